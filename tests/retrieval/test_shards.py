"""Sharded encoding: rank ranges, shards byte-identical to one process, resume of the missing shards only, and
the refusals (another world size or model, truncated / foreign shards, a full disk).

The ranks run one after the other in this process (:class:`SeqRanks`: no collectives), which is what each
process of a launched run does between the barriers; the real two-process run is in tests/cli/test_cli_sharded.py.
"""
from __future__ import annotations

import errno
import json

import numpy as np
import pytest

import drmix.retrieval.encode as encode_mod
from drmix.errors import ConfigError, DataError, DiskFullError
from drmix.fingerprint import tensors_digest, texts_digest
from drmix.retrieval import shards
from drmix.retrieval.encode import encode_texts
from drmix.retrieval.ranks import Ranks
from drmix.retrieval.shards import check_shard, encode_sharded, shard_ranges

TEXTS = [f"passage {i} " + "word " * (i % 7) + ("tail" if i % 3 else "") for i in range(11)]


class SeqRanks(Ranks):
    """Rank ``rank`` of ``world_size`` without a process group: the gathers see only this rank's item."""

    def gather(self, obj):
        return [obj if r == self.rank else None for r in range(self.world_size)]

    def barrier(self) -> None:
        pass

    def check_shared(self, folder, *, what, fix) -> None:
        pass  # the ranks run one after the other in this process: one folder (tests/retrieval/test_ranks.py)


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


@pytest.fixture
def chunk4(monkeypatch):
    """encode_texts sorts and batches every 4 texts on their own (16,384 in use), so 11 texts make 3 blocks."""
    monkeypatch.setattr(encode_mod, "_SORT_CHUNK", 4)


@pytest.fixture
def counted(monkeypatch):
    """How many texts encode_texts was given, call by call."""
    calls: list[int] = []
    real = encode_mod.encode_texts

    def spy(model, texts, **kw):
        calls.append(len(texts))
        return real(model, texts, **kw)

    monkeypatch.setattr(encode_mod, "encode_texts", spy)
    return calls


def run_all(model, folder, world, **kw):
    """Every rank, the last first (rank 0 merges once the others' shards are there); rank 0's result."""
    results = {r: encode_sharded(model, TEXTS, folder, ranks=SeqRanks(r, world), batch_size=3, normalize=True,
                                 show_progress=False, **kw) for r in reversed(range(world))}
    return results


def test_ranges_are_contiguous_aligned_and_even():
    # 10 rows in blocks of 4: blocks [0,4) [4,8) [8,10); rank r gets blocks r*3//w .. (r+1)*3//w
    assert shard_ranges(10, 2, 4) == [(0, 4), (4, 10)]
    assert shard_ranges(10, 3, 4) == [(0, 4), (4, 8), (8, 10)]
    assert shard_ranges(10, 4, 4) == [(0, 0), (0, 4), (4, 8), (8, 10)]
    assert shard_ranges(10, 1, 4) == [(0, 10)]
    assert shard_ranges(0, 2, 4) == [(0, 0), (0, 0)]


def test_two_ranks_give_the_bytes_of_one_process(tiny, tmp_path, chunk4):
    one = encode_texts(tiny, TEXTS, batch_size=3, normalize=True)
    results = run_all(tiny, tmp_path / "s", 2)
    assert results[1].embeddings is None and results[1].encoded == 7  # rows 4..10: blocks [4,8) and [8,11)
    assert results[0].encoded == 4
    merged = results[0].embeddings
    assert merged.dtype == np.float32 and merged.tobytes() == one.tobytes()
    man = json.loads((tmp_path / "s" / "rank-00001-of-00002.json").read_text())
    assert (man["start"], man["stop"], man["shape"], man["world_size"]) == (4, 11, [7, 32], 2)
    assert json.loads((tmp_path / "s" / "shards.json").read_text())["count"] == 11
    # three ranks, another folder: the same bytes
    assert run_all(tiny, tmp_path / "s3", 3)[0].embeddings.tobytes() == one.tobytes()


def test_a_rerun_encodes_only_the_missing_shard(tiny, tmp_path, chunk4, counted):
    run_all(tiny, tmp_path, 2)
    assert sum(counted) == 11
    (tmp_path / "rank-00001-of-00002.npy").unlink()  # rank 1 killed before its shard was complete
    (tmp_path / "rank-00001-of-00002.json").unlink()
    counted.clear()
    again = run_all(tiny, tmp_path, 2)
    assert sum(counted) == 7 and again[1].encoded == 7 and again[0].encoded == 0
    assert again[1].redone == {1: "missing"} and again[0].redone == {}
    assert again[0].embeddings.tobytes() == encode_texts(tiny, TEXTS, batch_size=3, normalize=True).tobytes()


def test_a_rank_killed_mid_write_leaves_no_shard_and_reruns(tiny, tmp_path, chunk4, counted, monkeypatch):
    real = np.lib.format.write_array

    def killed(f, array, **kw):
        f.write(b"\x93NUMPY partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(np.lib.format, "write_array", killed)
    with pytest.raises(KeyboardInterrupt):
        encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(1, 2), batch_size=3, show_progress=False)
    assert list(tmp_path.iterdir()) == []  # nothing half-written (rank 0 has not run: no shards.json either)
    monkeypatch.setattr(np.lib.format, "write_array", real)
    counted.clear()
    assert encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(1, 2), batch_size=3, show_progress=False).encoded == 7


def test_truncated_and_foreign_shards_are_named_and_encoded_again(tiny, tmp_path, chunk4, counted, caplog):
    run_all(tiny, tmp_path, 2)
    npy = tmp_path / "rank-00001-of-00002.npy"
    npy.write_bytes(npy.read_bytes()[:-10])
    settings = json.loads((tmp_path / "shards.json").read_text())
    assert "truncated or damaged" in check_shard(tmp_path, 1, settings, 4, 11)
    counted.clear()
    run_all(tiny, tmp_path, 2)
    assert sum(counted) == 7 and "rank-00001-of-00002.npy is truncated or damaged" in caplog.text
    # a shard manifest of another run (another prompt) in place of rank 0's
    man = tmp_path / "rank-00000-of-00002.json"
    meta = json.loads(man.read_text())
    man.write_text(json.dumps({**meta, "prompt": "query: "}))
    assert check_shard(tmp_path, 0, settings, 0, 4) == "rank-00000-of-00002 is foreign: encoded with prompt query: , not "
    counted.clear()
    caplog.clear()
    assert run_all(tiny, tmp_path, 2)[0].encoded == 4 and sum(counted) == 4 and "is foreign" in caplog.text
    # an .npy without its manifest (the write of the manifest was stopped)
    man.unlink()
    assert check_shard(tmp_path, 0, settings, 0, 4) == "rank-00000-of-00002.npy has no manifest (its write was stopped)"


def test_another_world_size_or_model_is_refused_naming_both(tiny, tmp_path, chunk4, tiny_model_path):
    run_all(tiny, tmp_path, 2)
    with pytest.raises(ConfigError, match=r"world_size 2, this run has 3\. Fix: run 2 processes again "
                                          r"\(torchrun --nproc-per-node 2\), or pass --overwrite"):
        encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(0, 3), batch_size=3, normalize=True, show_progress=False)
    import copy

    import torch

    other = copy.deepcopy(tiny)
    with torch.no_grad():
        next(other.parameters()).add_(1.0)
    with pytest.raises(ConfigError, match="encoded with model_fingerprint [0-9a-f]{40}, this run has [0-9a-f]{40}"):
        encode_sharded(other, TEXTS, tmp_path, ranks=SeqRanks(0, 2), batch_size=3, normalize=True, show_progress=False)
    with pytest.raises(ConfigError, match="batch_size 3, this run has 4"):
        encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(0, 2), batch_size=4, normalize=True, show_progress=False)
    # --overwrite: the old shards are deleted and the new world size recorded
    # (rank 0 alone: it encodes its rows, then cannot merge without the shards of ranks 1 and 2)
    with pytest.raises(DataError, match="shard 1 of 3 cannot be merged: missing"):
        encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(0, 3), batch_size=3, normalize=True,
                       show_progress=False, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-00000-of-00003.json", "rank-00000-of-00003.npy",
                                                         "shards.json"]
    assert json.loads((tmp_path / "shards.json").read_text())["world_size"] == 3


def test_merge_names_a_shard_that_is_not_there(tiny, tmp_path, chunk4):
    encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(1, 2), batch_size=3, show_progress=False)
    (tmp_path / "rank-00001-of-00002.json").unlink()
    with pytest.raises(DataError, match="shard 1 of 2 cannot be merged: rank-00001-of-00002.npy has no manifest"):
        encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(0, 2), batch_size=3, show_progress=False)


def test_a_full_disk_mid_shard_leaves_nothing_half_written(tiny, tmp_path, chunk4, monkeypatch):
    def full(f, array, **kw):
        f.write(b"\x93NUMPY")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", full)
    with pytest.raises(DiskFullError, match=r"no room to write this output: .*No space left on device.*"
                                            r"rank-00001-of-00002\.npy was left as it was"):
        encode_sharded(tiny, TEXTS, tmp_path, ranks=SeqRanks(1, 2), batch_size=3, show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_another_ranks_error_stops_every_rank(monkeypatch):
    ranks = SeqRanks(0, 2)
    monkeypatch.setattr(ranks, "gather", lambda obj: [obj, ("DiskFullError", "no room", "/x/rank-1.npy", "free space")])
    with pytest.raises(DiskFullError, match=r"/x/rank-1.npy: rank 1 stopped: no room Fix: free space"):
        shards.agree(ranks, None)
    shards.agree(SeqRanks(0, 2), None)  # nobody failed: no error


def test_an_unreadable_shard_manifest_is_refused(tmp_path):
    (tmp_path / "shards.json").write_text("{broken")
    with pytest.raises(ConfigError, match=r"shards.json: cannot read the shard manifest .* Fix: pass --overwrite"):
        shards.open_folder(tmp_path, {"world_size": 1})
    shards.open_folder(tmp_path, {"world_size": 1}, overwrite=True)
    assert json.loads((tmp_path / "shards.json").read_text()) == {"format": 1, "world_size": 1}


def test_encode_corpus_keys_shards_by_model_when_asked(tmp_path, tiny_model_path):
    """drmix adapt encodes one corpus with several models: each model's shards in a folder of its own."""
    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path)
    texts = ["one passage", "another passage"]
    with shards.sharded_corpora(Ranks(), tmp_path / "s", by_model=True):
        assert shards.active().by_model is True
        got = shards.encode_corpus(model, texts, batch_size=4, show_progress=False)
    assert shards.active() is None
    assert [p.name for p in (tmp_path / "s").iterdir()] == [
        f"{tensors_digest(model)[:16]}-{texts_digest(texts)[:16]}"]
    assert got.tobytes() == encode_texts(model, texts, batch_size=4).tobytes()


def _written_shards(folder, n: int, dim: int, world: int, align: int):
    """``world`` shards of ``n`` random rows written as encode_sharded writes them; (settings, all rows)."""
    x = np.random.default_rng(7).standard_normal((n, dim)).astype(np.float32)
    settings = {"world_size": world, "model_fingerprint": "m", "corpus_fingerprint": "c", "count": n, "prompt": "",
                "max_length": None, "normalize": False, "precision": "auto", "batch_size": 1, "align": align}
    for rank, (start, stop) in enumerate(shard_ranges(n, world, align)):
        shards.write_shard(folder, rank, settings, start, stop, x[start:stop])
    return settings, x


def test_shard_chunks_read_every_row_in_order_a_chunk_at_a_time(tmp_path):
    settings, x = _written_shards(tmp_path, 23, 3, 3, 5)  # rows 0-5, 5-15, 15-23
    got = list(shards.shard_chunks(tmp_path, settings, 4))
    assert [(row, len(part)) for row, part in got] == [(0, 4), (4, 1), (5, 4), (9, 4), (13, 2), (15, 4), (19, 4)]
    np.testing.assert_array_equal(np.concatenate([p for _, p in got]), x)
    np.testing.assert_array_equal(shards.merge_shards(tmp_path, settings), x)
    assert all(p.dtype == np.float32 and p.flags["C_CONTIGUOUS"] and p.flags["WRITEABLE"] for _, p in got)


def test_shard_chunks_check_every_shard_before_the_first_row(tmp_path):
    settings, _ = _written_shards(tmp_path, 23, 3, 3, 5)
    (tmp_path / "rank-00002-of-00003.npy").write_bytes(b"broken")
    with pytest.raises(DataError, match="shard 2 of 3 cannot be merged: .*truncated or damaged"):
        next(shards.shard_chunks(tmp_path, settings, 4))


def test_rank_chunks_read_one_rank_s_own_rows_with_their_row_numbers(tmp_path):
    settings, x = _written_shards(tmp_path, 23, 3, 3, 5)  # rows 0-5, 5-15, 15-23
    got = list(shards.rank_chunks(tmp_path, settings, 1, 4))
    assert [(row, len(part)) for row, part in got] == [(5, 4), (9, 4), (13, 2)]
    np.testing.assert_array_equal(np.concatenate([p for _, p in got]), x[5:15])
    (tmp_path / "rank-00002-of-00003.npy").write_bytes(b"broken")  # another rank's shard: not this rank's to read
    assert len(list(shards.rank_chunks(tmp_path, settings, 0, 10))) == 1
    with pytest.raises(DataError, match="shard 2 of 3 cannot be read: .*truncated or damaged"):
        next(shards.rank_chunks(tmp_path, settings, 2, 4))


def test_npy_chunks_refuse_an_array_that_is_not_rows(tmp_path):
    np.save(tmp_path / "v.npy", np.zeros(5, dtype=np.float32))
    with pytest.raises(DataError, match=r"v.npy: holds an array of shape \(5,\), not \[n, dim\] vectors"):
        next(shards.npy_chunks(tmp_path / "v.npy", 2))


def test_the_fix_of_a_shard_folder_names_the_option_or_the_cache(tmp_path, monkeypatch):
    """Where the shards of a command go decides what a user moves to a shared disk: the option that places them,
    or DRMIX_CACHE for a folder in the drmix cache (drmix eval without --output, a Milvus server build)."""
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    assert shards.shared_fix(tmp_path / "idx.shards", "--output") == (
        f"put --output on a filesystem every node mounts at the same path (NFS, Lustre, ...); its shards go to "
        f"{tmp_path / 'idx.shards'}")
    cached = tmp_path / "cache" / "shards" / "eval"
    assert shards.shared_fix(cached, "--output") == (
        "pass --output on a filesystem every node mounts, or point DRMIX_CACHE on every node at one folder they all "
        "mount at the same path (the shards go to $DRMIX_CACHE/shards/)")
    assert shards.shared_fix(cached / "c1", None) == (
        "point DRMIX_CACHE on every node at one folder they all mount at the same path (the shards go to "
        "$DRMIX_CACHE/shards/)")
