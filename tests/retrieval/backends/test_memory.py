"""The memory backend's DenseIndex: FAISS index kinds, save/load, the files' record checked on open and the
failure paths (the Python API over it: tests/retrieval/test_index.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.errors import ConfigError, DataError, IndexLoadError, ModelError
from drmix.retrieval.backends.memory import DenseIndex

VECS = np.array([[1, 0, 0], [0, 1, 0], [0.6, 0.8, 0], [0, 0, 1]], dtype=np.float32)
IDS = ["a", "b", "c", "d"]


def test_flat_search_hand_computed():
    index = DenseIndex.build(VECS, IDS)
    scores, ids = index.search(np.array([[1.0, 0.5, 0.0]], dtype=np.float32), k=3)
    # inner products: a 1.0, b 0.5, c 0.6 + 0.4 = 1.0, d 0
    assert ids[0][2] == "b" and set(ids[0][:2]) == {"a", "c"}
    np.testing.assert_allclose(scores[0], [1.0, 1.0, 0.5], atol=1e-6)
    scores, ids = index.search(VECS[3], k=10)  # k' = min(k, len)
    assert scores.shape == (1, 4) and ids[0][0] == "d"
    assert index.kind == "flat" and len(index) == 4 and index.dim == 3


def test_hnsw_and_ivf_agree_with_flat_on_small_data():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(200, 16)).astype(np.float32)
    ids = [f"d{i}" for i in range(200)]
    queries = emb[:20] + 0.01
    _, flat = DenseIndex.build(emb, ids).search(queries, 5)
    hnsw = DenseIndex.build(emb, ids, kind="hnsw", M=8, ef_search=64)
    ivf = DenseIndex.build(emb, ids, kind="ivf", nlist=4, nprobe=4)  # probing every list = exact
    assert hnsw.kind == "hnsw" and ivf.kind == "ivf" and ivf.metadata["params"] == {"nlist": 4, "nprobe": 4}
    assert [r[0] for r in hnsw.search(queries, 5)[1]] == [r[0] for r in flat]
    assert ivf.search(queries, 5)[1] == flat


def test_ivf_lowers_nlist_then_falls_back_to_flat(caplog):
    rng = np.random.default_rng(1)
    ivf = DenseIndex.build(rng.normal(size=(100, 4)).astype(np.float32), [str(i) for i in range(100)], kind="ivf")
    assert ivf.metadata["params"]["nlist"] == 2  # 4 * sqrt(100) = 40 wanted, 100 // 39 = 2 allowed
    small = DenseIndex.build(VECS, IDS, kind="ivf")
    assert small.kind == "flat" and small.metadata["requested_kind"] == "ivf"
    assert "flat index is built instead" in caplog.text


def test_build_rejects_bad_input():
    with pytest.raises(ConfigError, match="kind"):
        DenseIndex.build(VECS, IDS, kind="lsh")
    with pytest.raises(ConfigError, match="nprobee"):
        DenseIndex.build(VECS, IDS, nprobee=3)
    with pytest.raises(DataError, match="duplicate document id 'a'"):
        DenseIndex.build(VECS, ["a", "b", "a", "d"])
    with pytest.raises(DataError, match="3 ids for 4"):
        DenseIndex.build(VECS, IDS[:3])
    with pytest.raises(DataError, match="shape"):
        DenseIndex.build(np.zeros((0, 3), dtype=np.float32), [])
    with pytest.raises(ModelError, match="dimension 2"):
        DenseIndex.build(VECS, IDS).search(np.zeros((1, 2), dtype=np.float32), 1)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_save_load_round_trip_with_texts(tmp_path, kind):
    corpus = {i: {"title": f"T{i}", "text": f"text of {i} ünïcode"} for i in IDS}
    index = DenseIndex.build(VECS, IDS, kind=kind, metadata={"model": "m"}, corpus=corpus)
    index.save(tmp_path / "idx")
    loaded = DenseIndex.load(tmp_path / "idx")
    assert loaded.ids == IDS and loaded.kind == kind and loaded.metadata["model"] == "m"
    assert loaded.metadata["count"] == 4 and loaded.metadata["dim"] == 3
    assert loaded.doc("c") == {"title": "Tc", "text": "text of c ünïcode"}
    assert loaded.doc("zz") is None
    q = np.array([[0.0, 1.0, 0.0]], dtype=np.float32)
    assert loaded.search(q, 2)[1] == index.search(q, 2)[1]
    loaded.save(tmp_path / "copy")  # texts travel with a re-save
    assert DenseIndex.load(tmp_path / "copy").doc("d")["text"] == "text of d ünïcode"
    np.save(tmp_path / "copy" / "docs.offsets.npy", np.zeros(3, dtype=np.int64))
    with pytest.raises(IndexLoadError, match=r"docs.offsets.npy holds \d+ bytes, the build wrote \d+"):
        DenseIndex.load(tmp_path / "copy")
    _unrecorded(tmp_path / "copy")  # an index written before the record: the checks it had
    with pytest.raises(IndexLoadError, match="3 entries for 4"):
        DenseIndex.load(tmp_path / "copy")


def _unrecorded(folder):
    """The index in ``folder`` as drmix wrote it before meta.json recorded its files."""
    meta = json.loads((folder / "meta.json").read_text())
    del meta["files"]
    (folder / "meta.json").write_text(json.dumps(meta))


def test_load_failures(tmp_path):
    DenseIndex.build(VECS, IDS).save(tmp_path / "idx")
    with pytest.raises(IndexLoadError, match="not found"):
        DenseIndex.load(tmp_path / "missing")
    assert DenseIndex.load(tmp_path / "idx").doc("a") is None  # no texts stored
    _unrecorded(tmp_path / "idx")
    (tmp_path / "idx" / "ids.json").write_text(json.dumps(IDS[:3]))
    with pytest.raises(IndexLoadError, match="4 vectors but ids.json lists 3"):
        DenseIndex.load(tmp_path / "idx")
    (tmp_path / "idx" / "ids.json").write_text("[oops")
    with pytest.raises(IndexLoadError, match="cannot parse ids.json"):
        DenseIndex.load(tmp_path / "idx")
    (tmp_path / "idx" / "ids.json").write_text(json.dumps(IDS))
    (tmp_path / "idx" / "vectors.npy").write_bytes(b"garbage")
    with pytest.raises(IndexLoadError, match="cannot read vectors.npy"):
        DenseIndex.load(tmp_path / "idx")
    (tmp_path / "idx" / "vectors.npy").unlink()
    with pytest.raises(IndexLoadError, match="no vectors.npy or index.faiss") as info:
        DenseIndex.load(tmp_path / "idx")
    assert "drmix index" in info.value.fix
    DenseIndex.build(VECS, IDS, kind="hnsw").save(tmp_path / "hnsw")
    _unrecorded(tmp_path / "hnsw")
    (tmp_path / "hnsw" / "index.faiss").write_bytes(b"garbage")
    with pytest.raises(IndexLoadError, match="cannot read the FAISS index"):
        DenseIndex.load(tmp_path / "hnsw")


@pytest.mark.parametrize("kind,name", [("flat", "vectors.npy"), ("hnsw", "index.faiss"), ("flat", "ids.json"),
                                       ("flat", "docs.jsonl")])
def test_every_file_is_checked_against_the_record_of_the_build(tmp_path, kind, name):
    """Cut short, missing, or changed in place at the same size: one error naming the file and the rebuild."""
    corpus = {i: {"title": "", "text": f"text {i}"} for i in IDS}
    DenseIndex.build(VECS, IDS, kind=kind, corpus=corpus, metadata={"corpus": "data/c.jsonl"}).save(tmp_path / "i")
    path = tmp_path / "i" / name
    good = path.read_bytes()
    fix = f"rebuild it: drmix index --corpus data/c.jsonl --output {tmp_path / 'i'} --overwrite."
    path.write_bytes(good[:-1])
    with pytest.raises(IndexLoadError, match=f"{name} holds {len(good) - 1} bytes, the build wrote {len(good)}") as e:
        DenseIndex.load(tmp_path / "i")
    assert e.value.path == str(path) and e.value.fix == fix
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))    # the same size, one bit flipped in the last byte
    with pytest.raises(IndexLoadError, match=f"{name} does not match the checksum recorded at the build"):
        DenseIndex.load(tmp_path / "i")
    path.unlink()
    with pytest.raises(IndexLoadError, match=f"{name} is missing"):
        DenseIndex.load(tmp_path / "i")
    path.write_bytes(good)
    assert DenseIndex.load(tmp_path / "i").ids == IDS


def test_ids_and_texts_with_lone_surrogates_round_trip(tmp_path):
    ids = ['say "hi"', "naïve ☃", "a\udc80b"]
    corpus = {d: {"title": "", "text": f"text {d}"} for d in ids}
    DenseIndex.build(np.eye(3, dtype=np.float32), ids, corpus=corpus).save(tmp_path / "i")
    loaded = DenseIndex.load(tmp_path / "i")
    assert loaded.ids == ids and loaded.doc("a\udc80b") == {"title": "", "text": "text a\udc80b"}
    assert loaded.doc("naïve ☃") == {"title": "", "text": "text naïve ☃"}
    # only a line UTF-8 cannot hold is escaped; the others stay as written before (byte-identical files)
    lines = (tmp_path / "i" / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    assert '"text naïve ☃"' in lines[1] and "\\udc80" in lines[2]
