"""The ``milvus`` backend: one corpus = one Milvus collection, through ``pymilvus``'s ``MilvusClient``.

* ``--uri runs/x/index.db`` (a path ending in ``.db``) runs **Milvus Lite** (the ``milvus-lite`` package: the
  engine embedded in the process, its data in that one folder, nothing to start); ``--uri
  http://HOST:19530`` talks to a Milvus standalone or cluster with the same code. A token (``user:password``
  or an API key) is read from the ``MILVUS_TOKEN`` environment variable, never from a flag, and never
  written anywhere.
* A location names a collection as ``URI#COLLECTION``; without ``#COLLECTION`` the URI must hold exactly one
  drmix collection.
* Schema: ``pk`` (INT64 primary key: the row number), ``doc_id`` (VARCHAR: the document id; an id that is
  not valid UTF-8 -- a lone surrogate -- or longer than the field is stored as its JSON text with
  ``id_json`` true, so every id round-trips), ``vector`` (FLOAT_VECTOR), and with texts ``title`` and
  ``text`` (VARCHAR up to Milvus's 65,535-byte limit; a longer passage is stored by id only, counted in the
  log and in the metadata as ``texts_not_stored``).
* The collection property ``drmix.meta`` (JSON) records the model, its fingerprint, dimension, pooling and
  normalisation, the index type and its parameters; a search with another model is refused naming both.
* Index types as Milvus (and Milvus Lite 3) offer them: ``flat`` (FLAT, exact; drmix's default),
  ``ivf-flat`` (IVF_FLAT), ``ivf-sq8`` (IVF_SQ8), ``hnsw`` (HNSW), ``hnsw-sq`` (HNSW_SQ). Defaults as the
  memory backend's: HNSW M=32, efConstruction=200, ef=128 (raised to k); IVF nlist = 4 sqrt(n) (at most n/39,
  at most 65,536), nprobe=32. Metric IP (cosine for normalising models).
* Kill-safe builds: rows go into ``NAME__drmix_build``; only when every row is in, flushed and indexed, and
  ``drmix.meta`` is set, is an existing ``NAME`` dropped (only with ``--overwrite``) and the build renamed to
  ``NAME``. A build killed midway leaves ``NAME`` as it was (or absent); the next build drops the leftover.
  Nothing but ``--overwrite`` drops a user's collection.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from drmix.errors import ConfigError, DataError, IndexLoadError
from drmix.retrieval.backends.base import (BackendSpec, ChunkChecker, Chunks, GraphAndClusterParams, Index,
                                           collection_name, query_matrix, register_backend, split_location)

log = logging.getLogger(__name__)

BACKEND = "milvus"
META_PROPERTY = "drmix.meta"
BUILD_SUFFIX = "__drmix_build"
VARCHAR_LIMIT = 65_535  # bytes: Milvus's largest VARCHAR
CONNECT_TIMEOUT = 5.0
TOKEN_ENV = "MILVUS_TOKEN"
INSERT_BYTES = 8 << 20
TYPES = {"flat": "FLAT", "ivf-flat": "IVF_FLAT", "ivf-sq8": "IVF_SQ8", "hnsw": "HNSW", "hnsw-sq": "HNSW_SQ"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,180}$")
_clients: dict[str, Any] = {}


def is_uri(location: str) -> bool:
    return bool(re.match(r"^(https?|tcp|grpcs?|unix)://", location))


def _claims(location: str) -> bool:
    uri, _ = split_location(location)
    return is_uri(uri) or uri.endswith(".db")


class MilvusParams(GraphAndClusterParams):
    """The milvus backend's parameters (``drmix index``'s flags of the same names): the memory backend's, but
    32 lists probed, and the documents encoded per chunk."""

    nprobe: int = Field(32, ge=1, description="IVF: clusters searched per query.")
    chunk_size: int = Field(100_000, ge=1, description="documents encoded and added per chunk (the vectors held in "
                                                       "RAM while building).")


def check_name(name: str) -> str:
    if not _NAME.match(name) or name.endswith(BUILD_SUFFIX):
        raise ConfigError(f"{name!r} is not a usable Milvus collection name.",
                          fix="pass --collection with letters, digits and underscores, starting with a letter "
                              f"(at most 181 characters, not ending in {BUILD_SUFFIX}).")
    return name


#: a collection name from a corpus path (:func:`drmix.retrieval.backends.base.collection_name`)
default_collection = collection_name


def client(uri: str) -> Any:
    """A connected ``MilvusClient`` (one per URI in the process); one clear line when nothing answers."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    if not is_uri(uri) and not uri.endswith(".db"):
        raise ConfigError(f"{uri!r} is not a Milvus location.",
                          fix="pass a Milvus Lite file path ending in .db (runs/x/index.db) or http://HOST:19530.")
    key = uri if is_uri(uri) else str(Path(uri).expanduser().resolve())
    if key in _clients:
        return _clients[key]
    if not is_uri(uri):
        Path(key).parent.mkdir(parents=True, exist_ok=True)
        # Milvus Lite's in-process gRPC server logs a traceback for AllocTimestamp, which pymilvus probes and
        # Lite does not implement (the call falls back); it is not an error of the user's
        logging.getLogger("grpc._server").setLevel(logging.CRITICAL)
    try:
        c = MilvusClient(uri=key, token=os.environ.get(TOKEN_ENV, ""), timeout=CONNECT_TIMEOUT)
    except MilvusException as e:
        raise IndexLoadError(f"Milvus at {uri} does not answer ({_short(e)}).",
                             fix="start Milvus there (or check the URI and MILVUS_TOKEN), or use Milvus Lite with "
                                 "--uri PATH.db.") from None
    _clients[key] = c
    return c


def _short(e: BaseException) -> str:
    msg = getattr(e, "message", None) or str(e)
    return str(msg).splitlines()[0][:200]


def _meta_of(c: Any, name: str) -> dict[str, Any] | None:
    props = c.describe_collection(name).get("properties") or {}
    raw = props.get(META_PROPERTY)
    try:
        meta = json.loads(raw) if raw else None
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def _describe(meta: dict[str, Any] | None) -> str:
    if meta is None:
        return "not written by drmix"
    return f"model {meta.get('model', '?')}, {meta.get('dim', '?')}-d, {meta.get('count', '?')} passages"


def _check(target: str, meta: dict[str, Any], overwrite: bool) -> None:
    """Refuse an existing collection (naming its model and dimension) unless ``--overwrite``: before encoding."""
    uri, name = split_location(target)
    if name is None:
        raise ConfigError("no collection named.", fix="pass --collection NAME (or URI#NAME).")
    check_name(name)
    c = client(uri)
    if c.has_collection(name) and not overwrite:
        old = _meta_of(c, name)
        new = f"model {meta.get('model', '?')}" + (f", {meta['dim']}-d" if meta.get("dim") else "")
        raise ConfigError(f"collection {name} already exists in {uri} ({_describe(old)}); this build is {new}.",
                          fix="pass --overwrite to replace it, or another --collection.")


def _fits(s: str) -> bool:
    try:
        return len(s.encode("utf-8")) <= VARCHAR_LIMIT
    except UnicodeEncodeError:
        return False


def encode_id(doc_id: str) -> tuple[str, bool]:
    """The stored form of an id: itself, or its JSON text (ASCII) when it is not valid UTF-8 or too long."""
    if _fits(doc_id):
        return doc_id, False
    text = json.dumps(doc_id)
    if len(text) > VARCHAR_LIMIT:
        raise DataError(f"document id of {len(doc_id)} characters is longer than Milvus's {VARCHAR_LIMIT}-byte "
                        "field.", fix="shorten the ids of the corpus.")
    return text, True


def decode_id(stored: str, is_json: bool) -> str:
    return json.loads(stored) if is_json else stored


def _schema(c: Any, dim: int, texts: bool) -> Any:
    from pymilvus import DataType

    s = c.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("pk", DataType.INT64, is_primary=True)
    s.add_field("doc_id", DataType.VARCHAR, max_length=VARCHAR_LIMIT)
    s.add_field("id_json", DataType.BOOL)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    if texts:
        s.add_field("title", DataType.VARCHAR, max_length=VARCHAR_LIMIT)
        s.add_field("text", DataType.VARCHAR, max_length=VARCHAR_LIMIT)
    return s


def index_params(kind: str, params: MilvusParams | dict[str, Any], n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Milvus index ``params``, what meta records) of an index kind, defaults filled in."""
    if not isinstance(params, MilvusParams):
        params = MilvusParams(**{k: v for k, v in params.items() if v is not None})
    p = params.model_dump()
    if kind in ("hnsw", "hnsw-sq"):
        built = {"M": int(p["M"]), "efConstruction": int(p["ef_construction"])}
        return built, {**built, "ef": int(p["ef_search"])}
    if kind in ("ivf-flat", "ivf-sq8"):
        want = int(p["nlist"] or max(1, int(4 * math.sqrt(n))))
        nlist = max(1, min(want, n // 39, 65_536))
        return {"nlist": nlist}, {"nlist": nlist, "nprobe": min(int(p["nprobe"]), nlist)}
    return {}, {}


def _build(target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: MilvusParams,
           overwrite: bool, corpus: Any = None) -> str:
    from pymilvus.exceptions import MilvusException

    from drmix.io import clean_text

    uri, name = split_location(target)
    if name is None:
        raise ConfigError("no collection named.", fix="pass --collection NAME (or URI#NAME).")
    check_name(name)
    c = client(uri)
    building = name + BUILD_SUFFIX
    if c.has_collection(building):
        log.info("dropping %s, left by a build that did not finish", building)
        c.drop_collection(building)
    check = ChunkChecker()
    texts = corpus is not None
    long_texts = 0
    rows: list[dict[str, Any]] = []
    size = 0

    def flush() -> None:
        nonlocal rows, size
        if rows:
            c.insert(building, rows)
        rows, size = [], 0

    try:
        for chunk_ids, vectors in chunks:
            chunk_ids, vectors = check(chunk_ids, vectors)
            if not c.has_collection(building):
                c.create_collection(building, schema=_schema(c, int(vectors.shape[1]), texts))
            start = check.count - len(chunk_ids)
            for j, (doc_id, vec) in enumerate(zip(chunk_ids, vectors)):
                stored, is_json = encode_id(doc_id)
                row = {"pk": start + j, "doc_id": stored, "id_json": is_json, "vector": vec}
                if texts:
                    doc = corpus.get(doc_id) or {}
                    title, text = clean_text(doc.get("title", "") or ""), clean_text(doc.get("text", "") or "")
                    if not (_fits(title) and _fits(text)):
                        long_texts += 1
                        title = text = ""
                    row.update(title=title, text=text)
                    size += len(title) + len(text)
                rows.append(row)
                size += 4 * vectors.shape[1] + len(stored)
                if size >= INSERT_BYTES or len(rows) >= 5000:
                    flush()
        flush()
        check.finish()
        n, dim = check.count, int(check.dim or 0)
        built, used = index_params(kind, params, n)
        c.flush(building)
        ip = c.prepare_index_params()
        # each parameter goes both flat (pymilvus 3, Milvus 2.5+) and as the JSON "params" entry that Milvus Lite
        # 3 and earlier servers read
        ip.add_index("vector", index_type=TYPES[kind], metric_type="IP",
                     params={**built, "params": built} if built else {})
        c.create_index(building, ip)
        if long_texts:
            log.warning("%d passages are longer than Milvus's %d-byte text field: stored by id only (search shows "
                        "their id and score, no text)", long_texts, VARCHAR_LIMIT)
        full = {**meta, "backend": BACKEND, "kind": kind, "index_type": TYPES[kind], "params": used,
                "metric": "inner_product", "dim": dim, "count": n, "has_texts": texts,
                "texts_not_stored": long_texts}
        c.alter_collection_properties(building, properties={META_PROPERTY: json.dumps(full)})
        if c.has_collection(name):
            if not overwrite:  # checked before encoding; a collection created meanwhile is not dropped
                raise ConfigError(f"collection {name} appeared in {uri} during the build.",
                                  fix="pass --overwrite to replace it, or another --collection.")
            c.drop_collection(name)
        c.rename_collection(building, name)
    except MilvusException as e:
        raise IndexLoadError(f"Milvus at {uri} refused the build of {name} ({_short(e)}).",
                             fix="check the server's logs and limits; the collection is as it was.") from None
    log.info("saved milvus %s collection %s of %d documents to %s", kind, name, n, uri)
    return f"{uri}#{name}"


class MilvusIndex(Index):
    """A Milvus collection opened for search."""

    backend = BACKEND

    @classmethod
    def write(cls, target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: BaseModel,
              overwrite: bool = False, corpus: Any = None) -> str:
        return _build(target, chunks, meta, kind, params, overwrite, corpus)

    @classmethod
    def open(cls, location: str) -> MilvusIndex:
        return cls(location)

    @classmethod
    def check_target(cls, target: str, meta: Any, overwrite: bool) -> None:
        _check(target, meta, overwrite)

    @classmethod
    def claims(cls, location: str) -> bool:
        return _claims(location)

    @classmethod
    def local_path(cls, location: str) -> Path | None:
        uri, _ = split_location(location)
        return None if is_uri(uri) else Path(uri).expanduser()

    def __init__(self, location: str) -> None:
        uri, name = split_location(location)
        if not is_uri(uri) and not Path(uri).expanduser().exists():  # a read-only command creates no database
            raise IndexLoadError("no Milvus Lite database here.", path=uri,
                                 fix=f"pass the --uri drmix index wrote, or build one with drmix index --backend "
                                     f"milvus --uri {uri}.")
        self.location = location
        self.client = c = client(uri)
        drmix_collections = [n for n in c.list_collections() if not n.endswith(BUILD_SUFFIX)
                             and _meta_of(c, n) is not None]
        if name is None:
            if len(drmix_collections) != 1:
                raise IndexLoadError(f"{uri} holds {len(drmix_collections)} drmix collections "
                                     f"({', '.join(sorted(drmix_collections)) or 'none'}).",
                                     fix=f"name one as {uri}#COLLECTION, or build one with drmix index "
                                         f"--backend milvus --uri {uri}.")
            name = drmix_collections[0]
        if not c.has_collection(name):
            raise IndexLoadError(f"{uri} has no collection {name} (drmix collections there: "
                                 f"{', '.join(sorted(drmix_collections)) or 'none'}).",
                                 fix=f"build it with drmix index --backend milvus --uri {uri} --collection {name}.")
        meta = _meta_of(c, name)
        if meta is None:
            raise IndexLoadError(f"collection {name} in {uri} was not written by drmix index (no {META_PROPERTY}).",
                                 fix=f"build it with drmix index --backend milvus --uri {uri} --collection NAME.")
        self.uri, self.name, self.metadata = uri, name, meta
        params = meta.get("params") or {}
        self.search_params: dict[str, Any] = {k: params[k] for k in ("nprobe", "ef") if k in params}
        c.load_collection(name)
        self._pk: dict[str, int] = {}

    def __len__(self) -> int:
        return int(self.metadata.get("count", 0))

    @property
    def dim(self) -> int:
        return int(self.metadata["dim"])

    @property
    def has_texts(self) -> bool:
        return bool(self.metadata.get("has_texts"))

    def search(self, queries: np.ndarray, k: int, *, batch: int = 256) -> tuple[np.ndarray, list[list[str]]]:
        q = query_matrix(queries, self.dim, self.metadata, "collection")
        kk = min(int(k), len(self), 16_384)
        scores = np.full((q.shape[0], max(kk, 0)), -np.inf, dtype=np.float32)
        ids: list[list[str]] = []
        if kk <= 0:
            return scores, [[] for _ in range(q.shape[0])]
        params = dict(self.search_params)
        if "ef" in params:
            params["ef"] = max(int(params["ef"]), kk)
        for s in range(0, q.shape[0], batch):
            res = self.client.search(self.name, data=q[s:s + batch].tolist(), limit=kk,
                                     output_fields=["doc_id", "id_json"],
                                     search_params={"metric_type": "IP", "params": params})
            for i, hits in enumerate(res):
                row = []
                for j, h in enumerate(hits):
                    ent = h["entity"]
                    doc_id = decode_id(ent["doc_id"], bool(ent["id_json"]))
                    self._pk[doc_id] = int(h["pk"])
                    scores[s + i, j] = h["distance"]
                    row.append(doc_id)
                ids.append(row)
        return scores, ids

    def doc(self, doc_id: str) -> dict[str, str] | None:
        if not self.has_texts:
            return None
        pk = self._pk.get(doc_id)
        if pk is not None:
            rows = self.client.query(self.name, filter=f"pk == {pk}", output_fields=["title", "text"])
        else:
            stored, is_json = encode_id(doc_id)
            rows = self.client.query(self.name, filter=f"doc_id == {json.dumps(stored, ensure_ascii=False)} and "
                                                       f"id_json == {'true' if is_json else 'false'}",
                                     output_fields=["title", "text"])
        if not rows or not (rows[0].get("title") or rows[0].get("text")):
            return None
        return {"title": rows[0].get("title", ""), "text": rows[0].get("text", "")}

    def holds(self, doc_ids: Any) -> set[str]:
        """Which of ``doc_ids`` the collection holds (queried 1,000 ids at a time)."""
        want = {encode_id(d): d for d in doc_ids}
        stored = list(want)
        found: set[str] = set()
        for s in range(0, len(stored), 1000):
            texts = json.dumps([t for t, _ in stored[s:s + 1000]], ensure_ascii=False)
            for r in self.client.query(self.name, filter=f"doc_id in {texts}", output_fields=["doc_id", "id_json"]):
                key = (r["doc_id"], bool(r["id_json"]))
                if key in want:
                    found.add(want[key])
        return found

    def sample_vectors(self, size: int, seed: int) -> np.ndarray | None:
        n = len(self)
        if not n:
            return None
        rows = np.sort(np.random.default_rng(seed).choice(n, size=min(n, size), replace=False))
        out = {}
        for s in range(0, len(rows), 1000):
            part = [int(r) for r in rows[s:s + 1000]]
            for r in self.client.query(self.name, filter=f"pk in {part}", output_fields=["vector"]):
                out[int(r["pk"])] = r["vector"]
        return np.asarray([out[int(r)] for r in rows], dtype=np.float32)


register_backend(BackendSpec(
    name=BACKEND, order=20, index=MilvusIndex, kinds=tuple(TYPES), target="uri", params=MilvusParams,
    location_help="a Milvus collection as PATH.db#COLLECTION or http://HOST:19530#COLLECTION (#COLLECTION may be "
                  "left out when the URI holds one)",
    target_help="a Milvus Lite file (a path ending in .db, created when missing) or a server's http://HOST:19530",
    example="runs/x/index.db (Milvus Lite) or http://HOST:19530",
    help="a Milvus collection: Milvus Lite for --uri PATH.db (embedded, nothing to start), a Milvus server "
         "or cluster for --uri http://HOST:19530 (token from MILVUS_TOKEN)."))
