"""What a result was made from: content fingerprints of its input files and folders.

A result (a recipe's stage, a cached evaluation, a benchmark's cached run, a model card) names its inputs by
path; a path says nothing about what was at it. :func:`fingerprint` reads what is there now: a file's full
content hash (BLAKE2b-160), its size in bytes and, for a text table (``.jsonl``, ``.tsv``, ``.csv``,
``.txt``), its rows; a folder (a BEIR set, a corpus, a model, a collection) as the same for every file in it,
by relative path, and one digest over them. Two fingerprints are compared with :func:`describe_change`,
which names what changed in words a user can check: ``qrels/test.tsv: rows 21 -> 11``,
``corpus.jsonl: content changed (bytes 1,204 -> 1,204)``, ``model.safetensors removed``.

Hashing is :mod:`drmix.fingerprint`'s (BLAKE2b-160, the digest these records have always held, so a run recorded
by an earlier version is still reused): a file is read once per version, its digest remembered under its (path,
size, modification time, change time, inode), so an unchanged 10M-row file is not read again by the next run, and
an edit that restores the size and the modification time (``cp -p``, ``rsync -t``) is still seen.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from drmix.fingerprint import ALGORITHM, file_summary, files_digest

#: suffixes whose rows (lines) are counted while hashing
ROW_SUFFIXES = frozenset({".jsonl", ".tsv", ".csv", ".txt"})
#: files in a folder that are not part of what it holds (caches and markers other tools put beside data)
_IGNORED_PARTS = frozenset({".git", "__pycache__", ".cache", ".ipynb_checkpoints"})
_IGNORED_NAMES = frozenset({".DS_Store"})
#: the changed files of a folder named one by one (the others are counted)
MAX_LISTED = 5


def file_fingerprint(path: str | Path) -> dict[str, Any]:
    """``{"digest", "bytes"[, "rows"]}`` of one file (rows: lines of a text table, see :data:`ROW_SUFFIXES`)."""
    p = Path(path)
    fp = file_summary(p, count_rows=p.suffix.lower() in ROW_SUFFIXES)
    out: dict[str, Any] = {"digest": fp.digest, "bytes": fp.bytes}
    if fp.rows is not None:
        out["rows"] = fp.rows
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
    digest = files_digest((rel, fp["digest"]) for rel, fp in files.items())
    return {"kind": "folder", "digest": digest, "bytes": sum(fp["bytes"] for fp in files.values()),
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
