"""drmix index --backend faiss-disk|milvus, drmix search / eval --index over them (tiny random models)."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from drmix.cli.retrieval import register
from drmix.data.beir import write_beir
from drmix.errors import ConfigError, ModelError

pytest.importorskip("milvus_lite")

WORDS = "cat ship bread ocean yeast river mountain engine piano garden violin rocket castle forest".split()


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """120 passages of word pairs, 14 queries each judging the passages that hold its word."""
    root = tmp_path_factory.mktemp("backends")
    corpus = {f"p{i}": {"title": WORDS[i % 14], "text": f"{WORDS[i % 14]} and {WORDS[(i * 5) % 14]} {i}"}
              for i in range(120)}
    corpus['q"uote'] = {"title": "naïve ☃", "text": "a passage with an awkward id"}
    queries = {f"q{j}": f"about the {w}" for j, w in enumerate(WORDS)}
    qrels = {"test": {f"q{j}": {d: 1 for d, doc in corpus.items() if doc["title"] == w} for j, w in enumerate(WORDS)}}
    return root, write_beir(root / "toy", corpus, queries, qrels)


def _ok(app, args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def _eval(app, args, out):
    _ok(app, ["eval", *args, "--output", str(out), "--k", "20"])
    return json.loads((out / "eval.json").read_text())


def test_milvus_flat_index_searches_and_scores_as_exact_search(app, toy, tiny_model_path, tmp_path):
    root, data = toy
    db = str(tmp_path / "index.db")
    _ok(app, ["index", "--corpus", str(data), "--backend", "milvus", "--uri", db, "--model", tiny_model_path])
    from drmix.retrieval.backends import open_index

    assert len(open_index(f"{db}#toy")) == 121  # the collection is named after the corpus folder
    hits = json.loads(_ok(app, ["search", "--index", db, "-q", "about the cat", "--k", "3", "--json"]).stdout)
    assert len(hits["hits"]) == 3 and all("text" in h for h in hits["hits"])
    via_index = _eval(app, ["--index", f"{db}#toy", "--data", str(data)], tmp_path / "a")
    exact = _eval(app, ["--model", tiny_model_path, "--data", str(data)], tmp_path / "b")
    assert via_index["results"]["toy"] == pytest.approx(exact["results"]["toy"], abs=1e-6)
    assert via_index["info"]["toy"]["backend"] == "milvus" and via_index["info"]["toy"]["kind"] == "flat"
    assert via_index["info"]["toy"]["judged_not_indexed"] == 0              # every judged passage found there


def test_faiss_disk_ivf_probing_every_list_scores_as_exact_search(app, toy, tiny_model_path, tmp_path):
    _, data = toy
    out = tmp_path / "disk"
    _ok(app, ["index", "--corpus", str(data), "--backend", "faiss-disk", "--output", str(out), "--kind", "ivf-flat",
              "--nprobe", "1000", "--chunk-size", "50", "--model", tiny_model_path])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["backend"] == "faiss-disk" and meta["count"] == 121 and meta["params"]["nlist"] == 3
    assert meta["normalized"] is True and meta["pooling"] == "mean" and len(meta["fingerprint"]) == 24
    via_index = _eval(app, ["--index", str(out), "--data", str(data)], tmp_path / "a")
    exact = _eval(app, ["--model", tiny_model_path, "--data", str(data)], tmp_path / "b")
    assert via_index["results"]["toy"] == pytest.approx(exact["results"]["toy"], abs=1e-6)
    rows = json.loads(_ok(app, ["search", "--index", str(out), "-q", "awkward id", "--k", "121", "--json"]).stdout)
    assert 'q"uote' in [h["doc_id"] for h in rows["hits"]]
    # an earlier faiss-disk index is replaced without --overwrite, as every index folder
    _ok(app, ["index", "--corpus", str(data), "--backend", "faiss-disk", "--output", str(out), "--rerank", "0",
              "--model", tiny_model_path])
    assert not (out / "vectors.f32").exists() and json.loads((out / "meta.json").read_text())["params"]["rerank"] == 0


def test_another_model_is_refused_naming_both(app, toy, tiny_model_path, tmp_path):
    from conftest import build_tiny_model

    _, data = toy
    other = str(build_tiny_model(tmp_path / "other", seed=1))
    db = str(tmp_path / "index.db")
    _ok(app, ["index", "--corpus", str(data), "--backend", "milvus", "--uri", db, "--collection", "c",
              "--model", tiny_model_path])
    for args in (["search", "--index", f"{db}#c", "-q", "cat", "--model", other],
                 ["eval", "--index", f"{db}#c", "--data", str(data), "--model", other]):
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, ModelError)
        msg = str(result.exception)
        assert tiny_model_path in msg and other in msg and "fingerprint" in msg


def test_an_existing_collection_is_refused_before_encoding(app, toy, tiny_model_path, tmp_path):
    _, data = toy
    db = str(tmp_path / "index.db")
    args = ["index", "--corpus", str(data), "--backend", "milvus", "--uri", db, "--model", tiny_model_path]
    _ok(app, args)
    import drmix.model.encoder as encoder

    def no_loading(*a, **k):
        raise AssertionError("the model was loaded before the refusal")
    real, encoder.load_encoder = encoder.load_encoder, no_loading
    try:
        result = CliRunner().invoke(app, args)
    finally:
        encoder.load_encoder = real
    assert isinstance(result.exception, ConfigError)
    assert "collection toy already exists" in str(result.exception) and "121 passages" in str(result.exception)
    assert f"this build is model {tiny_model_path}." in str(result.exception)    # no dimension yet: none shown
    _ok(app, [*args, "--overwrite", "--kind", "hnsw"])
    out = _eval(app, ["--index", db, "--data", str(data)], tmp_path / "e")
    assert out["info"]["toy"]["kind"] == "hnsw"


@pytest.mark.parametrize("args,message", [
    (["--backend", "milvus"], "give --uri"),
    (["--backend", "faiss-disk", "--uri", "x.db"], "give --output DIR"),
    (["--uri", "x.db"], "--backend memory writes a folder: give --output DIR"),
    (["--output", "OUT", "--kind", "ivf-pq"], "the memory backend has no index kind 'ivf-pq'"),
    (["--backend", "faiss-disk", "--output", "OUT", "--kind", "hnsw"], "no index kind 'hnsw'"),
    (["--backend", "milvus", "--uri", "x.db", "--collection", "9lives"], "not a usable Milvus collection name"),
])
def test_bad_index_options(app, toy, tmp_path, args, message):
    _, data = toy
    args = [a.replace("OUT", str(tmp_path / "o")).replace("x.db", str(tmp_path / "x.db")) for a in args]
    result = CliRunner().invoke(app, ["index", "--corpus", str(data), *args])
    assert isinstance(result.exception, ConfigError) and message in str(result.exception)


def test_eval_index_needs_one_dataset(app, toy, tmp_path):
    _, data = toy
    result = CliRunner().invoke(app, ["eval", "--index", str(tmp_path / "i"), "--data", str(data), "--data",
                                      str(data)])
    assert isinstance(result.exception, ConfigError) and "2 --data given" in str(result.exception)
    result = CliRunner().invoke(app, ["eval", "--index", str(tmp_path / "i"), "--data", str(data), "--dims", "8"])
    assert isinstance(result.exception, ConfigError) and "--dims cannot be used with --index" in str(result.exception)


def test_sweep_index_replaces_a_corpus_by_its_index(tmp_path):
    from drmix.cli.multicorpus import _indexed

    dirs = {"a": tmp_path / "a", "b": tmp_path / "b"}
    assert _indexed(dirs, None) is dirs
    assert _indexed(dirs, ["b=runs/x.db#b"]) == {"a": tmp_path / "a", "b": "runs/x.db#b"}
    with pytest.raises(ConfigError, match="--index names corpus 'c', which is not among a, b"):
        _indexed(dirs, ["c=runs/x.db#c"])
