"""Sharded encoding over processes and GPUs: each rank encodes one contiguous part of the corpus into a shard.

Under ``torchrun`` / ``accelerate launch`` (one process per GPU, on one node or several; :mod:`drmix.retrieval.ranks`)
every rank encodes the rows ``[start, stop)`` of :func:`shard_ranges` with
:func:`~drmix.retrieval.encode.encode_texts` and writes them to its shard folder:

* ``rank-RRRRR-of-WWWWW.npy``: the float32 embeddings of those rows, written to a temporary file, fsynced
  and renamed (never half-written; a full disk leaves nothing behind and stops every rank with one line);
* ``rank-RRRRR-of-WWWWW.json``: its manifest, written after the array: the row range, shape, the digest of
  the ``.npy`` (:func:`drmix.fingerprint.read_file_digest`) and the run's settings;
* ``shards.json`` (rank 0, before any encoding): the run's settings -- corpus content fingerprint (the digest
  of every text, in order), model fingerprint (the digest of its weights; both :mod:`drmix.fingerprint`),
  prompt, max length, normalisation, precision, batch size, world size and the row alignment.

With several processes every rank first checks that the folder is one folder on every node
(:meth:`~drmix.retrieval.ranks.Ranks.check_shared`: rank 0 merges what the others wrote there, so it must be on a
filesystem every node mounts); a folder a node sees on its own disk is refused in one line before any encoding.
A barrier, then rank 0 checks every shard against its manifest and merges them in rank order into one array --
or, for a build that takes vectors in chunks (``drmix index --backend faiss-disk|milvus``), reads them in rank
order a chunk of rows at a time (:func:`shard_chunks`), so N vectors are never in RAM at once.
The same command again reuses each shard whose manifest and digest match (a killed run re-encodes only the
missing shards); a shard that is missing its manifest, truncated, damaged or written for other settings is
named in one line and encoded again. A folder made with another world size, model, corpus or encoding
setting is refused with both values, unless ``overwrite`` (the shards are deleted first).

Ranges start at multiples of ``encode_texts``' sort chunk, so every rank forms exactly the length-sorted
batches one process forms over the same rows: the merged embeddings are byte-identical to one process's.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix import errors
from drmix.errors import ConfigError, DataError, DrmixError
from drmix.fingerprint import read_file_digest, tensors_digest, texts_digest
from drmix.retrieval.ranks import Ranks

log = logging.getLogger(__name__)

FORMAT = 1
MANIFEST = "shards.json"
BLOCK_CHUNKS = 4  # sort chunks per encode_texts call (the progress bar moves once per call)
#: what a refused shard folder's fix says when the caller names no option (drmix.cli.sharded names its own)
SHARED_FIX = "put the shard folder on a filesystem every node mounts at the same path (NFS, Lustre, ...)"
#: settings that must match for a shard folder to be continued (the world size is checked first)
SETTINGS = ("world_size", "model_fingerprint", "corpus_fingerprint", "count", "prompt", "max_length", "normalize",
            "precision", "batch_size", "align")


def shard_align() -> int:
    """Rows per alignment unit: ``encode_texts`` sorts and batches each such chunk on its own."""
    from drmix.retrieval import encode

    return int(getattr(encode, "_SORT_CHUNK", 16384))


def shard_ranges(n: int, world_size: int, align: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, stop)`` row ranges, one per rank, cut at multiples of ``align``: the
    ``ceil(n / align)`` blocks are dealt out as evenly as whole blocks allow (rank r gets blocks
    ``floor(r b / w)`` to ``floor((r + 1) b / w)``), so a rank may get none when there are fewer blocks than ranks."""
    blocks = -(-n // align)
    cuts = [min(n, (r * blocks // world_size) * align) for r in range(world_size + 1)]
    return [(cuts[r], cuts[r + 1]) for r in range(world_size)]


def shard_name(rank: int, world_size: int) -> str:
    return f"rank-{rank:05d}-of-{world_size:05d}"


@dataclass
class ShardedEncoding:
    """What one rank did: the merged embeddings (rank 0 only), rows it encoded, shards reused or redone."""

    embeddings: np.ndarray | None
    folder: Path
    rank: int
    world_size: int
    encoded: int = 0                                       # texts this rank encoded
    reused: list[int] = field(default_factory=list)       # ranks whose shard was reused as it was (rank 0)
    redone: dict[int, str] = field(default_factory=dict)  # rank -> why its shard was encoded again (rank 0)
    settings: dict[str, Any] = field(default_factory=dict)  # the run's settings (what shard_chunks reads with)


# ----------------------------------------------------------------------------------------------- the folder

def _describe(value: Any) -> str:
    return "none" if value is None else str(value)


def shared_fix(folder: Path, option: str | None) -> str:
    """The fix of a shard folder that is not one folder on every node (:meth:`drmix.retrieval.ranks.Ranks.check_shared`):
    the option that places it (``--output``, ``--uri``), or ``DRMIX_CACHE`` for a folder in the drmix cache."""
    from drmix.io.checks import cache_root

    folder = Path(folder).expanduser().absolute()
    if cache_root().expanduser().absolute() in folder.parents:
        cache = ("point DRMIX_CACHE on every node at one folder they all mount at the same path (the shards go to "
                 "$DRMIX_CACHE/shards/)")
        return f"pass {option} on a filesystem every node mounts, or {cache}" if option else cache
    return (f"put {option} on a filesystem every node mounts at the same path (NFS, Lustre, ...); its shards go to "
            f"{folder}")


def open_folder(folder: Path, settings: dict[str, Any], *, overwrite: bool = False) -> None:
    """Rank 0, before encoding: refuse a folder of other settings (unless ``overwrite``: its shards are
    deleted), then record ``settings`` in ``shards.json``."""
    from drmix.io.atomic import atomic_write_json

    path = folder / MANIFEST
    if path.exists() and not overwrite:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read the shard manifest ({e}).", path=path,
                              fix="pass --overwrite to encode again (the shards there are deleted).") from None
        for key in SETTINGS:
            if old.get(key) != settings.get(key):
                hint = (f"run {old.get(key)} processes again (torchrun --nproc-per-node {old.get(key)})"
                        if key == "world_size" else "run with the settings of the shards again")
                raise ConfigError(f"the shards there were encoded with {key} {_describe(old.get(key))}, this run "
                                  f"has {_describe(settings.get(key))}.", path=folder,
                                  fix=f"{hint}, or pass --overwrite to encode again (the shards there are deleted).")
    for pattern in (".rank-*-of-*.*.tmp", ".drmix-shared.*.tmp"):  # left by a killed write or shared-folder check
        for p in folder.glob(pattern):
            p.unlink()
    if overwrite:
        for p in folder.glob("rank-*-of-*.*"):
            p.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"format": FORMAT, **settings})


def check_shard(folder: Path, rank: int, settings: dict[str, Any], start: int, stop: int) -> str | None:
    """Why the shard of ``rank`` cannot be reused (``"missing"`` when it was never written), or None."""
    name = shard_name(rank, settings["world_size"])
    npy, man = folder / f"{name}.npy", folder / f"{name}.json"
    if not man.exists():
        return "missing" if not npy.exists() else f"{npy.name} has no manifest (its write was stopped)"
    try:
        meta = json.loads(man.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"{man.name} cannot be read"
    if not isinstance(meta, dict):
        return f"{man.name} is not a shard manifest"
    for key in SETTINGS:
        if meta.get(key) != settings.get(key):
            return f"{name} is foreign: encoded with {key} {_describe(meta.get(key))}, not {_describe(settings.get(key))}"
    if [meta.get("start"), meta.get("stop")] != [start, stop]:
        return f"{name} holds rows {meta.get('start')}-{meta.get('stop')}, not {start}-{stop}"
    if not npy.exists():
        return f"{npy.name} is missing"
    if npy.stat().st_size != meta.get("bytes") or read_file_digest(npy) != meta.get("digest"):
        return f"{npy.name} is truncated or damaged (its size or digest differs from {man.name})"
    return None


def _write_npy(path: Path, array: np.ndarray) -> None:
    """``array`` as ``.npy`` at ``path``: a temporary sibling, fsynced, renamed (a full disk: one line)."""
    from drmix.io.checks import disk_full_error, is_disk_full

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(array, dtype=np.float32), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, Exception) and not isinstance(e, DrmixError) and is_disk_full(e, tmp):
            raise disk_full_error(e, path) from None
        raise


def write_shard(folder: Path, rank: int, settings: dict[str, Any], start: int, stop: int,
                embeddings: np.ndarray) -> None:
    """The array, then its manifest (so a manifest always describes a complete array)."""
    from drmix.io.atomic import atomic_write_json

    name = shard_name(rank, settings["world_size"])
    npy = folder / f"{name}.npy"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").unlink(missing_ok=True)  # an old manifest must not describe the new array
    _write_npy(npy, embeddings)
    atomic_write_json(folder / f"{name}.json", {
        "format": FORMAT, **settings, "rank": rank, "start": start, "stop": stop,
        "shape": list(embeddings.shape), "dtype": "float32", "bytes": npy.stat().st_size,
        "digest": read_file_digest(npy)})


def _checked_ranges(folder: Path, settings: dict[str, Any]) -> list[tuple[int, int]]:
    """Every shard's row range, each shard checked against its manifest first (one line naming a bad one)."""
    world = settings["world_size"]
    ranges = shard_ranges(settings["count"], world, settings["align"])
    for rank, (start, stop) in enumerate(ranges):
        why = check_shard(folder, rank, settings, start, stop)
        if why is not None:
            raise DataError(f"shard {rank} of {world} cannot be merged: {why}.", path=folder,
                            fix="run the same command again: it encodes only the shards that are not complete.")
    return ranges


def npy_chunks(path: str | Path, chunk_size: int) -> Iterator[np.ndarray]:
    """The rows of a 2-d float32 ``.npy`` file, ``chunk_size`` at a time, each a fresh array read from the file
    (its shape and data offset from a memory map; the rows read with ``pread``, not through the map, so the
    pages read do not stay resident in this process)."""
    header = np.load(path, mmap_mode="r", allow_pickle=False)
    shape, dtype, offset = header.shape, header.dtype, int(header.offset)
    del header
    if len(shape) != 2:
        raise DataError(f"holds an array of shape {shape}, not [n, dim] vectors.", path=path,
                        fix="pass the .npy embeddings an encoder wrote (one row per document).")
    row = shape[1] * dtype.itemsize
    with open(path, "rb") as f:
        for start in range(0, shape[0], max(1, int(chunk_size))):
            m = min(int(chunk_size), shape[0] - start)
            f.seek(offset + start * row)
            part = np.fromfile(f, dtype=dtype, count=m * shape[1]).reshape(m, shape[1])
            yield part.astype(np.float32, copy=False)


def shard_chunks(folder: str | Path, settings: dict[str, Any], chunk_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """Rank 0, after the barrier: every shard checked against its manifest, then the rows of all of them in rank
    order as ``(first row, float32 [m, dim] array)`` chunks of at most ``chunk_size`` rows -- the merged
    embeddings of :func:`merge_shards` without holding them: one chunk in RAM at a time."""
    folder = Path(folder)
    world = settings["world_size"]
    for rank, (start, stop) in enumerate(_checked_ranges(folder, settings)):
        if stop == start:
            continue
        row = start
        for part in npy_chunks(folder / f"{shard_name(rank, world)}.npy", chunk_size):
            yield row, part
            row += len(part)


def rank_chunks(folder: str | Path, settings: dict[str, Any], rank: int,
                chunk_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """One rank, after the barrier: its own shard checked against its manifest, then its rows as ``(first row,
    float32 [m, dim] array)`` chunks of at most ``chunk_size`` rows (a build into which every rank inserts its
    own rows: ``drmix index --backend milvus`` against a server)."""
    folder = Path(folder)
    world = settings["world_size"]
    start, stop = shard_ranges(settings["count"], world, settings["align"])[rank]
    why = check_shard(folder, rank, settings, start, stop)
    if why is not None:
        raise DataError(f"shard {rank} of {world} cannot be read: {why}.", path=folder,
                        fix="run the same command again: it encodes only the shards that are not complete.")
    if stop == start:
        return
    row = start
    for part in npy_chunks(folder / f"{shard_name(rank, world)}.npy", chunk_size):
        yield row, part
        row += len(part)


def merge_shards(folder: Path, settings: dict[str, Any]) -> np.ndarray:
    """Rank 0, after the barrier: every shard checked against its manifest, concatenated in rank order."""
    world, n = settings["world_size"], settings["count"]
    out: np.ndarray | None = None
    for rank, (start, stop) in enumerate(_checked_ranges(folder, settings)):
        part = np.load(folder / f"{shard_name(rank, world)}.npy", mmap_mode="r", allow_pickle=False)
        if out is None:
            out = np.empty((n, part.shape[1]), dtype=np.float32)
        out[start:stop] = part
    assert out is not None
    return out


# ----------------------------------------------------------------------------------------------- one run

def _settings(model: Any, texts: Sequence[str], world_size: int, *, prompt: str, max_length: int | None,
              normalize: bool, precision: str | None, batch_size: int, model_name: str) -> dict[str, Any]:
    return {"world_size": world_size, "model": model_name, "model_fingerprint": tensors_digest(model),
            "corpus_fingerprint": texts_digest(texts), "count": len(texts), "prompt": prompt,
            "max_length": max_length or getattr(model, "max_seq_length", None), "normalize": bool(normalize),
            "precision": precision or "auto", "batch_size": batch_size, "align": shard_align()}


def agree(ranks: Ranks, error: DrmixError | None) -> None:
    """A collective: every rank stops with the first rank's error when any rank had one."""
    found = ranks.gather(None if error is None else (type(error).__name__, error.message, error.path, error.fix))
    if error is not None:
        raise error
    for rank, item in enumerate(found):
        if item is not None:
            cls = getattr(errors, item[0], DrmixError)
            raise cls(f"rank {rank} stopped: {item[1]}", path=item[2], fix=item[3])


def _encode_range(model: Any, texts: Sequence[str], start: int, stop: int, *, show_progress: bool, desc: str,
                  device: str | None, **encode_kw: Any) -> np.ndarray:
    """Rows ``[start, stop)`` through ``encode_texts`` in aligned blocks; the bar counts passages."""
    from tqdm.auto import tqdm

    from drmix.retrieval.encode import embedding_dim, encode_texts

    block = shard_align() * BLOCK_CHUNKS
    devices = [device] if device is not None else None
    parts = []
    with tqdm(total=stop - start, desc=desc, unit="passage", unit_scale=True, disable=not show_progress) as bar:
        for s in range(start, stop, block):
            e = min(stop, s + block)
            parts.append(encode_texts(model, texts[s:e], devices=devices, **encode_kw))
            bar.update(e - s)
    return np.concatenate(parts) if parts else np.zeros((0, embedding_dim(model)), dtype=np.float32)


def encode_sharded(model: Any, texts: Sequence[str], folder: str | Path, *, ranks: Ranks | None = None,
                   batch_size: int = 64, prompt: str = "", max_length: int | None = None, normalize: bool = False,
                   precision: str | None = "auto", model_name: str = "", overwrite: bool = False,
                   show_progress: bool = True, everywhere: bool = False, merge: bool = True,
                   shared_fix: str | None = SHARED_FIX) -> ShardedEncoding:
    """Encode ``texts`` split over the launched ranks into shards in ``folder``; every rank calls it.

    Returns the merged embeddings on rank 0 (on every rank with ``everywhere``, ``None`` elsewhere),
    byte-identical to ``encode_texts(model, texts, ...)`` in one process with the same settings; with
    ``merge=False`` none (read the shards with ``shard_chunks(folder, result.settings, chunk_size)``). See the
    module docstring for the files, the resume and the refusals (``shared_fix``: the fix of a folder that is not one
    folder on every node; None: no rank reads another's shard, the folder need not be shared)."""
    ranks = ranks or Ranks()
    folder = Path(folder).expanduser()
    texts = list(texts)
    device = ranks.device()
    if device is not None:
        model.to(device)
    settings = _settings(model, texts, ranks.world_size, prompt=prompt, max_length=max_length, normalize=normalize,
                         precision=precision, batch_size=batch_size, model_name=model_name)
    error = None
    if ranks.main:
        try:
            open_folder(folder, settings, overwrite=overwrite)
        except DrmixError as e:
            error = e
    agree(ranks, error)
    if shared_fix is not None:
        ranks.check_shared(folder, what="the shard folder", fix=shared_fix)
    start, stop = shard_ranges(len(texts), ranks.world_size, settings["align"])[ranks.rank]
    why = check_shard(folder, ranks.rank, settings, start, stop)
    encoded, error = 0, None
    if why is not None:
        if why != "missing":
            log.warning("rank %d: %s; encoding it again", ranks.rank, why)
        try:
            emb = _encode_range(model, texts, start, stop, show_progress=show_progress and ranks.main,
                                desc=f"encoding shard {ranks.rank + 1}/{ranks.world_size}", device=device,
                                batch_size=batch_size, prompt=prompt, max_length=max_length, normalize=normalize,
                                precision=precision)
            write_shard(folder, ranks.rank, settings, start, stop, emb)
            encoded = stop - start
        except DrmixError as e:
            error = e
    agree(ranks, error)  # also the barrier: every shard is written
    reasons = ranks.gather(why)
    result = ShardedEncoding(None, folder, ranks.rank, ranks.world_size, encoded=encoded,
                             reused=[r for r, w in enumerate(reasons) if w is None],
                             redone={r: w for r, w in enumerate(reasons) if w is not None}, settings=settings)
    if merge and (ranks.main or everywhere):
        result.embeddings = merge_shards(folder, settings)
    if ranks.main:
        log.info("%d passages encoded in %d shards (%d reused from an earlier run) in %s", len(texts),
                 ranks.world_size, len(result.reused), folder)
    return result


# ----------------------------------------------------------------------------------------------- in a command

@dataclass
class ShardedCorpora:
    """While active (:func:`sharded_corpora`), :func:`encode_corpus` encodes each corpus in shards under
    ``root/<first 16 hex digits of its fingerprint>/`` (``root/<model's 16>-<corpus's 16>/`` with ``by_model``:
    a command that encodes the corpora with several models), and every rank gets the merged embeddings."""

    ranks: Ranks
    root: Path
    overwrite: bool = False
    runs: list[ShardedEncoding] = field(default_factory=list)
    by_model: bool = False
    shared_fix: str = SHARED_FIX   # the fix when root is not one folder on every node (names the command's option)


_active: ShardedCorpora | None = None


@contextlib.contextmanager
def sharded_corpora(ranks: Ranks, root: str | Path, *, overwrite: bool = False, by_model: bool = False,
                    shared_fix: str = SHARED_FIX):
    """Route the corpus encodings of a command (``drmix eval``, ``drmix mine``, ``drmix adapt``'s corpus passes)
    through sharded encoding."""
    global _active
    previous, _active = _active, ShardedCorpora(ranks, Path(root).expanduser(), overwrite, by_model=by_model,
                                                shared_fix=shared_fix)
    try:
        yield _active
    finally:
        _active = previous


def active() -> ShardedCorpora | None:
    """The sharded encoding in force (:func:`sharded_corpora`), or None."""
    return _active


def writes_here() -> bool:
    """Whether this process writes a command's outputs: always, except the ranks other than 0 of a
    :func:`sharded_corpora` command (they encode their shards and compute the same result, unwritten)."""
    return _active is None or _active.ranks.main


def encode_corpus(model: Any, texts: Sequence[str], **kwargs: Any) -> np.ndarray:
    """``encode_texts(model, texts, **kwargs)``, or the same rows encoded in shards over the launched ranks when
    :func:`sharded_corpora` is active (``devices`` and ``cache_ids`` then do not apply)."""
    from drmix.retrieval import encode

    plan = _active
    if plan is None:
        return encode.encode_texts(model, texts, **kwargs)
    texts = list(texts)
    folder = plan.root / texts_digest(texts)[:16]
    if plan.by_model:
        folder = plan.root / f"{tensors_digest(model)[:16]}-{folder.name}"
    keep = {k: kwargs[k] for k in ("batch_size", "prompt", "max_length", "normalize", "precision", "show_progress")
            if k in kwargs}
    run = encode_sharded(model, texts, folder, ranks=plan.ranks, overwrite=plan.overwrite, everywhere=True,
                         shared_fix=plan.shared_fix, **keep)
    plan.runs.append(run)
    assert run.embeddings is not None
    return run.embeddings
