"""DRAMA's teacher windows on a hand-made ranking, and the written lines load as a training collection."""
from __future__ import annotations

import math

import pytest

import drmix.augment.examples as ex
from drmix.augment.rerank import rerank_examples
from drmix.data.collections import load_jsonl_collection
from drmix.errors import DataError

CORPUS = {f"d{i:02d}": f"document text {i}" for i in range(60)}


@pytest.fixture()
def fake_ranking(monkeypatch):
    calls = {}

    def fake_mine_ranked(queries, doc_ids, doc_texts, model, *, top_n=50, batch_size=64, **kw):
        calls["top_n"] = top_n
        # query 0 ranks d59, d58, ... ; query 1 finds nothing (an empty pool for it)
        ranked = [[(f"d{59 - r:02d}", 1.0 - r / 100) for r in range(top_n)], []]
        return ranked[:len(queries)]

    monkeypatch.setattr(ex, "mine_ranked", fake_mine_ranked)
    return calls


def test_positive_and_negative_windows(fake_ranking, tmp_path):
    rows = [{"query": "q zero", "augment": "crop", "source_doc": "d59", "sentence": 2, "positive": "dropped"},
            {"query": "q one", "augment": "crop"}]
    out, counts = ex.mine_examples(rows, CORPUS, model=None, teacher_name="teacher-x")
    assert fake_ranking["top_n"] == 50
    assert dict(counts) == {"kept": 1, "no_positive": 1}
    line = out[0]
    assert line["positives"] == [f"document text {59 - r}" for r in range(10)]          # ranks 1..10
    assert line["negatives"] == [f"document text {59 - r}" for r in range(29, 50)]      # ranks 30..50
    assert line["teacher"]["positive_ids"][0] == "d59" and line["teacher"]["negative_ids"][0] == "d30"
    assert len(line["teacher"]["candidates"]) == 20 and line["teacher"]["model"] == "teacher-x"
    assert line["augment"] == "crop+mine" and line["source_doc"] == "d59" and "positive" not in line
    assert line["positive_scores"] == pytest.approx([1.0 - r / 100 for r in range(10)])   # the teacher's, aligned
    assert line["negative_scores"] == pytest.approx([1.0 - r / 100 for r in range(29, 50)])
    ex.write_collection(tmp_path / "c.jsonl", out)
    col = load_jsonl_collection(tmp_path / "c.jsonl")                                  # provenance is ignored
    assert col.dataset[0]["positives"][0] == "document text 59" and len(col.dataset[0]["negatives"]) == 21


def test_custom_windows(fake_ranking):
    out, _ = ex.mine_examples([{"query": "q"}], CORPUS, model=None, positives="2:3", negatives="5:6",
                              keep_candidates=4)
    assert fake_ranking["top_n"] == 6
    assert out[0]["teacher"]["positive_ids"] == ["d58", "d57"]
    assert out[0]["teacher"]["negative_ids"] == ["d55", "d54"]


def test_rerank_examples_use_the_llm_order(tmp_path):
    from fake_llm import FakeBackend

    row = {"query": "q", "augment": "generate+mine", "positives": ["x"], "negatives": [],
           "teacher": {"candidates": [[f"d{i:02d}", 0.5] for i in range(12)]}}
    answer = " > ".join(f"[{i}]" for i in [12, 11, 3])   # the rest appended in teacher order
    out, stats = rerank_examples([row], CORPUS, FakeBackend(lambda m: answer), k=12, negatives="10:12")
    order = out[0]["llm_rerank"]["order"]
    assert order[:4] == ["d11", "d10", "d02", "d00"]
    assert out[0]["positives"] == ["document text 11"]
    assert out[0]["negatives"] == [CORPUS[d] for d in order[9:12]]
    assert out[0]["llm_rerank"]["repairs"] == {"invalid": 0, "duplicates": 0, "missing": 9}
    assert out[0]["augment"] == "generate+mine+rerank"
    # the LLM's order as teacher scores, -ln(rank): positive rank 1, negatives ranks 10..12
    assert out[0]["positive_scores"] == [0.0]
    assert out[0]["negative_scores"] == pytest.approx([-math.log(10), -math.log(11), -math.log(12)], abs=1e-6)
    with pytest.raises(DataError, match="no teacher candidates"):
        rerank_examples([{"query": "q"}], CORPUS, FakeBackend(lambda m: answer), path="in.jsonl")


def test_empty_output_is_refused(tmp_path):
    with pytest.raises(DataError, match="nothing to write"):
        ex.write_collection(tmp_path / "none.jsonl", [])


def test_rerank_defaults_are_the_papers_k20_n10():
    """DRAMA Sec. 3.1.3 as written: the LLM reranks the teacher's top k = 20; its top-1 is the positive and its
    top [k - n, k] with n = 10 (1-based, inclusive: ranks 10..20) the hard negatives."""
    from fake_llm import FakeBackend

    k, n = 20, 10
    row = {"query": "q", "augment": "generate+mine", "positives": ["x"], "negatives": [],
           "teacher": {"candidates": [[f"d{i:02d}", 0.5] for i in range(30)]}}     # more than k: only k shown
    llm_order = [7, 3, 20, 1, 19, 2, 18, 4, 17, 5, 16, 6, 15, 8, 14, 9, 13, 10, 12, 11]   # a full permutation
    out, stats = rerank_examples([row], CORPUS, FakeBackend(lambda m: " > ".join(f"[{i}]" for i in llm_order)))
    reranked = [f"d{i - 1:02d}" for i in llm_order]
    assert out[0]["llm_rerank"]["order"] == reranked and stats.outcomes["complete"] == 1
    assert out[0]["positives"] == [CORPUS[reranked[0]]]
    assert out[0]["negatives"] == [CORPUS[d] for d in reranked[k - n - 1:k]]           # ranks 10..20: 11 passages
    assert len(out[0]["negatives"]) == 11
