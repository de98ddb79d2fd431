"""MultiCorpusRetriever, multi_search and the ``drmix multicorpus`` commands with the tiny model."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from drmix.data.beir import doc_text, load_beir
from drmix.data.entity_matching import EntityMatchingConfig, build_entity_matching
from drmix.errors import ConfigError, DataError
from drmix.retrieval.multi import MultiCorpusRetriever, allocate_all, multi_search, parse_corpus_args

from em_tables import write_src


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from drmix.model.encoder import load_encoder

    return load_encoder(tiny_model_path, device="cpu")


@pytest.fixture()
def layout(tmp_path) -> Path:
    build_entity_matching(write_src(tmp_path / "src"), tmp_path / "bench", EntityMatchingConfig(names=("left", "right")))
    return tmp_path / "bench"


def _encode(model, texts):
    from drmix.retrieval.encode import encode_texts

    return encode_texts(model, texts, normalize=True)


def test_candidates_match_brute_force_scores_and_background(tiny, layout):
    dirs = {"right": layout / "right", "left": layout / "left"}
    retr = MultiCorpusRetriever.from_dirs(tiny, dirs, depth=3)
    assert retr.corpora == ["right", "left"]
    queries = {"q": "foo gadget"}
    cset = retr.candidates(queries, k=2)
    q = _encode(tiny, ["foo gadget"])[0]
    for name, d in dirs.items():
        corpus = load_beir(d, split=None).corpus
        ids = list(corpus)
        scores = _encode(tiny, [doc_text(corpus[i]) for i in ids]) @ q
        cc = cset.by_query["q"][name]
        assert len(cc) == 3                                  # depth 3 of 4 passages
        np.testing.assert_allclose(cc.scores, np.sort(scores)[::-1][:3], atol=1e-5)
        np.testing.assert_allclose([scores[ids.index(i)] for i in cc.ids], cc.scores, atol=1e-5)  # ids match
        # the background sample is the whole 4-passage corpus here
        assert cc.background == pytest.approx((scores.mean(), scores.std()), abs=1e-5)
    out = retr.search(queries, 4, "fixed:0.75")
    assert [h.corpus for h in out["q"]].count("right") == 3
    assert out == allocate_all(cset, "fixed:0.75", 4)


def test_multi_search_rows_and_oracle_refused(tiny, layout):
    rows = multi_search(tiny, {"left": layout / "left", "right": layout / "right"}, {"1": "acme widget"}, k=3,
                        allocation="fixed:0.5")
    assert len(rows) == 1 and rows[0]["query"] == "acme widget"
    hits = rows[0]["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert sorted(h["corpus"] for h in hits) == ["left", "left", "right"]   # round(1.5) = 2 from left
    assert all("title" not in h.get("text", "") for h in hits)    # title-free passages by default
    with pytest.raises(ConfigError, match="oracle"):
        multi_search(tiny, {"left": layout / "left"}, {"1": "x"}, allocation="oracle")


def test_k_larger_than_depth_fetches_k_candidates(tiny, layout):
    retr = MultiCorpusRetriever.from_dirs(tiny, {"left": layout / "left", "right": layout / "right"}, depth=2)
    cset = retr.candidates({"q": "foo gadget"}, k=3)
    assert [len(cset.by_query["q"][c]) for c in ("left", "right")] == [3, 3]   # max(depth, k) per corpus
    out = retr.search({"q": "foo gadget"}, 6, "fixed:0.5")
    assert sorted(h.corpus for h in out["q"]) == ["left"] * 3 + ["right"] * 3
    # k above both corpora together (4 + 4 passages): everything, once
    out = retr.search({"q": "foo gadget"}, 20, "naive")
    assert len(out["q"]) == 8 and len({(h.corpus, h.doc_id) for h in out["q"]}) == 8


@pytest.mark.parametrize("empty", ["no files", "empty corpus.jsonl"])
def test_an_empty_corpus_directory_contributes_nothing(tiny, layout, tmp_path, empty):
    private = tmp_path / "private"
    private.mkdir()
    if empty == "empty corpus.jsonl":
        (private / "corpus.jsonl").write_text("\n")
    dirs = {"left": layout / "left", "private": private}
    for policy in ("naive", "fixed:0.5", "zscore", "calibrated", "confidence:0.9"):
        rows = multi_search(tiny, dirs, {"q": "foo gadget"}, k=3, allocation=policy)
        assert [h["corpus"] for h in rows[0]["hits"]] == ["left"] * 3, policy
    alone = multi_search(tiny, {"private": private}, {"q": "x"}, k=3)
    assert alone[0]["hits"] == []


def test_parse_corpus_args(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    got = parse_corpus_args([f"wiki={tmp_path / 'a'}", f"mail={tmp_path / 'b'}"])
    assert list(got) == ["wiki", "mail"] and got["mail"] == tmp_path / "b"
    for bad in (["nodir"], [f"a={tmp_path / 'a'}", f"a={tmp_path / 'b'}"], [f"x/y={tmp_path / 'a'}"], []):
        with pytest.raises(ConfigError):
            parse_corpus_args(bad)
    with pytest.raises(DataError):
        parse_corpus_args([f"a={tmp_path / 'missing'}"])


def test_cli_build_and_sweep(tmp_path, tiny_model_path):
    from typer.testing import CliRunner

    from drmix.cli import app

    src = write_src(tmp_path / "walmart-amazon")
    runner = CliRunner()
    r = runner.invoke(app, ["multicorpus", "build", str(src), str(tmp_path / "wa")])
    assert r.exit_code == 0, r.output
    # the corpus sizes the command reports, read from the files (not from console text, which wraps)
    corpus_lines = (tmp_path / "wa" / "walmart" / "corpus.jsonl").read_text().splitlines()
    assert len(corpus_lines) == 4 and (tmp_path / "wa" / "amazon" / "corpus.jsonl").exists()
    out = tmp_path / "sweep"
    r = runner.invoke(app, ["multicorpus", "sweep", str(tmp_path / "wa"), "--model", tiny_model_path, "--known",
                            "walmart", "--known", "amazon", "-p", "naive", "-p", "fixed:0..1/0.5", "-p", "oracle",
                            "--k", "2", "--ks", "1,2,4", "--output", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    table = (out / "table.md").read_text()
    assert table.splitlines()[0] == "| Known corpus → | walmart known (k=2) | amazon known (k=2) |"
    for row in ("naive", "fixed:0", "fixed:0.5", "fixed:1", "oracle", "fixed (dev-tuned)"):
        assert f"| {row}" in table
    res = json.loads((out / "results.json").read_text())
    assert [r_["setting"] for r_ in res] == ["walmart known", "amazon known"]
    for setting in res:
        rows = setting["rows"]
        assert rows["oracle"]["pc_recall@2"] >= max(v["pc_recall@2"] for v in rows.values()) - 1e-12
        assert set(setting["curves"]["naive"]) == {"1", "2", "4"}
    assert (out / "recall_vs_k-walmart-known.png").exists()


def test_cli_rejects_bad_input(tmp_path):
    from typer.testing import CliRunner

    from drmix.cli import app

    runner = CliRunner()
    r = runner.invoke(app, ["multicorpus", "build", str(tmp_path / "nope"), str(tmp_path / "o"), "--names", "x"])
    assert isinstance(r.exception, ConfigError)
    r = runner.invoke(app, ["multicorpus", "build", str(tmp_path / "nope"), str(tmp_path / "o")])
    assert isinstance(r.exception, DataError) and "tableA.csv" in str(r.exception)
    r = runner.invoke(app, ["multicorpus", "sweep", "-p", "bogus", "--corpus", f"a={tmp_path}"])
    assert isinstance(r.exception, ConfigError) and "bogus" in str(r.exception)
    r = runner.invoke(app, ["multicorpus", "sweep", "--corpus", f"a={tmp_path}", "--split", "dev"])
    assert isinstance(r.exception, ConfigError) and "--tune-split dev is the evaluated --split" in str(r.exception)
    r = runner.invoke(app, ["multicorpus", "sweep", "--corpus", f"a={tmp_path}", "-p", "rrf"])
    assert isinstance(r.exception, ConfigError) and "round-robin" in str(r.exception)
