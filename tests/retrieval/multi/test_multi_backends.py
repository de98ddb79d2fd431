"""Multi-corpus search over Milvus collections (Milvus Lite and the session's Milvus server) and on-disk FAISS
indexes: every label-free allocation policy gives what it gives over the same corpora in memory (exact flat
collections, IVF probing every list); a multicorpus sweep over a server collection gives the sweep's results."""
from __future__ import annotations

import pytest

from drmix.errors import DataError
from drmix.retrieval.backends import build_index, encode_chunks, model_record
from drmix.retrieval.index import index_corpus
from drmix.retrieval.multi import multi_search, parse_corpus_args

pytest.importorskip("pymilvus")

POLICIES = ["naive", "equal", "fixed:0.3", "confidence:0.9", "zscore", "calibrated", "coverage", "crcs", "redde"]


def _corpus(tag: str, n: int) -> dict[str, dict[str, str]]:
    words = "apple river stone cloud music paper glass tiger".split()
    return {f"{tag}{i}": {"title": words[i % 8], "text": f"{tag} {words[(i * 3) % 8]} {words[(i * 5) % 8]} {i}"}
            for i in range(n)}


@pytest.fixture(scope="module", params=["lite", "server"])
def milvus_place(request, tmp_path_factory):
    from conftest import milvus_location

    with milvus_location(request.param, request, tmp_path_factory.mktemp("milvus")) as where:
        yield where


@pytest.fixture(scope="module")
def places(tiny_model_path, tmp_path_factory, milvus_place):
    from drmix.model.encoder import load_encoder

    root = tmp_path_factory.mktemp("multi-backends")
    model = load_encoder(tiny_model_path)
    a, b = _corpus("a", 90), _corpus("b", 120)
    memory = {}
    for name, docs in (("a", a), ("b", b)):
        index_corpus(model, docs, show_progress=False).save(root / f"mem-{name}")
        memory[name] = str(root / f"mem-{name}")
    meta = {"model": tiny_model_path, **model_record(model)}
    db = milvus_place
    engines = {
        "a": build_index("milvus", f"{db}#a", encode_chunks(model, a, chunk_size=40, show_progress=False),
                         metadata=meta, corpus=a),
        "b": build_index("faiss-disk", str(root / "disk-b"), encode_chunks(model, b, show_progress=False),
                         kind="ivf-pq", nprobe=1000, rerank=100, metadata=meta, corpus=b),  # exact: all re-scored
    }
    return model, memory, engines


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_over_engines_matches_memory(places, policy):
    model, memory, engines = places
    queries = {"q1": "apple river", "q2": "tiger glass", "q3": "music"}
    want = multi_search(model, parse_corpus_args([f"{n}={p}" for n, p in memory.items()]), queries, k=8,
                        allocation=policy, depth=30)
    got = multi_search(model, parse_corpus_args([f"{n}={p}" for n, p in engines.items()]), queries, k=8,
                       allocation=policy, depth=30)
    assert [[(h["corpus"], h["doc_id"]) for h in r["hits"]] for r in got] == \
        [[(h["corpus"], h["doc_id"]) for h in r["hits"]] for r in want]
    for g, w in zip(got, want):
        assert [h["score"] for h in g["hits"]] == pytest.approx([h["score"] for h in w["hits"]], abs=1e-4)
        assert [h.get("text") for h in g["hits"]] == [h.get("text") for h in w["hits"]]


def test_corpus_args_keep_milvus_locations():
    parsed = parse_corpus_args(["a=runs/x/index.db#a", "b=http://milvus:19530#b"])
    assert parsed == {"a": "runs/x/index.db#a", "b": "http://milvus:19530#b"}
    with pytest.raises(DataError, match="a saved index, or a Milvus collection as PATH.db#COLLECTION"):
        parse_corpus_args(["a=/nowhere/at/all"])


def test_a_sweep_over_a_milvus_collection_gives_the_sweep_over_its_corpus(tmp_path, tiny_model_path, milvus_target):
    import json

    from typer.testing import CliRunner

    from drmix.cli import app
    from em_tables import write_src

    runner = CliRunner()
    src = write_src(tmp_path / "walmart-amazon")
    assert runner.invoke(app, ["multicorpus", "build", str(src), str(tmp_path / "wa")]).exit_code == 0
    r = runner.invoke(app, ["index", "--corpus", str(tmp_path / "wa" / "walmart"), "--backend", "milvus", "--uri",
                            milvus_target, "--collection", "walmart", "--model", tiny_model_path])
    assert r.exit_code == 0, r.output
    runs = {}
    for name, extra in (("plain", []), ("indexed", ["--index", f"walmart={milvus_target}#walmart"])):
        r = runner.invoke(app, ["multicorpus", "sweep", str(tmp_path / "wa"), "--model", tiny_model_path, "-p", "naive",
                                "-p", "equal", "--k", "2", "--ks", "1,2", "--output", str(tmp_path / name),
                                "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        runs[name] = json.loads((tmp_path / name / "results.json").read_text())
    assert runs["indexed"] == runs["plain"] and runs["plain"][0]["rows"]["naive"]["pc_recall@2"] > 0
