"""Layers that only point down: the import graph of ``src/drmix``, read with ``ast``.

Every ``import`` counts, at module level or inside a function (a lazy import is still a dependency); only
imports under ``if TYPE_CHECKING:`` are left out (they never run). Run ``python tests/test_layers.py`` to print
the graph's cycles and up-arrows.
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "drmix"

#: the layers, lowest first: a module may import its own layer and the layers below it, never one above.
#: A name is a subpackage of drmix or a module directly under it ("drmix" is the package's __init__); a dotted
#: name places one module apart from its package (the most specific name wins).
LAYERS: list[set[str]] = [
    {"drmix", "errors", "io", "fingerprint", "registry", "papers", "device", "outputs", "provenance",
     "markdown", "listener", "lock"},                                 # foundations (Markdown escaping, listener hooks)
    {"llm"},                                                          # LLM backends
    {"data"},                                                         # collections, BEIR, batches, formats
    {"model"},                                                        # backbones, encoders, losses, pruning
    {"retrieval"},                                                    # indexes, search, multi-corpus policies
    {"evaluation"},                                                   # metrics, evaluation, significance
    {"config"},                                                       # the training configuration
    {"mixture"},                                                      # strategies and their registry
    {"train"},                                                        # the trainer
    {"report"},                                                       # model cards, HTML report, plots
    {"api"},                                                          # train() with its default listeners
    {"analysis", "augment", "integrations", "pretrain"},              # built on training and mixtures
    {"recipes"},                                                      # multi-stage recipes
    {"hub"},                                                          # publishing runs
    {"cli", "__main__"},                                              # the command line
]

#: up-arrows still in the code, each owned by the config / trainer restructuring of issue #27. The test
#: fails when one of them disappears, so that it is taken off this list.
PENDING: set[tuple[str, str]] = set()


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.resolve().relative_to(root.resolve().parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: {drmix modules it imports}}`` (a name imported from a package resolves to its submodule)."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = _type_checking_nodes(tree)
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            else:
                continue
            for target in targets:
                found = resolve(target) if target.split(".")[0] == "drmix" else None
                if found and found != mod:
                    graph[mod].add(found)
    return dict(graph)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(set(graph) | {m for ms in graph.values() for m in ms}):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def layer_of(module: str) -> int:
    parts = module.split(".")[1:] or ["drmix"]
    for n in range(len(parts), 0, -1):          # the most specific name first: "report.card", then "report"
        key = ".".join(parts[:n])
        for i, names in enumerate(LAYERS):
            if key in names:
                return i
    raise KeyError(f"{module} is in no layer: add {parts[0]!r} to LAYERS in tests/test_layers.py")


def up_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every import from a module to one in a higher layer."""
    return {(a, b) for a, bs in graph.items() for b in bs if layer_of(b) > layer_of(a)}


# ------------------------------------------------------------------------------------------------- tests

def test_every_package_has_a_layer():
    for module in import_graph():
        layer_of(module)
    for path in ROOT.iterdir():
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
            layer_of(module_name(path if path.suffix == ".py" else path / "__init__.py"))


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_layers_only_point_down():
    arrows = up_arrows(import_graph())
    assert arrows - PENDING == set(), "imports from a lower layer to a higher one"
    assert PENDING - arrows == set(), "gone: take these off PENDING in tests/test_layers.py"


def test_the_checker_finds_cycles_and_up_arrows(tmp_path):
    """The checker on a made-up package: a cycle through a lazy import, an up-arrow, a TYPE_CHECKING import."""
    pkg = tmp_path / "drmix"
    for sub in ("data", "train"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "data" / "a.py").write_text("from drmix.data import b\n")
    (pkg / "data" / "b.py").write_text("def f():\n    from .a import x\n")   # lazy and relative: still an edge
    (pkg / "data" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                       "    from drmix.train import t\n")
    (pkg / "train" / "t.py").write_text("import drmix.errors\nfrom drmix.data.c import y\n")
    (pkg / "data" / "d.py").write_text("from drmix.train.t import z\n")
    graph = import_graph(pkg)
    assert graph["drmix.data.a"] == {"drmix.data.b"} and graph["drmix.data.b"] == {"drmix.data.a"}
    assert "drmix.data.c" not in graph                                       # TYPE_CHECKING only
    assert graph["drmix.train.t"] == {"drmix.errors", "drmix.data.c"}
    assert cycles(graph) == [["drmix.data.a", "drmix.data.b"]]
    assert up_arrows(graph) == {("drmix.data.d", "drmix.train.t")}
    # a module named apart from its package takes its own layer
    assert layer_of("drmix.markdown") == 0 < layer_of("drmix.evaluation.compare") < layer_of("drmix.report.card")
    LAYERS[0].add("report.card")
    try:
        assert layer_of("drmix.report.card") == 0 < layer_of("drmix.report.html")
    finally:
        LAYERS[0].discard("report.card")


if __name__ == "__main__":
    g = import_graph(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
    print("cycles:", cycles(g) or "none")
    for a, b in sorted(up_arrows(g)):
        print(f"up-arrow: {a} -> {b}" + ("  (pending)" if (a, b) in PENDING else ""))
