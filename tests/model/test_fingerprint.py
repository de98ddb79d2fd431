"""drmix.model.fingerprint: a loaded model is known by its files (hashed once), a changed one by its tensors."""
from __future__ import annotations

import torch

from drmix.model.fingerprint import file_hash, folder_fingerprint, tensors_fingerprint, weights_fingerprint


def test_loaded_model_is_its_files_until_a_weight_changes(tiny_model_path, tmp_path, monkeypatch):
    from drmix.model.encoder import load_encoder

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path))
    a, b = load_encoder(tiny_model_path, device="cpu"), load_encoder(tiny_model_path, device="cpu")
    fp = weights_fingerprint(a)
    assert fp == "files:" + folder_fingerprint(tiny_model_path) == weights_fingerprint(b)
    with torch.no_grad():
        next(a.parameters()).mul_(2.0)
    changed = weights_fingerprint(a)
    assert changed == "tensors:" + tensors_fingerprint(a) and changed != fp
    with torch.no_grad():
        next(a.parameters()).div_(2.0)                              # the same values again, but no longer "as loaded"
    assert weights_fingerprint(a) == "tensors:" + tensors_fingerprint(b)


def test_file_hash_is_the_provenance_digest_and_follows_the_content(tmp_path, monkeypatch):
    import hashlib
    import os

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    assert file_hash(f) == hashlib.blake2b(b"weights", digest_size=20).hexdigest()
    f.write_bytes(b"other!!")
    os.utime(f, ns=(1, 1))                                           # same size, new mtime: hashed again
    assert file_hash(f) == hashlib.blake2b(b"other!!", digest_size=20).hexdigest()
