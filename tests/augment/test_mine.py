"""Retriever mining: rank windows, exclusion of positives, the positive-aware filter, provenance, the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from drmix.augment import mine as mine_mod
from drmix.augment.mine import RankWindow, mine_collection, rank, top_k_scores
from drmix.cli import app
from drmix.errors import ConfigError


def test_rank_window_parse_and_take():
    w = RankWindow.parse("2:3")
    assert (w.start, w.end) == (2, 3) and str(w) == "2:3"
    assert w.take(["a", "b", "c", "d"]) == ["b", "c"]
    assert RankWindow.parse("3:10").take(["a", "b"]) == []
    for bad in ("0:3", "5:2", "3", "a:b", "1:2:3"):
        with pytest.raises(ConfigError):
            RankWindow.parse(bad)


def test_top_k_and_rank_with_exclusion():
    q = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    d = np.array([[0.9, 0.1], [0.1, 0.9], [0.6, 0.6], [-1.0, 0.0]], np.float32)
    scores, index = top_k_scores(q, d, 3)
    assert index.tolist() == [[0, 2, 1], [1, 2, 0]]
    assert np.allclose(scores, [[0.9, 0.6, 0.1], [0.9, 0.6, 0.1]])
    ranked = rank(q, d, ["a", "b", "c", "z"], top_n=2, exclude=[{"a"}, set()])
    # query 0 loses its positive "a": the next two in order are c (0.6) and b (0.1)
    assert [i for i, _ in ranked[0]] == ["c", "b"]
    assert [i for i, _ in ranked[1]] == ["b", "c"]
    assert ranked[0][0][1] == pytest.approx(0.6)


# texts -> hand-made unit vectors, so every cosine below is known exactly
_VEC = {
    "q1": [1.0, 0.0], "q2": [0.0, 1.0],
    "p1": [1.0, 0.0],                        # q1's positive, cos 1.0
    "p2": [0.6, 0.8],                        # q2's positive, cos 0.8
    "n_a": [0.98, 0.198997487],              # cos(q1)=0.98  (> 0.95 * 1.0: filtered for q1)
    "n_b": [0.8, 0.6],                       # cos(q1)=0.8, cos(q2)=0.6
    "n_c": [0.0, -1.0],                      # cos(q1)=0,   cos(q2)=-1
}


@pytest.fixture
def hand_embed(monkeypatch):
    def fake_embed(model, queries, docs, **kw):
        as_arr = lambda xs: np.array([_VEC[x] for x in xs], np.float32)  # noqa: E731
        return as_arr(queries), as_arr(docs)

    monkeypatch.setattr(mine_mod, "embed", fake_embed)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_mine_collection_by_hand(tmp_path, hand_embed):
    src = tmp_path / "c.jsonl"
    _write(src, [{"query": "q1", "positive": "p1", "negatives": ["n_a", "n_c"], "source": "x"},
                 {"query": "q2", "positive": ["p2"], "negatives": ["n_b"]}])
    out = tmp_path / "m.jsonl"
    stats = mine_collection(src, out, model=None, window="1:3", num_negatives=2, max_score_ratio=0.95,
                            model_name="teacher")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    # pool = p1, n_a, n_c, p2, n_b. q1 (positive p1 removed): n_a .98, n_b .8, p2 .6 -> window 1:3; the filter
    # drops n_a (0.98 > 0.95 * 1.0); the top two left are n_b, p2.
    assert rows[0]["negatives"] == ["n_b", "p2"]
    assert rows[0]["mined"] == {"model": "teacher", "ranks": "1:3", "scores": [0.8, 0.6]}
    assert rows[0]["source"] == "x" and rows[0]["positive"] == "p1"   # other fields kept
    # q2 (positive p2 removed, its cos 0.8 -> limit 0.76): n_a .199, n_b .6, p1 0 -> all under the limit
    assert rows[1]["negatives"] == ["n_b", "n_a"]
    assert stats.filtered == 1 and stats.negatives == 4 and stats.short == 0 and stats.pool == 5
    # the mining model's scores of every text of the row, aligned with it (the scores distillation trains on)
    assert rows[0]["positive_scores"] == [1.0] and rows[0]["negative_scores"] == [0.8, 0.6]
    assert rows[1]["positive_scores"] == [0.8] and rows[1]["negative_scores"] == pytest.approx([0.6, 0.199], abs=1e-3)
    from drmix.data.collections import load_collections

    c = load_collections([str(out)])[0]
    assert c.has_scores and c.dataset[0]["negative_scores"] == [0.8, 0.6]


def test_mine_collection_reads_any_layout_through_load_collections(tmp_path, hand_embed, monkeypatch):
    """The same rows as a FlagEmbedding parquet file mine to the same negatives as the drmix JSONL above."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"query": "q1", "pos": ["p1"], "neg": ["n_a", "n_c"], "pos_scores": [1.0], "neg_scores": [0.5, 0.1]},
        {"query": "q2", "pos": ["p2"], "neg": ["n_b"], "pos_scores": [1.0], "neg_scores": [0.2]}]), src)
    out = tmp_path / "m.jsonl"
    mine_collection(src, out, model=None, window="1:3", num_negatives=2, max_score_ratio=0.95, model_name="t")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["negatives"] for r in rows] == [["n_b", "p2"], ["n_b", "n_a"]]
    assert rows[0]["positive"] == ["p1"]
    assert rows[0]["negative_scores"] == [0.8, 0.6]    # the old teacher scores replaced by the mining model's
    from drmix.data.collections import load_collections

    assert load_collections([str(out)])[0].layout == "drmix"


def test_mine_collection_window_keep_and_random(tmp_path, hand_embed):
    src = tmp_path / "c.jsonl"
    _write(src, [{"query": "q1", "positive": "p1", "negatives": ["n_a", "n_c"]},
                 {"query": "q2", "positive": "p2", "negatives": ["n_b"]}])
    out = tmp_path / "m.jsonl"
    # window 2:3 without the filter: q1 ranks n_a, n_b, p2, ... -> n_b, p2; keep old negatives in front
    mine_collection(src, out, None, window="2:3", num_negatives=2, max_score_ratio=None, keep_negatives=True)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["negatives"] == ["n_a", "n_c", "n_b", "p2"]
    assert rows[0]["negative_scores"] == pytest.approx([0.98, 0.0, 0.8, 0.6], abs=1e-6)  # kept ones scored too
    # random sampling draws inside the window only, and is seeded
    draws = set()
    for seed in range(6):
        mine_collection(src, out, None, window="1:3", num_negatives=1, max_score_ratio=None, sampling="random",
                        seed=seed)
        first = json.loads(out.read_text().splitlines()[0])["negatives"]
        assert first[0] in {"n_a", "n_b", "p2"}
        draws.add(first[0])
    mine_collection(src, out, None, window="1:3", num_negatives=1, max_score_ratio=None, sampling="random", seed=3)
    again = out.read_text()
    mine_collection(src, out, None, window="1:3", num_negatives=1, max_score_ratio=None, sampling="random", seed=3)
    assert out.read_text() == again and len(draws) > 1


def test_cli_mine_tiny_model(tmp_path, tiny_model_path):
    data = tmp_path / "cols"
    data.mkdir()
    rows = [{"query": f"question {i} about topic {i % 3}", "positive": f"passage {i} on topic {i % 3}"}
            for i in range(8)]
    _write(data / "a.jsonl", rows)
    out = tmp_path / "mined"
    runner = CliRunner()
    r = runner.invoke(app, ["mine", "--data", str(data), "--output", str(out), "--model", tiny_model_path,
                            "--ranks", "1:4", "--num-negatives", "2", "--max-score-ratio", "0"])
    assert r.exit_code == 0, r.output
    mined = [json.loads(x) for x in (out / "a.jsonl").read_text().splitlines()]
    assert len(mined) == 8
    for row in mined:
        assert len(row["negatives"]) == 2 and row["positive"] not in row["negatives"]
        assert row["mined"]["ranks"] == "1:4" and row["mined"]["scores"] == sorted(row["mined"]["scores"], reverse=True)
    # the output loads as a collection
    from drmix.data.collections import load_collections
    assert len(load_collections([str(out / "a.jsonl")])[0]) == 8
    # an existing output is refused without --overwrite, and the input is never the output
    r = runner.invoke(app, ["mine", "--data", str(data), "--output", str(out), "--model", tiny_model_path])
    assert isinstance(r.exception, ConfigError) and "--overwrite" in r.exception.fix
    r = runner.invoke(app, ["mine", "--data", str(data / "a.jsonl"), "--output", str(data / "a.jsonl"),
                            "--model", tiny_model_path, "--overwrite"])
    assert isinstance(r.exception, ConfigError) and "overwrite the input" in r.exception.message
    r = runner.invoke(app, ["mine", "--data", str(data), "--output", str(tmp_path / "o2"), "--ranks", "9:2",
                            "--model", tiny_model_path])
    assert isinstance(r.exception, ConfigError) and not (tmp_path / "o2").exists()


def test_top_up_negatives_by_hand(hand_embed):
    """Examples below num_negatives keep theirs and gain the next best of the window (known cosines above)."""
    from drmix.augment.mine import top_up_negatives

    queries, positives = ["q1", "q2"], [["p1"], ["p2"]]
    negatives = [["n_c"], ["n_b", "n_a"]]
    # pool = p1, n_c, p2, n_b, n_a. q1 without p1 and n_c: n_a .98, n_b .8, p2 .6 -> the filter (0.95 * 1.0) drops
    # n_a; two more wanted: n_b, p2. q2 already has 2 of 2: untouched, not embedded as a query.
    new, stats = top_up_negatives(queries, positives, negatives, None, num_negatives=2, window="1:3")
    assert new == [["n_c", "n_b"], ["n_b", "n_a"]]
    assert (stats.queries, stats.pool, stats.negatives, stats.filtered, stats.short) == (1, 5, 1, 1, 0)
    new, stats = top_up_negatives(queries, positives, negatives, None, num_negatives=3, window="1:3")
    # q1: n_b, p2 (two wanted, two left); q2 (without p2, n_b, n_a; its limit 0.95 * 0.8 = 0.76): p1 0, n_c -0.
    # n_c scores -1 for q2, p1 0: p1 first, within the window of the three left
    assert new == [["n_c", "n_b", "p2"], ["n_b", "n_a", "p1"]]
    assert (stats.queries, stats.negatives, stats.short) == (2, 3, 0)
    # a window too small for the need: counted short
    new, stats = top_up_negatives(queries, positives, negatives, None, num_negatives=4, window="1:1",
                                  max_score_ratio=None)
    assert new[0] == ["n_c", "n_a"] and stats.short == 2
    with pytest.raises(ConfigError):
        top_up_negatives(queries, positives, negatives, None, num_negatives=0)
