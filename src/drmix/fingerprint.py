"""Content fingerprints: the one hash function of every digest drmix takes of files, folders, texts, settings and
model weights.

Every content digest in drmix -- the inputs of a stage record (:mod:`drmix.provenance`), the key of a cache (Arrow
conversions of collections, pre-tokenised ids, embeddings, COCO's spans, ONNX exports, GGUF conversions, LLM
answers), the manifests of a sharded encoding, the model an index was built with -- is **BLAKE2b with a 20-byte
(160-bit) digest** (:data:`ALGORITHM`), written as 40 hex digits, taken by one of the functions below, each named
for what it fingerprints. Why this one:

* BLAKE2b is a cryptographic hash in Python's standard library (no dependency) and faster in software than SHA-256
  or SHA-1 (about 1 GB/s a core), so a 10M-row corpus is hashed in seconds and no one can make two inputs that
  share a digest: a digest may stand for the content.
* 160 bits: among a trillion digests the odds of any two colliding are about 10^-24. A longer digest would buy
  nothing here; a shorter one would save 4 bytes a cached embedding row (of 1,556 for a 384-dimensional model).
* It is the digest every stage record (``provenance.json``), evaluation cache and model card has held since they
  began (``blake2b-160``), so the runs recorded before stay reusable. Caches that used other hashes or sizes
  before (SHA-1, SHA-256, BLAKE2b at 12 or 16 bytes) now have other keys: an entry written before is not found
  and the work is done again (a cache miss), never a wrong reuse. Only an index's records (its model
  fingerprint and file checksums) are still *checked* at their old sizes (:func:`hasher`'s ``like``), so an
  index built before is not refused.

**Files are hashed once per version.** As build systems and DVC do, :func:`file_summary` remembers a file's
digest under its (path, size, modification time, change time, inode) in an SQLite table in the drmix cache
(:func:`store_path`, ``$DRMIX_CACHE/provenance/hashes.sqlite``), so an unchanged 10M-row file is not read again
by the next run. The change time (``st_ctime_ns``) is what makes this safe: every write, rename into place or
``utime`` sets it to the current time and user space cannot set it back, so an edit that restores the size and
the modification time (``cp -p``, ``rsync -t``, ``tar x``, ``touch -d``, archives with normalised times) still
changes the key. Timestamps are coarse (a clock tick; 2 s on FAT), so a file changed less than
:data:`SETTLE_NS` ago is hashed but not remembered: a second write within the same tick would keep every field
of the key. A store that cannot be written (a read-only home, a full disk) or read is skipped and the file hashed
again, never an error. What it cannot see: an edit on a filesystem that does not keep change times (some FUSE
and network filesystems report a constant or the modification time), or bytes changed beneath the filesystem
(a raw block device, a disk image edited offline); :func:`read_file_digest` reads the bytes now, for checks of
drmix's own outputs against damage.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from drmix.io.checks import cache_root

log = logging.getLogger(__name__)

#: the name of the one digest (a stage record's ``short`` line, the digest store's rows)
ALGORITHM = "blake2b-160"
DIGEST_SIZE = 20
#: sizes of digests that earlier versions wrote, by their hex length: read to check a record, never written
_EARLIER_SIZES = {24: 12,   # an index's model record (BLAKE2b-96)
                  32: 16}   # an index's file checksums (BLAKE2b-128)
#: a file changed less than this long ago (ns) is hashed but its digest is not remembered (coarse timestamps)
SETTLE_NS = 2_000_000_000


def hasher(like: str | None = None) -> Any:
    """A new BLAKE2b hasher of :data:`DIGEST_SIZE` bytes; ``like``: a hex digest an earlier version recorded,
    to compute the digest at that digest's size (checking an old record, :data:`_EARLIER_SIZES`)."""
    if like and len(like) in _EARLIER_SIZES:
        return hashlib.blake2b(digest_size=_EARLIER_SIZES[len(like)])
    return hashlib.blake2b(digest_size=DIGEST_SIZE)


def bytes_digest(data: bytes) -> str:
    """The digest of some bytes."""
    h = hasher()
    h.update(data)
    return h.hexdigest()


def text_key(text: str) -> bytes:
    """The raw digest (:data:`DIGEST_SIZE` bytes) of one text's UTF-8 bytes (a lone surrogate kept as it is)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=DIGEST_SIZE).digest()


def text_digest(text: str) -> str:
    """The digest of one text (hex of :func:`text_key`)."""
    return text_key(text).hex()


def texts_digest(texts: Iterable[str]) -> str:
    """The digest of a sequence of texts: their order and boundaries count (each is length-prefixed)."""
    h = hasher()
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def config_digest(obj: Any) -> str:
    """The digest of settings: ``obj`` as canonical JSON (keys sorted; a value JSON has no type for as ``str``)."""
    return bytes_digest(json.dumps(obj, sort_keys=True, default=str).encode("utf-8", "surrogatepass"))


def files_digest(entries: Iterable[tuple[str, str]]) -> str:
    """The digest of a folder from its files: ``(relative path, file digest)`` pairs in the order given."""
    h = hasher()
    for rel, digest in entries:
        h.update(f"{rel}\0{digest}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- files

class FileDigest(NamedTuple):
    digest: str
    bytes: int
    rows: int | None  # lines (a last one without its newline counts), when counted


def _read(path: Path, count_rows: bool) -> tuple[str, int | None]:
    h = hasher()
    rows, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            if count_rows:
                rows += block.count(b"\n")
                last = block[-1:]
    if count_rows and last != b"\n":     # a last row without its newline
        rows += 1
    return h.hexdigest(), (rows if count_rows else None)


def read_file_digest(path: str | Path) -> str:
    """A file's digest from its bytes as they are now (never remembered: a check of an output against damage)."""
    return _read(Path(path), False)[0]


def file_parts_digest(path: str | Path, parts: Iterable[tuple[int, int]], *, size: int, like: str | None = None) -> str:
    """The digest of a file's ``size`` and the bytes of its ``(offset, length)`` parts, read now (a cheap check of a
    large output against damage: an index's files); ``like``: see :func:`hasher`."""
    h = hasher(like)
    h.update(str(size).encode())
    with open(path, "rb") as f:
        for offset, length in parts:
            f.seek(offset)
            h.update(f.read(length))
    return h.hexdigest()


def store_path() -> Path:
    """The SQLite file that remembers file digests: ``cache_root()/provenance/hashes.sqlite``."""
    return cache_root() / "provenance" / "hashes.sqlite"


_Key = tuple[str, int, int, int, int]   # real path, size, mtime_ns, ctime_ns, inode
_LOCK = threading.Lock()
_MEMO: dict[_Key, tuple[str, int | None]] = {}
_CONNECTIONS: dict[tuple[str, int], sqlite3.Connection] = {}


def _connect(create: bool) -> sqlite3.Connection | None:
    """The process's connection to the digest store (one per store and process), or None when it cannot be used
    (``create``: make the store when missing; else a missing store is None)."""
    path = store_path()
    key = (str(path), os.getpid())
    if key in _CONNECTIONS:
        return _CONNECTIONS[key]
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            return None
        con = sqlite3.connect(str(path), timeout=5.0, check_same_thread=False)
        with con:
            con.execute("DROP TABLE IF EXISTS digests")  # keyed without the change time: never read again
            con.execute("CREATE TABLE IF NOT EXISTS file_digests (path TEXT, size INTEGER, mtime_ns INTEGER, "
                        "ctime_ns INTEGER, inode INTEGER, algorithm TEXT, digest TEXT, rows INTEGER, "
                        "PRIMARY KEY (path, size, mtime_ns, ctime_ns, inode, algorithm))")
    except (OSError, sqlite3.Error) as e:
        log.debug("fingerprint: digest store %s not usable (%s); hashing without it", path, e)
        return None
    _CONNECTIONS[key] = con
    return con


def _remembered(key: _Key) -> tuple[str, int | None] | None:
    if key in _MEMO:
        return _MEMO[key]
    con = _connect(create=False)
    if con is None:
        return None
    try:
        row = con.execute("SELECT digest, rows FROM file_digests WHERE path=? AND size=? AND mtime_ns=? AND "
                          "ctime_ns=? AND inode=? AND algorithm=?", (*key, ALGORITHM)).fetchone()
    except sqlite3.Error:
        row = None
    return (row[0], row[1]) if row else None


def _remember(key: _Key, value: tuple[str, int | None]) -> None:
    _MEMO[key] = value
    con = _connect(create=True)
    if con is None:
        return
    try:
        with con:
            con.execute("INSERT OR REPLACE INTO file_digests VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (*key, ALGORITHM, *value))
    except sqlite3.Error as e:
        log.debug("fingerprint: digest of %s not remembered (%s)", key[0], e)


def _key(path: Path) -> _Key:
    st = path.stat()
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def file_summary(path: str | Path, *, count_rows: bool = False) -> FileDigest:
    """A file's digest, size and (``count_rows``) lines, remembered by (path, size, mtime, ctime, inode)."""
    p = Path(path)
    now = time.time_ns()
    key = _key(p)
    with _LOCK:
        value = _remembered(key)
    if value is None or (count_rows and value[1] is None):
        value = _read(p, count_rows)
        settled = now - max(key[2], key[3]) >= SETTLE_NS
        if settled and _key(p) == key:   # not changed while it was read
            with _LOCK:
                _remember(key, value)
    return FileDigest(value[0], key[1], value[1] if count_rows else None)


def file_digest(path: str | Path) -> str:
    """A file's content digest (remembered, :func:`file_summary`)."""
    return file_summary(path).digest


# ----------------------------------------------------------------------------------------------- model weights

_MODEL_SKIP = frozenset({".git", "__pycache__", "checkpoints"})


def model_folder_digest(folder: str | Path) -> str:
    """The digest of a model folder's files (weights, configuration, tokenizer; relative names and contents;
    ``checkpoints/`` and hidden folders left out), each file's digest remembered (:func:`file_digest`)."""
    root = Path(folder)
    entries = []
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _MODEL_SKIP and not d.startswith("."))
        for name in sorted(names):
            p = Path(dirpath) / name
            entries.append((p.relative_to(root).as_posix(), file_digest(p)))
    return files_digest(entries)


def tensors_digest(module: Any, *, bfloat16: bool = False, extra: str = "", like: str | None = None) -> str:
    """The digest of a torch module's parameters and buffers (names, shapes, dtypes, bytes) after ``extra``;
    ``bfloat16``: floating tensors rounded to bfloat16 first (the same weights loaded in fp32 or bf16 match);
    ``like``: an earlier version's digest, to compute this one at its size (:func:`hasher`)."""
    import torch

    h = hasher(like)
    h.update(extra.encode())
    for name, t in module.state_dict().items():
        t = t.detach().to("cpu")
        if bfloat16 and t.is_floating_point():
            t = t.to(torch.bfloat16)
        t = t.contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


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


def weights_fingerprint(model: Any) -> str:
    """What a model's weights are, cheaply: ``files:`` and the digest of the folder it was loaded from while every
    tensor is still the one loaded, else ``tensors:`` and the digest of its tensors' bytes.

    A model loaded by :func:`drmix.model.encoder.load_encoder` from a local folder is marked with that folder and
    the identity of its tensors at load time (:func:`remember_source`: each tensor's storage address and autograd
    version counter, which every in-place update -- an optimiser step, ``copy_``, ``load_state_dict`` --
    advances); the folder's file digests are remembered (:func:`file_summary`), so a rerun hashes nothing. Any
    other model -- built in memory, trained, moved or cast after loading -- is hashed tensor by tensor, the result
    remembered on the model while its tensors stay the same. (Writes through ``tensor.data`` bypass the version
    counter; code that updates weights that way and caches embeddings should pass a fresh model.) Keys caches of
    what a model computed (embeddings, :mod:`drmix.retrieval.embedding_cache`)."""
    live = _live(model)
    memo = getattr(model, "_drmix_fingerprint", None)
    if memo is not None and memo[0] == live:
        return memo[1]
    source = getattr(model, "_drmix_source", None)
    if source is not None and source[1] == live and Path(source[0]).is_dir():
        fp = "files:" + model_folder_digest(source[0])
    else:
        fp = "tensors:" + tensors_digest(model)
    try:
        model._drmix_fingerprint = (live, fp)
    except AttributeError:
        pass
    return fp


__all__ = ["ALGORITHM", "DIGEST_SIZE", "SETTLE_NS", "FileDigest", "hasher", "bytes_digest", "text_key", "text_digest",
           "texts_digest", "config_digest", "files_digest", "read_file_digest", "file_parts_digest", "store_path",
           "file_summary", "file_digest", "model_folder_digest", "tensors_digest", "remember_source",
           "weights_fingerprint"]
