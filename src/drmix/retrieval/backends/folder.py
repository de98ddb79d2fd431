"""Indexes kept in a folder (the ``memory`` and ``faiss-disk`` backends, and any plug-in that writes one): the
document ids (``ids.json``), what the index records (``meta.json``), the stored document texts, and the record
of every file's size and checksum that opening checks.

**Texts.** ``docs.jsonl`` holds one ``{"_id", "title", "text"}`` line per indexed document in index order, with
each line's byte offset in ``docs.offsets.npy``, so ``drmix search`` shows any hit's text with one seek and an
index stays usable when its corpus file is moved, edited or deleted. Storing only offsets into the original
corpus would save that space (about the size of the corpus, comparable to the float32 vectors themselves) but
silently show wrong text once the corpus changes.

**Checks on open.** At the build, ``meta.json`` records under ``files`` each file's size in bytes and a BLAKE2b
checksum of part of it (:func:`file_checksum`): the whole file up to 1 MiB; above that its first and last
64 KiB (the headers FAISS and numpy read first, the end a cut-short copy loses) and 32 blocks of 4 KiB spread
evenly over the rest. Opening compares every file with the record (:func:`check_files`) before FAISS, numpy or
a memory mapping reads it: a missing file, any change of size (cut short by a full disk, a killed copy, ``cp``
of a sparse file onto a smaller filesystem ...) and any change inside the hashed parts is one line naming the
file and the ``drmix index ... --overwrite`` that rebuilds it -- never a wrong answer, and never the SIGBUS a
mapping of a cut-short file gives. Reading about 200 KiB per file keeps opening a multi-GB index as fast as
before; what is **not** seen is an edit of a large file that keeps its size and touches none of the hashed bytes
(a bit flipped in the middle of a 4 GB ``lists.ivfdata``). Indexes built before the record existed are opened
with the checks they had (the backend may add its own: faiss-disk compares the lists file with the size its
header says).
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import IndexLoadError
from drmix.retrieval.backends.base import Index, rebuild_fix

IDS_FILE = "ids.json"
META_FILE = "meta.json"
DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "docs.offsets.npy"

#: files up to this size are hashed whole; a larger one by its ends and :data:`BLOCKS` blocks
WHOLE_FILE = 1 << 20
EDGE = 64 << 10
BLOCKS, BLOCK = 32, 4096


def json_text(value: Any) -> str:
    """JSON with non-ASCII characters as they are; a value holding a lone surrogate (which UTF-8 cannot encode)
    is written with ``\\u`` escapes instead, so its ids and texts round-trip."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)
    return text


def read_json(path: Path, kind: type, fix: str) -> Any:
    """The JSON value of ``path``, which must be a ``kind`` (dict or list); IndexLoadError otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IndexLoadError(f"cannot parse {path.name} ({e}).", path=path, fix=fix) from None
    if not isinstance(value, kind):
        raise IndexLoadError(f"{path.name} should hold a JSON {kind.__name__}.", path=path, fix=fix)
    return value


# ----------------------------------------------------------------------------------------------- file records

def _spans(size: int) -> list[tuple[int, int]]:
    """The ``(offset, length)`` byte ranges of a file of ``size`` bytes that its checksum covers."""
    if size <= WHOLE_FILE:
        return [(0, size)]
    inner = size - 2 * EDGE
    step = inner / BLOCKS
    middle = [(EDGE + int(i * step + (step - BLOCK) / 2), BLOCK) for i in range(BLOCKS)]
    return [(0, EDGE), *middle, (size - EDGE, EDGE)]


def file_checksum(path: Path, size: int | None = None, *, like: str | None = None) -> str:
    """The digest of the parts of ``path`` that :func:`_spans` names, with its size
    (:func:`drmix.fingerprint.file_parts_digest`; ``like``: a recorded checksum, checked at its own size)."""
    from drmix.fingerprint import file_parts_digest

    size = path.stat().st_size if size is None else size
    return file_parts_digest(path, _spans(size), size=size, like=like)


def record_files(folder: Path, names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{name: {"size", "checksum"}}`` of the files of ``folder`` among ``names`` (those that exist)."""
    out = {}
    for name in names:
        path = folder / name
        if path.is_file():
            size = path.stat().st_size
            out[name] = {"size": size, "checksum": file_checksum(path, size)}
    return out


def check_files(folder: Path, record: Mapping[str, Any], fix: str) -> None:
    """Compare the files of ``folder`` with the ``record`` :func:`record_files` made at the build."""
    for name, want in record.items():
        path = folder / name
        if not path.is_file():
            raise IndexLoadError(f"{name} is missing (the index was built with it).", path=path, fix=fix)
        size = path.stat().st_size
        if size != want.get("size"):
            raise IndexLoadError(f"{name} holds {size} bytes, the build wrote {want.get('size')}: the file was cut "
                                 "short or changed since.", path=path, fix=fix)
        if want.get("checksum") and file_checksum(path, size, like=want["checksum"]) != want["checksum"]:
            raise IndexLoadError(f"{name} does not match the checksum recorded at the build: the file was changed "
                                 "or damaged.", path=path, fix=fix)


# ----------------------------------------------------------------------------------------------- documents

class DocStore:
    """Stored document texts of an index (``docs.jsonl`` + ``docs.offsets.npy``), read by position."""

    def __init__(self, path: Path, offsets: np.ndarray) -> None:
        self.path = path
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets)

    @staticmethod
    def write(directory: Path, ids: Sequence[str], corpus: Mapping[str, Mapping[str, str]]) -> None:
        """Write the texts of ``ids`` (in that order) into ``directory`` (called inside an atomic dir)."""
        offsets = np.empty(len(ids), dtype=np.int64)
        pos = 0
        with open(directory / DOCS_FILE, "wb") as f:
            for i, doc_id in enumerate(ids):
                doc = corpus.get(doc_id) or {}
                row = {"_id": doc_id, "title": doc.get("title", "") or "", "text": doc.get("text", "") or ""}
                data = (json_text(row) + "\n").encode("utf-8")
                offsets[i] = pos
                f.write(data)
                pos += len(data)
        np.save(directory / OFFSETS_FILE, offsets, allow_pickle=False)

    @classmethod
    def open(cls, directory: Path, count: int, fix: str = "rebuild the index with drmix index.") -> DocStore | None:
        path, opath = directory / DOCS_FILE, directory / OFFSETS_FILE
        if not path.exists() and not opath.exists():
            return None
        if not (path.exists() and opath.exists()):
            raise IndexLoadError(f"index has only one of {DOCS_FILE} and {OFFSETS_FILE}.", path=directory, fix=fix)
        try:
            offsets = np.load(opath, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise IndexLoadError(f"cannot read {OFFSETS_FILE} ({e}).", path=opath, fix=fix) from None
        if offsets.ndim != 1 or len(offsets) != count:
            raise IndexLoadError(f"{OFFSETS_FILE} has {offsets.size} entries for {count} indexed documents.",
                                 path=opath, fix=fix)
        return cls(path, offsets)

    def get(self, position: int) -> dict[str, str]:
        with open(self.path, "rb") as f:
            f.seek(int(self.offsets[position]))
            raw = f.readline()
        try:
            row = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            row = None
        if not isinstance(row, dict):
            raise IndexLoadError(f"{DOCS_FILE} is damaged or truncated (document #{position + 1} cannot be read).",
                                 path=self.path, fix="rebuild the index with drmix index --overwrite.")
        return row

    def copy_to(self, directory: Path) -> None:
        shutil.copyfile(self.path, directory / DOCS_FILE)
        np.save(directory / OFFSETS_FILE, self.offsets, allow_pickle=False)


# ----------------------------------------------------------------------------------------------- the index

class FolderIndex(Index):
    """An index kept in a folder: its document ids in row order, its ``meta.json``, its texts (a
    :class:`DocStore`, or the corpus it was built from while in RAM)."""

    def __init__(self, ids: list[str], metadata: Mapping[str, Any] | None = None, *, store: DocStore | None = None,
                 corpus: Mapping[str, Mapping[str, str]] | None = None, location: str | None = None) -> None:
        self.ids = ids
        self.metadata = dict(metadata or {})
        self.location = location
        self._store = store
        self._corpus = corpus
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def has_texts(self) -> bool:
        return self._corpus is not None or self._store is not None

    # -- the backend
    @classmethod
    def claims(cls, location: str) -> bool:
        meta = cls.read_meta(location)
        return bool(meta) and meta.get("backend") == cls.backend

    @classmethod
    def read_meta(cls, location: str) -> dict[str, Any] | None:
        """``meta.json`` of the folder at ``location`` (None when there is none or it is not a JSON object)."""
        p = Path(location).expanduser()
        try:
            meta = json.loads((p / META_FILE).read_text(encoding="utf-8")) if p.is_dir() else None
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    @classmethod
    def fix(cls, directory: Path, meta: Mapping[str, Any] | None = None) -> str:
        """How to rebuild the index in ``directory``."""
        return rebuild_fix(meta or cls.read_meta(str(directory)), directory, cls.backend)

    @classmethod
    def opened_meta(cls, directory: Path, required: Sequence[str]) -> dict[str, Any]:
        """``meta.json`` of the index in ``directory``, after checking that the folder, ``meta.json`` and
        ``required`` exist and that every file matches the record of the build (:func:`check_files`)."""
        if not directory.is_dir():
            raise IndexLoadError("index directory not found.", path=directory,
                                 fix="pass the --output of drmix index, or build one with drmix index --corpus ... "
                                     "--output DIR.")
        if not (directory / META_FILE).is_file():
            raise IndexLoadError(f"index directory has no {META_FILE}.", path=directory, fix=cls.fix(directory))
        meta = read_json(directory / META_FILE, dict, cls.fix(directory))
        fix = cls.fix(directory, meta)
        check_files(directory, meta.get("files") or {}, fix)
        for name in required:
            if not (directory / name).is_file():
                raise IndexLoadError(f"index directory has no {name}.", path=directory, fix=fix)
        return meta

    @staticmethod
    def write_meta(directory: Path, meta: Mapping[str, Any], files: Iterable[str]) -> None:
        """Write ``meta.json`` with the record of ``files`` and of the ids and texts (call it last: the files are
        final); ``drmix index`` then knows the folder as an index it may replace (:mod:`drmix.outputs`)."""
        full = {"format_version": 1, **meta,
                "files": record_files(directory, [*files, IDS_FILE, DOCS_FILE, OFFSETS_FILE])}
        try:
            text = json.dumps(full, indent=2, ensure_ascii=False)
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (in a path): escaped
            text = json.dumps(full, indent=2)
        (directory / META_FILE).write_text(text + "\n", encoding="utf-8")

    # -- documents
    def position(self, doc_id: str) -> int | None:
        if self._positions is None:
            self._positions = {d: i for i, d in enumerate(self.ids)}
        return self._positions.get(doc_id)

    def holds(self, doc_ids: Iterable[str]) -> set[str]:
        return {d for d in doc_ids if self.position(d) is not None}

    def doc(self, doc_id: str) -> dict[str, str] | None:
        if self._corpus is not None:
            doc = self._corpus.get(doc_id)
            return dict(doc) if doc is not None else None
        pos = self.position(doc_id)
        if self._store is None or pos is None:
            return None
        row = self._store.get(pos)
        return {"title": row.get("title", ""), "text": row.get("text", "")}

    def hits(self, scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, list[list[str]]]:
        """Rows of FAISS-style ``labels`` (``-1``: no hit) as document ids; the scores of missing hits ``-inf``."""
        ids: list[list[str]] = []
        for row_scores, row in zip(scores, labels):
            valid = row >= 0
            if not valid.all():
                row_scores[~valid] = -np.inf
            ids.append([self.ids[j] for j in row[valid]])
        return scores, ids
