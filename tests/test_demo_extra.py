"""The `demo` extra (what `make demo` installs) is what the demo imports: every third-party module the
demo's code imports comes from the extra (or the core dependencies, or their own dependencies), and
every distribution the extra names is imported by the demo's code."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

import ragaudit

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the check is the same on every version

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(ragaudit.__file__).parent
# The demo's code: the demo package and its command.
DEMO_FILES = [*sorted((SRC / "demo").glob("*.py")), SRC / "cli" / "demo.py"]


def _name(requirement: str) -> str:
    return re.split(r"[ ;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _extra(extras: dict[str, list[str]], name: str) -> set[str]:
    """The distributions extra *name* names, with `ragaudit[...]` self-references expanded."""
    out: set[str] = set()
    for requirement in extras[name]:
        match = re.fullmatch(r"ragaudit\[([^\]]+)\]", requirement.strip())
        if match:
            for inner in match.group(1).split(","):
                out |= _extra(extras, inner.strip())
        else:
            out.add(_name(requirement))
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:``: imported for type checkers, never at run time."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            hidden.update(id(inner) for child in node.body for inner in ast.walk(child))
    return hidden


def _imported_modules() -> set[str]:
    modules: set[str] = set()
    for path in DEMO_FILES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        hidden = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module)
    return {m for m in modules
            if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ("ragaudit", "__future__")}


def _distribution(module: str) -> str:
    """The installed distribution that ships *module* (namespace packages such as llama_index and
    opentelemetry are shared by many, so the module's own path decides)."""
    parts = module.split(".")
    candidates = md.packages_distributions().get(parts[0], [])
    for depth in range(len(parts), 0, -1):
        prefix = "/".join(parts[:depth])
        owners = {d for d in candidates
                  if any(str(f).startswith((prefix + "/", prefix + ".py")) for f in md.files(d) or ())}
        if len(owners) == 1:
            return owners.pop().lower().replace("_", "-")
    raise AssertionError(f"no single installed distribution ships {module} (candidates: {candidates})")


@pytest.mark.slow  # reads the file lists of every installed distribution
def test_the_demo_extra_is_what_the_demo_imports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    demo = _extra(project["optional-dependencies"], "demo")
    core = {_name(r) for r in project["dependencies"]}
    imported = {_distribution(m) for m in _imported_modules()}
    # Imports a direct requirement does not name must come with one (pydantic with langchain-core).
    brought = {_name(r) for d in demo | core for r in (md.requires(d) or ()) if "extra ==" not in r}
    assert imported - demo - core - brought == set()
    # ... and nothing in the extra goes unused.
    assert demo - imported == set()
