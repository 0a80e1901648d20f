"""The test suite's own rules: no test module imports another, and pytest runs strict.

A test module (``test_*.py``, or a ``conftest.py``) that imports from another one couples the two:
moving, renaming or deleting a test breaks an unrelated file, and pytest may import a module twice.
Shared helpers belong in :mod:`tests.support` (or a harness module such as ``tests/e2e/processes.py``);
fixtures in ``tests/conftest.py``, which pytest provides without an import.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _is_test_module(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _imported_modules(tree: ast.Module, source: str) -> list[tuple[int, str]]:
    """Every module an import statement names (anywhere in the file), relative imports resolved."""
    package = source.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.append((node.lineno, base))
            # ``from tests.gateway import test_budgets`` imports a module by its attribute name
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _violations() -> list[str]:
    out = []
    for path in sorted(TESTS.rglob("*.py")):
        source = _module_name(path)
        if not _is_test_module(source):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in _imported_modules(tree, source):
            if target.startswith("tests.") and _is_test_module(target) and (TESTS.parent / (
                    target.replace(".", "/") + ".py")).exists():
                out.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return out


def test_no_test_module_imports_another_test_module() -> None:
    violations = _violations()
    assert not violations, ("test modules import other test modules (move the shared helper to "
                            "tests/support.py):\n" + "\n".join(violations))


def test_the_check_sees_each_form_of_import() -> None:
    source = "tests.gateway.test_x"
    tree = ast.parse("from tests.conftest import AUTH\n"
                     "def f():\n    from tests.gateway.test_budgets import ledger_summary\n"
                     "from tests.gateway import test_budgets\n"
                     "import tests.auth.test_signing\n"
                     "from . import test_scenes\n"
                     "from tests.support import AUTH\n")
    targets = {t for _, t in _imported_modules(tree, source)}
    assert {"tests.conftest", "tests.gateway.test_budgets", "tests.auth.test_signing",
            "tests.gateway.test_scenes"} <= targets
    assert not _is_test_module("tests.support") and not _is_test_module("tests.e2e.processes")


def test_serial_tests_live_in_tests_e2e_only() -> None:
    """`make test` runs the ``serial`` tests by collecting tests/e2e/ alone (collecting the whole suite
    for 23 tests cost ~10 s): a test marked serial anywhere else would run in neither part."""
    marker = "pytest.mark" + ".serial"  # spelled apart so that this file does not match itself
    marked = [str(path.relative_to(ROOT)) for path in sorted(TESTS.rglob("test_*.py"))
              if marker in path.read_text(encoding="utf-8") and "e2e" not in path.relative_to(TESTS).parts]
    assert marked == []
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert '-m "not serial"' in makefile and "-m serial tests/e2e" in makefile


def test_pytest_runs_strict() -> None:
    """Warnings are errors, an xfail that passes fails, and an unregistered marker is an error."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert options["filterwarnings"][0] == "error"
    assert options["xfail_strict"] is True
    assert "--strict-markers" in options["addopts"].split()
