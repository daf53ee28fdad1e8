"""MkDocs hook: the API reference is generated from the code's own ``__all__`` lists.

``docs/reference/index.md`` holds ``<!-- api: MODULE -->`` markers; each becomes one mkdocstrings
entry per public name of MODULE (its ``__all__``), so a name added to the public face appears in the
reference without anyone editing a page, and a name without a resolvable definition fails
``mkdocs build --strict``. Modules that are public names themselves (``ragaudit.metrics``) get one
entry for the module. Names that are values, not definitions (``__version__``, constants), are listed
in a table.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
from typing import Any

_MARKER = re.compile(r"<!-- api: ([\w.]+) -->")


def _where(module: types.ModuleType, name: str) -> str | None:
    """The dotted path mkdocstrings should render for *name* of *module*, or None for a plain value."""
    obj = getattr(module, name)
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if inspect.isclass(obj) or inspect.isfunction(obj):
        home = getattr(obj, "__module__", None)
        qual = getattr(obj, "__qualname__", name)
        if home and "<" not in qual:
            return f"{home}.{qual}"
    return None


def render(module_name: str) -> str:
    module = importlib.import_module(module_name)
    names = sorted(getattr(module, "__all__", ()), key=str.lower)
    entries: list[str] = []
    values: list[tuple[str, Any]] = []
    for name in names:
        where = _where(module, name)
        if where is None:
            values.append((name, getattr(module, name)))
            continue
        entries.append(f"::: {where}\n    options:\n      heading: \"{module_name}.{name}\"\n      "
                       "show_root_full_path: false\n")
    out = [f"`{module_name}` — {len(names)} public names.\n"]
    if values:
        out.append("| name | value |\n|---|---|")
        out.extend(f"| `{module_name}.{n}` | `{v!r}` |" for n, v in values)
        out.append("")
    out.extend(entries)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if not page.file.src_uri.startswith("reference/"):
        return markdown
    return _MARKER.sub(lambda m: render(m.group(1)), markdown)
