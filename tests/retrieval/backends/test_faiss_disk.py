"""The faiss-disk backend: IVF on disk built from chunks, searched memory-mapped."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.errors import ConfigError, DataError, IndexLoadError
from drmix.retrieval.backends import build_index, open_index
from drmix.retrieval.backends.faiss_disk import DiskIndex, pq_size, train_rows

from backend_helpers import AWKWARD, chunks, exact_top, ids, vectors

N = 400


@pytest.fixture(scope="module")
def data():
    return ids(N), vectors(N)


def _corpus(doc_ids):
    return {d: {"title": f"T{i}", "text": f"text of {d}"} for i, d in enumerate(doc_ids)}


def test_ivf_flat_probing_every_list_is_exact(tmp_path, data):
    doc_ids, x = data
    loc = build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x), kind="ivf-flat", nprobe=10_000)
    idx = open_index(loc)
    assert isinstance(idx, DiskIndex) and len(idx) == N and idx.dim == 16
    meta = idx.metadata
    assert meta["backend"] == "faiss-disk" and meta["kind"] == "ivf-flat"
    assert meta["params"]["nlist"] == 10  # 4 sqrt(400) = 80 clusters wanted, at most 400 // 39 = 10
    assert meta["params"]["nprobe"] == 10 and meta["params"]["rerank"] == 0
    assert not (tmp_path / "i" / "vectors.f32").exists() and (tmp_path / "i" / "lists.ivfdata").is_file()
    scores, got = idx.search(x[:20], 5)
    want_s, want = exact_top(x, x[:20], doc_ids, 5)
    assert got == want
    np.testing.assert_allclose(scores, want_s, rtol=1e-5, atol=1e-5)


def test_ivf_pq_rerank_over_every_candidate_gives_exact_scores(tmp_path, data):
    doc_ids, x = data
    loc = build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x, size=150), nprobe=10_000, rerank=80)
    idx = open_index(loc)
    assert idx.metadata["kind"] == "ivf-pq"  # the backend's default kind
    assert idx.metadata["params"]["pq_m"] == 2 and idx.metadata["params"]["pq_bits"] == 3  # 16-d; 400/39 -> 2**3
    scores, got = idx.search(x[:10], 5)  # 5 * 80 = 400 candidates: every vector, re-scored exactly
    want_s, want = exact_top(x, x[:10], doc_ids, 5)
    assert got == want
    np.testing.assert_allclose(scores, want_s, rtol=1e-5, atol=1e-5)


def test_ids_and_texts_round_trip_and_the_folder_moves(tmp_path, data):
    doc_ids, x = data
    build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x), kind="ivf-flat", corpus=_corpus(doc_ids))
    (tmp_path / "i").rename(tmp_path / "moved")
    idx = open_index(str(tmp_path / "moved"))
    assert idx.ids[:4] == AWKWARD
    _, got = idx.search(x[3], 1)
    assert got == [["a\udc80b"]]
    assert idx.doc("a\udc80b") == {"title": "T3", "text": "text of a\udc80b"}
    assert idx.doc('say "hi"') == {"title": "T0", "text": 'text of say "hi"'}
    assert idx.doc("missing") is None


def test_sample_vectors_are_the_seeded_rows(tmp_path, data):
    doc_ids, x = data
    idx = open_index(build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x)))
    rows = np.sort(np.random.default_rng(3).choice(N, size=7, replace=False))
    np.testing.assert_array_equal(idx.sample_vectors(7, 3), x[rows])
    flat = open_index(build_index("faiss-disk", str(tmp_path / "j"), chunks(doc_ids, x), rerank=0))
    assert flat.sample_vectors(7, 3) is None and not (tmp_path / "j" / "vectors.f32").exists()


def test_a_build_killed_midway_leaves_the_old_index(tmp_path, data):
    doc_ids, x = data
    target = str(tmp_path / "i")
    build_index("faiss-disk", target, chunks(doc_ids[:200], x[:200]), kind="ivf-flat")
    with pytest.raises(KeyboardInterrupt):
        build_index("faiss-disk", target, chunks(doc_ids, x, fail_after=2), kind="ivf-flat")
    assert len(open_index(target)) == 200
    assert [p.name for p in tmp_path.iterdir()] == ["i"]  # no half-built folder left beside it
    build_index("faiss-disk", target, chunks(doc_ids, x), kind="ivf-flat")
    assert len(open_index(target)) == N


def test_bad_input(tmp_path, data):
    doc_ids, x = data
    with pytest.raises(DataError, match="duplicate document id 'd5'"):
        build_index("faiss-disk", str(tmp_path / "a"), [(["d5", "d5"], x[:2])])
    with pytest.raises(DataError, match="dimension 8, the first had 16"):
        build_index("faiss-disk", str(tmp_path / "a"), [(["a"], x[:1]), (["b"], x[:1, :8])])
    with pytest.raises(DataError, match="NaN"):
        build_index("faiss-disk", str(tmp_path / "a"), [(["a"], np.full((1, 4), np.nan, np.float32))])
    with pytest.raises(DataError, match="no vectors"):
        build_index("faiss-disk", str(tmp_path / "a"), [])
    with pytest.raises(ConfigError, match="no index kind 'hnsw'"):
        build_index("faiss-disk", str(tmp_path / "a"), chunks(doc_ids, x), kind="hnsw")
    with pytest.raises(ConfigError, match="--pq-m 5 does not divide the dimension 16"):
        build_index("faiss-disk", str(tmp_path / "a"), chunks(doc_ids, x), pq_m=5)
    assert not (tmp_path / "a").exists()


def test_damaged_folders_are_refused(tmp_path, data):
    doc_ids, x = data
    target = tmp_path / "i"
    build_index("faiss-disk", str(target), chunks(doc_ids, x), kind="ivf-flat", metadata={"corpus": "c.jsonl"})
    ids_file = target / "ids.json"
    ids_file.write_text(json.dumps(doc_ids[:3]))
    with pytest.raises(IndexLoadError, match=r"ids.json holds \d+ bytes, the build wrote \d+") as info:
        open_index(str(target))
    assert info.value.fix == (f"rebuild it: drmix index --corpus c.jsonl --backend faiss-disk --output {target} "
                              "--overwrite.")
    # an index written before meta.json recorded its files: the checks it had
    meta = json.loads((target / "meta.json").read_text())
    del meta["files"]
    (target / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexLoadError, match="holds 400 vectors but ids.json lists 3 ids"):
        open_index(str(target))
    (target / "lists.ivfdata").unlink()
    with pytest.raises(IndexLoadError, match="no lists.ivfdata"):
        open_index(str(target))


def test_a_lists_file_cut_short_is_refused_never_searched(tmp_path, data):
    """A lists.ivfdata cut short gave IVF-PQ a wrong answer (1 hit for k=3, rc 0) and IVF-flat a SIGBUS: opened in
    a child process (a signal would end it), both are refused naming the file, with the record of the build and,
    for an index written before that record, with the size the index's own header gives the lists file."""
    import subprocess
    import sys

    doc_ids, x = data
    places = []
    for kind, cut in (("ivf-pq", 100), ("ivf-flat", 4096)):
        for recorded in (True, False):
            folder = tmp_path / f"{kind}-{recorded}"
            build_index("faiss-disk", str(folder), chunks(doc_ids, x), kind=kind)
            if not recorded:
                meta = json.loads((folder / "meta.json").read_text())
                del meta["files"]
                (folder / "meta.json").write_text(json.dumps(meta))
            with open(folder / "lists.ivfdata", "r+b") as f:
                f.truncate(cut)
            places.append(str(folder))
    code = ("import sys, numpy as np\n"
            "from drmix.errors import IndexLoadError\n"
            "from drmix.retrieval.backends import open_index\n"
            "q = np.load(sys.argv[1])\n"
            "for place in sys.argv[2:]:\n"
            "    try:\n"
            "        print('answered', [len(r) for r in open_index(place).search(q, 3)[1]])\n"
            "    except IndexLoadError as e:\n"
            "        print('refused', e.format())\n")
    np.save(tmp_path / "q.npy", x[:4])
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q.npy"), *places], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    lines = out.stdout.splitlines()
    assert len(lines) == 4 and all(line.startswith("refused ") for line in lines), lines
    assert all(f"{place}/lists.ivfdata: lists.ivfdata holds " in line and "--overwrite" in line
               for place, line in zip(places, lines))


def test_pq_size():
    assert pq_size(384, None) == 48 and pq_size(768, None) == 96 and pq_size(16, None) == 2
    assert pq_size(384, 96) == 96


def test_the_training_sample_is_64_rows_per_list_and_at_least_what_pq_wants():
    assert train_rows(1_000_000, 4000) == 256_000  # 64 per list
    assert train_rows(1_000_000, 100) == 9_984  # the product quantiser's 256 centroids x 39
    assert train_rows(10_000, 256) == 10_000 and train_rows(300, 7) == 300  # never more than n
    assert train_rows(1_000_000, 4000, wanted=5_000) == 5_000


def test_the_product_quantiser_is_trained_without_polysemous_reordering(tmp_path):
    """index_factory turns polysemous training on for 8-bit PQ (a simulated-annealing reordering of the codes,
    most of the training time); the built quantiser equals one trained with it off on the same seeded sample."""
    import faiss

    n = 9_984  # 8-bit PQ: 256 centroids x 39 rows
    doc_ids, x = [str(i) for i in range(n)], vectors(n, seed=5)
    idx = open_index(build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x, size=5_000), nlist=4,
                                 pq_m=2))
    assert idx.metadata["params"]["pq_bits"] == 8 and idx.metadata["params"]["train_size"] == n
    want = faiss.index_factory(16, "IVF4,PQ2x8", faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.downcast_index(faiss.extract_index_ivf(want))
    ivf.cp.seed, ivf.pq.cp.seed, ivf.do_polysemous_training = 0, 0, False
    want.train(x)
    got = faiss.downcast_index(faiss.extract_index_ivf(idx.index))
    np.testing.assert_array_equal(faiss.vector_to_array(got.pq.centroids), faiss.vector_to_array(ivf.pq.centroids))


def test_opening_prints_nothing_on_stdout(tmp_path, data):
    """FAISS's on-disk lists print to the C stdout; drmix search --json output must stay JSON."""
    import subprocess
    import sys

    doc_ids, x = data
    build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x), kind="ivf-flat")
    (tmp_path / "i").rename(tmp_path / "j")  # the lists file is found again: FAISS says so on stdout
    code = (f"from drmix.retrieval.backends import open_index; i = open_index({str(tmp_path / 'j')!r}); "
            "print(len(i))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "400\n"


def test_a_build_from_shards_holds_a_chunk_not_the_corpus(tmp_path):
    """Rank 0 streams two shards of 20,000 384-d vectors (29 MB) into the build 1,000 rows at a time: what the
    build allocates (tracemalloc counts numpy's arrays; FAISS's own buffers hold the trained quantisers and one
    block of codes) peaks far below the vectors -- the rest is the ids, about 150 bytes each -- and the index is
    the one built from the whole array at once."""
    import tracemalloc

    from drmix.retrieval import shards

    n, dim = 20_000, 384
    x = np.random.default_rng(3).standard_normal((n, dim)).astype(np.float32)
    settings = {"world_size": 2, "model_fingerprint": "m", "corpus_fingerprint": "c", "count": n, "prompt": "",
                "max_length": None, "normalize": False, "precision": "auto", "batch_size": 1, "align": 4096}
    for rank, (start, stop) in enumerate(shards.shard_ranges(n, 2, 4096)):
        shards.write_shard(tmp_path / "s", rank, settings, start, stop, x[start:stop])
    del x
    doc_ids = [str(i) for i in range(n)]
    seen = []

    def streamed():
        for row, part in shards.shard_chunks(tmp_path / "s", settings, 1_000):
            seen.append(len(part))
            yield doc_ids[row:row + len(part)], part

    opts = {"nlist": 8, "train_size": 1_000, "chunk_size": 1_000, "nprobe": 8}
    build_index("faiss-disk", str(tmp_path / "warm"), [(doc_ids[:400], vectors(400, dim))])  # its imports
    tracemalloc.start()
    try:
        build_index("faiss-disk", str(tmp_path / "sharded"), streamed(), **opts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert max(seen) == 1_000 and sum(seen) == n
    assert peak < n * dim * 4 / 4, f"{peak / 2**20:.1f} MB allocated for {n * dim * 4 / 2**20:.1f} MB of vectors"
    whole = shards.merge_shards(tmp_path / "s", settings)
    build_index("faiss-disk", str(tmp_path / "one"), [(doc_ids, whole)], **opts)
    for name in ("ids.json", "vectors.f32", "lists.ivfdata"):  # index.faiss names its own folder's lists file
        assert (tmp_path / "sharded" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    (s1, i1), (s2, i2) = (open_index(str(tmp_path / f)).search(whole[:20], 5) for f in ("sharded", "one"))
    assert i1 == i2
    np.testing.assert_array_equal(s1, s2)


def test_the_index_is_read_without_the_flag_that_skips_mapping_the_lists(tmp_path, data, monkeypatch):
    """IO_FLAG_MMAP carries IO_FLAG_SKIP_IVF_DATA, with which OnDiskInvertedLists never maps lists.ivfdata (a
    segfault at the first search); the folder is read with IO_FLAG_ONDISK_SAME_DIR only."""
    import faiss

    doc_ids, x = data
    loc = build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x), kind="ivf-flat")
    flags = []
    real = faiss.read_index
    monkeypatch.setattr(faiss, "read_index", lambda path, f=0: flags.append(f) or real(path, f))
    open_index(loc)
    assert flags == [faiss.IO_FLAG_ONDISK_SAME_DIR] and not flags[0] & faiss.IO_FLAG_SKIP_IVF_DATA


def test_the_training_sample_is_read_in_blocks_row_for_row(tmp_path):
    from drmix.retrieval.backends.faiss_disk import read_rows

    x = np.arange(23 * 3, dtype=np.float32).reshape(23, 3)
    x.tofile(tmp_path / "v.f32")
    rows = np.array([0, 4, 5, 6, 17, 22])
    np.testing.assert_array_equal(read_rows(tmp_path / "v.f32", rows, 23, 3, 5), x[rows])  # blocks of 5 rows
    np.testing.assert_array_equal(read_rows(tmp_path / "v.f32", rows, 23, 3, 100), x[rows])
    assert read_rows(tmp_path / "v.f32", np.array([], dtype=np.int64), 23, 3, 5).shape == (0, 3)


def test_the_exact_rescoring_gathers_a_bounded_block_of_candidates(tmp_path, data, monkeypatch):
    """A search batch re-scores at most RESCORE_FLOATS floats of candidate rows at once: 400 queries x 400
    candidates x 16 dimensions go through in batches of 4 when the bound is 4 x 400 x 16, with the same results."""
    from drmix.retrieval.backends import faiss_disk

    doc_ids, x = data
    idx = open_index(build_index("faiss-disk", str(tmp_path / "i"), chunks(doc_ids, x), nprobe=10_000, rerank=80))
    want_s, want = idx.search(x, 5)
    seen = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def search(self, q, k):
            seen.append((q.shape[0], k))
            return self.inner.search(q, k)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    idx.index = Spy(idx.index)
    monkeypatch.setattr(faiss_disk, "RESCORE_FLOATS", 4 * 400 * 16 + 3)
    got_s, got = idx.search(x, 5)
    assert seen == [(4, 400)] * 100
    assert got == want
    np.testing.assert_array_equal(got_s, want_s)
    seen.clear()
    monkeypatch.setattr(faiss_disk, "RESCORE_FLOATS", 10)  # less than one query's candidates: one query a batch
    assert idx.search(x[:3], 5)[1] == want[:3] and seen == [(1, 400)] * 3


def test_the_default_bound_caps_a_default_search_below_20_mb():
    from drmix.retrieval.backends import faiss_disk

    assert 4 * faiss_disk.RESCORE_FLOATS <= 20 * 2**20 and faiss_disk.RESCORE_FLOATS >= 100 * 1024
