"""Print the shape of one package of drmix: its modules, lines, the imports between its modules and its layers.

    python scripts/package_shape.py src/drmix/recipes/adapt [--json]

* **modules**: the package's ``.py`` files (its ``__init__`` included), **lines**: their lines;
* **import edges**: the pairs (module A, module B) of the package where A imports B, at module level or inside a
  function (a lazy import is a dependency too, as ``tests/test_layers.py`` counts them; imports under
  ``if TYPE_CHECKING:`` never run and are left out); the package's ``__init__`` counts as a module;
* **layers**: the modules on the longest chain of such imports (A imports B imports C: three layers; a package
  whose modules import none of each other has one layer);
* **private imports**: names starting with ``_`` that one module of the package imports from another;
* for a recipe (a package declaring :class:`drmix.recipes.stages.Stage` s), **modules a stage is declared over**:
  the modules that call ``Stage(...)`` (or a subclass ``...Stage``), or name a stage's work by a literal
  (``StageWork("title", ...)``), or give a stage's fields apart from its ``Stage(...)`` (a call with ``needs=``,
  ``done=`` or ``work=``): the source files one more stage touches; and **files touched to add a
  stage from a test**, the test's included: 1 when a public function of the package's ``__init__`` takes stages
  (a parameter annotated with ``Stage``: the test passes its stage there), else those modules and the test.

Read with ``ast`` only (nothing is imported), so it measures any checkout: ``git archive COMMIT src | tar -x -C
/tmp/old``, then ``python scripts/package_shape.py /tmp/old/src/drmix/recipes/adapt --json``. docs/testing.md
("Shape of the code") prints its table with ``--before`` (a stored ``--json`` of the earlier commit).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path


def _module(path: Path, package: Path) -> str:
    """``"runner"`` for ``package/runner.py``, ``"__init__"`` for the package itself, ``"sub.x"`` below it."""
    return ".".join(path.relative_to(package).with_suffix("").parts)


def _dotted(package: Path) -> str:
    """The package's import name: the folders from the first one that holds no ``__init__.py``."""
    parts = [package.name]
    p = package.parent
    while (p / "__init__.py").is_file():
        parts.insert(0, p.name)
        p = p.parent
    return ".".join(parts)


def _type_checking(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imports(path: Path, module: str, dotted: str, known: set[str]) -> list[tuple[str, list[str]]]:
    """``[(imported module's dotted name, names imported from it), ...]`` of one file; ``from pkg import mod``
    imports the module ``pkg.mod`` when it is one of ``known`` (as tests/test_layers.py reads it), else ``pkg``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _type_checking(tree)
    package = (dotted + "." + module).split(".")[:-1]   # what a relative import starts from
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names = [a.name for a in node.names]
            modules = [n for n in names if f"{base}.{n}" in known]
            out += [(f"{base}.{n}", []) for n in modules]
            if len(modules) < len(names):
                out.append((base, [n for n in names if n not in modules]))
    return out


_STAGE_FIELDS = {"needs", "done", "work"}


def _declares_stages(tree: ast.AST) -> bool:
    """Whether a module declares (a part of) a stage; see the module docstring."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name.endswith("Stage") and name[:1].isupper():
            return True
        if name == "StageWork" and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
            return True
        if {k.arg for k in node.keywords} & _STAGE_FIELDS and name != "StageWork":
            return True
    return False


def _takes_stages(tree: ast.AST) -> bool:
    """Whether a public function of the module has a parameter annotated with ``Stage`` (e.g. ``Sequence[Stage]``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            args = [*node.args.args, *node.args.kwonlyargs]
            if any(a.annotation is not None and "Stage" in ast.unparse(a.annotation).replace("StageWork", "")
                   for a in args):
                return True
    return False


def shape(package: Path) -> dict:
    """The measures of the module docstring, for the package folder ``package``."""
    package = package.resolve()
    dotted = _dotted(package)
    files = {_module(p, package): p for p in sorted(package.rglob("*.py"))}
    full = {dotted if m == "__init__" else (dotted + "." + m).removesuffix(".__init__"): m for m in files}
    edges: set[tuple[str, str]] = set()
    private: set[tuple[str, str, str]] = set()
    for module, path in files.items():
        for target, names in _imports(path, module, dotted, set(full)):
            other = full.get(target)
            if other is None or other == module:
                continue
            edges.add((module, other))
            private.update((module, other, n) for n in names if n.startswith("_") and not n.startswith("__"))
    graph: dict[str, set[str]] = {m: set() for m in files}
    for a, b in edges:
        graph[a].add(b)

    memo: dict[str, int] = {}

    def depth(m: str, seen: frozenset = frozenset()) -> int:   # a cycle (none in drmix) is cut where it closes
        if m not in memo:
            memo[m] = 1 + max((depth(n, seen | {m}) for n in graph[m] if n not in seen), default=0)
        return memo[m]

    trees = {m: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for m, p in files.items()}
    stages = sorted(m for m, t in trees.items() if m != "__init__" and _declares_stages(t))
    seam = "__init__" in trees and _takes_stages(trees["__init__"])
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files.values())
    return {"package": dotted, "modules": len(files), "lines": lines, "import_edges": len(edges),
            "layers": max((depth(m) for m in files), default=0), "private_imports": len(private),
            "stage_modules": len(stages), "toy_stage_files": 1 if seam else len(stages) + 1,
            "private": sorted(f"{a} -> {b}.{n}" for a, b, n in private), "stage_declared_in": stages}


#: the table's rows: (title, key of :func:`shape`)
ROWS = [("modules", "modules"), ("import edges between its modules", "import_edges"),
        ("layers (longest import chain)", "layers"), ("private names imported from a sibling", "private_imports"),
        ("modules a stage is declared over", "stage_modules"),
        ("files touched to add a stage from a test (the test's included)", "toy_stage_files")]


def table(columns: dict[str, dict]) -> str:
    """Markdown: one column per measurement (``{column title: shape(...)}``); the lines are left out of it (they
    change with every edit, the shape does not)."""
    out = [f"| {columns[next(iter(columns))]['package']} | " + " | ".join(columns) + " |",
           "|---|" + "---:|" * len(columns)]
    for title, key in ROWS:
        out.append("| " + " | ".join([title, *(f"{c[key]:,}" for c in columns.values())]) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package", type=Path, help="the package folder, e.g. src/drmix/recipes/adapt")
    ap.add_argument("--json", action="store_true", help="print the measures as JSON")
    ap.add_argument("--before", type=Path, default=None,
                    help="a stored --json of the same package at an earlier commit: print both columns")
    args = ap.parse_args(argv)
    if not (args.package / "__init__.py").is_file():
        print(f"error: {args.package} is not a package folder (no __init__.py).", file=sys.stderr)
        return 2
    s = shape(args.package)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    columns = {"now": s}
    if args.before is not None:
        before = json.loads(args.before.read_text(encoding="utf-8"))
        columns = {f"before ({before.get('commit', args.before.stem)})": before, "now": s}
    print(table(columns))
    for p in s["private"]:
        print(f"private import: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
