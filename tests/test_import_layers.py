"""Dependencies inside ``src/hearth`` point one way.

The imports of every module are read with :mod:`ast` (module level, inside functions, and those under
``if TYPE_CHECKING:``, which are reported as such but obey the same rules: a type-only dependency is
still a dependency of the design). Two properties are checked:

* no import cycle between modules;
* the layering contract below: a module may import from its own container, from any lower layer and
  from the foundation, never from a higher layer, and never from a sibling of its own layer.

A violation that cannot be fixed at once goes into ``ALLOWED`` with the reason; nothing is hidden by
moving an import into a function or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "hearth"

# Highest first. The containers of one layer are independent of each other.
LAYERS: list[tuple[str, ...]] = [
    ("hearth.__main__",),
    ("hearth.cli",),
    ("hearth.operator_cli",),  # hearth status/tasks/reviews/schedules/logs/sign: HTTP clients of a running Hearth
    ("hearth.testing",),  # the fake upstream, a server in a thread (used by tests and `hearth fake-upstream`)
    ("hearth.app",),  # the ASGI application
    ("hearth.grpc_api",),  # the gRPC door, started by the app: AiService on the gateway core and capabilities
    ("hearth.console",),  # the web console at /console: server-rendered pages over api's plumbing and the services
    ("hearth.api",),  # HTTP faces: routers, auth dependencies, HTTP-only concerns (budget headers)
    ("hearth.readiness",),
    ("hearth.runtime",),  # composition root: builds the gateway, providers, writers, the task engine
    ("hearth.shutdown",),  # the process's shutdown phases (readiness and the open streams read them)
    ("hearth.mcp",),  # the MCP gateway: upstream MCP servers, tool policy, pooled sessions, audit (over gateway)
    ("hearth.alerting",),  # alert checks (a scheduler pass over gateway, tasks, reviews) and the alert sender
    ("hearth.usage",),  # usage events' relay: sinks (signed webhook, NATS, RabbitMQ) fed from the outbox
    # image generation (requests, signed URLs, the service and task: gateway + blob store); the OpenAI Batch API on
    # the task engine (files, batches, the executor through the gateway) — independent of each other
    ("hearth.images", "hearth.batches"),
    ("hearth.documents",),  # the document pipeline: blobs, PDF text, evidence, review triggers, jobs
    ("hearth.workflows",),  # schedules (and, next, workflows and reviews) on the task engine
    ("hearth.tasks",),  # the durable task engine: the queue is a table; capability tasks run on it
    ("hearth.responses",),  # the Responses API and legacy completions: translated to chat calls on the gateway
    ("hearth.capabilities",),  # summarize, extract, generate, chat: prompt rendered, gateway called, output checked
    ("hearth.gateway", "hearth.auth"),  # the call core; who is calling (callers' keys, signatures)
    ("hearth.providers",),  # upstream adapters, used by the gateway, never using it
    # providers → endpoints → models, scenes, callers (the hot-path snapshot); versioned prompts and roles
    ("hearth.registry", "hearth.prompts"),
    ("hearth.observability", "hearth.state"),  # request-log writer; state backends (memory | Redis)
    # the database; wire formats (SSE, token estimates); a body checked against a pydantic model (400 otherwise)
    ("hearth.store", "hearth.wire", "hearth.validation"),
    ("hearth.v1",),  # the gRPC messages generated from proto/hearth/v1 (`make proto`): protobuf only
]

# Imported from anywhere, importing nothing of Hearth above it (they import only each other).
# ``observability.logging`` is here, not in ``observability``: every layer logs, and the rest of that
# package (the request-log writer) sits above the store.
FOUNDATION: tuple[str, ...] = (
    "hearth",  # the package itself (``__version__``)
    "hearth.clock",  # the injectable time source of the state backends and the breakers
    "hearth.errors",
    "hearth.ids",
    "hearth.settings",
    "hearth.process_memory",  # the collector around a long-lived command's start-up (serve, worker)
    "hearth.yaml_documents",  # YAML with libyaml where PyYAML has it (configuration, pipeline definitions)
    "hearth.observability.logging",
)

# The call core knows nothing of HTTP serving: status codes, headers and responses are api/'s business.
NO_WEB_FRAMEWORK: tuple[str, ...] = ("hearth.capabilities", "hearth.prompts", "hearth.gateway", "hearth.providers",
                                     "hearth.wire", "hearth.registry",
                                     "hearth.state", "hearth.store")
WEB_FRAMEWORKS: tuple[str, ...] = ("fastapi", "starlette", "uvicorn")

# (importing module, imported module) pairs that break the contract, each with the reason it is
# tolerated for now. Keep this empty; an entry that no longer occurs fails the test.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    kind: str  # "module", "function" or "TYPE_CHECKING"

    def __str__(self) -> str:
        where = "" if self.kind == "module" else f" ({self.kind})"
        return f"{self.source}:{self.line} imports {self.target}{where}"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.kind = "module"
        self.found: list[Import] = []

    def _add(self, target: str, node: ast.stmt) -> None:
        if target == ROOT or target.startswith(ROOT + "."):
            assert target in MODULES, f"{self.module}:{node.lineno} imports {target}, which does not exist"
            found = Import(self.module, target, node.lineno, self.kind)
            if target != self.module and found not in self.found:
                self.found.append(found)

    def _nested(self, kind: str, body: list[ast.stmt]) -> None:
        outer, self.kind = self.kind, (kind if self.kind == "module" else self.kind)
        for stmt in body:
            self.visit(stmt)
        self.kind = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._nested("function", node.body)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._nested("function", node.body)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._nested("TYPE_CHECKING", node.body)
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            module = ".".join([*base, node.module] if node.module else base)
        else:
            module = node.module or ""
        for alias in node.names:
            # ``from hearth.gateway import sse`` imports the submodule; ``from x import name`` the module x.
            self._add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module, node)


@functools.cache  # parsed when a test first asks, not at collection (every xdist worker collects this module)
def _imports() -> list[Import]:
    found: list[Import] = []
    for module, path in MODULES.items():
        collector = _Collector(module, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found.extend(collector.found)
    return found


def _within(module: str, container: str) -> bool:
    return module == container or module.startswith(container + ".")


def _place(module: str) -> tuple[int, str]:
    """(layer index, container); the foundation is below every layer. The most specific entry wins."""
    best: tuple[int, str] | None = None
    for container in FOUNDATION:
        if _within(module, container) and (module == container or container != ROOT):
            best = (len(LAYERS), container)
    for index, layer in enumerate(LAYERS):
        for container in layer:
            if _within(module, container) and (best is None or len(container) > len(best[1])):
                best = (index, container)
    assert best is not None, f"{module} is in no layer: add it to LAYERS or FOUNDATION in {__file__}"
    return best


def _violation(imp: Import) -> str | None:
    (src_layer, src_box), (dst_layer, dst_box) = _place(imp.source), _place(imp.target)
    if src_box == dst_box or dst_layer > src_layer or src_layer == dst_layer == len(LAYERS):
        return None  # (the foundation's modules may import each other: the cycle check still applies)
    if dst_layer == src_layer:
        return f"{imp}: {src_box} and {dst_box} are independent siblings"
    if src_layer == len(LAYERS):
        return f"{imp}: the foundation imports nothing above it"
    return f"{imp}: {dst_box} is above {src_box}"


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first node repeated at the end), or None."""
    colour: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if colour.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in colour and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(edges):
        if node not in colour and (cycle := visit(node)) is not None:
            return cycle
    return None


def _describe(path: list[str]) -> str:
    lines = []
    for a, b in itertools.pairwise(path):
        lines.append(f"  {next(i for i in _imports() if i.source == a and i.target == b)}")
    return " -> ".join(path) + "\n" + "\n".join(lines)


def test_every_module_is_read() -> None:
    assert "hearth.gateway.call" in MODULES and "hearth.providers.base" in MODULES
    assert any(i.kind == "function" for i in _imports())  # cli.py imports inside its commands
    assert any(i.kind == "TYPE_CHECKING" for i in _imports())


def test_no_import_cycle_between_modules() -> None:
    edges: dict[str, set[str]] = {}
    for imp in _imports():
        edges.setdefault(imp.source, set()).add(imp.target)
    cycle = _find_cycle(edges)
    assert cycle is None, "import cycle: " + _describe(cycle or [])


def test_no_import_cycle_between_packages() -> None:
    def container(module: str) -> str:
        return _place(module)[1]

    edges: dict[str, set[str]] = {}
    for imp in _imports():
        a, b = container(imp.source), container(imp.target)
        if a != b and (imp.source, imp.target) not in ALLOWED:
            edges.setdefault(a, set()).add(b)
    cycle = _find_cycle(edges)
    steps = set(itertools.pairwise(cycle or []))
    culprits = [f"  {i}" for i in _imports() if (container(i.source), container(i.target)) in steps]
    assert cycle is None, "cycle between packages: " + " -> ".join(cycle or []) + "\n" + "\n".join(culprits)


def test_layering_contract() -> None:
    problems = [v for imp in _imports() if (imp.source, imp.target) not in ALLOWED and (v := _violation(imp))]
    assert not problems, "imports against the layering contract (see LAYERS in this file):\n" + "\n".join(problems)


def test_the_core_imports_no_web_framework() -> None:
    found = []
    for module, path in MODULES.items():
        if not any(_within(module, box) for box in NO_WEB_FRAMEWORK):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{module}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in WEB_FRAMEWORKS]
    assert not found, "HTTP serving belongs in hearth.api:\n" + "\n".join(found)


def test_allowlist_is_current() -> None:
    stale = [pair for pair in ALLOWED if not any((i.source, i.target) == pair for i in _imports())
             or not any(_violation(i) for i in _imports() if (i.source, i.target) == pair)]
    assert not stale, f"ALLOWED entries that no longer occur or no longer break the contract: {stale}"


def test_the_checker_sees_a_violation() -> None:
    # Guards the guard: a provider importing the gateway must be reported.
    fake = Import("hearth.providers.base", "hearth.gateway.call", 1, "function")
    assert _violation(fake) is not None
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
