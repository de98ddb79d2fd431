"""``--dims``: metrics at truncated sizes equal those of manually truncated, re-normalised embeddings."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.data.beir import load_beir, write_beir
from drmix.errors import ConfigError
from drmix.evaluation.matryoshka import parse_dims, truncate_normalize

WORDS = ["cats", "dogs", "ships", "trains", "rivers", "mountains", "music", "bread", "stars", "cheese"]
CORPUS = {f"d{i}": {"title": "", "text": f"a short note about {w} and {WORDS[(i + 3) % 10]}"} for i, w in enumerate(WORDS)}
QUERIES = {f"q{i}": f"{w} facts" for i, w in enumerate(WORDS)}
QRELS = {"test": {f"q{i}": {f"d{i}": 1, f"d{(i + 1) % 10}": 2} for i in range(10)}}


@pytest.fixture()
def toy(tmp_path):
    return write_beir(tmp_path / "toy", CORPUS, QUERIES, QRELS)


def test_truncate_normalize_by_hand():
    out = truncate_normalize(np.array([[3.0, 4.0, 12.0], [0.0, 0.0, 1.0]]), 2)
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_parse_dims():
    assert parse_dims("256,64, 128") == (64, 128, 256)
    assert parse_dims(None) == ()
    for bad in ("64,x", "0,8"):
        with pytest.raises(ConfigError):
            parse_dims(bad)


def test_dims_metrics_equal_manual_truncation(tiny_model_path, toy):
    from drmix.evaluation.evaluate import evaluate_dataset
    from drmix.evaluation.metrics import evaluate_run
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.encode import encode_texts

    model = load_encoder(tiny_model_path, device="cpu")
    data = load_beir(toy, "test")
    metrics = ("ndcg@10", "recall@5", "mrr@10")
    got = evaluate_dataset(model, data, k=10, metrics=metrics, dims=(8, 16, 999))
    docs = list(CORPUS)
    d_full = encode_texts(model, [CORPUS[d]["text"] for d in docs])
    q_full = encode_texts(model, [QUERIES[q] for q in QUERIES])
    for dim in (8, 16):
        d = d_full[:, :dim] / np.linalg.norm(d_full[:, :dim], axis=1, keepdims=True)
        q = q_full[:, :dim] / np.linalg.norm(q_full[:, :dim], axis=1, keepdims=True)
        scores = q @ d.T
        run = {qid: {docs[j]: float(scores[i, j]) for j in np.argsort(-scores[i])[:10]}
               for i, qid in enumerate(QUERIES)}
        manual = evaluate_run(data.qrels, run, metrics)
        for m in metrics:
            assert got[f"{m}@{dim}d"] == pytest.approx(manual[m], abs=1e-6)
    full = evaluate_dataset(model, data, k=10, metrics=metrics)
    assert {m: got[m] for m in metrics} == pytest.approx(full, abs=1e-6)   # full size unchanged
    assert not any(k.endswith("@999d") for k in got)                       # larger than the model: skipped
    assert got["ndcg@10@8d"] != pytest.approx(got["ndcg@10"])                # truncation does change the ranking


def test_eval_cli_reports_each_dim(tiny_model_path, toy, tmp_path):
    from typer.testing import CliRunner

    from drmix.cli import app

    res = CliRunner().invoke(app, ["eval", "--data", str(toy), "--model", tiny_model_path, "--dims", "8,16",
                                   "--metric", "ndcg@10", "--output", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "out" / "eval.json").read_text())["results"]["toy"]
    assert set(row) == {"ndcg@10", "ndcg@10@8d", "ndcg@10@16d"}
