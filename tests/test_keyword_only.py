"""House rule: a function of ``src/hearth`` takes at most four positional parameters (besides
``self``/``cls``); the rest are keyword-only, so a call site says what each value is and two values
of the same type cannot be swapped silently."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "hearth"
MAX_POSITIONAL = 4
# Signatures a framework dictates (overrides called by the framework with positional arguments).
FRAMEWORK = {"settings_customise_sources"}


def too_many_positional(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name in FRAMEWORK:
                continue
            positional = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
            if len(positional) > MAX_POSITIONAL:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}({', '.join(positional)})")
    return found


def test_no_function_takes_more_than_four_positional_parameters() -> None:
    assert too_many_positional(SRC) == []


def test_the_check_finds_a_violation(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f(a, b, c, d, e):\n    pass\n\ndef g(a, b, c, d, *, e):\n    pass\n")
    assert too_many_positional(pkg) == ["pkg/m.py:1 f(a, b, c, d, e)"]
