"""MkDocs hook: the API reference, one page per public module, generated from the code's ``__all__`` lists.

Each ``docs/reference/*.md`` page holds one ``<!-- api: MODULE -->`` marker; it becomes one mkdocstrings
entry per public name of MODULE (its ``__all__``), so a name added to the public face appears in the
reference without anyone editing a page, and a name without a resolvable definition fails
``mkdocs build --strict``. An object exported by several public modules is documented once, under its
shortest public path (``ragaudit.Auditor``, not ``ragaudit.auditor.Auditor``); the other pages link to
it. Private modules (a ``_`` anywhere in the path) never appear: every entry is rendered under its
public path. Values (``__version__``, constants) are listed in a table.

The code is read with griffe (static analysis, what mkdocstrings itself uses), never imported, so the
``docs`` extra alone builds the site: no LangChain or LlamaIndex needed. ``public_paths`` is also what
``scripts/docstring_crossrefs.py`` uses to point the docstrings' cross-references at these entries.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

import griffe

_MARKER = re.compile(r"<!-- api: ([\w.]+) -->")
ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


@functools.cache
def package() -> griffe.Module:
    return griffe.load("ragaudit", search_paths=[str(ROOT / "src")], resolve_aliases=True,
                       resolve_external=False)


def lookup(path: str) -> Any:
    """The griffe object at dotted *path* under ``ragaudit`` (aliases followed), or None."""
    pkg = package()
    if path == pkg.path:
        return pkg
    try:
        obj = pkg[path.removeprefix(pkg.path + ".")]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return final(obj)


def final(obj: Any) -> Any:
    """*obj* with aliases followed to the definition (None when the alias leads outside the package)."""
    while obj is not None and obj.is_alias:
        try:
            obj = obj.final_target
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    return obj


def exports(module_name: str) -> list[str]:
    """MODULE's ``__all__``, with ``*_EXPORTS`` (a lazy-export table) expanded to its keys."""
    module = lookup(module_name)
    names: list[str] = []
    for item in module.exports or ():
        if isinstance(item, str):
            names.append(item)
            continue
        table = ast.literal_eval(str(module.members[str(item)].value))
        names.extend(table)
    return sorted(dict.fromkeys(names), key=str.lower)


def reference_modules() -> list[str]:
    """The modules with a reference page, shortest path first (the order in which they own objects)."""
    found = [m.group(1) for page in sorted(REFERENCE.glob("*.md"))
             for m in _MARKER.finditer(page.read_text(encoding="utf-8"))]
    return sorted(found, key=lambda name: (name.count("."), name))


@functools.cache
def public_paths() -> dict[str, str]:
    """Canonical path (where a class, function or method is defined) -> the public path it is documented
    under. Methods and attributes of a documented class follow their class."""
    owner: dict[str, str] = {}
    for module_name in reference_modules():
        for name in exports(module_name):
            obj = lookup(f"{module_name}.{name}")
            if obj is None or obj.is_module or not (obj.is_class or obj.is_function):
                continue
            public = f"{module_name}.{name}"
            if obj.path in owner:
                continue
            owner[obj.path] = public
            if obj.is_class:
                for member_name in obj.members:
                    if not member_name.startswith("_"):
                        owner.setdefault(f"{obj.path}.{member_name}", f"{public}.{member_name}")
    return owner


def _value_row(module_name: str, name: str, obj: Any) -> str:
    value = getattr(obj, "value", None) if obj is not None else None
    shown = str(value) if value is not None else ""
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    doc = (obj.docstring.value.strip().split("\n\n")[0].replace("\n", " ")
           if obj is not None and getattr(obj, "docstring", None) else "")
    return f"| `{module_name}.{name}` | `{shown.replace('|', '&#124;')}` | {doc.replace('|', '&#124;')} |"


def render(module_name: str) -> str:
    names = exports(module_name)
    owner = public_paths()
    entries: list[str] = []
    elsewhere: list[str] = []
    modules: list[str] = []
    values: list[str] = []
    for name in names:
        public = f"{module_name}.{name}"
        obj = lookup(public)
        if obj is not None and obj.is_module:
            modules.append(f"- [`{public}`][{obj.path}]" if obj.path in reference_modules() else f"- `{public}`")
        elif obj is not None and (obj.is_class or obj.is_function):
            if owner.get(obj.path) == public:
                entries.append(f"::: {public}\n    options:\n      heading: \"{public}\"\n      "
                               "show_root_full_path: false\n")
            else:
                elsewhere.append(f"- `{public}`: see [`{owner[obj.path]}`][{owner[obj.path]}]")
        else:
            values.append(_value_row(module_name, name, obj))
    # The module's own docstring first; it also makes MODULE a cross-reference target.
    out = [f"::: {module_name}\n    options:\n      members: false\n      show_root_heading: false\n",
           f"{len(names)} public names.\n"]
    if modules:
        out += ["Modules:\n", *modules, ""]
    if elsewhere:
        out += ["Documented under a shorter path:\n", *elsewhere, ""]
    if values:
        out += ["| name | value | what it is |", "|---|---|---|", *values, ""]
    out.extend(entries)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if not page.file.src_uri.startswith("reference/"):
        return markdown
    return _MARKER.sub(lambda m: render(m.group(1)), markdown)
