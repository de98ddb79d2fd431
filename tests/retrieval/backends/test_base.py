"""The backend registry, the model record and its check, chunk checks."""
from __future__ import annotations

import numpy as np
import pytest

from drmix.errors import ConfigError, DataError, ModelError
from drmix.retrieval.backends import BACKENDS, backend, backend_for, check_model, chunks_from_npy, model_record
from drmix.retrieval.backends.base import ChunkChecker, model_fingerprint, resolve_kind


def test_builtin_backends_and_their_default_kinds():
    assert list(BACKENDS.all()) == ["memory", "faiss-disk", "milvus"]
    assert [resolve_kind(backend(n), None) for n in ("memory", "faiss-disk", "milvus")] == ["flat", "ivf-pq", "flat"]
    assert resolve_kind(backend("milvus"), "IVF_FLAT") == "ivf-flat"
    with pytest.raises(ConfigError, match="unknown index backend 'elastic'"):
        backend("elastic")


def test_locations_pick_their_backend(tmp_path):
    from drmix.retrieval.index import DenseIndex

    assert backend_for("runs/x/index.db").name == "milvus"
    assert backend_for("runs/x/index.db#scifact").name == "milvus"
    assert backend_for("https://milvus.example:19530#c").name == "milvus"
    DenseIndex.build(np.eye(2, dtype=np.float32), ["a", "b"]).save(tmp_path / "mem")
    assert backend_for(tmp_path / "mem").name == "memory"
    (tmp_path / "disk").mkdir()
    (tmp_path / "disk" / "meta.json").write_text('{"backend": "faiss-disk"}')
    assert backend_for(tmp_path / "disk").name == "faiss-disk"
    assert backend_for(tmp_path / "missing").name == "memory"  # and DenseIndex.load says it is not found


def test_fingerprint_follows_the_weights_not_their_dtype(tiny_model_path):
    import torch

    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path)
    record = model_record(model)
    assert record["dim"] == 32 and record["pooling"] == "mean" and record["normalized"] is True
    same = load_encoder(tiny_model_path)
    assert model_fingerprint(load_encoder(tiny_model_path).to(torch.bfloat16)) == record["fingerprint"]
    assert model_fingerprint(same) == record["fingerprint"]
    with torch.no_grad():
        next(same.parameters()).add_(1.0)
    assert model_fingerprint(same) != record["fingerprint"]


def test_check_model_names_both(tiny_model_path):
    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path)
    rec = model_record(model)
    check_model({"model": "m", **rec}, model, where="here")  # the same model: accepted
    check_model({"model": "m"}, model, where="here")  # nothing recorded (a memory index): accepted
    with pytest.raises(ModelError, match=r"built with the model old \(fingerprint abc\); the query model .* has "
                                         "fingerprint " + rec["fingerprint"]):
        check_model({**rec, "model": "old", "fingerprint": "abc"}, model, where="here")
    with pytest.raises(ModelError, match="holds 768-d vectors of the model old; the model .* gives 32-d"):
        check_model({**rec, "model": "old", "fingerprint": "abc", "dim": 768}, model, where="here")
    with pytest.raises(ModelError, match="holds unnormalised vectors"):
        check_model({**rec, "normalized": False}, model, where="here")


def _earlier_fingerprint(model) -> str:
    """The model fingerprint indexes recorded before drmix.fingerprint (BLAKE2b-96 of the bfloat16 weights), as
    that version computed it."""
    import hashlib

    import torch

    h = hashlib.blake2b(digest_size=12)
    for name, t in model.state_dict().items():
        t = t.detach().to("cpu")
        if t.is_floating_point():
            t = t.to(torch.bfloat16)
        t = t.contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def test_an_index_built_by_an_earlier_version_is_checked_at_its_own_digest_size(tiny_model_path):
    """Indexes are costly to rebuild: one whose record holds the earlier 24-digit fingerprint is accepted for the
    model it was built with and refused for any other, never for the digest's length."""
    import torch

    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path)
    rec = {**model_record(model), "model": "old", "fingerprint": _earlier_fingerprint(model)}
    assert len(rec["fingerprint"]) == 24 and len(model_record(model)["fingerprint"]) == 40
    check_model(rec, model, where="here")
    check_model(rec, load_encoder(tiny_model_path).to(torch.bfloat16), where="here")
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    with pytest.raises(ModelError, match=f"fingerprint {rec['fingerprint']}\\); the query model .* has fingerprint "
                                         "[0-9a-f]{24}\\."):
        check_model(rec, model, where="here")


def test_chunk_checks_and_npy_shards(tmp_path):
    check = ChunkChecker()
    ids, x = check(["a", 2], np.ones((2, 3), dtype=np.float64))
    assert ids == ["a", "2"] and x.dtype == np.float32 and check.count == 2 and check.dim == 3
    with pytest.raises(DataError, match="a chunk of 1 ids holds an array of shape \\(2, 3\\)"):
        check(["z"], np.ones((2, 3)))
    with pytest.raises(DataError, match="duplicate document id 'a'"):
        check(["a"], np.ones((1, 3)))
    with pytest.raises(DataError, match="no vectors"):
        ChunkChecker().finish()
    np.save(tmp_path / "s0.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    [(got_ids, got)] = list(chunks_from_npy([(["x", "y"], tmp_path / "s0.npy")]))
    assert got_ids == ["x", "y"] and got.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_npy_shards_stream_a_chunk_at_a_time_and_their_ids_must_match(tmp_path):
    np.save(tmp_path / "s0.npy", np.arange(15, dtype=np.float32).reshape(5, 3))
    got = list(chunks_from_npy([(["a", "b", "c", "d", "e"], tmp_path / "s0.npy")], chunk_size=2))
    assert [ids for ids, _ in got] == [["a", "b"], ["c", "d"], ["e"]]
    assert np.concatenate([x for _, x in got]).tolist() == np.arange(15).reshape(5, 3).tolist()
    with pytest.raises(DataError, match=r"s0.npy: 4 ids for 5 vectors"):
        list(chunks_from_npy([(["a", "b", "c", "d"], tmp_path / "s0.npy")], chunk_size=2))
