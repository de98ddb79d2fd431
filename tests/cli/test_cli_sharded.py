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


def _torchrun(tmp_path, args: list[str], *, setup: str = "") -> subprocess.CompletedProcess:
    launcher = tmp_path / "launch.py"
    launcher.write_text("import sys\nimport drmix.retrieval.encode as e\ne._SORT_CHUNK = 4\n" + setup
                        + "from drmix.cli import main\nmain(sys.argv[1:])\n")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(launcher),
           *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DRMIX_CACHE": str(tmp_path / "cache")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


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


def test_two_gloo_processes_build_the_one_process_milvus_collection(corpus, tiny_model_path, tmp_path, capsys,
                                                                     chunk4, milvus_target, monkeypatch):
    """Milvus Lite (a folder one process opens): rank 0 streams both shards into it. A Milvus server: each rank
    inserts its own shard (rows 0-4 and 4-11) into the build collection rank 0 made and swapped in. Either way the
    collection is the one process's: ids, scores."""
    from drmix.retrieval.backends.milvus import is_uri

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    base = ["index", "--corpus", str(corpus), "--model", tiny_model_path, "--backend", "milvus"]
    server = is_uri(milvus_target)
    one, two = (f"{milvus_target}#one", f"{milvus_target}#two") if server else (
        f"{tmp_path / 'one.db'}#toy", f"{tmp_path / 'two.db'}#toy")
    code, _, err = run([*base, "--uri", one.split("#")[0], "--collection", one.split("#")[1]], capsys)
    assert code == 0, err
    done = _torchrun(tmp_path, [*base, "--chunk-size", "3", "--uri", two.split("#")[0], "--collection", "two" if
                                server else "toy"])
    assert done.returncode == 0, done.stderr[-2000:]
    said = " ".join(done.stdout.split())
    if server:
        assert "2 shards in" in said and "each rank inserting its own" in said
    else:
        assert f"2 shards in {tmp_path / 'two.db.shards'}" in said and "inserting its own" not in said
    _same_search(one, two)
    from drmix.retrieval.backends import open_index

    rows = []
    for where in (one, two):  # the row numbers (pk) are the corpus's, whichever rank inserted them
        index = open_index(where)
        rows.append(sorted((r["pk"], r["doc_id"]) for r in index.client.query(index.name, filter="pk >= 0",
                                                                              output_fields=["pk", "doc_id"])))
    assert rows[0] == rows[1] == sorted(enumerate(DOCS))


def test_a_rank_that_dies_midway_leaves_the_server_collection_as_it_was(corpus, tiny_model_path, tmp_path, capsys,
                                                                         chunk4, milvus_target, monkeypatch):
    from drmix.retrieval.backends import open_index
    from drmix.retrieval.backends.milvus import BUILD_SUFFIX, client, is_uri, split_location

    if not is_uri(milvus_target):
        pytest.skip("Milvus Lite is built by rank 0 alone (test_two_gloo_processes_build_the_one_process_...)")
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"_id": k, **v}) + "\n" for k, v in list(DOCS.items())[:5]))
    base = ["index", "--model", tiny_model_path, "--backend", "milvus", "--uri", milvus_target, "--collection", "c"]
    code, _, err = run([*base, "--corpus", str(small)], capsys)
    assert code == 0, err
    # rank 1 dies (no cleanup, no handler) after its first insert; the launcher stops rank 0
    dies = ("import os\nimport drmix.retrieval.backends.milvus as m\n_add = m.Inserter.add\n"
            "def add(self, *a):\n    _add(self, *a)\n    self.flush()\n"
            "    if os.environ['RANK'] == '1':\n        os._exit(9)\nm.Inserter.add = add\n")
    done = _torchrun(tmp_path, [*base, "--corpus", str(corpus), "--chunk-size", "2", "--overwrite"], setup=dies)
    assert done.returncode != 0
    assert len(open_index(f"{milvus_target}#c")) == 5  # the old collection, as it was
    c = client(split_location(milvus_target)[0])
    assert c.has_collection("c" + BUILD_SUFFIX)  # the unfinished build, under its own name
    code, _, err = run([*base, "--corpus", str(corpus), "--overwrite"], capsys)  # the next build drops it
    assert code == 0, err
    assert len(open_index(f"{milvus_target}#c")) == len(DOCS) and not c.has_collection("c" + BUILD_SUFFIX)


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


# ------------------------------------------------------------------------------------------- two nodes
# Two torchrun launchers of one process each (tests/nodes.py), each in its own folder with its own TMPDIR and
# DRMIX_CACHE: a relative path is then a folder each node has on its own disk, tmp_path the disk they share.

def _codes(nodes, command: int) -> dict[int, str]:
    """{global rank: exit code} of ``command`` on the two nodes."""
    return dict(node.codes()[command] for node in nodes)


def test_two_nodes_index_into_a_shared_folder_and_refuse_a_node_local_one(corpus, tiny_model_path, tmp_path, capsys,
                                                                           chunk4):
    """The index written by two nodes into a folder both mount is one process's, byte for byte, from two shards;
    an --output each node has on its own disk is refused on both before anything is encoded, naming the node."""
    from nodes import by_rank, one_line, two_nodes

    base = ["index", "--corpus", str(corpus), "--model", tiny_model_path]
    code, _, err = run([*base, "--output", str(tmp_path / "one")], capsys)
    assert code == 0, err
    nodes = two_nodes(tmp_path, [[*base, "--output", "idx"], [*base, "--output", str(tmp_path / "two")]])
    assert [n.returncode for n in nodes] == [0, 0], nodes[0].stderr[-3000:] + nodes[1].stderr[-3000:]
    assert _codes(nodes, 0) == {0: "2", 1: "2"} and _codes(nodes, 1) == {0: "0", 1: "0"}
    first, second = by_rank(nodes)[0], by_rank(nodes)[1]
    refused = one_line(first.stderr)
    assert (f"{first.root / 'idx.shards'}: the shard folder is not one folder on every node: rank 1 (node 1) does "
            "not see the marker rank 0 (node 0) wrote there") in refused
    assert f"Fix: put --output on a filesystem every node mounts at the same path (NFS, Lustre, ...); its shards go " \
           f"to {first.root / 'idx.shards'}" in refused
    assert "the shard folder is not one folder on every node" in one_line(second.stderr)  # both ranks stop
    assert not list((first.root / "idx.shards").glob("rank-*")) and not (second.root / "idx.shards").exists()
    for name in ("vectors.npy", "ids.json"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    shards = sorted(p.name for p in (tmp_path / "two.shards").glob("rank-*.npy"))
    assert shards == ["rank-00000-of-00002.npy", "rank-00001-of-00002.npy"]  # rank 1 (node 1) wrote its own
    assert not list((tmp_path / "two.shards").glob(".drmix-shared.*"))
    assert f"into {tmp_path / 'two'}; 2 shards in {tmp_path / 'two.shards'}" in one_line(first.stdout)


def test_drmix_eval_without_output_names_drmix_cache_as_the_fix(tmp_path, monkeypatch):
    """drmix eval without --output keeps its shards in the drmix cache: its fix says where to point DRMIX_CACHE."""
    from drmix.cli import sharded
    from drmix.retrieval import ranks, shards

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    _launched(monkeypatch, 0, 2)
    monkeypatch.setattr(ranks.Ranks, "_join", lambda self: None)
    monkeypatch.setattr(ranks.Ranks, "gather", lambda self, obj: [obj] * self.world_size)  # no process group here
    with sharded.launched_shards(None, "eval", folder=True) as joined:
        plan = shards.active()
        assert joined.world_size == 2 and plan.root == tmp_path / "cache" / "shards" / "eval"
        assert plan.shared_fix == shards.shared_fix(plan.root, "--output")
        assert plan.shared_fix.startswith("pass --output on a filesystem every node mounts, or point DRMIX_CACHE")


@pytest.mark.slow
def test_two_nodes_eval_needs_a_shared_shard_folder_and_gives_one_process_results(tiny_model_path, tmp_path, capsys,
                                                                                  chunk4):
    """drmix eval without --output keeps its shards in DRMIX_CACHE, here each node's own: refused on both ranks,
    naming the cache and the way out; with --output on the shared disk, one process's results."""
    from nodes import by_rank, one_line, two_nodes

    from drmix.data.beir import write_beir

    data = write_beir(tmp_path / "toy", DOCS, {"q1": "word3 word6", "q2": "t4"},
                      {"test": {"q1": {"d3": 1}, "q2": {"d4": 1}}})
    evaluate = ["eval", "--data", str(data), "--model", tiny_model_path, "--metric", "ndcg@10"]
    code, _, err = run([*evaluate, "--output", str(tmp_path / "e1")], capsys)
    assert code == 0, err
    nodes = two_nodes(tmp_path, [evaluate, [*evaluate, "--output", str(tmp_path / "e2")]])
    assert [n.returncode for n in nodes] == [0, 0], nodes[0].stderr[-3000:] + nodes[1].stderr[-3000:]
    assert _codes(nodes, 0) == {0: "2", 1: "2"} and _codes(nodes, 1) == {0: "0", 1: "0"}
    first = by_rank(nodes)[0]
    refused = one_line(first.stderr)
    assert f"{first.cache / 'shards' / 'eval'}/" in refused and "rank 1 (node 1) does not see the marker" in refused
    assert ("Fix: pass --output on a filesystem every node mounts, or point DRMIX_CACHE on every node at one folder "
            "they all mount at the same path") in refused
    one, two = (json.loads((tmp_path / e / "eval.json").read_text()) for e in ("e1", "e2"))
    assert two["results"] == one["results"]
    assert len(list((tmp_path / "e2" / "shards").glob("*/rank-00001-of-00002.npy"))) == 1
