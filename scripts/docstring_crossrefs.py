"""Rewrite the reST roles of src/ragaudit's docstrings and comments as Markdown that mkdocstrings renders.

``:class:`X``` (and ``:meth:``, ``:func:``, ``:attr:``, ``:data:``, ``:exc:``, ``:mod:``, ``:obj:``,
``:const:``, with ``~`` and ``title <target>`` forms) becomes ``[`X`][ragaudit.X]`` when X resolves to an
entry of the API reference (the public path docs/_hooks/reference.py documents it under), else ```X```
(a private name, a builtin, another package: plain code, no broken link). Names are resolved the way
Python would from where the docstring is (its function, class, module), with griffe.

A line the rewrite takes over 120 characters is broken at a space, the rest on a new line with the
paragraph's indentation. Re-runnable: it changes nothing once no role is left.

    .venv/bin/python scripts/docstring_crossrefs.py [--check]
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import griffe  # noqa: E402
import reference  # noqa: E402  (docs/_hooks/reference.py)

ROLE = re.compile(r":(?:py:)?(class|meth|func|attr|data|exc|mod|obj|const):`(~?)([^`<]+?)(?:\s*<([^>`]+)>)?`"
                  r"(\\?\ss\b)?")
WIDTH = 120


def _objects(module: Any) -> list[Any]:
    """Every object defined in *module*'s file, innermost last when sorted by start line."""
    found = []
    stack = [module]
    while stack:
        obj = stack.pop()
        found.append(obj)
        stack.extend(m for m in obj.members.values() if not m.is_alias and (m.is_class or m.is_function))
    return found


def _scope(objects: list[Any], line: int) -> Any:
    best = objects[0]
    for obj in objects:
        start, end = obj.lineno or 0, obj.endlineno or 10**9
        if start <= line <= end and (best.lineno or 0) <= start:
            best = obj
    return best


def _canonical(scope: Any, target: str) -> str | None:
    """The canonical path of *target* seen from *scope*, or None when it is not ragaudit's."""
    target = target.lstrip(".")
    if target.startswith("ragaudit."):
        obj = reference.lookup(target)
        return obj.path if obj is not None else None
    head, _, rest = target.partition(".")
    where = scope
    while where is not None:
        try:
            path = where.resolve(head)
        except (griffe.NameResolutionError, AttributeError):
            path = None
        if path and path.startswith("ragaudit"):
            obj = reference.lookup(f"{path}.{rest}" if rest else path)
            if obj is not None:
                return obj.path
        where = where.parent
    return None


def _public(canonical: str | None) -> str | None:
    if canonical is None:
        return None
    if canonical in reference.reference_modules():
        return canonical
    return reference.public_paths().get(canonical)


def convert(path: Path, module: Any) -> tuple[str, int]:
    """The file with the roles of its strings and comments rewritten, and how many there were."""
    text = path.read_text(encoding="utf-8")
    objects = _objects(module)
    count = 0

    def replace(match: re.Match[str], line: int) -> str:
        nonlocal count
        count += 1
        _, tilde, written, explicit, plural = match.groups()
        written = re.sub(r"\s+", "", written) if not explicit else " ".join(written.split())
        target = re.sub(r"\s+", "", explicit or written)
        shown = written if explicit else (target.lstrip(".").rsplit(".", 1)[-1] if tilde else target.lstrip("."))
        public = _public(_canonical(_scope(objects, line), target))
        plural = "s" if plural else ""  # reST's "`X` s" (a role cannot touch a letter); Markdown's "Xs"
        return f"[`{shown}`][{public}]{plural}" if public else f"`{shown}`{plural}"

    lines = text.splitlines(keepends=True)
    starts = [0]
    for physical in lines:
        starts.append(starts[-1] + len(physical))
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type in (tokenize.STRING, tokenize.COMMENT) and ROLE.search(t.string)]
    for tok in reversed(tokens):  # from the end, so earlier offsets stay valid
        (row, col), (end_row, end_col) = tok.start, tok.end
        begin, finish = starts[row - 1] + col, starts[end_row - 1] + end_col
        body = ROLE.sub(lambda m, r=row, s=tok.string: replace(m, r + s.count("\n", 0, m.start())), tok.string)
        line_start = starts[row - 1]
        line_end = text.find("\n", finish)
        line_end = len(text) if line_end < 0 else line_end
        block = text[line_start:begin] + body + text[finish:line_end]
        wrapped = _rewrap(block, tok.type == tokenize.COMMENT)
        text = text[:line_start] + wrapped + text[line_end:]
    return text, count


_STARTS_BLOCK = re.compile(r'^([-*+] |\d+\. |```|>>>|"""|\w+( \w+)?:$)')
_ITEM = re.compile(r"^\*{0,2}\w+(, \*{0,2}\w+)*( \([^)]*\))?: ")


def _rewrap(block: str, comment: bool) -> str:
    """Break the lines of *block* (one string or comment, with the rest of its first and last lines)
    that are over WIDTH: the rest joins the next line of the same paragraph, or goes on a line of its own."""
    lines = block.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        cut = line.rfind(" ", 0, WIDTH + 1)
        if len(line) <= WIDTH or cut <= indent:
            i += 1
            continue
        head, rest = line[:cut].rstrip(), line[cut + 1:].strip()
        lines[i] = head
        if comment:
            lines.insert(i + 1, " " * indent + "# " + rest)
            i += 1
            continue
        following = lines[i + 1] if i + 1 < len(lines) else None
        more = len(following) - len(following.lstrip()) if following else 0
        cont = more if following and following.strip() and more > indent else indent
        if cont == indent and _ITEM.match(line.lstrip()):
            cont = indent + 4  # an "Args:" item: its continuation is indented under it
        if following and following.strip() and more == cont and not _STARTS_BLOCK.match(following.lstrip()):
            lines[i + 1] = " " * cont + rest + " " + following.lstrip()
        else:
            lines.insert(i + 1, " " * cont + rest)
        i += 1
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    pkg = reference.package()
    left = 0
    for path in sorted((ROOT / "src" / "ragaudit").rglob("*.py")):
        rel = path.relative_to(ROOT / "src").with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        module = pkg if len(parts) == 1 else pkg[".".join(parts[1:])]
        new, count = convert(path, module)
        if count:
            left += count
            if check:
                print(f"{path.relative_to(ROOT)}: {count} reST role(s)")
            else:
                path.write_text(new, encoding="utf-8")
    print(f"{left} reST role(s) {'left' if check else 'rewritten'}")
    return 1 if check and left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
