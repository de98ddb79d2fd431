"""What a result was made from: content fingerprints of its input files and folders.

A result (a recipe's stage, a cached evaluation, a benchmark's cached run, a model card) names its inputs by
path; a path says nothing about what was at it. :func:`fingerprint` reads what is there now: a file's full
content hash (BLAKE2b-160), its size in bytes and, for a text table (``.jsonl``, ``.tsv``, ``.csv``,
``.txt``), its rows; a folder (a BEIR set, a corpus, a model, a collection) as the same for every file in it,
by relative path, and one digest over them. Two fingerprints are compared with :func:`describe_change`,
which names what changed in words a user can check: ``qrels/test.tsv: rows 21 -> 11``,
``corpus.jsonl: content changed (bytes 1,204 -> 1,204)``, ``model.safetensors removed``.

Hashing is done once per file version. As build systems and DVC do, a file's digest is remembered under its
(path, size, modification time, inode) in an SQLite table in the drmix cache
(``$DRMIX_CACHE/provenance/hashes.sqlite``; :func:`drmix.io.checks.cache_root`), so an unchanged 10M-row file is not
read again by the next run. Any change of content through the filesystem changes at least one of the four, so
a stale entry is never used; a cache that cannot be written (a read-only home, a full disk) or read is
skipped and the file hashed again, never an error.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from drmix.io.checks import cache_root

log = logging.getLogger(__name__)

#: the digest of every fingerprint (a new one would change every recorded fingerprint)
ALGORITHM = "blake2b-160"
#: suffixes whose rows (lines) are counted while hashing
ROW_SUFFIXES = frozenset({".jsonl", ".tsv", ".csv", ".txt"})
#: files in a folder that are not part of what it holds (caches and markers other tools put beside data)
_IGNORED_PARTS = frozenset({".git", "__pycache__", ".cache", ".ipynb_checkpoints"})
_IGNORED_NAMES = frozenset({".DS_Store"})
#: the changed files of a folder named one by one (the others are counted)
MAX_LISTED = 5

_LOCK = threading.Lock()
_MEMO: dict[tuple[str, int, int, int], tuple[str, int | None]] = {}


def store_path() -> Path:
    """The SQLite file that remembers digests: ``cache_root()/provenance/hashes.sqlite``."""
    return cache_root() / "provenance" / "hashes.sqlite"


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
        con.execute("CREATE TABLE IF NOT EXISTS digests (path TEXT, size INTEGER, mtime_ns INTEGER, "
                    "inode INTEGER, algorithm TEXT, digest TEXT, rows INTEGER, "
                    "PRIMARY KEY (path, size, mtime_ns, inode, algorithm))")
    except (OSError, sqlite3.Error) as e:
        log.debug("provenance: digest store %s not usable (%s); hashing without it", path, e)
        return None
    _CONNECTIONS[key] = con
    return con


def _remembered(key: tuple[str, int, int, int]) -> tuple[str, int | None] | None:
    if key in _MEMO:
        return _MEMO[key]
    con = _connect(create=False)
    if con is None:
        return None
    try:
        row = con.execute("SELECT digest, rows FROM digests WHERE path=? AND size=? AND mtime_ns=? AND inode=? "
                          "AND algorithm=?", (*key, ALGORITHM)).fetchone()
    except sqlite3.Error:
        row = None
    return (row[0], row[1]) if row else None


def _remember(key: tuple[str, int, int, int], value: tuple[str, int | None]) -> None:
    _MEMO[key] = value
    con = _connect(create=True)
    if con is None:
        return
    try:
        with con:
            con.execute("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?, ?)", (*key, ALGORITHM, *value))
    except sqlite3.Error as e:
        log.debug("provenance: digest of %s not remembered (%s)", key[0], e)


def _hash(path: Path, count_rows: bool) -> tuple[str, int | None]:
    h = hashlib.blake2b(digest_size=20)
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


def file_fingerprint(path: str | Path) -> dict[str, Any]:
    """``{"digest", "bytes"[, "rows"]}`` of one file (rows: lines of a text table, see :data:`ROW_SUFFIXES`)."""
    p = Path(path)
    st = p.stat()
    real = os.path.realpath(p)
    key = (real, st.st_size, st.st_mtime_ns, st.st_ino)
    with _LOCK:
        value = _remembered(key)
    if value is None:
        value = _hash(p, p.suffix.lower() in ROW_SUFFIXES)
        with _LOCK:
            _remember(key, value)
    out: dict[str, Any] = {"digest": value[0], "bytes": st.st_size}
    if value[1] is not None:
        out["rows"] = value[1]
    return out


def _files(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_PARTS)
        for name in sorted(filenames):
            if name not in _IGNORED_NAMES:
                yield Path(dirpath) / name


def fingerprint(path: str | Path, *, only: Iterable[str] | None = None) -> dict[str, Any] | None:
    """The content fingerprint of a file or folder, or None when nothing is at ``path``.

    A file: ``{"kind": "file", "digest", "bytes"[, "rows"]}``. A folder: ``{"kind": "folder", "digest",
    "bytes", "files": {relative path: file fingerprint}}`` (``only``: the relative paths to include, e.g. one
    split's qrels of a BEIR set; those missing are left out)."""
    p = Path(path)
    if p.is_file():
        return {"kind": "file", **file_fingerprint(p)}
    if not p.is_dir():
        return None
    wanted = None if only is None else {str(Path(o)) for o in only}
    files: dict[str, dict[str, Any]] = {}
    for f in _files(p):
        rel = f.relative_to(p).as_posix()
        if wanted is not None and str(Path(rel)) not in wanted:
            continue
        if f.is_file():
            files[rel] = file_fingerprint(f)
    h = hashlib.blake2b(digest_size=20)
    for rel, fp in files.items():
        h.update(f"{rel}\0{fp['digest']}\n".encode("utf-8"))
    return {"kind": "folder", "digest": h.hexdigest(), "bytes": sum(fp["bytes"] for fp in files.values()),
            "files": files}


def beir_fingerprint(root: str | Path, split: str) -> dict[str, Any] | None:
    """A BEIR set as one split sees it: ``corpus``, ``queries`` and ``qrels/<split>`` files (any extension)."""
    p = Path(root)
    if not p.is_dir():
        return fingerprint(p)
    only = [f.relative_to(p).as_posix() for f in _files(p)
            if f.name.split(".")[0] in ("corpus", "queries") and f.parent == p
            or (f.parent == p / "qrels" and f.name.split(".")[0] == split)]
    return fingerprint(p, only=only)


def corpus_fingerprint(root: str | Path) -> dict[str, Any] | None:
    """A target corpus as a recipe reads it: of a BEIR set only its ``corpus`` file(s) -- the labelled queries
    and qrels are never opened -- else the file or folder as it is."""
    p = Path(root)
    if p.is_dir():
        only = [f.name for f in sorted(p.iterdir()) if f.is_file() and f.name.split(".")[0] == "corpus"]
        if only:
            return fingerprint(p, only=only)
    return fingerprint(p)


def short(fp: Mapping[str, Any] | None) -> str:
    """One line for a fingerprint: digest prefix, size and rows (a model card's "made from" list)."""
    if not fp:
        return "missing"
    parts = [f"{ALGORITHM} {str(fp.get('digest', ''))[:16]}", f"{fp.get('bytes', 0):,} bytes"]
    if fp.get("kind") == "folder":
        parts.append(f"{len(fp.get('files', {}))} files")
    elif fp.get("rows") is not None:
        parts.append(f"{fp['rows']:,} rows")
    return ", ".join(parts)


def _file_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    if before.get("digest") == after.get("digest"):
        return None
    said = []
    if before.get("rows") is not None and after.get("rows") is not None and before["rows"] != after["rows"]:
        said.append(f"rows {before['rows']:,} -> {after['rows']:,}")
    said.append(f"bytes {before.get('bytes', 0):,} -> {after.get('bytes', 0):,}")
    if before.get("bytes") == after.get("bytes") and before.get("rows") == after.get("rows"):
        said.insert(0, "content changed")
    return ", ".join(said)


def describe_change(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """What changed between two fingerprints of the same input, in words; None when the content is the same."""
    if before is None and after is None:
        return None
    if before is None:
        return "added"
    if after is None:
        return "missing now"
    if before.get("digest") == after.get("digest") and before.get("kind") == after.get("kind"):
        return None
    if before.get("kind") != after.get("kind"):
        return f"was a {before.get('kind')}, now a {after.get('kind')}"
    if before.get("kind") != "folder":
        return _file_change(before, after)
    b, a = before.get("files", {}), after.get("files", {})
    said = []
    for rel in sorted(set(b) | set(a)):
        if rel not in a:
            said.append(f"{rel} removed")
        elif rel not in b:
            said.append(f"{rel} added")
        elif (c := _file_change(b[rel], a[rel])) is not None:
            said.append(f"{rel}: {c}")
    if len(said) > MAX_LISTED:
        said = said[:MAX_LISTED] + [f"and {len(said) - MAX_LISTED} more files"]
    return "; ".join(said) or "content changed"
