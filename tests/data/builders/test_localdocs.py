"""Collections built from installed packages' documentation: text cleaning, pairs, negatives, splits, files."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from drmix.data.builders.localdocs import (
    DocItem,
    LocalDocsOptions,
    Pair,
    add_hard_negatives,
    build_localdocs,
    clean_text,
    extract_items,
    list_submodules,
    make_pairs,
    split_docstring,
    split_family,
    stats_table,
)
from drmix.errors import ConfigError


# ------------------------------------------------------------------------------------------ text

def test_clean_text_strips_markup_and_truncates():
    raw = textwrap.dedent("""\
        Compute the :func:`numpy.linalg.norm` of ``x``, see [the docs](https://example.org/x).

        .. versionadded:: 1.2
        ![badge](https://img.shields.io/x.svg)
        >>> norm([3, 4])
        5.0
        ## Notes
        Uses **BLAS**  `when`  available.
        """)
    assert clean_text(raw) == ("Compute the numpy.linalg.norm of x, see the docs. 5.0 Notes Uses BLAS when available.")
    assert clean_text("one two three four five", max_words=3) == "one two three"


def test_split_docstring_summary_lead_and_body():
    doc = textwrap.dedent("""\
        norm(x, ord=None) -> float

        Matrix or vector norm.

        This function returns one of eight norms.

        Parameters
        ----------
        x : array_like
            Input array.
        """)
    summary, lead, body = split_docstring(doc)
    assert summary == "Matrix or vector norm."
    assert clean_text(lead) == "Matrix or vector norm. This function returns one of eight norms."
    assert clean_text(body) == "This function returns one of eight norms. Parameters x : array_like Input array."


def test_split_docstring_long_first_paragraph_takes_first_sentence():
    first = "Return the thing. " + " ".join(["Word"] * 45) + "."
    summary, _, body = split_docstring(first + "\n\nMore text here.")
    assert summary == "Return the thing."
    assert body.split() == ["Word"] * 44 + ["Word.", "More", "text", "here."]


def test_split_docstring_args_header_ends_lead():
    _, lead, _ = split_docstring("Do it.\n\nDetails.\n\nArgs:\n    x: a thing.\n")
    assert clean_text(lead) == "Do it. Details."


# ------------------------------------------------------------------------------------------ pairs

def _item(name: str, doc: str, sig: str | None = None, kind: str = "function", root: str = "pkg",
          family: str = "fam", summary: str | None = None) -> DocItem:
    return DocItem(family, root, kind, name, doc, sig, summary)


def test_make_pairs_one_per_object_and_duplicates_dropped():
    long_doc = "Add two numbers together.\n\nThe result is the arithmetic sum of both inputs as a float."
    items = [
        _item("pkg.add", long_doc, "pkg.add(a, b)"),
        _item("pkg.plus", long_doc, "pkg.plus(a, b)"),  # alias: same docstring -> dropped
        _item("pkg.tiny", "Hi.", "pkg.tiny()"),  # positive too short for any type -> dropped
        _item("dist", "word " * 30, kind="package", summary="A small demo package"),
    ]
    opts = LocalDocsOptions(min_words=5)
    pairs = make_pairs(items, seed=0, opts=opts)["fam"]
    assert [p.key for p in pairs] == ["package:dist", "function:pkg.add"]  # sorted by object name
    add = pairs[1]
    if add.type == "signature":
        assert (add.query, add.positive) == ("pkg.add(a, b)", " ".join(long_doc.split()))
    else:
        assert (add.query, add.positive) == ("Add two numbers together.",
                                              "The result is the arithmetic sum of both inputs as a float.")
    assert (pairs[0].type, pairs[0].query, pairs[0].positive) == ("package", "A small demo package",
                                                                  " ".join(["word"] * 30))
    # the type drawn per object depends only on the seed and the object
    assert [p.type for p in make_pairs(list(reversed(items)), seed=0, opts=opts)["fam"]] == [p.type for p in pairs]


def test_make_pairs_uses_both_types_across_objects():
    items = [_item(f"pkg.f{i}", f"Summary line number {i} here.\n\nBody text {i} with enough words in it.",
                   f"pkg.f{i}(x)") for i in range(40)]
    types = {p.type for p in make_pairs(items, seed=3, opts=LocalDocsOptions(min_words=5))["fam"]}
    assert types == {"signature", "summary"}


def test_hard_negatives_lexical_first_then_random_never_self():
    pool = [
        Pair("parse json string", "Decode a JSON document.", "summary", "pkg", "function:pkg.loads"),
        Pair("x", "Parse a json string into objects quickly.", "summary", "pkg", "function:pkg.parse"),
        Pair("y", "Compute the arithmetic mean of numbers.", "summary", "pkg", "function:pkg.mean"),
        Pair("z", "Open a file for reading.", "summary", "pkg", "function:pkg.open"),
        Pair("w", "Sort items in place.", "summary", "pkg", "function:pkg.sort"),
        Pair("v", "Parse json string helpers.", "summary", "other", "function:other.p"),
    ]
    target = pool[0]
    add_hard_negatives([target], pool, num_negatives=2, seed=0)
    # idf over 6 docs: "parse", "json", "string" appear in 2 docs each -> equal weights; doc 1 has 7 terms,
    # doc 5 is another root. So doc 1 is the lexical pick; the second is random from pkg's other docs.
    assert target.negatives[0] == "Parse a json string into objects quickly."
    assert target.negatives[1] in {pool[2].positive, pool[3].positive, pool[4].positive}
    assert target.positive not in target.negatives


def test_hard_negatives_skip_docs_containing_the_query():
    pool = [
        Pair("Partition each element around sep.", "Split once.", "summary", "pkg", "k0"),
        Pair("q1", "Partition each element around sep. For each element split it.", "summary", "pkg", "k1"),
        Pair("q2", "Partition the array by pivot element.", "summary", "pkg", "k2"),
        Pair("q3", "Unrelated text about files.", "summary", "pkg", "k3"),
    ]
    add_hard_negatives(pool[:1], pool, num_negatives=1, seed=0)
    assert pool[0].negatives == ["Partition the array by pivot element."]


def test_split_family_sizes_and_disjoint():
    import random

    pairs = [Pair(f"q{i}", f"p{i}", "summary", "pkg", f"k{i}") for i in range(100)]
    opts = LocalDocsOptions(test_queries=10, dev_queries=5, distractors=20, max_pairs_per_collection=50)
    sp = split_family(pairs, opts, random.Random(0))
    assert (len(sp.test), len(sp.dev), len(sp.distractors), len(sp.train)) == (10, 5, 20, 50)
    keys = [p.key for part in (sp.test, sp.dev, sp.distractors, sp.train) for p in part]
    assert len(set(keys)) == len(keys)
    # a small family keeps half for training: held-out parts scale by (n//2)/held = 20/35
    small = split_family(pairs[:40], opts, random.Random(0))
    assert (len(small.test), len(small.dev), len(small.distractors), len(small.train)) == (5, 2, 11, 22)


# ------------------------------------------------------------------------------------------ walking

def _make_package(root: Path, name: str = "ldpkg", n: int = 40) -> None:
    pkg = root / name
    (pkg / "sub").mkdir(parents=True)
    (pkg / "tests").mkdir()
    funcs = "\n".join(
        f"def fn{i}(x, scale={i}, *, axis=None):\n"
        f"    \"\"\"Topic{i} summary for function {i}.\n\n"
        f"    Longer explanation {i}: it computes quantity{i} from x along axis with care.\n\"\"\"\n"
        for i in range(n))
    (pkg / "__init__.py").write_text(f'"""Demo package for tests.\n\nIt has helpers and a submodule."""\n'
                                     f"from {name}.core_mod import fn0 as alias0\n")
    (pkg / "core_mod.py").write_text('"""Core functions."""\n' + funcs + textwrap.dedent('''
        class Box:
            """A box holding items.

            It keeps them in insertion order for later use.
            """

            def __init__(self, size=3):
                self.size = size

            def put(self, item, *, force=False):
                """Put one item in the box and return how many it now holds in total."""

            def _hidden(self):
                """Never listed because private."""
        '''))
    (pkg / "_private.py").write_text('"""Private."""\n')
    (pkg / "convert_stuff.py").write_text('"""Converter."""\n')
    (pkg / "tests" / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "leaf.py").write_text('def g():\n    """Leaf function g of the sub package, it does things."""\n')


@pytest.fixture()
def fake_package(tmp_path, monkeypatch):
    _make_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "ldpkg"
    for m in [m for m in sys.modules if m == "ldpkg" or m.startswith("ldpkg.")]:
        del sys.modules[m]


def test_list_submodules_skips_private_tests_and_converters(fake_package):
    assert list_submodules(fake_package) == ["ldpkg", "ldpkg.core_mod", "ldpkg.sub", "ldpkg.sub.leaf"]
    assert list_submodules(fake_package, max_depth=1) == ["ldpkg", "ldpkg.core_mod", "ldpkg.sub"]
    assert list_submodules(fake_package, limit=2) == ["ldpkg", "ldpkg.core_mod"]


def test_extract_items_signatures_methods_and_reexports(fake_package):
    items, walk = extract_items({"demo": [fake_package]}, LocalDocsOptions(isolate=False))
    by_name = {i.name: i for i in items}
    assert walk["demo"]["modules"] == 4 and walk["demo"]["failed"] == 0
    # fn0 is re-exported by the package root (walked first) as alias0: listed once, under that name
    assert by_name["ldpkg.alias0"].signature == "ldpkg.alias0(x, scale=0, *, axis=None)"
    assert "ldpkg.core_mod.fn0" not in by_name
    assert by_name["ldpkg.core_mod.fn7"].signature == "ldpkg.core_mod.fn7(x, scale=7, *, axis=None)"
    assert by_name["ldpkg.core_mod.Box"].signature == "ldpkg.core_mod.Box(size=3)"
    assert by_name["ldpkg.core_mod.Box.put"].signature == "ldpkg.core_mod.Box.put(item, *, force=False)"
    assert by_name["ldpkg.core_mod.Box.put"].kind == "method"
    assert "ldpkg.core_mod.Box._hidden" not in by_name
    assert by_name["ldpkg"].kind == "module"
    assert by_name["ldpkg.sub.leaf.g"].doc == "Leaf function g of the sub package, it does things."
    # 40 functions + Box + Box.put + g + the docstrings of ldpkg and ldpkg.core_mod (sub and leaf have none)
    assert len(items) == 45


def test_build_localdocs_writes_collections_and_beir(fake_package, tmp_path):
    from drmix.data.beir import load_beir

    opts = LocalDocsOptions(isolate=False, test_queries=4, dev_queries=2, distractors=6, min_train_pairs=5,
                            num_negatives=2)
    data = build_localdocs(tmp_path / "out", seed=1, families={"demo": [fake_package]}, options=opts)
    assert data.families == ["demo"]
    rows = [json.loads(line) for line in data.train_files["demo"].read_text().splitlines()]
    # 45 objects give 44 pairs (core_mod's "Core functions." is too short for either type), 4 + 2 + 6 held out
    stats = data.stats[0]
    assert len(rows) == stats["train_pairs"] == 44 - 12
    assert all(set(r) == {"query", "positive", "negatives"} and len(r["negatives"]) == 2 for r in rows)
    assert all(r["positive"] not in r["negatives"] for r in rows)
    test = load_beir(data.beir_dirs["demo"], split="test")
    dev = load_beir(data.beir_dirs["demo"], split="dev")
    assert (len(test.queries), len(dev.queries), len(test.corpus)) == (4, 2, 12)
    train_pos = {r["positive"] for r in rows}
    assert not train_pos & {d["text"] for d in test.corpus.values()}
    assert stats["test_queries"] == 4 and stats["corpus_docs"] == 12
    assert json.loads((data.root / "stats.json").read_text())["families"][0]["family"] == "demo"
    table = stats_table(data).splitlines()
    assert len(table) == 3 and table[2].startswith("| demo | 4 | ")
    # same installed code + same seed -> the same bytes
    again = build_localdocs(tmp_path / "out2", seed=1, families={"demo": [fake_package]}, options=opts)
    assert again.train_files["demo"].read_bytes() == data.train_files["demo"].read_bytes()
    assert (again.beir_dirs["demo"] / "corpus.jsonl").read_bytes() == (data.beir_dirs["demo"] / "corpus.jsonl").read_bytes()


def test_isolated_child_process_reads_the_same_items(fake_package):
    opts = LocalDocsOptions(isolate=False)
    from drmix.data.builders.localdocs import collect_items

    inproc, _ = collect_items({"demo": [fake_package]}, opts)
    child, walk = collect_items({"demo": [fake_package]}, opts.model_copy(update={"isolate": True}))
    assert [vars(i) for i in child] == [vars(i) for i in inproc]
    assert walk["demo"]["modules"] == 4


def test_stdlib_family_in_child_process(tmp_path):
    opts = LocalDocsOptions(test_queries=5, dev_queries=0, distractors=10, min_train_pairs=5)
    data = build_localdocs(tmp_path / "std", families={"std": ["json", "textwrap", "shlex", "bisect"]}, options=opts)
    queries = [json.loads(line)["query"] for line in data.train_files["std"].read_text().splitlines()]
    assert len(queries) == data.stats[0]["train_pairs"] >= 5
    assert not (data.beir_dirs["std"] / "qrels" / "dev.tsv").exists()


def test_unknown_family_and_nothing_installed_raise():
    with pytest.raises(ConfigError, match="unknown documentation family 'nope'"):
        build_localdocs("/tmp/never-written", families=["nope"])
    with pytest.raises(ConfigError, match="none of the requested documentation families"):
        build_localdocs("/tmp/never-written", families={"x": ["surely_not_an_installed_module_123"]})
