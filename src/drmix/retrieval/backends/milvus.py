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

import contextlib
import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from drmix.errors import ConfigError, DataError, DrmixError, IndexLoadError
from drmix.retrieval.backends.base import (BackendSpec, ChunkChecker, Chunks, GraphAndClusterParams, Index,
                                           collection_name, query_matrix, register_backend, split_location)

log = logging.getLogger(__name__)

BACKEND = "milvus"
META_PROPERTY = "drmix.meta"
BUILD_SUFFIX = "__drmix_build"
VARCHAR_LIMIT = 65_535  # bytes: Milvus's largest VARCHAR
CONNECT_TIMEOUT = 5.0
TOKEN_ENV = "MILVUS_TOKEN"
#: the oldest Milvus server drmix works with (the oldest it was run against: the ``milvus`` package's 2.3.5)
MIN_SERVER = (2, 3)
#: gRPC channel options for Milvus Lite (in this process: no keepalive pings, see :func:`client`)
LITE_GRPC = {"grpc.keepalive_time_ms": 2**31 - 1, "grpc.keepalive_permit_without_calls": 0}
#: the libraries whose log records drmix shows at DEBUG only (:func:`quiet_libraries`)
LIBRARY_LOGGERS = ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer", "milvus_lite", "grpc")
INSERT_BYTES = 8 << 20
TYPES = {"flat": "FLAT", "ivf-flat": "IVF_FLAT", "ivf-sq8": "IVF_SQ8", "hnsw": "HNSW", "hnsw-sq": "HNSW_SQ"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,180}$")
_clients: dict[tuple[str, str], Any] = {}
_fresh: set[str] = set()  # Milvus Lite folders this process created (removed when a build fails)


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


def client(uri: str, *, create: bool = True) -> Any:
    """A connected ``MilvusClient`` (one per URI and token in the process); one clear line when nothing answers.

    A Milvus Lite path that is a plain file, or (``create=False``: a read-only command) that does not exist, is
    refused naming it, and nothing is created; a server older than :data:`MIN_SERVER` is refused naming both
    versions. The libraries' own log records (pymilvus' RPC errors, Milvus Lite's tracebacks and start/stop
    lines) go to the log at DEBUG (``-vv``); drmix's one line goes to the user."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    check_uri(uri)
    quiet_libraries()
    token = os.environ.get(TOKEN_ENV, "")
    key = uri if is_uri(uri) else str(Path(uri).expanduser().resolve())
    if (key, token) in _clients:
        return _clients[(key, token)]
    options: dict[str, Any] = {}
    if not is_uri(uri):
        fresh = _lite_path(uri, Path(key), create=create)
        # in-process: no keepalive pings (Milvus Lite's gRPC server answers pings without calls with a GOAWAY
        # "too_many_pings", which gRPC prints to stderr)
        options["grpc_options"] = LITE_GRPC
    _ToDebug.last_error = ""
    try:
        c = MilvusClient(uri=key, token=token, timeout=CONNECT_TIMEOUT, **options)
        if is_uri(uri):
            check_version(uri, c.get_server_version())
    except MilvusException as e:
        if not is_uri(uri):
            if fresh:
                _forget_lite(Path(key))
            raise IndexLoadError(f"Milvus Lite could not open {uri} ({_ToDebug.last_error or _short(e)}).",
                                 fix="close the process that has it open (Milvus Lite opens a folder from one "
                                     "process at a time), or pass another --uri.") from None
        if _unauthenticated(e):
            raise IndexLoadError(f"Milvus at {uri} refused the token in {TOKEN_ENV} ("
                                 + ("none is set" if not token else "not accepted") + ").",
                                 fix=f"export {TOKEN_ENV}=USER:PASSWORD (or an API key) that this server accepts.") \
                from None
        raise IndexLoadError(f"Milvus at {uri} does not answer ({_short(e)}).",
                             fix="start Milvus there (or check the URI and MILVUS_TOKEN), or use Milvus Lite with "
                                 "--uri PATH.db.") from None
    if not is_uri(uri) and fresh:
        _fresh.add(key)
    _clients[(key, token)] = c
    return c


def _unauthenticated(e: BaseException) -> bool:
    """Whether a connection failed because the server refused the credentials (gRPC UNAUTHENTICATED, somewhere in
    the exceptions it was raised from)."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        text = str(x)
        if "UNAUTHENTICATED" in text or "auth check failure" in text or "authorization in header" in text:
            return True
        x = x.__cause__ or x.__context__
    return False


def check_uri(uri: str) -> None:
    """Refuse what is not a Milvus location, and a URI that holds a user or password (the token is read from
    ``MILVUS_TOKEN`` only, so that it is written nowhere: not in meta, logs or run files)."""
    if not is_uri(uri) and not uri.endswith(".db"):
        raise ConfigError(f"{uri!r} is not a Milvus location.",
                          fix="pass a Milvus Lite file path ending in .db (runs/x/index.db) or http://HOST:19530.")
    if is_uri(uri):
        from urllib.parse import urlparse

        parsed = urlparse(uri)
        if parsed.username or parsed.password:
            host = parsed.hostname or "?"
            raise ConfigError(f"the Milvus URI for {host} holds a user or password; drmix reads the token from "
                              f"{TOKEN_ENV} only, so that it is written nowhere.",
                              fix=f"drop 'USER:PASSWORD@' from the URI and export {TOKEN_ENV}=USER:PASSWORD.")


def _lite_path(uri: str, path: Path, *, create: bool) -> bool:
    """Check a Milvus Lite location (a folder, Milvus Lite 3); True when this call will create it."""
    if path.exists() and not path.is_dir():
        raise IndexLoadError(f"{uri} is a file, not a Milvus Lite database (Milvus Lite 3 keeps one in a folder; "
                             "a Milvus Lite 2 file cannot be read).",
                             fix="pass another --uri PATH.db, or move the file away and build the collection "
                                 "again with drmix index --backend milvus.")
    if not create and not (path / "collections").is_dir():
        what = "is not a Milvus Lite database" if path.exists() else "does not exist"
        raise IndexLoadError(f"{uri} {what}; nothing was created.",
                             fix=f"build a collection there with drmix index --backend milvus --uri {uri}, or pass "
                                 "the path of an existing one.")
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    return True


def _forget_lite(path: Path, *, remove: bool = True) -> None:
    """Close this process's Milvus Lite server and client of ``path``; with ``remove``, delete the folder (one
    this process created and could not finish: nothing half-made is left)."""
    import shutil

    key = str(path)
    for k in [k for k in _clients if k[0] == key]:
        with contextlib.suppress(Exception):
            _clients.pop(k).close()
    with contextlib.suppress(Exception):
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(key)
    _fresh.discard(key)
    if remove:
        shutil.rmtree(path, ignore_errors=True)


def server_version(text: str) -> tuple[int, ...] | None:
    """``(major, minor, patch)`` of a server's version string (``v2.3.5-lite``, ``2.4.13``); None when it has
    none."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return tuple(int(g or 0) for g in m.groups()) if m else None


def check_version(uri: str, text: str) -> None:
    """Refuse a Milvus server older than :data:`MIN_SERVER`, naming both versions."""
    got = server_version(text)
    if got is None:
        log.debug("Milvus at %s reports version %r: not checked", uri, text)
        return
    if got[:2] < MIN_SERVER:
        need = ".".join(map(str, MIN_SERVER))
        raise IndexLoadError(f"Milvus at {uri} is version {text}; drmix needs Milvus {need} or later (the oldest "
                             "it was run against).",
                             fix=f"upgrade the server to Milvus {need} or later, or use Milvus Lite with --uri "
                                 "PATH.db.")


class _ToDebug(logging.Handler):
    """Re-logs a library's records at DEBUG through drmix's logger (shown with ``-vv``, never above drmix's
    one-line error)."""

    last_error = ""  # the latest ERROR record's message and exception: why Milvus Lite did not open a folder

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            exc = record.exc_info[1] if record.exc_info else None
            _ToDebug.last_error = str(exc).splitlines()[0] if exc is not None and str(exc) else record.getMessage()
        target = logging.getLogger(__name__ + ".library")
        if target.isEnabledFor(logging.DEBUG):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            target.handle(record)


def quiet_libraries() -> None:
    """Send pymilvus', Milvus Lite's and gRPC's Python log records to :class:`_ToDebug` (once per process)."""
    import pymilvus  # noqa: F401  (its settings module configures its loggers on import: replaced here)

    handler = next((h for h in logging.getLogger("milvus_lite").handlers if isinstance(h, _ToDebug)), None)
    if handler is not None:
        return
    handler = _ToDebug()
    for name in LIBRARY_LOGGERS:
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.propagate = False


def _short(e: BaseException, limit: int = 200) -> str:
    msg = getattr(e, "message", None) or str(e)
    return str(msg).splitlines()[0][:limit]


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
    if not is_uri(uri) and not Path(uri).expanduser().exists():
        return  # a Milvus Lite database that is not there yet holds no collection (and is not created here)
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


class Inserter:
    """Writes ``(ids, vectors)`` chunks into a collection as rows ``pk`` (the global row number), ``doc_id``,
    ``id_json``, ``vector`` (and ``title``, ``text`` with a corpus), in inserts of at most 8 MB or 5,000 rows."""

    def __init__(self, c: Any, collection: str, corpus: Any = None) -> None:
        self.c, self.collection, self.corpus = c, collection, corpus
        self.long_texts = 0
        self.rows: list[dict[str, Any]] = []
        self.size = 0

    def add(self, start: int, chunk_ids: list[str], vectors: np.ndarray) -> None:
        from drmix.io.text import clean_text

        for j, (doc_id, vec) in enumerate(zip(chunk_ids, vectors)):
            stored, is_json = encode_id(doc_id)
            row = {"pk": start + j, "doc_id": stored, "id_json": is_json, "vector": vec}
            if self.corpus is not None:
                doc = self.corpus.get(doc_id) or {}
                title, text = clean_text(doc.get("title", "") or ""), clean_text(doc.get("text", "") or "")
                if not (_fits(title) and _fits(text)):
                    self.long_texts += 1
                    title = text = ""
                row.update(title=title, text=text)
                self.size += len(title) + len(text)
            self.rows.append(row)
            self.size += 4 * vectors.shape[1] + len(stored)
            if self.size >= INSERT_BYTES or len(self.rows) >= 5000:
                self.flush()

    def flush(self) -> None:
        if self.rows:
            self.c.insert(self.collection, self.rows)
        self.rows, self.size = [], 0


def start_build(c: Any, name: str, dim: int, texts: bool) -> str:
    """Drop a build of ``name`` that did not finish and create the empty build collection; its name."""
    building = name + BUILD_SUFFIX
    if c.has_collection(building):
        log.info("dropping %s, left by a build that did not finish", building)
        c.drop_collection(building)
    c.create_collection(building, schema=_schema(c, dim, texts))
    return building


def finish_build(c: Any, uri: str, name: str, meta: dict[str, Any], kind: str,
                 params: MilvusParams | dict[str, Any], *, count: int, dim: int, texts: bool, long_texts: int,
                 overwrite: bool) -> None:
    """Every row is in the build collection: flush, check the count, index, record ``drmix.meta``, swap it in
    for ``name`` (dropping the old one, with ``overwrite``) and load it (searchable by any Milvus client)."""
    building = name + BUILD_SUFFIX
    built, used = index_params(kind, params, count)
    c.flush(building)
    held = int(c.get_collection_stats(building).get("row_count", count))
    if held != count:
        raise IndexLoadError(f"Milvus at {uri} holds {held} rows of the {count} inserted into {building}.",
                             fix="check the server's logs, then run the same drmix index command again.")
    ip = c.prepare_index_params()
    # each parameter goes both flat (pymilvus 3, Milvus 2.5+) and as the JSON "params" entry that Milvus Lite
    # 3 and earlier servers read
    ip.add_index("vector", index_type=TYPES[kind], metric_type="IP", params={**built, "params": built} if built else {})
    c.create_index(building, ip)
    if long_texts:
        log.warning("%d passages are longer than Milvus's %d-byte text field: stored by id only (search shows "
                    "their id and score, no text)", long_texts, VARCHAR_LIMIT)
    full = {**meta, "backend": BACKEND, "kind": kind, "index_type": TYPES[kind], "params": used,
            "metric": "inner_product", "dim": dim, "count": count, "has_texts": texts, "texts_not_stored": long_texts}
    c.alter_collection_properties(building, properties={META_PROPERTY: json.dumps(full)})
    if c.has_collection(name):
        if not overwrite:  # checked before encoding; a collection created meanwhile is not dropped
            raise ConfigError(f"collection {name} appeared in {uri} during the build.",
                              fix="pass --overwrite to replace it, or another --collection.")
        c.drop_collection(name)
    c.rename_collection(building, name)
    c.load_collection(name)


def build_failed(uri: str, name: str, e: BaseException) -> DrmixError:
    """The one line of a build the server refused (a full disk named as such), after removing what it made:
    the build collection, or the whole Milvus Lite folder when this build created it."""
    from drmix.errors import DiskFullError

    path = None if is_uri(uri) else Path(uri).expanduser().resolve()
    left = ""
    if path is not None and str(path) in _fresh:
        _forget_lite(path)
    else:
        try:
            c = client(uri)
            if c.has_collection(name + BUILD_SUFFIX):
                c.drop_collection(name + BUILD_SUFFIX)
        except Exception:  # a full disk may refuse the drop too: the next build drops it
            left = f"; the unfinished {name}{BUILD_SUFFIX} could not be dropped (the next build drops it)"
    if isinstance(e, DrmixError):
        return e
    text = _short(e)
    if "Errno 28" in text or "No space left" in text or "Errno 27" in text or "File too large" in text:
        return DiskFullError(f"Milvus ran out of room building {name} ({text})"
                             + (left or "; nothing was left behind") + ".",
                             path=uri, fix="free space on that filesystem or choose another --uri.")
    return IndexLoadError(f"Milvus at {uri} refused the build of {name} ({text}){left}.",
                          fix="check the server's logs and limits; the collection is as it was.")


def _build(target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: MilvusParams,
           overwrite: bool, corpus: Any = None) -> str:
    from pymilvus.exceptions import MilvusException

    uri, name = split_location(target)
    if name is None:
        raise ConfigError("no collection named.", fix="pass --collection NAME (or URI#NAME).")
    check_name(name)
    c = client(uri)
    check = ChunkChecker()
    inserter: Inserter | None = None
    try:
        for chunk_ids, vectors in chunks:
            chunk_ids, vectors = check(chunk_ids, vectors)
            if inserter is None:
                inserter = Inserter(c, start_build(c, name, int(vectors.shape[1]), corpus is not None), corpus)
            inserter.add(check.count - len(chunk_ids), chunk_ids, vectors)
        check.finish()
        assert inserter is not None
        inserter.flush()
        finish_build(c, uri, name, meta, kind, params, count=check.count, dim=int(check.dim or 0),
                     texts=corpus is not None, long_texts=inserter.long_texts, overwrite=overwrite)
    except (MilvusException, DrmixError, OSError) as e:
        raise build_failed(uri, name, e) from None
    except BaseException:
        path = None if is_uri(uri) else Path(uri).expanduser().resolve()
        if path is not None and str(path) in _fresh:  # killed: a database this build created is not left half-made
            _forget_lite(path)
        raise
    _fresh.discard(str(Path(uri).expanduser().resolve()) if not is_uri(uri) else uri)
    log.info("saved milvus %s collection %s of %d documents to %s", kind, name, check.count, uri)
    return f"{uri}#{name}"


def build_from_ranks(target: str, ranks: Any, chunks: Any, meta: dict[str, Any], kind: str,
                     params: MilvusParams | dict[str, Any], overwrite: bool, corpus: Any = None, *, count: int,
                     dim: int) -> str:
    """A build into a Milvus **server** from every launched rank (torchrun): rank 0 creates the build collection,
    every rank inserts its own rows -- ``chunks`` of ``(first row, ids, vectors)``, its shard of the corpus -- and
    once every rank has finished (a collective), rank 0 flushes, indexes, records ``drmix.meta`` and swaps the build
    in for ``NAME`` (:func:`finish_build`). Every rank gets the same error when one fails; a rank that dies stops
    the launcher before the swap, so ``NAME`` stays as it was and the next build drops the unfinished one.

    The collection is the one process's: the same rows (``pk`` is the row number in the corpus), vectors and
    index. Milvus Lite is not built this way: it is a folder that one process opens at a time, so under torchrun
    rank 0 streams every rank's shard into it (:func:`_build`)."""
    from pymilvus.exceptions import MilvusException

    from drmix.retrieval.shards import agree

    uri, name = split_location(target)
    if name is None or not is_uri(uri):
        raise ConfigError("build_from_ranks builds into a Milvus server collection (http://HOST:PORT#NAME).",
                          fix="build a Milvus Lite collection from one process (rank 0 streams the shards).")
    texts = corpus is not None

    def step(fn: Any) -> Any:
        try:
            return fn(), None
        except (MilvusException, DrmixError, OSError) as e:
            return None, (e if isinstance(e, DrmixError) else IndexLoadError(
                f"Milvus at {uri} refused the build of {name} ({_short(e)}).",
                fix="check the server's logs and limits; the collection is as it was."))

    error = step(lambda: start_build(client(uri), name, dim, texts))[1] if ranks.main else None
    agree(ranks, error)

    def insert() -> int:
        check = ChunkChecker()
        inserter = Inserter(client(uri), name + BUILD_SUFFIX, corpus)
        for row, chunk_ids, vectors in chunks:
            chunk_ids, vectors = check(chunk_ids, vectors)
            inserter.add(row, chunk_ids, vectors)
        inserter.flush()
        return inserter.long_texts

    mine, error = step(insert)
    try:
        agree(ranks, error)
    except DrmixError as e:
        if ranks.main:
            build_failed(uri, name, e)  # drops the build collection
        raise
    long_texts = sum(ranks.gather(mine))
    error = None
    if ranks.main:
        error = step(lambda: finish_build(client(uri), uri, name, meta, kind, params, count=count, dim=dim,
                                          texts=texts, long_texts=long_texts, overwrite=overwrite))[1]
        if error is not None:
            error = build_failed(uri, name, error)
    agree(ranks, error)
    log.info("saved milvus %s collection %s of %d documents to %s, %d ranks inserting", kind, name, count, uri,
             ranks.world_size)
    return f"{uri}#{name}"


class MilvusIndex(Index):
    """A Milvus collection opened for search."""

    backend = BACKEND

    @classmethod
    def write(cls, target: str, chunks: Chunks, meta: dict[str, Any], kind: str, params: BaseModel,
              overwrite: bool = False, corpus: Any = None) -> str:
        return _build(target, chunks, meta, kind, params, overwrite, corpus)

    @classmethod
    def write_from_ranks(cls, target: str, ranks: Any, chunks: Any, meta: dict[str, Any], kind: str,
                         params: MilvusParams, overwrite: bool, corpus: Any = None, *, count: int, dim: int) -> str:
        """Every launched rank inserts its own rows into a server collection (:func:`build_from_ranks`)."""
        return build_from_ranks(target, ranks, chunks, meta, kind, params, overwrite, corpus, count=count, dim=dim)

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
        from pymilvus.exceptions import MilvusException

        uri, name = split_location(location)
        if not is_uri(uri) and not Path(uri).expanduser().exists():  # a read-only command creates no database
            raise IndexLoadError("no Milvus Lite database here.", path=uri,
                                 fix=f"pass the --uri drmix index wrote, or build one with drmix index --backend "
                                     f"milvus --uri {uri}.")
        self.location = location
        self.client = c = client(uri, create=False)
        try:
            name = self._find(c, uri, name)
            meta = _meta_of(c, name)
            if meta is None:
                raise IndexLoadError(f"collection {name} in {uri} was not written by drmix index (no "
                                     f"{META_PROPERTY}).",
                                     fix=f"build it with drmix index --backend milvus --uri {uri} --collection NAME.")
            c.load_collection(name)
        except MilvusException as e:
            raise unreadable(uri, name, e) from None
        self.uri, self.name, self.metadata = uri, name, meta
        params = meta.get("params") or {}
        self.search_params: dict[str, Any] = {k: params[k] for k in ("nprobe", "ef") if k in params}
        self._pk: dict[str, int] = {}

    @staticmethod
    def _find(c: Any, uri: str, name: str | None) -> str:
        drmix_collections = [n for n in c.list_collections() if not n.endswith(BUILD_SUFFIX)
                             and _meta_of(c, n) is not None]
        if name is None:
            if len(drmix_collections) != 1:
                raise IndexLoadError(f"{uri} holds {len(drmix_collections)} drmix collections "
                                     f"({', '.join(sorted(drmix_collections)) or 'none'}).",
                                     fix=f"name one as {uri}#COLLECTION, or build one with drmix index "
                                         f"--backend milvus --uri {uri}.")
            return drmix_collections[0]
        if not c.has_collection(name):
            raise IndexLoadError(f"{uri} has no collection {name} (drmix collections there: "
                                 f"{', '.join(sorted(drmix_collections)) or 'none'}).",
                                 fix=f"build it with drmix index --backend milvus --uri {uri} --collection {name}.")
        return name

    def __len__(self) -> int:
        return int(self.metadata.get("count", 0))

    @property
    def dim(self) -> int:
        return int(self.metadata["dim"])

    @property
    def has_texts(self) -> bool:
        return bool(self.metadata.get("has_texts"))

    def search(self, queries: np.ndarray, k: int, *, batch: int = 256) -> tuple[np.ndarray, list[list[str]]]:
        from pymilvus.exceptions import MilvusException

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
            try:
                res = self.client.search(self.name, data=q[s:s + batch].tolist(), limit=kk,
                                         output_fields=["pk", "doc_id", "id_json"],
                                         search_params={"metric_type": "IP", "params": params})
            except MilvusException as e:
                raise unreadable(self.uri, self.name, e) from None
            for i, hits in enumerate(res):
                row = []
                for j, h in enumerate(hits):
                    ent = h["entity"]
                    doc_id = decode_id(ent["doc_id"], bool(ent["id_json"]))
                    self._pk[doc_id] = hit_pk(h)
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


def hit_pk(hit: Any) -> int:
    """The primary key of a search hit as every server returns it: the ``pk`` output field (asked for), else the
    hit's own ``pk`` or ``id`` key (Milvus servers name the primary key ``id`` in a hit, Milvus Lite ``pk``)."""
    for get in (lambda: hit["entity"]["pk"], lambda: hit["pk"], lambda: hit["id"], lambda: hit.id):
        with contextlib.suppress(KeyError, AttributeError, TypeError):
            value = get()
            if value is not None:
                return int(value)
    raise IndexLoadError(f"a Milvus search hit has no primary key ({sorted(dict(hit))}).",
                         fix="report this with the Milvus and pymilvus versions (drmix reads 'pk' or 'id').")


def unreadable(uri: str, name: str | None, e: BaseException) -> IndexLoadError:
    """The one line of a collection Milvus could not read (a damaged Milvus Lite folder: a file cut short)."""
    where = f"collection {name} in {uri}" if name else uri
    if is_uri(uri):
        return IndexLoadError(f"Milvus could not read {where} ({_short(e)}).",
                              fix=f"check the server's logs, or build it again with drmix index --backend milvus "
                                  f"--uri {uri} --overwrite.")
    return IndexLoadError(f"the Milvus Lite database {uri} is damaged: {_short(e, 2000).rstrip('.')}.",
                          fix=f"build the collection again into a new --uri with drmix index --backend milvus "
                              f"(or delete {uri} and build it again there).")


register_backend(BackendSpec(
    name=BACKEND, order=20, index=MilvusIndex, kinds=tuple(TYPES), target="uri", params=MilvusParams,
    location_help="a Milvus collection as PATH.db#COLLECTION or http://HOST:19530#COLLECTION (#COLLECTION may be "
                  "left out when the URI holds one)",
    target_help="a Milvus Lite file (a path ending in .db, created when missing) or a server's http://HOST:19530",
    example="runs/x/index.db (Milvus Lite) or http://HOST:19530",
    help="a Milvus collection: Milvus Lite for --uri PATH.db (embedded, nothing to start), a Milvus server "
         "or cluster for --uri http://HOST:19530 (token from MILVUS_TOKEN)."))
