"""Figures of the house, read from the source (nothing is run): the Auditor's size and keywords, ``Any``.

- the `Auditor` class: its ``__init__`` keywords, its lines, its methods (its own and its bases' inside
  ragaudit), and the parts it owns;
- ``Any`` in function signatures (parameters and return annotations), per package of ``src/ragaudit``.

```bash
python benchmarks/house.py            # this checkout
python benchmarks/house.py --src DIR  # another checkout's src/ragaudit
```
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ANY = re.compile(r"\bAny\b")


def _classes(src: Path) -> dict[str, tuple[Path, ast.ClassDef]]:
    found: dict[str, tuple[Path, ast.ClassDef]] = {}
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, (path, node))
    return found


def _methods(node: ast.ClassDef) -> list[str]:
    return [n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def auditor_figures(src: Path) -> dict[str, object]:
    classes = _classes(src)
    path, auditor = classes["Auditor"]
    bases = [b.id for b in auditor.bases if isinstance(b, ast.Name) and b.id in classes]
    lines = auditor.end_lineno - auditor.lineno + 1  # type: ignore[operator]
    methods = _methods(auditor)
    for base in bases:
        base_node = classes[base][1]
        lines += base_node.end_lineno - base_node.lineno + 1  # type: ignore[operator]
        methods += [m for m in _methods(base_node) if m not in methods]
    init = next(n for n in auditor.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    keywords = [a.arg for a in init.args.args[1:] + init.args.kwonlyargs]
    return {
        "file": str(path.relative_to(src.parent)),
        "bases": bases,
        "lines (with bases)": lines,
        "methods (with bases)": len(methods),
        "keywords": len(keywords),
        "keyword names": keywords,
    }


def any_in_signatures(src: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for path in src.rglob("*.py"):
        package = path.parent.relative_to(src.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            annotations = [x.annotation for x in args if x.annotation is not None]
            annotations += [node.returns] if node.returns is not None else []
            counts[package] += sum(len(_ANY.findall(ast.unparse(ann))) for ann in annotations)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src" / "ragaudit")
    args = parser.parse_args(argv)
    for key, value in auditor_figures(args.src).items():
        print(f"Auditor {key}: {value}")
    counts = any_in_signatures(args.src)
    lines = sum(len(p.read_text().splitlines()) for p in args.src.rglob("*.py"))
    total = sum(counts.values())
    print(f"Any in signatures: {total} ({1000 * total / lines:.1f} per 1,000 lines of {lines:,})")
    for package, n in counts.most_common():
        print(f"  {package}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
