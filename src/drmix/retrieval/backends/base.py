"""The index-backend interface: where ``drmix index`` writes vectors and what ``drmix search`` reads.

A backend is a :class:`BackendSpec` registered in :data:`BACKENDS` (the one registry idiom of
:mod:`drmix.registry`). The built-in ones are listed in :data:`BUILTIN`; a package adds its own through the
``drmix.index_backends`` entry-point group, and everything that builds or opens an index -- ``drmix index``,
``search``, ``eval --index``, multi-corpus search, ``drmix adapt``'s index stage -- reads what it needs from
the spec, so a backend is one module:

* :class:`Index` -- the protocol every backend's index implements: class-level ``write`` (build an index at a
  target from chunks of vectors, atomically, and return its location), ``open``, ``check_target`` (refuse a
  target before anything is encoded), ``claims`` (whether a location is one of its indexes) and ``read_meta``;
  instance-level ``len``, ``dim``, ``metadata``, ``search``, ``doc``, ``holds``, ``sample_vectors`` and the
  model it records (``check_model``). Indexes kept in a folder share
  :class:`drmix.retrieval.backends.folder.FolderIndex` (ids, texts, the files' sizes and checksums).
* :class:`BackendSpec` -- its name and help, its index class, its index kinds (the first is the default), its
  **target kind** (``folder``: ``--output DIR``; ``file``: ``--output FILE``; ``uri``: ``--uri URI`` plus a
  collection name, located as ``URI#NAME``) and its **typed parameters** (a pydantic model whose fields become
  ``drmix index``'s flags: their ``description``, bounds, default and ``json_schema_extra={"flag": ...}``).

Builds take vectors in chunks -- an iterable of ``(ids, float32 [n, dim] array)`` -- so a corpus larger than
RAM (or the ``.npy`` shards of a sharded encoder) streams in. Every index records the model that encoded it:
its fingerprint (a hash of its weights), dimension, pooling and normalisation; :func:`check_model` refuses a
search with another model, naming both.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drmix.errors import ConfigError, DataError, DrmixError, ModelError
from drmix.registry import Registry

#: an iterable of ``(ids, vectors)`` chunks: ``len(ids) == len(vectors)``, vectors float32 ``[n, dim]``
Chunks = Iterable[tuple[list[str], np.ndarray]]

#: where a backend's index lives: a folder (``--output DIR``), one file (``--output FILE``), or a collection at a
#: URI (``--uri URI --collection NAME``, located as ``URI#NAME``)
TargetKind = Literal["folder", "file", "uri"]


class NoParams(BaseModel):
    """The parameters of a backend that takes none."""

    model_config = ConfigDict(extra="forbid")


class GraphAndClusterParams(NoParams):
    """HNSW and IVF parameters, as FAISS and Milvus name them (the ``memory`` and ``milvus`` backends'; defaults
    after the FAISS guidelines: HNSW M=32; IVF nlist ~ 4 sqrt(n))."""

    M: int = Field(32, ge=2, description="HNSW: neighbours per node.", json_schema_extra={"flag": "--hnsw-m"})
    ef_construction: int = Field(200, ge=1, description="HNSW: candidate list size while building.")
    ef_search: int = Field(128, ge=1, description="HNSW: candidate list size while searching (raised to k when "
                                                  "smaller).")
    nlist: int | None = Field(None, ge=1, description="IVF: number of clusters (default 4*sqrt(n), at most n/39).")
    nprobe: int = Field(16, ge=1, description="IVF: clusters searched per query.")


# ----------------------------------------------------------------------------------------------- the protocol

class Index(ABC):
    """An index of one backend, opened for search (and, at class level, how the backend builds and opens one)."""

    #: the backend's name (its :class:`BackendSpec`'s), set by the subclass
    backend: ClassVar[str] = ""
    metadata: dict[str, Any]
    #: where it was opened from (None for an index built in RAM and not saved)
    location: str | None = None

    # -- the backend: building, opening, recognising
    @classmethod
    @abstractmethod
    def write(cls, target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: BaseModel,
              overwrite: bool = False, corpus: Mapping[str, Mapping[str, str]] | None = None) -> str:
        """Build an index of ``chunks`` at ``target`` (atomically: a build killed midway leaves what was there),
        recording ``meta`` (and the texts of ``corpus`` when given); returns its location."""

    @classmethod
    @abstractmethod
    def open(cls, location: str) -> Index:
        """The index at ``location``, its files checked (:class:`~drmix.errors.IndexLoadError` when damaged)."""

    @classmethod
    def check_target(cls, target: str, meta: Mapping[str, Any], overwrite: bool) -> None:
        """Refuse ``target`` before anything is encoded (a folder target is claimed by the command itself)."""

    @classmethod
    def claims(cls, location: str) -> bool:
        """Whether ``location`` is one of this backend's indexes."""
        return False

    @classmethod
    def local_path(cls, location: str) -> Path | None:
        """For a backend whose indexes live at a URI: the file on this machine that holds the index at ``location``
        (an embedded database), or None (a server). Shards of a launched build go beside it."""
        return None

    @classmethod
    def read_meta(cls, location: str) -> dict[str, Any] | None:
        """What the index at ``location`` records, without loading its vectors where it can; None when none."""
        try:
            return cls.open(location).metadata
        except DrmixError:
            return None

    # -- searching
    @abstractmethod
    def __len__(self) -> int: ...

    @property
    @abstractmethod
    def dim(self) -> int: ...

    @property
    def kind(self) -> str:
        return str(self.metadata.get("kind"))

    @property
    def has_texts(self) -> bool:
        return bool(self.metadata.get("has_texts"))

    @abstractmethod
    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, list[list[str]]]:
        """Top ``k' = min(k, len(self))`` documents per query row: scores ``[n, k']`` (descending) and ids; a
        query with fewer hits (approximate indexes) has a shorter id list and ``-inf`` in the missing slots."""

    @abstractmethod
    def doc(self, doc_id: str) -> dict[str, str] | None:
        """``{"title", "text"}`` of an indexed document when the index stores texts, else None."""

    @abstractmethod
    def holds(self, doc_ids: Iterable[str]) -> set[str]:
        """Which of ``doc_ids`` the index holds."""

    def sample_vectors(self, size: int, seed: int) -> np.ndarray | None:
        """The vectors of a seeded sample of ``min(size, len)`` rows; None when the index cannot give them."""
        return None

    # -- the model
    def model_record(self) -> dict[str, Any]:
        """What the index records about the model that encoded it."""
        return {k: self.metadata[k] for k in ("model", "fingerprint", "dim", "pooling", "normalized")
                if k in self.metadata}

    def check_model(self, model: Any) -> None:
        """Refuse searching with a model other than the one that built the index (:func:`check_model`)."""
        check_model(self.metadata, model, where=str(self.location or "the index"))

    def queries(self, queries: np.ndarray) -> np.ndarray:
        """Query embeddings as a contiguous float32 ``[n, dim]`` matrix; another dimension is refused naming the
        model the index was built with."""
        return query_matrix(queries, self.dim, self.metadata)


def query_matrix(queries: np.ndarray, dim: int, metadata: Mapping[str, Any], what: str = "index") -> np.ndarray:
    """Query embeddings as a contiguous float32 ``[n, dim]`` matrix (one row for a vector); another dimension is
    refused naming the model the index (``what``) was built with; texts are refused with the fix (encode them)."""
    try:
        q = None if isinstance(queries, (str, bytes)) else np.ascontiguousarray(queries, dtype=np.float32)
    except (TypeError, ValueError):
        q = None
    if q is None:
        from drmix.errors import wrong_argument

        raise wrong_argument("search", "queries", queries, "query embeddings (an [n, dim] array of numbers)",
                             fix="encode the texts first (model.encode(['...'])), or search by text with drmix "
                                 "search --index DIR --query '...'.")
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.shape[1] != dim:
        raise ModelError(f"query embeddings have dimension {q.shape[-1]}, the {what} has {dim}.",
                         fix=f"search with the model the index was built with ({metadata.get('model', '?')}).")
    return q


def empty_hits(n: int, k: int) -> tuple[np.ndarray, list[list[str]]]:
    """The answer to ``n`` queries when there is nothing to search (``k`` is 0 or no query)."""
    return np.zeros((n, max(k, 0)), dtype=np.float32), [[] for _ in range(n)]


# ----------------------------------------------------------------------------------------------- the spec

@dataclass(frozen=True)
class BackendSpec:
    """One index backend.

    ``index``: its :class:`Index` class (how it builds, opens and searches); ``kinds``: the index types it builds
    (the first is its default); ``target``: where its index lives (:data:`TargetKind`); ``params``: its typed
    parameters (a pydantic model: each field is also a ``drmix index`` flag); ``location_help``: how one of its
    indexes is named (``drmix search --index``'s help); ``target_help``: for a ``uri`` backend, what ``--uri``
    takes; ``example``: a target, for fixes.
    """

    name: str
    help: str
    index: type[Index]
    kinds: tuple[str, ...]
    target: TargetKind = "folder"
    params: type[BaseModel] = NoParams
    location_help: str = ""
    target_help: str = ""
    example: str = ""
    order: int = 100

    def claims(self, location: str) -> bool:
        return self.index.claims(location)

    def check(self, target: str, meta: Mapping[str, Any], overwrite: bool) -> None:
        self.index.check_target(target, meta, overwrite)

    def build(self, target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: Mapping[str, Any],
              overwrite: bool = False, corpus: Any = None) -> str:
        """Write the index (``params`` checked against :attr:`params`); returns its location."""
        return self.index.write(target, chunks, meta, kind, self.parse_params(params), overwrite, corpus)

    def open(self, location: str) -> Index:
        return self.index.open(location)

    def read_meta(self, location: str) -> dict[str, Any] | None:
        return self.index.read_meta(location)

    def param_names(self) -> frozenset[str]:
        return frozenset(self.params.model_fields)

    def parse_params(self, given: Mapping[str, Any] | BaseModel) -> BaseModel:
        """``given`` as the backend's typed parameters (None values take the defaults); an unknown name or a value
        out of bounds is a :class:`ConfigError` naming the option."""
        if isinstance(given, self.params):
            return given
        values = dict(given.model_dump() if isinstance(given, BaseModel) else given)
        values = {k: v for k, v in values.items() if v is not None}
        unknown = sorted(set(values) - self.param_names())
        if unknown:
            raise ConfigError(f"unknown {self.name} option(s) {', '.join(unknown)}.",
                              fix=f"options are {', '.join(self.param_names()) or 'none'}.")
        try:
            return self.params(**values)
        except ValidationError as e:
            err = e.errors()[0]
            raise ConfigError(f"invalid {self.name} option {'.'.join(map(str, err['loc']))}: {err['msg']}.",
                              fix=f"options are {', '.join(self.param_names())} (drmix index --help).") from None

    def own_params(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of ``given`` that are this backend's parameters (a command's flags for every backend)."""
        names = self.param_names()
        return {k: v for k, v in given.items() if k in names}


BUILTIN = tuple(f"drmix.retrieval.backends.{m}" for m in ("memory", "faiss_disk", "milvus"))
BACKENDS: Registry[BackendSpec] = Registry("index backend", BUILTIN, entry_points="drmix.index_backends",
                                           order=lambda s: s.order)


#: the backend ``drmix index`` (and ``drmix adapt``'s index stage) uses unless told otherwise; it opens any folder
#: that no other backend claims
DEFAULT_BACKEND = "memory"


def register_backend(spec: BackendSpec) -> BackendSpec:
    """Register an index backend (called by its module at import time)."""
    if not spec.kinds:
        raise ValueError(f"index backend {spec.name!r} declares no index kind")
    return BACKENDS.register(spec)


def backend(name: str) -> BackendSpec:
    return BACKENDS.get(name)


def backend_for(location: str | Path) -> BackendSpec:
    """The backend whose index ``location`` is (asked in order; a folder none claims: the default backend's)."""
    loc = str(location)
    for spec in BACKENDS:
        if spec.name != DEFAULT_BACKEND and spec.claims(loc):
            return spec
    return backend(DEFAULT_BACKEND)


def is_location(value: str) -> bool:
    """Whether ``value`` names an index that is not a local folder or file (a collection at a URI)."""
    return any(spec.target == "uri" and spec.claims(value) for spec in BACKENDS)


def open_index(location: str | Path, model: Any | None = None) -> Index:
    """Open the index at ``location`` with its backend; with ``model``, refuse a model other than the one
    the index records (:func:`check_model`)."""
    index = backend_for(location).open(str(location))
    if model is not None:
        check_model(index.metadata, model, where=str(location))
    return index


def resolve_kind(spec: BackendSpec, kind: str | None) -> str:
    kind = (kind or spec.kinds[0]).lower().replace("_", "-")
    if kind not in spec.kinds:
        raise ConfigError(f"the {spec.name} backend has no index kind {kind!r}.",
                          fix=f"pass --kind {' or '.join(spec.kinds)} (default {spec.kinds[0]}), or another "
                              "--backend.")
    return kind


# ----------------------------------------------------------------------------------------------- targets

def uri_backends() -> list[str]:
    return [s.name for s in BACKENDS if s.target == "uri"]


def check_target(name: str, *, uri: str | None, uri_flag: str = "--uri", backend_flag: str = "--backend") -> None:
    """Refuse a target that does not fit backend ``name``: a ``uri`` backend writes a collection (``uri`` needed),
    every other backend a folder or file (no ``uri``). The flags name the options of the command that asks."""
    spec = backend(name)
    if spec.target == "uri":
        if uri is None:
            example = f"{uri_flag} {spec.example}" if spec.example else f"{uri_flag} URI"
            raise ConfigError(f"{backend_flag} {spec.name} writes a collection: give {uri_flag}.",
                              fix=f"pass {example}.")
    elif uri is not None:
        others = " or ".join(f"{backend_flag} {n}" for n in uri_backends()) or f"a {backend_flag} that writes to one"
        raise ConfigError(f"{backend_flag} {spec.name} writes a {spec.target}; {uri_flag} is for {others}.",
                          fix=f"drop {uri_flag}, or pass {others}.")


def split_location(location: str) -> tuple[str, str | None]:
    """``URI#COLLECTION`` -> (URI, COLLECTION); a plain URI -> (URI, None)."""
    uri, sep, name = str(location).rpartition("#")
    return (uri, name or None) if sep else (str(location), None)


def collection_name(corpus: str | Path) -> str:
    """A collection name from a corpus path: its folder name (for ``.../corpus.jsonl``) or file stem, every
    character but letters, digits and ``_`` as ``_``, starting with a letter or ``_`` (at most 180 characters)."""
    p = Path(corpus)
    stem = p.parent.name if p.name == "corpus.jsonl" else p.stem
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)[:180] or "corpus"
    return name if re.match(r"[A-Za-z_]", name) else f"c_{name}"[:180]


def rebuild_fix(meta: Mapping[str, Any] | None, location: str | Path, backend_name: str) -> str:
    """The fix of a damaged index: the ``drmix index`` command that rebuilds it in place."""
    import shlex

    meta = meta or {}
    parts = ["drmix index --corpus", shlex.quote(str(meta.get("corpus") or "CORPUS"))]
    if backend_name != DEFAULT_BACKEND:
        parts += ["--backend", backend_name]
    uri, name = split_location(str(location))
    if backend(backend_name).target == "uri":
        parts += ["--uri", shlex.quote(uri)] + (["--collection", name] if name else [])
    else:
        parts += ["--output", shlex.quote(str(location))]
    model = meta.get("model")
    if model and model != "default":
        parts += ["--model", shlex.quote(str(model))]
    return "rebuild it: " + " ".join(parts) + " --overwrite."


# ----------------------------------------------------------------------------------------------- the model

def model_fingerprint(model: Any, *, like: str | None = None) -> str:
    """The digest of the model's weights rounded to bfloat16 (so the same weights loaded in fp32 or bf16 match;
    any change a fine-tuning step makes shows) and their names and shapes; ``""`` for an object without
    ``state_dict`` (:func:`drmix.fingerprint.tensors_digest`; ``like``: a recorded fingerprint, to check an index
    built by an earlier version at its own digest size)."""
    from drmix.fingerprint import tensors_digest

    return tensors_digest(model, bfloat16=True, like=like) if hasattr(model, "state_dict") else ""


def pooling_mode(model: Any) -> str | None:
    for module in getattr(model, "_modules", {}).values():
        mode = getattr(module, "pooling_mode", None)
        if mode is None and callable(getattr(module, "get_pooling_mode_str", None)):
            mode = module.get_pooling_mode_str()
        if mode is not None:
            return str(mode)
    return None


def model_name(model: Any) -> str:
    """Best-effort name of a loaded model (the folder or hub id it was loaded from)."""
    try:
        return str(model[0].auto_model.config._name_or_path)
    except (AttributeError, IndexError, TypeError, KeyError):
        return type(model).__name__


def model_location(model: Any) -> str:
    """What an index records as its model: :func:`model_name`, made absolute when it is a local folder (so the
    index is searched from any folder, not only from the one it was built in)."""
    name = model_name(model)
    p = Path(name).expanduser()
    return str(p.resolve()) if p.exists() else name


def model_record(model: Any, *, like: str | None = None) -> dict[str, Any]:
    """What an index records about the model that encoded it (``like``: see :func:`model_fingerprint`)."""
    from drmix.retrieval.encode import model_normalizes

    get_dim = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension",
                                                                         lambda: None)
    dim = get_dim()
    return {"fingerprint": model_fingerprint(model, like=like), "dim": dim, "pooling": pooling_mode(model),
            "normalized": model_normalizes(model)}


def check_model(meta: Mapping[str, Any], model: Any, *, where: str) -> None:
    """Refuse searching an index with a model other than the one that built it (fingerprint, dimension,
    normalisation), naming both."""
    want = meta.get("fingerprint")
    if not want:
        return
    got = model_record(model, like=want)
    built = meta.get("model", "?")
    given = model_name(model)
    if got["dim"] is not None and meta.get("dim") is not None and int(got["dim"]) != int(meta["dim"]):
        raise ModelError(f"the index at {where} holds {meta['dim']}-d vectors of the model {built}; the model "
                         f"{given} gives {got['dim']}-d vectors.",
                         fix="search with the model the index was built with (drop --model), or rebuild the "
                             "index with drmix index --overwrite.")
    if got["fingerprint"] != want:
        raise ModelError(f"the index at {where} was built with the model {built} (fingerprint {want}); the "
                         f"query model {given} has fingerprint {got['fingerprint']}.",
                         fix="search with the model the index was built with (drop --model), or rebuild the "
                             "index with drmix index --overwrite.")
    if "normalized" in meta and bool(meta["normalized"]) != bool(got["normalized"]):
        raise ModelError(f"the index at {where} holds {'' if meta['normalized'] else 'un'}normalised vectors; "
                         f"the query model {given} {'normalises' if got['normalized'] else 'does not normalise'}.",
                         fix="search with the model the index was built with.")


# ----------------------------------------------------------------------------------------------- chunks

def encode_chunks(model: Any, corpus: Mapping[str, Mapping[str, str]], *, chunk_size: int = 100_000,
                  batch_size: int = 64, max_length: int | None = None, precision: str | None = "auto",
                  show_progress: bool = True) -> Iterator[tuple[list[str], np.ndarray]]:
    """Encode ``corpus`` in chunks of ``chunk_size`` documents (``title + " " + text`` with the model's
    document prompt, as :func:`~drmix.retrieval.index.index_corpus`): one chunk's vectors in RAM at a time. A
    corpus with empty documents is encoded with a warning (:func:`warn_empty_texts`)."""
    from drmix.data.beir import doc_text
    from drmix.model.encoder import document_prompt
    from drmix.retrieval.encode import encode_texts, model_normalizes

    ids = list(corpus)
    warn_empty_texts(corpus)
    normalize = model_normalizes(model)
    prompt = document_prompt(model)
    for start in range(0, len(ids), chunk_size):
        part = ids[start:start + chunk_size]
        emb = encode_texts(model, [doc_text(corpus[i]) for i in part], batch_size=batch_size, prompt=prompt,
                           max_length=max_length, show_progress=show_progress, normalize=normalize,
                           precision=precision)
        yield part, np.ascontiguousarray(emb, dtype=np.float32)


def warn_empty_texts(corpus: Mapping[str, Mapping[str, str]]) -> int:
    """Warn when documents have neither title nor text (they are encoded as the empty string: one vector that
    every query scores alike); returns how many."""
    import logging

    from drmix.data.beir import doc_text

    empty = [d for d, doc in corpus.items() if not doc_text(doc).strip()]
    if empty:
        what = f"all {len(corpus)}" if len(empty) == len(corpus) else f"{len(empty)} of {len(corpus)}"
        logging.getLogger("drmix.index").warning(
            "%s documents have no title or text (first: %r): each is indexed as the empty string, one vector that "
            "every query scores alike (check the corpus's text field)", what, empty[0])
    return len(empty)


def chunks_from_npy(shards: Iterable[tuple[Iterable[str], str | Path]], *,
                    chunk_size: int = 100_000) -> Iterator[tuple[list[str], np.ndarray]]:
    """Chunks from ``.npy`` shards on disk (``(ids, path)`` pairs): each shard's rows read ``chunk_size`` at a
    time (:func:`drmix.retrieval.shards.npy_chunks`), so a shard larger than RAM streams in."""
    from drmix.retrieval.shards import npy_chunks

    for ids, path in shards:
        ids = [str(i) for i in ids]
        start = 0
        for part in npy_chunks(path, chunk_size):
            yield ids[start:start + len(part)], part
            start += len(part)
        if start != len(ids):
            raise DataError(f"{len(ids)} ids for {start} vectors.", path=path,
                            fix="pass the ids of the documents the shard holds, in its row order.")


class ChunkChecker:
    """Checks the chunks of a build as they stream in: one dimension, finite values, unique ids."""

    def __init__(self) -> None:
        self.dim: int | None = None
        self.count = 0
        self._seen: set[str] = set()

    def __call__(self, ids: list[str], vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        ids = [str(i) for i in ids]
        if vectors.ndim != 2 or len(ids) != vectors.shape[0]:
            raise DataError(f"a chunk of {len(ids)} ids holds an array of shape {vectors.shape}.",
                            fix="pass one [n, dim] float32 array per chunk with one id per row.")
        if self.dim is None:
            self.dim = int(vectors.shape[1])
        elif vectors.shape[1] != self.dim:
            raise DataError(f"a chunk has dimension {vectors.shape[1]}, the first had {self.dim}.",
                            fix="encode every chunk with the same model.")
        if not np.isfinite(vectors).all():
            raise DataError("embeddings contain NaN or infinite values.", fix="check the model and its inputs.")
        for i in ids:
            if i in self._seen:
                raise DataError(f"duplicate document id {i!r}.", fix="give every document a unique id.")
            self._seen.add(i)
        self.count += len(ids)
        return ids, vectors

    def finish(self) -> None:
        if not self.count:
            raise DataError("no vectors to index.", fix="index a corpus with at least one document.")
