"""What a model's weights are, cheaply: a content hash of the files it was loaded from, or of its tensors.

:func:`weights_fingerprint` keys caches of things a model computed (embeddings, :mod:`drmix.retrieval.embedding_cache`).
A model loaded by :func:`drmix.model.encoder.load_encoder` from a local folder is marked with that folder and
the identity of its tensors at load time (each tensor's storage address and autograd version counter, which
every in-place update -- an optimiser step, ``copy_``, ``load_state_dict`` -- advances). While every tensor
is still the one loaded, the fingerprint is the BLAKE2b hash of the folder's files (weights, configuration,
tokenizer), computed once per file and remembered by (path, size, modification time, inode) by
:mod:`drmix.provenance` (the same digests every stage record uses), so a rerun hashes nothing. Any other model -- built in memory, trained,
moved or cast after loading -- is fingerprinted by hashing its tensors' bytes
(:func:`drmix.retrieval.onnx.fingerprint`-style), remembered on the model for as long as its tensors stay
the same. (Writes through ``tensor.data`` bypass the version counter; code that updates weights that way and
caches embeddings should pass a fresh model.)
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

_SKIP_DIRS = {".git", "__pycache__", "checkpoints"}


def _live(model: Any) -> tuple:
    """The identity of every tensor (storage address, version counter): changes when any weight changes."""
    return tuple((t.data_ptr(), t._version) for t in model.state_dict(keep_vars=True).values())


def remember_source(model: Any, path: str | Path) -> Any:
    """Mark ``model`` as loaded from the local folder ``path`` (its tensors as they are now); returns it."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        try:
            model._drmix_source = (str(folder.resolve()), _live(model))
        except (AttributeError, RuntimeError):
            pass
    return model


def file_hash(path: Path) -> str:
    """A file's content digest, remembered by (path, size, mtime, inode): :func:`drmix.provenance.file_fingerprint`."""
    from drmix.provenance import file_fingerprint

    return file_fingerprint(path)["digest"]


def folder_fingerprint(folder: str | Path) -> str:
    """A hash of every file under ``folder`` (relative names and contents)."""
    root = Path(folder)
    h = hashlib.blake2b(digest_size=16)
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            p = Path(dirpath) / name
            h.update(f"{p.relative_to(root)}\0{file_hash(p)}\n".encode())
    return h.hexdigest()


def tensors_fingerprint(model: Any) -> str:
    """BLAKE2b of every parameter and buffer (names, shapes, dtypes, bytes)."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for name, t in model.state_dict().items():
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def weights_fingerprint(model: Any) -> str:
    """The model's weights fingerprint: its files' hash while it is as loaded, else its tensors' (see above)."""
    live = _live(model)
    memo = getattr(model, "_drmix_fingerprint", None)
    if memo is not None and memo[0] == live:
        return memo[1]
    source = getattr(model, "_drmix_source", None)
    if source is not None and source[1] == live and Path(source[0]).is_dir():
        fp = "files:" + folder_fingerprint(source[0])
    else:
        fp = "tensors:" + tensors_fingerprint(model)
    try:
        model._drmix_fingerprint = (live, fp)
    except AttributeError:
        pass
    return fp


__all__ = ["weights_fingerprint", "remember_source", "folder_fingerprint", "file_hash", "tensors_fingerprint"]
