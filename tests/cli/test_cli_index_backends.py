"""drmix index --backend faiss-disk|milvus, drmix search / eval --index over them (tiny random models); every
Milvus test on Milvus Lite and on the session's Milvus server (``milvus_target``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from drmix.cli.retrieval import register
from drmix.data.beir import write_beir
from drmix.errors import ConfigError, ModelError

pytest.importorskip("pymilvus")

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


def test_milvus_flat_index_searches_and_scores_as_exact_search(app, toy, tiny_model_path, tmp_path, milvus_target):
    root, data = toy
    db = milvus_target
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


def test_a_drmix_collection_answers_a_plain_pymilvus_search(app, toy, tiny_model_path, tmp_path, milvus_target):
    """What a Milvus user does after drmix index: MilvusClient.search with the query encoded by the same model;
    the hits are drmix search's. A server's collection is left loaded by the build (no load_collection first);
    Milvus Lite releases every collection when a process opens the folder, so there load_collection comes first
    (as docs/evaluation.md says)."""
    from pymilvus import MilvusClient
    from sentence_transformers import SentenceTransformer

    _, data = toy
    _ok(app, ["index", "--corpus", str(data), "--backend", "milvus", "--uri", milvus_target, "--model",
              tiny_model_path, "--collection", "plain"])
    from drmix.retrieval.backends.milvus import _forget_lite, is_uri

    if not is_uri(milvus_target):  # Milvus Lite: one process opens the folder at a time
        _forget_lite(Path(milvus_target).resolve(), remove=False)
    user = MilvusClient(uri=milvus_target)
    if is_uri(milvus_target):
        assert user.get_load_state("plain")["state"].name == "Loaded"
    else:
        user.load_collection("plain")
    query = SentenceTransformer(tiny_model_path, device="cpu").encode(["about the ship"], normalize_embeddings=True)
    res = user.search("plain", data=query.tolist(), limit=5, output_fields=["doc_id", "title"],
                      search_params={"metric_type": "IP"})
    got = [h["entity"]["doc_id"] for h in res[0]]
    user.close()
    if not is_uri(milvus_target):
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(str(Path(milvus_target).resolve()))
    hits = json.loads(_ok(app, ["search", "--index", f"{milvus_target}#plain", "-q", "about the ship", "--k", "5",
                                "--json"]).stdout)
    assert got == [h["doc_id"] for h in hits["hits"]] and len(got) == 5


def test_faiss_disk_ivf_probing_every_list_scores_as_exact_search(app, toy, tiny_model_path, tmp_path):
    _, data = toy
    out = tmp_path / "disk"
    _ok(app, ["index", "--corpus", str(data), "--backend", "faiss-disk", "--output", str(out), "--kind", "ivf-flat",
              "--nprobe", "1000", "--chunk-size", "50", "--model", tiny_model_path])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["backend"] == "faiss-disk" and meta["count"] == 121 and meta["params"]["nlist"] == 3
    assert meta["normalized"] is True and meta["pooling"] == "mean" and len(meta["fingerprint"]) == 40
    via_index = _eval(app, ["--index", str(out), "--data", str(data)], tmp_path / "a")
    exact = _eval(app, ["--model", tiny_model_path, "--data", str(data)], tmp_path / "b")
    assert via_index["results"]["toy"] == pytest.approx(exact["results"]["toy"], abs=1e-6)
    rows = json.loads(_ok(app, ["search", "--index", str(out), "-q", "awkward id", "--k", "121", "--json"]).stdout)
    assert 'q"uote' in [h["doc_id"] for h in rows["hits"]]
    # an earlier faiss-disk index is replaced without --overwrite, as every index folder
    _ok(app, ["index", "--corpus", str(data), "--backend", "faiss-disk", "--output", str(out), "--rerank", "0",
              "--model", tiny_model_path])
    assert not (out / "vectors.f32").exists() and json.loads((out / "meta.json").read_text())["params"]["rerank"] == 0


def test_another_model_is_refused_naming_both(app, toy, tiny_model_path, tmp_path, milvus_target):
    from conftest import build_tiny_model

    _, data = toy
    other = str(build_tiny_model(tmp_path / "other", seed=1))
    db = milvus_target
    _ok(app, ["index", "--corpus", str(data), "--backend", "milvus", "--uri", db, "--collection", "c",
              "--model", tiny_model_path])
    for args in (["search", "--index", f"{db}#c", "-q", "cat", "--model", other],
                 ["eval", "--index", f"{db}#c", "--data", str(data), "--model", other]):
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, ModelError)
        msg = str(result.exception)
        assert tiny_model_path in msg and other in msg and "fingerprint" in msg


def test_an_existing_collection_is_refused_before_encoding(app, toy, tiny_model_path, tmp_path, milvus_target):
    _, data = toy
    db = milvus_target
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


def _lite_collection(tmp_path, data, model) -> str:
    from drmix.retrieval.backends.milvus import _forget_lite

    db = str(tmp_path / "i.db")
    _ok_main(["index", "--corpus", str(data), "--backend", "milvus", "--uri", db, "--model", model])
    _forget_lite(Path(db).resolve(), remove=False)  # as another process finds it
    return db


def _ok_main(argv):
    from drmix.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code in (0, None)


def _one_line(capsys, argv) -> str:
    """``drmix ARGV`` in-process: exit code 2 and exactly one line on stderr (no library log, no traceback)."""
    from cli_helpers import run

    code, _, err = run(argv, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def test_damaged_misplaced_or_missing_milvus_lite_folders_are_one_line(toy, tiny_model_path, tmp_path, capsys):
    """drmix's line only: Milvus Lite's and pymilvus' own tracebacks and start/stop lines go to the log (-vv)."""
    pytest.importorskip("milvus_lite")
    _, data = toy
    db = _lite_collection(tmp_path, data, tiny_model_path)
    capsys.readouterr()
    part = next(Path(db).rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    line = _one_line(capsys, ["search", "--index", f"{db}#toy", "-q", "cat"])
    assert f"the Milvus Lite database {db} is damaged" in line and "Parquet magic bytes not found" in line
    (tmp_path / "plain.db").write_text("x")
    line = _one_line(capsys, ["search", "--index", str(tmp_path / "plain.db"), "-q", "cat"])
    assert "plain.db is a file, not a Milvus Lite database" in line and "does not answer" not in line
    # a read-only command creates nothing
    for argv in (["search", "--index", str(tmp_path / "missing.db"), "-q", "cat"],
                 ["eval", "--index", f"{tmp_path / 'missing.db'}#toy", "--data", str(data)]):
        assert "missing.db: no Milvus Lite database here" in _one_line(capsys, argv)
    assert not (tmp_path / "missing.db").exists()
    # a folder another process has open: named, with the cause
    from drmix.retrieval.backends.milvus import client

    other = tmp_path / "other.db"
    client(str(other)).list_collections()
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "drmix", "search", "--index", str(other), "-q", "cat"],
                          capture_output=True, text=True, timeout=300)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert f"Milvus Lite could not open {other} (another process holds the lock" in lines[0]


def test_an_index_a_full_disk_cannot_hold_is_refused_before_encoding(toy, tiny_model_path, tmp_path, capsys,
                                                                       monkeypatch):
    import collections
    import shutil

    import drmix.model.encoder as encoder

    pytest.importorskip("milvus_lite")
    _, data = toy
    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 1_000, 1_000))
    loaded = []
    real = encoder.load_encoder
    monkeypatch.setattr(encoder, "load_encoder", lambda *a, **k: loaded.append(1) or real(*a, **k))
    db = tmp_path / "full.db"
    line = _one_line(capsys, ["index", "--corpus", str(data), "--backend", "milvus", "--uri", str(db), "--model",
                              tiny_model_path])
    assert "the index of 121 documents needs about" in line and "1000 bytes free; nothing was written" in line
    assert not db.exists() and loaded == [1]  # the model loaded (its dimension), nothing encoded, no folder


@pytest.mark.slow
def test_eval_index_on_milvus_lite_keeps_stderr_clean_while_idle(toy, tiny_model_path, tmp_path):
    """Milvus Lite's in-process gRPC server answered pymilvus' 10-second keepalive pings, sent while no call was
    open, with a GOAWAY "too_many_pings" after about 30 s idle, which gRPC printed to stderr; drmix's Lite channels
    send no such pings. 40 s of reading the data set, the index open, stand for a long query encoding."""
    import os
    import subprocess
    import sys

    pytest.importorskip("milvus_lite")
    _, data = toy
    db = _lite_collection(tmp_path, data, tiny_model_path)
    slow = ("import sys, time\nimport drmix.evaluation.index_eval as ie\nreal = ie.load_beir\n"
            "def slow(*a, **k):\n    time.sleep(40)\n    return real(*a, **k)\nie.load_beir = slow\n"
            "from drmix.cli import main\nmain(sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-c", slow, "eval", "--index", f"{db}#toy", "--data", str(data),
                           "--output", str(tmp_path / "e")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GOAWAY" not in done.stderr and "too_many_pings" not in done.stderr, done.stderr[-2000:]
