"""Sharded encoding: each rank's share (whole batches of one process, about n / world rows), shards byte-identical
to one process, resume of the missing shards only, and the refusals (another world size or model, truncated / foreign shards, a full disk).

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
from drmix.retrieval.shards import check_shard, encode_sharded, shard_parts

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


def test_shares_are_whole_batches_of_one_process_about_n_over_w_rows():
    # 11 rows, sort chunks of 4: chunks [0,4) [4,8) [8,11); batches of 3 cut each chunk's length order at 0, 3, end
    # 2 ranks: the boundary nearest 5.5 rows is 4 (7 is as near: the lower one); 3 ranks: nearest 3.67 and 7.33
    assert shard_parts(11, 2, 4, 3) == [[(0, 4, 0, 4)], [(4, 8, 0, 4), (8, 11, 0, 3)]]
    assert shard_parts(11, 3, 4, 3) == [[(0, 4, 0, 4)], [(4, 8, 0, 3)], [(4, 8, 3, 4), (8, 11, 0, 3)]]
    # the corpus: 300 passages in one sort chunk of 16,384 -- split inside the chunk, not 0 and 300
    assert shard_parts(300, 2, 16384, 64) == [[(0, 300, 0, 128)], [(0, 300, 128, 300)]]  # 150 nearest 128 of 128/192
    assert shard_parts(300, 2, 16384, 32) == [[(0, 300, 0, 160)], [(0, 300, 160, 300)]]  # 160 of 128/160
    assert shard_parts(10, 1, 4, 3) == [[(0, 4, 0, 4), (4, 8, 0, 4), (8, 10, 0, 2)]]
    assert shard_parts(0, 2, 4, 3) == [[], []]
    assert shard_parts(2, 3, 4, 1) == [[(0, 2, 0, 1)], [], [(0, 2, 1, 2)]]  # 0.67 -> 1, 1.33 -> 1
    assert "rank 1 has nothing to encode" in shards.describe_shares(shard_parts(2, 3, 4, 1), 2, 1)
    assert shards.describe_shares(shard_parts(300, 2, 16384, 32), 300, 32).startswith(
        "300 passages over 2 ranks: rank 0 160, rank 1 140")


@pytest.mark.parametrize("n, world, align, batch", [(1000, 2, 16384, 64), (1000, 3, 256, 32), (97, 4, 10, 3),
                                                    (40000, 8, 16384, 256), (5, 2, 4, 7), (64, 2, 16384, 64)])
def test_shares_cover_every_sorted_position_once_within_a_batch_of_an_even_split(n, world, align, batch):
    shares = shard_parts(n, world, align, batch)
    covered = [(start, p) for parts in shares for start, stop, first, last in parts for p in range(first, last)]
    assert covered == [(c, p) for c in range(0, n, align) for p in range(min(align, n - c))]  # in order, once each
    for parts in shares:
        assert abs(shards.share_rows(parts) - n / world) <= batch
        for start, stop, first, last in parts:  # cut at batches of one process: multiples of the batch or the end
            assert first % batch == 0 and (last % batch == 0 or last == stop - start)


def test_two_ranks_give_the_bytes_of_one_process(tiny, tmp_path, chunk4):
    one = encode_texts(tiny, TEXTS, batch_size=3, normalize=True)
    results = run_all(tiny, tmp_path / "s", 2)
    assert results[1].embeddings is None and results[1].encoded == 7  # rows 4..10: chunks [4,8) and [8,11)
    assert results[0].encoded == 4
    merged = results[0].embeddings
    assert merged.dtype == np.float32 and merged.tobytes() == one.tobytes()
    man = json.loads((tmp_path / "s" / "rank-00001-of-00002.json").read_text())
    assert (man["parts"], man["rows"], man["shape"], man["world_size"]) == ([[4, 8, 0, 4], [8, 11, 0, 3]], 7, [7, 32], 2)
    assert np.load(tmp_path / "s" / "rank-00001-of-00002.rows.npy").tolist() == list(range(4, 11))
    assert json.loads((tmp_path / "s" / "shards.json").read_text())["count"] == 11
    # three ranks, another folder: rank 1 has 3 rows of chunk [4,8), rank 2 its last row and chunk [8,11)
    three = run_all(tiny, tmp_path / "s3", 3)
    assert three[0].embeddings.tobytes() == one.tobytes()
    assert [three[r].encoded for r in range(3)] == [4, 3, 4]


def test_a_share_inside_one_sort_chunk_gives_the_bytes_of_one_process(tiny, tmp_path, caplog):
    """The sort chunk as in use (16,384): 11 texts are one chunk, cut inside it by whole batches of its length
    order -- each rank encodes about half, and the merged rows are one process's, byte for byte."""
    import logging

    one = encode_texts(tiny, TEXTS, batch_size=3, normalize=True)
    with caplog.at_level(logging.INFO, logger="drmix.retrieval.shards"):
        results = run_all(tiny, tmp_path, 2)
    assert [results[r].encoded for r in range(2)] == [6, 5]  # the batch boundary nearest 5.5 of 3 and 6
    assert results[0].embeddings.tobytes() == one.tobytes()
    assert "11 passages over 2 ranks: rank 0 6, rank 1 5" in caplog.text
    lengths = encode_mod.token_lengths(tiny, TEXTS, "", None)
    longest = sorted(range(11), key=lambda i: (-lengths[i], i))[:6]  # rank 0: the first two batches of 3
    assert np.load(tmp_path / "rank-00000-of-00002.rows.npy").tolist() == sorted(longest)
    assert json.loads((tmp_path / "rank-00001-of-00002.json").read_text())["parts"] == [[0, 11, 6, 11]]


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
    assert "truncated or damaged" in check_shard(tmp_path, 1, settings, [(4, 8, 0, 4), (8, 11, 0, 3)])
    counted.clear()
    run_all(tiny, tmp_path, 2)
    assert sum(counted) == 7 and "rank-00001-of-00002.npy is truncated or damaged" in caplog.text
    # a shard manifest of another run (another prompt) in place of rank 0's
    man = tmp_path / "rank-00000-of-00002.json"
    meta = json.loads(man.read_text())
    man.write_text(json.dumps({**meta, "prompt": "query: "}))
    assert check_shard(tmp_path, 0, settings, [(0, 4, 0, 4)]) == "rank-00000-of-00002 is foreign: encoded with prompt query: , not "
    counted.clear()
    caplog.clear()
    assert run_all(tiny, tmp_path, 2)[0].encoded == 4 and sum(counted) == 4 and "is foreign" in caplog.text
    # an .npy without its manifest (the write of the manifest was stopped)
    man.unlink()
    assert check_shard(tmp_path, 0, settings, [(0, 4, 0, 4)]) == "rank-00000-of-00002.npy has no manifest (its write was stopped)"


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
                                                         "rank-00000-of-00003.rows.npy", "shards.json"]
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
    assert json.loads((tmp_path / "shards.json").read_text()) == {"format": 2, "world_size": 1}


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


def _written_shards(folder, n: int, dim: int, world: int, align: int, batch: int = 1):
    """``world`` shards of ``n`` random rows written as encode_sharded writes them, a part of a chunk taken in the
    order ``reversed`` (a stand-in for its length order); (settings, all rows)."""
    x = np.random.default_rng(7).standard_normal((n, dim)).astype(np.float32)
    settings = {"world_size": world, "model_fingerprint": "m", "corpus_fingerprint": "c", "count": n, "prompt": "",
                "max_length": None, "normalize": False, "precision": "auto", "batch_size": batch, "align": align,
                "split": "batches"}
    for rank, parts in enumerate(shard_parts(n, world, align, batch)):
        rows = np.sort(np.concatenate([np.arange(stop - 1, start - 1, -1)[first:last]
                                       for start, stop, first, last in parts] or [np.zeros(0, dtype=np.int64)]))
        shards.write_shard(folder, rank, settings, parts, rows, x[rows])
    return settings, x


def test_shard_chunks_read_every_row_in_order_a_chunk_at_a_time(tmp_path):
    settings, x = _written_shards(tmp_path, 23, 3, 3, 5)  # rows 0-8, 8-15, 15-23 (nearest 7.67 and 15.33)
    got = list(shards.shard_chunks(tmp_path, settings, 4))
    assert [(row, len(part)) for row, part in got] == [(0, 4), (4, 4), (8, 4), (12, 4), (16, 4), (20, 3)]
    np.testing.assert_array_equal(np.concatenate([p for _, p in got]), x)
    np.testing.assert_array_equal(shards.merge_shards(tmp_path, settings), x)
    assert all(p.dtype == np.float32 and p.flags["C_CONTIGUOUS"] and p.flags["WRITEABLE"] for _, p in got)


def test_shard_chunks_put_the_rows_of_shards_cut_inside_a_chunk_in_corpus_order(tmp_path):
    """Batches of 2 in one chunk of 9 rows: the two shards' rows interleave (the length order is not the corpus
    order), and every chunk read gathers them back into corpus order."""
    settings, x = _written_shards(tmp_path, 9, 2, 2, 16, batch=2)
    assert np.load(tmp_path / "rank-00000-of-00002.rows.npy").tolist() == [5, 6, 7, 8]  # 4 last rows: "longest"
    got = list(shards.shard_chunks(tmp_path, settings, 4))
    assert [(row, len(part)) for row, part in got] == [(0, 4), (4, 4), (8, 1)]
    np.testing.assert_array_equal(np.concatenate([p for _, p in got]), x)
    np.testing.assert_array_equal(shards.merge_shards(tmp_path, settings), x)


def test_shard_chunks_check_every_shard_before_the_first_row(tmp_path):
    settings, _ = _written_shards(tmp_path, 23, 3, 3, 5)
    (tmp_path / "rank-00002-of-00003.npy").write_bytes(b"broken")
    with pytest.raises(DataError, match="shard 2 of 3 cannot be merged: .*truncated or damaged"):
        next(shards.shard_chunks(tmp_path, settings, 4))
    settings, _ = _written_shards(tmp_path / "b", 23, 3, 3, 5)
    (tmp_path / "b" / "rank-00001-of-00003.rows.npy").write_bytes(b"broken")
    with pytest.raises(DataError, match=r"shard 1 of 3 cannot be merged: rank-00001-of-00003\.rows\.npy is truncated"):
        next(shards.shard_chunks(tmp_path / "b", settings, 4))


def test_rank_chunks_read_one_rank_s_own_rows_with_their_row_numbers(tmp_path):
    # sorted positions 0-8, 8-15, 15-23; rank 1: places 3-5 of chunk [5, 10) in its (reversed) order, rows 6 and 5,
    # and the whole chunk [10, 15)
    settings, x = _written_shards(tmp_path, 23, 3, 3, 5)
    got = list(shards.rank_chunks(tmp_path, settings, 1, 4))
    assert [(row, len(part)) for row, part in got] == [(5, 2), (10, 4), (14, 1)]
    np.testing.assert_array_equal(np.concatenate([p for _, p in got]), x[[5, 6, 10, 11, 12, 13, 14]])
    (tmp_path / "rank-00002-of-00003.npy").write_bytes(b"broken")  # another rank's shard: not this rank's to read
    assert [(row, len(p)) for row, p in shards.rank_chunks(tmp_path, settings, 0, 10)] == [(0, 5), (7, 3)]
    with pytest.raises(DataError, match="shard 2 of 3 cannot be read: .*truncated or damaged"):
        next(shards.rank_chunks(tmp_path, settings, 2, 4))


def test_rank_chunks_of_rows_that_interleave_are_runs_of_consecutive_rows(tmp_path):
    """Two shards cut inside one sort chunk whose length order alternates: each rank's rows come as runs of
    consecutive rows, each with its first row's number (what a Milvus server insert takes as pk)."""
    x = np.random.default_rng(3).standard_normal((9, 2)).astype(np.float32)
    settings = {"world_size": 2, "model_fingerprint": "m", "corpus_fingerprint": "c", "count": 9, "prompt": "",
                "max_length": None, "normalize": False, "precision": "auto", "batch_size": 1, "align": 16,
                "split": "batches"}
    shares = shard_parts(9, 2, 16, 1)
    assert shares == [[(0, 9, 0, 4)], [(0, 9, 4, 9)]]
    for rank, rows in enumerate((np.array([1, 3, 5, 6]), np.array([0, 2, 4, 7, 8]))):
        shards.write_shard(tmp_path, rank, settings, shares[rank], rows, x[rows])
    assert [(row, len(p)) for row, p in shards.rank_chunks(tmp_path, settings, 0, 4)] == [(1, 1), (3, 1), (5, 2)]
    got = list(shards.rank_chunks(tmp_path, settings, 1, 1))
    assert [row for row, _ in got] == [0, 2, 4, 7, 8]
    np.testing.assert_array_equal(np.concatenate([p for _, p in got]), x[[0, 2, 4, 7, 8]])
    np.testing.assert_array_equal(np.concatenate([p for _, p in shards.shard_chunks(tmp_path, settings, 4)]), x)


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
