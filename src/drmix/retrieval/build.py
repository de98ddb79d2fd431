"""``drmix index`` as one library call: a corpus file encoded into an index of any registered backend.

:func:`index_corpus_file` does for every backend what ``drmix index`` does: the target is read from the options
by the backend's target kind (a folder or file ``--output``, or ``--uri`` and a collection, named after the corpus
by default), refused before anything loads when it is not the backend's (a folder that is not an index, a
collection that exists); the corpus is read, the model loaded, the disk checked (local targets), and the
documents encoded -- in chunks of the backend's ``chunk_size``, or all at once for a backend without one -- and
streamed into the backend's :meth:`~drmix.retrieval.backends.base.Index.write`. Under ``torchrun`` / ``accelerate
launch`` every process encodes one shard of the corpus (:mod:`drmix.retrieval.shards`) beside the target
(``OUTPUT.shards``; ``PATH.shards`` beside a local database file; the drmix cache for a remote collection) and
the first streams the shards, ``chunk_size`` rows at a time, into the backend: the same index as one process.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drmix.data.corpus import corpus_file
from drmix.errors import ConfigError, DrmixError
from drmix.retrieval.backends.base import BACKENDS, BackendSpec, backend, collection_name, resolve_kind

#: rows read from a shard at a time when the backend takes all its vectors at once (no ``chunk_size``)
SHARD_CHUNK = 100_000


@dataclass(frozen=True)
class IndexTarget:
    """Where an index is written: the backend's ``location`` (a folder, a file, ``URI#NAME``) and the folder or
    file on this machine that holds it (None for a collection elsewhere)."""

    spec: BackendSpec
    location: str
    local: Path | None


@dataclass(frozen=True)
class IndexBuilt:
    """What :func:`index_corpus_file` made: where, of how many documents, and the shards it was encoded in."""

    target: IndexTarget
    count: int
    kind: str
    dim: int | None
    shards: str | None = None

    def summary(self) -> str:
        line = (f"indexed {self.count} documents ({self.target.spec.name} {self.kind}, dim {self.dim}) into "
                f"{self.target.location}")
        return f"{line}; {self.shards}" if self.shards else line


def stored_model_name(model: str | None) -> str:
    """What an index records as its model: an absolute path for a local model (an index is searched from
    anywhere), ``default`` for the bundled model, a hub id as given."""
    from drmix.model.encoder import resolve_model_path

    if model is None:
        return "default"
    resolved = Path(resolve_model_path(model)).expanduser()
    return str(resolved.resolve()) if resolved.exists() else model


def local_path(spec: BackendSpec, location: str) -> Path | None:
    """The folder or file on this machine that holds ``spec``'s index at ``location`` (None: elsewhere)."""
    if spec.target == "uri":
        return spec.index.local_path(location)
    return Path(location).expanduser()


def index_target(spec: BackendSpec, *, output: Path | None, uri: str | None, collection: str | None,
                 corpus_file: Path) -> IndexTarget:
    """The target of ``drmix index --backend NAME`` from its ``--output`` / ``--uri`` / ``--collection``."""
    uri_names = " or ".join(f"--backend {s.name}" for s in BACKENDS if s.target == "uri") or "a --backend with --uri"
    if spec.target == "uri":
        if uri is None or output is not None:
            raise ConfigError(f"--backend {spec.name} writes a collection: give --uri (not --output).",
                              fix=f"pass --uri {spec.example or 'URI'}.")
        location = f"{uri}#{collection or collection_name(corpus_file)}"
        return IndexTarget(spec, location, local_path(spec, location))
    if output is None or uri is not None or collection is not None:
        what = "DIR" if spec.target == "folder" else "FILE"
        raise ConfigError(f"--backend {spec.name} writes a {spec.target}: give --output {what} (--uri and "
                          f"--collection are for {uri_names}).", fix=f"pass --output {what}.")
    return IndexTarget(spec, str(output), Path(output).expanduser())


def claim_place(target: IndexTarget, *, corpus: Path, overwrite: bool) -> None:
    """Refuse a local target before anything loads: a folder that is not an index, or a file that is not one of
    the backend's indexes (unless ``--overwrite``), an output that overlaps the corpus (whatever the flags)."""
    from drmix.outputs import check_output_dir, claim_output

    spec = target.spec
    if spec.target == "folder":
        check_output_dir(target.local, "index", overwrite=overwrite, inputs=[corpus])
    elif spec.target == "file":
        ours = target.local.is_file() and spec.claims(target.location)
        claim_output(target.local, "file", overwrite=overwrite or ours, inputs=[corpus])


def claim_target(target: IndexTarget, meta: dict[str, Any], *, corpus: Path, overwrite: bool) -> None:
    """:func:`claim_place`, then what the backend refuses before encoding (a collection that exists)."""
    claim_place(target, corpus=corpus, overwrite=overwrite)
    target.spec.check(target.location, meta, overwrite)


def shard_folder(output: Path) -> Path:
    """Where the shards of ``output`` go: ``OUTPUT.shards`` beside it."""
    output = output.expanduser()
    return output.with_name(output.name + ".shards")


def check_own_params(spec: Any, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` when every one is a parameter of the backend ``spec``; one that only another backend takes (a
    flag given for a backend not chosen, which would do nothing) is a :class:`ConfigError` naming its flag, the
    backends that take it and the fix."""
    from drmix.retrieval.backends.base import BACKENDS

    foreign = sorted(set(params) - spec.param_names())
    if not foreign:
        return dict(params)
    flags, owners = [], []
    for name in foreign:
        takers = [s for s in BACKENDS if name in s.param_names()]
        extra = takers[0].params.model_fields[name].json_schema_extra if takers else None
        flags.append((extra or {}).get("flag") if isinstance(extra, dict) and extra.get("flag")
                     else "--" + name.replace("_", "-"))
        owners += [s.name for s in takers if s.name not in owners]
    given = ", ".join(flags)
    one = len(flags) == 1
    whose = (f"{'an option' if one else 'options'} of {' and '.join(owners)}" if owners
             else f"no backend's option{'' if one else 's'}")
    raise ConfigError(f"{given} {'is' if one else 'are'} {whose}, not of --backend {spec.name}.",
                      fix=f"drop {given}" + (f", or choose --backend {owners[0]}." if owners else "."))


def index_corpus_file(backend_name: str, corpus: Path, *, output: Path | None = None, uri: str | None = None,
                      collection: str | None = None, model: str | None = None, kind: str | None = None,
                      params: dict[str, Any] | None = None, store_texts: bool = True, overwrite: bool = False,
                      precision: str = "auto", batch_size: int = 64, max_length: int | None = None,
                      model_kwargs: dict[str, Any] | None = None) -> IndexBuilt | None:
    """Encode the corpus file (or BEIR directory) ``corpus`` with ``model`` into an index of ``backend_name``
    (``params``: its parameters; one of another backend is refused, :func:`check_own_params`); None on the
    processes of a launch that do not write."""
    from drmix.retrieval.backends import check_index_room, index_documents
    from drmix.retrieval.ranks import launched

    spec = backend(backend_name)
    kind = resolve_kind(spec, kind)
    params = check_own_params(spec, params or {})
    spec.parse_params(params)  # a value out of bounds: before anything loads
    corpus_path = corpus_file(corpus)
    target = index_target(spec, output=output, uri=uri, collection=collection, corpus_file=corpus_path)
    if not launched():  # before the model is looked up (under a launcher: rank 0, with the others waiting)
        claim_place(target, corpus=corpus, overwrite=overwrite)
    meta: dict[str, Any] = {"model": stored_model_name(model), "corpus": str(corpus_path.resolve())}

    def load() -> Any:
        from drmix.model.encoder import load_encoder

        return load_encoder(model, model_kwargs=model_kwargs or {})

    def check_room(encoder: Any, docs: dict[str, dict[str, str]]) -> None:
        if target.local is not None:  # a folder, a file, a local database (Milvus Lite): its disk
            check_index_room(target.local, docs, encoder, store_texts=store_texts)

    settings = {"kind": kind, "params": params, "store_texts": store_texts, "overwrite": overwrite,
                "precision": precision, "batch_size": batch_size, "max_length": max_length}
    if launched():
        return _index_sharded(target, corpus, corpus_path, meta, load=load, check_room=check_room, **settings)
    spec.check(target.location, meta, overwrite)  # a collection that exists: refused before encoding
    from drmix.data.beir import read_corpus

    docs = read_corpus(corpus_path)
    encoder = load()
    check_room(encoder, docs)
    location = index_documents(spec, target.location, encoder, docs, meta, **settings)
    return IndexBuilt(IndexTarget(spec, location, target.local), len(docs), kind, meta.get("dim"))


def _shards_of(target: IndexTarget) -> Path:
    """Where the shards of a launched ``drmix index`` go: beside the local folder or file, else in the cache."""
    from drmix.io.checks import cache_root

    if target.local is not None:
        return shard_folder(target.local)
    return cache_root() / "shards" / target.location.rpartition("#")[2]


def _index_sharded(target: IndexTarget, corpus: Path, corpus_path: Path, meta: dict[str, Any], *,
                   load: Callable[[], Any], check_room: Callable[[Any, dict], None], kind: str,
                   params: dict[str, Any], store_texts: bool, overwrite: bool, precision: str, batch_size: int,
                   max_length: int | None) -> IndexBuilt | None:
    """Every rank: claim the target and the shard folder (rank 0), read the corpus, load the model, encode its
    shard; rank 0 then streams the shards' rows, ``chunk_size`` at a time, into the backend."""
    from drmix.data.beir import doc_text, read_corpus
    from drmix.io.checks import check_free_space
    from drmix.lock import run_lock
    from drmix.model.encoder import document_prompt
    from drmix.outputs import claim_output
    from drmix.retrieval.backends import build_encoded, encoding_chunk
    from drmix.retrieval.encode import embedding_dim, model_normalizes
    from drmix.retrieval.ranks import Ranks
    from drmix.retrieval.shards import agree, encode_sharded, shard_chunks, shared_fix

    ranks = Ranks.from_env()
    folder = _shards_of(target)
    # what moves the shards to a disk every node shares: the option naming the local target, else DRMIX_CACHE; none
    # when every rank inserts its own shard into a server (no rank reads another's: a node's own disk will do)
    fix = None if _from_every_rank(target) else shared_fix(
        folder, None if target.local is None else "--output" if target.spec.target == "folder" else "--uri")
    held = contextlib.ExitStack()
    try:
        error = None
        if ranks.main:
            try:  # one sharded run at a time into this output (drmix.lock): a second one is refused, writes nothing
                held.enter_context(run_lock(folder, flag="--output"))
                claim_target(target, meta, corpus=corpus, overwrite=overwrite)
                claim_output(folder, "shards", overwrite=overwrite, inputs=[corpus])
            except DrmixError as e:
                error = e
        agree(ranks, error)
        docs = read_corpus(corpus_path)
        encoder = load()
        error = None
        if ranks.main:
            try:
                check_room(encoder, docs)
                check_free_space(folder, len(docs) * embedding_dim(encoder) * 4,
                                 what=f"the shards of {len(docs)} documents")
            except DrmixError as e:
                error = e
        agree(ranks, error)
        result = encode_sharded(encoder, [doc_text(docs[i]) for i in docs], folder, ranks=ranks,
                                batch_size=batch_size, prompt=document_prompt(encoder), max_length=max_length,
                                normalize=model_normalizes(encoder), precision=precision,
                                model_name=str(meta.get("model")), overwrite=overwrite, merge=False,
                                shared_fix=fix)
        step = encoding_chunk(target.spec, params) or SHARD_CHUNK
        reused = f", {len(result.reused)} reused from an earlier run" if result.reused else ""
        if _from_every_rank(target):
            location = _write_from_ranks(target, ranks, docs, encoder, meta, folder, result.settings, step, kind=kind,
                                         params=params, overwrite=overwrite, store_texts=store_texts,
                                         precision=precision, max_length=max_length)
            return IndexBuilt(IndexTarget(target.spec, location, target.local), len(docs), kind, meta.get("dim"),
                              shards=f"{ranks.world_size} shards{reused} in {folder}, each rank inserting its "
                                     "own") if ranks.main else None
        if not ranks.main:
            return None
        ids = list(docs)
        chunks = ((ids[row:row + len(part)], part) for row, part in shard_chunks(folder, result.settings, step))
        location = build_encoded(target.spec, target.location, encoder, chunks, docs, meta, kind=kind, params=params,
                                 overwrite=overwrite, store_texts=store_texts, max_length=max_length,
                                 precision=precision)
        return IndexBuilt(IndexTarget(target.spec, location, target.local), len(docs), kind, meta.get("dim"),
                          shards=f"{ranks.world_size} shards{reused} in {folder}")
    finally:
        held.close()
        ranks.close()


def _from_every_rank(target: IndexTarget) -> bool:
    """Whether every rank writes its own rows into the target: a backend whose index takes them
    (``write_from_ranks``) at a target that is not on this machine (a server; a local database such as Milvus
    Lite is opened by one process at a time, so rank 0 streams every shard into it)."""
    return target.local is None and callable(getattr(target.spec.index, "write_from_ranks", None))


def _write_from_ranks(target: IndexTarget, ranks: Any, docs: dict, encoder: Any, meta: dict[str, Any], folder: Path,
                      settings: dict[str, Any], step: int, *, kind: str, params: dict[str, Any], overwrite: bool,
                      store_texts: bool, precision: str, max_length: int | None) -> str:
    """Every rank: the rows of its own shard (``(first row, ids, vectors)`` chunks) into the backend's
    ``write_from_ranks``, which creates the index on rank 0 and swaps it in once every rank has finished."""
    from drmix.retrieval.backends import encoded_meta
    from drmix.retrieval.encode import embedding_dim
    from drmix.retrieval.shards import rank_chunks

    encoded_meta(meta, encoder, precision=precision, max_length=max_length)
    ids = list(docs)
    own = ((row, ids[row:row + len(part)], part) for row, part in rank_chunks(folder, settings, ranks.rank, step))
    spec = target.spec
    parsed = spec.parse_params(spec.own_params(params))
    return spec.index.write_from_ranks(target.location, ranks, own, meta, kind, parsed, overwrite,
                                       docs if store_texts else None, count=len(docs), dim=int(embedding_dim(encoder)))
