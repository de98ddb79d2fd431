"""Print the N longest functions under a source tree (name, lines), longest first.

    python scripts/longest_functions.py [src/drmix] [-n 10]

Lines are counted from the ``def`` to the function's last line (``end_lineno``), decorators excluded,
nested functions counted separately and inside their parent.
"""
from __future__ import annotations

import argparse
import ast
from pathlib import Path


def longest(root: Path, n: int = 10) -> list[tuple[int, str]]:
    rows = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        parents: dict[ast.AST, str] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    parents[child] = parents.get(node, "") + node.name + "."
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{path.relative_to(root.parent).as_posix()}:{parents.get(node, '')}{node.name}"
                rows.append((node.end_lineno - node.lineno + 1, name))
    rows.sort(key=lambda r: (-r[0], r[1]))
    return rows[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="src/drmix")
    ap.add_argument("-n", type=int, default=10)
    args = ap.parse_args()
    for lines, name in longest(Path(args.root), args.n):
        print(f"{lines:5d}  {name}")


if __name__ == "__main__":
    main()
