"""The package's shape, as DESIGN.md states it: no import cycles, no upward imports between floors, and
no framework or OpenTelemetry import in the floors that must stay framework-free.

Runtime imports only (those under ``if TYPE_CHECKING:`` never execute), including the ones inside
functions: a deferred import still ties the two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ragaudit

SRC = Path(ragaudit.__file__).parent

# Floors, top to bottom (DESIGN "The flow"): a module may import its own floor or lower ones only.
FLOORS = {"cli": 6, "evaluation": 5, "demo": 5, "integrations": 4, "auditor": 3,
          "judges": 2, "tracing": 2}
# Everything else (records, content, citations, metrics, errors, private helpers) is floor 1.

# Third-party roots a pure floor never imports: the frameworks, OpenTelemetry, the vector store.
FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "llama_index", "opentelemetry", "chromadb",
              "openinference", "langfuse", "phoenix")
FRAMEWORK_FREE = ("metrics", "judges", "records", "_judgement_records", "_record_checks", "content", "citations",
                  "errors")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(node) for branch in ast.walk(tree)
               if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
               for stmt in branch.body for node in ast.walk(stmt)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Absolute names *node* imports: the module and, for ``from X import y``, also ``X.y``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [target, *(f"{target}.{alias.name}" for alias in node.names)]


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(our modules -> our modules they import, our modules -> third-party roots they import)."""
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    ours: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for module, path in files.items():
        ours[module], external[module] = set(), set()
        for node in _runtime_imports(path):
            for target in _targets(module, path.name == "__init__.py", node):
                if target in files and target != module and not module.startswith(target + "."):
                    ours[module].add(target)
                elif not target.startswith("ragaudit"):
                    external[module].add(target.split(".")[0])
    return ours, external


def _floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS.get(parts[1], 1) if len(parts) > 1 else 7


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_sees_our_modules() -> None:
    # Guards the checks below against passing vacuously (a wrong root would find no module and no edge).
    ours, external = _graph()
    assert "ragaudit.judges.chat" in ours and "ragaudit.records" in ours["ragaudit.judges.chat"]
    assert any(root in FRAMEWORKS for root in external["ragaudit.integrations.langchain"])


def test_no_import_cycles() -> None:
    ours, _ = _graph()
    assert _cycles(ours) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_upward_imports() -> None:
    ours, _ = _graph()
    upward = sorted(f"{m} -> {d}" for m, deps in ours.items() for d in deps
                    if m != "ragaudit" and _floor(d) > _floor(m))
    assert upward == []


@pytest.mark.parametrize("package", FRAMEWORK_FREE)
def test_pure_floors_import_no_framework_or_opentelemetry(package: str) -> None:
    _, external = _graph()
    prefix = f"ragaudit.{package}"
    offending = sorted(f"{m} -> {root}" for m, roots in external.items()
                       if m == prefix or m.startswith(prefix + ".")
                       for root in roots if root in FRAMEWORKS)
    assert offending == []
