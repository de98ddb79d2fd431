"""drmix index under torchrun: shards beside the index, byte-identical to one process, a rerun that reuses them,
the refusals; and drmix index --estimate."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import drmix.retrieval.encode as encode_mod
from cli_helpers import run

DOCS = {f"d{i}": {"title": f"t{i}", "text": " ".join(f"word{(j * i) % 17}" for j in range(i % 9 + 1))}
        for i in range(11)}


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"_id": k, **v}) + "\n" for k, v in DOCS.items()) + "\n")
    return path


@pytest.fixture
def chunk4(monkeypatch):
    monkeypatch.setattr(encode_mod, "_SORT_CHUNK", 4)


def _launched(monkeypatch, rank: int = 0, world: int = 1) -> None:
    for name, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank)):
        monkeypatch.setenv(name, str(value))


def test_index_under_a_launcher_writes_shards_and_the_same_index(corpus, tiny_model_path, tmp_path, capsys,
                                                                   monkeypatch, chunk4):
    base = ["index", "--corpus", str(corpus), "--model", tiny_model_path]
    code, out, err = run([*base, "--output", str(tmp_path / "plain")], capsys)
    assert code == 0, err
    assert not (tmp_path / "plain.shards").exists()  # one plain process: as before, no shards
    _launched(monkeypatch)
    code, out, err = run([*base, "--output", str(tmp_path / "idx")], capsys)
    assert code == 0, err
    assert f"into {tmp_path / 'idx'}; 1 shards in {tmp_path / 'idx.shards'}" in " ".join(out.split())
    assert (tmp_path / "idx" / "vectors.npy").read_bytes() == (tmp_path / "plain" / "vectors.npy").read_bytes()
    assert sorted(p.name for p in (tmp_path / "idx.shards").iterdir()) == [
        "rank-00000-of-00001.json", "rank-00000-of-00001.npy", "shards.json"]
    # the same command again reuses the shard
    code, out, err = run([*base, "--output", str(tmp_path / "idx")], capsys)
    assert code == 0 and "1 reused from an earlier run" in " ".join(out.split())
    # another batch size: refused naming both, unless --overwrite
    code, out, err = run([*base, "--output", str(tmp_path / "idx"), "--batch-size", "8"], capsys)
    assert code == 2 and "encoded with batch_size 64, this run has 8" in " ".join(err.split())
    code, out, err = run([*base, "--output", str(tmp_path / "idx"), "--batch-size", "8", "--overwrite"], capsys)
    assert code == 0, err


def test_a_foreign_file_in_the_shard_folder_is_refused(corpus, tiny_model_path, tmp_path, capsys, monkeypatch):
    (tmp_path / "idx.shards").mkdir()
    (tmp_path / "idx.shards" / "notes.txt").write_text("mine")
    _launched(monkeypatch)
    code, out, err = run(["index", "--corpus", str(corpus), "--model", tiny_model_path, "--output",
                          str(tmp_path / "idx")], capsys)
    assert code == 2 and "notes.txt" in err and "drmix did not write" in " ".join(err.split())
    assert (tmp_path / "idx.shards" / "notes.txt").read_text() == "mine" and not (tmp_path / "idx").exists()


def test_estimate_counts_the_passages_and_prints_hours(corpus, capsys):
    code, out, err = run(["index", "--corpus", str(corpus), "--output", "unused", "--estimate", "--gpus", "2",
                          "--passages-per-s", "0.5"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("11 passages at 0.5 passages/s per GPU (given with --passages-per-s)")
    assert lines[2] == "  1 GPU: 1.4 min (0.02 h)"  # 60 + 11 / 0.5 = 82 s
    assert lines[3] == "  2 GPUs: 1.2 min (0.02 h)"  # 60 + 6 / 0.5 = 72 s
    assert not os.path.exists("unused")


@pytest.mark.slow
def test_two_gloo_processes_give_the_bytes_of_one(corpus, tiny_model_path, tmp_path, capsys, monkeypatch, chunk4):
    """Two real processes (torchrun, gloo on CPU), then rank 1's shard deleted and the command run again."""
    code, _, err = run(["index", "--corpus", str(corpus), "--model", tiny_model_path, "--output",
                        str(tmp_path / "one")], capsys)
    assert code == 0, err
    launcher = tmp_path / "launch.py"
    launcher.write_text("import sys\nimport drmix.retrieval.encode as e\ne._SORT_CHUNK = 4\n"
                        "from drmix.cli import main\nmain(sys.argv[1:])\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(launcher),
           "index", "--corpus", str(corpus), "--model", tiny_model_path, "--output", str(tmp_path / "two")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "two" / "vectors.npy").read_bytes() == (tmp_path / "one" / "vectors.npy").read_bytes()
    assert (tmp_path / "two" / "ids.json").read_text() == (tmp_path / "one" / "ids.json").read_text()
    shards = tmp_path / "two.shards"
    assert json.loads((shards / "rank-00001-of-00002.json").read_text())["start"] == 4
    first = (shards / "rank-00000-of-00002.npy").stat().st_mtime_ns
    (shards / "rank-00001-of-00002.npy").unlink()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 reused from an earlier run" in " ".join(done.stdout.split())
    assert (shards / "rank-00000-of-00002.npy").stat().st_mtime_ns == first  # only rank 1 encoded again
    assert (tmp_path / "two" / "vectors.npy").read_bytes() == (tmp_path / "one" / "vectors.npy").read_bytes()


def test_eval_and_mine_under_a_launcher_give_what_one_process_gives(corpus, tiny_model_path, tmp_path, capsys,
                                                                       monkeypatch, chunk4):
    from drmix.data.beir import write_beir

    data = write_beir(tmp_path / "toy", DOCS, {"q1": "word3 word6", "q2": "t4"},
                      {"test": {"q1": {"d3": 1}, "q2": {"d4": 1}}})
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"query": q}) + "\n" for q in ("word3 word6", "t4", "word1")))
    evaluate = ["eval", "--data", str(data), "--model", tiny_model_path, "--metric", "ndcg@10"]
    mine = ["mine", "--mode", "teacher", "--queries", str(queries), "--corpus", str(data), "--model",
            tiny_model_path, "--positive-ranks", "1:2", "--ranks", "3:5"]
    assert run([*evaluate, "--output", str(tmp_path / "e1")], capsys)[0] == 0
    assert run([*mine, "-o", str(tmp_path / "m1.jsonl")], capsys)[0] == 0
    _launched(monkeypatch)
    code, _, err = run([*evaluate, "--output", str(tmp_path / "e2")], capsys)
    assert code == 0, err
    one, two = (json.loads((tmp_path / e / "eval.json").read_text()) for e in ("e1", "e2"))
    assert two["results"] == one["results"]
    names = [p.name for p in (tmp_path / "e2" / "shards").iterdir()]  # one folder per corpus: its fingerprint
    assert len(names) == 1 and re.fullmatch("[0-9a-f]{16}", names[0])
    assert run([*evaluate, "--output", str(tmp_path / "e2"), "--overwrite"], capsys)[0] == 0  # shards reused
    monkeypatch.delenv("RANK")
    assert run([*evaluate, "--dims", "16", "--output", str(tmp_path / "d1")], capsys)[0] == 0
    _launched(monkeypatch)
    assert run([*evaluate, "--dims", "16", "--output", str(tmp_path / "d2")], capsys)[0] == 0  # Matryoshka too
    one, two = (json.loads((tmp_path / e / "eval.json").read_text()) for e in ("d1", "d2"))
    assert two["results"] == one["results"] and "ndcg@10@16d" in one["results"]["toy"]
    assert not (tmp_path / "d1" / "shards").exists() and (tmp_path / "d2" / "shards").is_dir()
    code, _, err = run([*mine, "-o", str(tmp_path / "m2.jsonl")], capsys)
    assert code == 0, err
    assert (tmp_path / "m2.jsonl").read_bytes() == (tmp_path / "m1.jsonl").read_bytes()
    assert (tmp_path / "m2.jsonl.shards" / "shards.json").exists() is False  # one folder per corpus below it
    assert len(list((tmp_path / "m2.jsonl.shards").glob("*/shards.json"))) == 1


def test_only_rank_0_writes_under_sharded_corpora(tmp_path):
    from drmix.retrieval.ranks import Ranks
    from drmix.retrieval.shards import sharded_corpora, writes_here

    assert writes_here()
    with sharded_corpora(Ranks(1, 2), tmp_path):
        assert not writes_here()
    with sharded_corpora(Ranks(0, 2), tmp_path):
        assert writes_here()
    assert writes_here()


def test_estimate_names_a_missing_corpus(tmp_path, capsys):
    code, _, err = run(["index", "--corpus", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o"),
                        "--estimate"], capsys)
    assert code == 2 and "nope.jsonl: corpus file not found" in " ".join(err.split())


def _torchrun(tmp_path, args: list[str]) -> subprocess.CompletedProcess:
    launcher = tmp_path / "launch.py"
    launcher.write_text("import sys\nimport drmix.retrieval.encode as e\ne._SORT_CHUNK = 4\n"
                        "from drmix.cli import main\nmain(sys.argv[1:])\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(launcher),
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          timeout=600)


def _same_search(one: str, two: str) -> None:
    import numpy as np

    from drmix.retrieval.backends import open_index

    a, b = open_index(one), open_index(two)
    assert len(a) == len(b) == len(DOCS)
    q = np.random.default_rng(0).standard_normal((5, a.dim)).astype(np.float32)
    (sa, ia), (sb, ib) = a.search(q, 4), b.search(q, 4)
    assert ia == ib and len(ia[0]) == 4
    np.testing.assert_array_equal(sa, sb)


def test_two_gloo_processes_stream_their_shards_into_a_faiss_disk_index(corpus, tiny_model_path, tmp_path, capsys,
                                                                         chunk4):
    """Rank 0 reads the shards 3 rows at a time (rows 0-4 and 4-11 of two shards) into the on-disk build: the
    index is the one process's, vector for vector."""
    base = ["index", "--corpus", str(corpus), "--model", tiny_model_path, "--backend", "faiss-disk"]
    code, _, err = run([*base, "--output", str(tmp_path / "one")], capsys)  # one chunk: encoded as the shards are
    assert code == 0, err
    done = _torchrun(tmp_path, [*base, "--chunk-size", "3", "--output", str(tmp_path / "two")])
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"2 shards in {tmp_path / 'two.shards'}" in " ".join(done.stdout.split())
    for name in ("ids.json", "vectors.f32", "lists.ivfdata"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    _same_search(str(tmp_path / "one"), str(tmp_path / "two"))


def test_two_gloo_processes_stream_their_shards_into_a_milvus_lite_collection(corpus, tiny_model_path, tmp_path,
                                                                               capsys, chunk4):
    pytest.importorskip("milvus_lite")
    base = ["index", "--corpus", str(corpus), "--model", tiny_model_path, "--backend", "milvus", "--collection", "toy"]
    code, _, err = run([*base, "--uri", str(tmp_path / "one.db")], capsys)
    assert code == 0, err
    done = _torchrun(tmp_path, [*base, "--chunk-size", "3", "--uri", str(tmp_path / "two.db")])
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"2 shards in {tmp_path / 'two.db.shards'}" in " ".join(done.stdout.split())
    _same_search(f"{tmp_path / 'one.db'}#toy", f"{tmp_path / 'two.db'}#toy")


PAUSED = """
import os, sys, time
from pathlib import Path
import drmix.retrieval.shards as shards

started, go = Path(sys.argv[1]), Path(sys.argv[2])
encode = shards._encode_range


def paused(*args, **kwargs):  # holds the run in the middle of its encoding until the test says go
    started.write_text(str(os.getpid()))
    while not go.exists():
        time.sleep(0.05)
    return encode(*args, **kwargs)


shards._encode_range = paused
from drmix.cli import main
main(sys.argv[3:])
"""


@pytest.mark.parametrize("command", ["index", "eval"])
def test_a_second_sharded_run_into_the_same_output_is_refused_while_the_first_runs(command, corpus, tiny_model_path,
                                                                                  tmp_path, capsys, monkeypatch):
    """Two processes at once: the first holds the output (drmix.lock) in the middle of its encoding; the second is
    refused with one line naming it and writes nothing; the first then finishes with the index / scores of one
    plain process."""
    from drmix.data.beir import write_beir

    data = write_beir(tmp_path / "toy", DOCS, {"q1": "word3 word6"}, {"test": {"q1": {"d3": 1}}})
    out = tmp_path / "out"
    base = (["index", "--corpus", str(corpus)] if command == "index" else
            ["eval", "--data", str(data), "--metric", "ndcg@10"]) + ["--model", tiny_model_path]
    args = [*base, "--output", str(out)]
    code, _, err = run([*base, "--output", str(tmp_path / "plain")], capsys)   # one plain process
    assert code == 0, err
    started, go = tmp_path / "started", tmp_path / "go"
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-c", PAUSED, str(started), str(go), *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        from loopback_llm import wait_until

        assert wait_until(lambda: started.exists() or first.poll() is not None, 300), "the first run never started"
        assert first.poll() is None, first.communicate()[1][-2000:]
        shard_root = tmp_path / "out.shards" if command == "index" else out / "shards"
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        _launched(monkeypatch)
        code, _, err = run(args, capsys)
        assert code == 2, err
        line = " ".join(err.split())
        assert f"{shard_root}: another run is writing to this output directory: process {first.pid}" in line
        assert "Traceback" not in err and err.count("error:") == 1
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
        go.write_text("")
        _, first_err = first.communicate(timeout=300)
    finally:
        go.write_text("")
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, first_err[-2000:]
    assert not (shard_root / ".drmix.lock").exists()  # released
    if command == "index":
        assert (out / "vectors.npy").read_bytes() == (tmp_path / "plain" / "vectors.npy").read_bytes()
    else:
        results = [json.loads((d / "eval.json").read_text())["results"] for d in (out, tmp_path / "plain")]
        assert results[0] == results[1]
