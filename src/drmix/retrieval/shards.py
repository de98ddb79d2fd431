"""Sharded encoding over processes and GPUs: each rank encodes its share of the corpus's rows into a shard.

Under ``torchrun`` / ``accelerate launch`` (one process per GPU, on one node or several; :mod:`drmix.retrieval.ranks`)
every rank encodes the rows of its share (:func:`shard_parts`) with :func:`~drmix.retrieval.encode.encode_texts`
and writes them to its shard folder:

* ``rank-RRRRR-of-WWWWW.rows.npy``: the (ascending) corpus rows the shard holds, int64;
* ``rank-RRRRR-of-WWWWW.npy``: the float32 embeddings of those rows, in that order; each array written to a
  temporary file, fsynced and renamed (never half-written; a full disk leaves nothing behind and stops every rank
  with one line);
* ``rank-RRRRR-of-WWWWW.json``: its manifest, written after the arrays: the share, shape, the digest of both
  ``.npy`` files (:func:`drmix.fingerprint.read_file_digest`) and the run's settings;
* ``shards.json`` (rank 0, before any encoding): the run's settings -- corpus content fingerprint (the digest
  of every text, in order), model fingerprint (the digest of its weights; both :mod:`drmix.fingerprint`),
  prompt, max length, normalisation, precision, batch size, world size and the sort chunk.

With several processes every rank first checks that the folder is one folder on every node
(:meth:`~drmix.retrieval.ranks.Ranks.check_shared`: rank 0 merges what the others wrote there, so it must be on a
filesystem every node mounts); a folder a node sees on its own disk is refused in one line before any encoding.
A barrier, then rank 0 checks every shard against its manifest and merges them into one array in corpus order --
or, for a build that takes vectors in chunks (``drmix index --backend faiss-disk|milvus``), reads them in corpus
order a chunk of rows at a time (:func:`shard_chunks`), so N vectors are never in RAM at once.
The same command again reuses each shard whose manifest and digest match (a killed run re-encodes only the
missing shards); a shard that is missing its manifest, truncated, damaged or written for other settings is
named in one line and encoded again. A folder made with another world size, model, corpus or encoding
setting is refused with both values, unless ``overwrite`` (the shards are deleted first).

**The split.** One process (``encode_texts``) sorts each chunk of ``_SORT_CHUNK`` texts by token length and
encodes it in batches of ``batch_size`` in that order. The ranks share out exactly those batches: laid end to
end, chunk after chunk, they are cut into ``world_size`` runs of whole batches, each cut at the batch boundary
nearest to ``r * n / world_size`` rows, so every rank gets about ``n / world_size`` rows whatever the corpus size
(a cut inside a chunk costs the two ranks either side of it the tokenising of that chunk, to find its order).
Every rank forms exactly the batches one process forms, so the merged embeddings are byte-identical to one
process's; the sort chunk is not the shard.
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

FORMAT = 2
SPLIT = "batches"  # how the rows are shared out (format 1 cut contiguous ranges at sort chunks: "chunks")
MANIFEST = "shards.json"
BLOCK_CHUNKS = 4  # sort chunks per encode_texts call (the progress bar moves once per call)
#: what a refused shard folder's fix says when the caller names no option (drmix.cli.sharded names its own)
SHARED_FIX = "put the shard folder on a filesystem every node mounts at the same path (NFS, Lustre, ...)"
#: settings that must match for a shard folder to be continued (the world size is checked first)
SETTINGS = ("world_size", "model_fingerprint", "corpus_fingerprint", "count", "prompt", "max_length", "normalize",
            "precision", "batch_size", "align", "split")


def shard_align() -> int:
    """Rows per alignment unit: ``encode_texts`` sorts and batches each such chunk on its own."""
    from drmix.retrieval import encode

    return int(getattr(encode, "_SORT_CHUNK", 16384))


#: one rank's part of one sort chunk: the chunk's rows ``[start, stop)`` and the positions ``[first, last)`` of its
#: length order (longest first) that the rank encodes; a whole chunk when ``first == 0`` and ``last == stop - start``
Part = tuple[int, int, int, int]


def _nearest_cut(num: int, den: int, n: int, align: int, batch_size: int) -> int:
    """The batch boundary nearest to ``num / den`` rows (the lower one on a tie), in the rows laid end to end
    chunk after chunk: inside the chunk ``[cs, ce)`` the boundaries are ``cs``, ``cs + batch_size``, ... and ``ce``."""
    if num >= n * den:
        return n
    cs = (num // den) // align * align
    ce = min(n, cs + align)
    k = (num - cs * den) // (batch_size * den)
    lo, hi = cs + k * batch_size, min(cs + (k + 1) * batch_size, ce)
    return lo if num - lo * den <= hi * den - num else hi


def shard_cuts(n: int, world_size: int, align: int, batch_size: int) -> list[int]:
    """``world_size + 1`` cuts in the length-sorted order: rank r encodes sorted positions ``[cuts[r], cuts[r+1])``
    (position ``p`` is place ``p - cs`` of the length order of the chunk ``cs = p // align * align``)."""
    batch_size = max(1, int(batch_size))
    return [0, *(_nearest_cut(r * n, world_size, n, align, batch_size) for r in range(1, world_size)), n]


def shard_parts(n: int, world_size: int, align: int, batch_size: int) -> list[list[Part]]:
    """Each rank's share of ``n`` rows, as the parts of sort chunks it encodes (see the module docstring):
    whole batches of one process, about ``n / world_size`` rows a rank (a batch more or less)."""
    cuts = shard_cuts(n, world_size, align, batch_size)
    shares: list[list[Part]] = []
    for a, b in zip(cuts, cuts[1:]):
        parts = []
        for cs in range(a // align * align, b, align):
            ce = min(n, cs + align)
            first, last = max(a, cs) - cs, min(b, ce) - cs
            if last > first:
                parts.append((cs, ce, first, last))
        shares.append(parts)
    return shares


def share_rows(parts: Sequence[Part]) -> int:
    """How many rows a share holds."""
    return sum(last - first for _, _, first, last in parts)


def describe_shares(shares: Sequence[Sequence[Part]], n: int, batch_size: int) -> str:
    """One line: every rank's rows (``rank 0 150, rank 1 150``), and why a rank has none."""
    counts = [share_rows(p) for p in shares]
    line = (f"{n} passages over {len(shares)} ranks: " + ", ".join(f"rank {r} {c}" for r, c in enumerate(counts))
            + f" (whole batches of {batch_size})")
    idle = [r for r, c in enumerate(counts) if c == 0]
    if idle and n:
        line += (f"; rank{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))} "
                 f"{'have' if len(idle) > 1 else 'has'} nothing to encode: fewer batches than ranks")
    return line


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


def _files(folder: Path, rank: int, world_size: int) -> tuple[Path, Path, Path]:
    """The shard's embeddings, rows and manifest."""
    name = shard_name(rank, world_size)
    return folder / f"{name}.npy", folder / f"{name}.rows.npy", folder / f"{name}.json"


def check_shard(folder: Path, rank: int, settings: dict[str, Any], parts: Sequence[Part]) -> str | None:
    """Why the shard of ``rank`` cannot be reused (``"missing"`` when it was never written), or None."""
    name = shard_name(rank, settings["world_size"])
    npy, rows, man = _files(folder, rank, settings["world_size"])
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
    if meta.get("parts") != [list(p) for p in parts]:
        return f"{name} holds the share {meta.get('parts')}, not {[list(p) for p in parts]}"
    for path, key in ((npy, ""), (rows, "rows_")):
        if not path.exists():
            return f"{path.name} is missing"
        if path.stat().st_size != meta.get(f"{key}bytes") or read_file_digest(path) != meta.get(f"{key}digest"):
            return f"{path.name} is truncated or damaged (its size or digest differs from {man.name})"
    return None


def _write_npy(path: Path, array: np.ndarray, dtype: Any = np.float32) -> None:
    """``array`` as ``.npy`` at ``path``: a temporary sibling, fsynced, renamed (a full disk: one line)."""
    from drmix.io.checks import disk_full_error, is_disk_full

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.lib.format.write_array(f, np.ascontiguousarray(array, dtype=dtype), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, Exception) and not isinstance(e, DrmixError) and is_disk_full(e, tmp):
            raise disk_full_error(e, path) from None
        raise


def write_shard(folder: Path, rank: int, settings: dict[str, Any], parts: Sequence[Part], rows: np.ndarray,
                embeddings: np.ndarray) -> None:
    """The embeddings and their rows (ascending), then the manifest (so a manifest always describes complete
    arrays)."""
    from drmix.io.atomic import atomic_write_json

    npy, rows_npy, man = _files(folder, rank, settings["world_size"])
    folder.mkdir(parents=True, exist_ok=True)
    man.unlink(missing_ok=True)  # an old manifest must not describe the new arrays
    _write_npy(npy, embeddings)
    _write_npy(rows_npy, rows, np.int64)
    atomic_write_json(man, {
        "format": FORMAT, **settings, "rank": rank, "parts": [list(p) for p in parts], "rows": len(rows),
        "shape": list(embeddings.shape), "dtype": "float32", "bytes": npy.stat().st_size,
        "digest": read_file_digest(npy), "rows_bytes": rows_npy.stat().st_size,
        "rows_digest": read_file_digest(rows_npy)})


def _checked_shares(folder: Path, settings: dict[str, Any]) -> list[list[Part]]:
    """Every shard's share, each shard checked against its manifest first (one line naming a bad one)."""
    world = settings["world_size"]
    shares = shard_parts(settings["count"], world, settings["align"], settings["batch_size"])
    for rank, parts in enumerate(shares):
        why = check_shard(folder, rank, settings, parts)
        if why is not None:
            raise DataError(f"shard {rank} of {world} cannot be merged: {why}.", path=folder,
                            fix="run the same command again: it encodes only the shards that are not complete.")
    return shares


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


def _read_rows(f: Any, offset: int, width: int, start: int, count: int) -> np.ndarray:
    """Rows ``[start, start + count)`` of a float32 ``[n, width]`` ``.npy`` open as ``f`` (data at ``offset``)."""
    f.seek(offset + start * width * 4)
    return np.fromfile(f, dtype=np.float32, count=count * width).reshape(count, width)


def shard_chunks(folder: str | Path, settings: dict[str, Any], chunk_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """Rank 0, after the barrier: every shard checked against its manifest, then the rows of all of them in corpus
    order as ``(first row, float32 [m, dim] array)`` chunks of at most ``chunk_size`` rows -- the merged
    embeddings of :func:`merge_shards` without holding them: one chunk in RAM at a time (each shard's rows are
    ascending, so a chunk's rows are one contiguous run of each shard, read with ``pread``, not through a map)."""
    folder = Path(folder)
    world, n = settings["world_size"], settings["count"]
    _checked_shares(folder, settings)
    step = max(1, int(chunk_size))
    with contextlib.ExitStack() as stack:
        shards = []
        for rank in range(world):
            npy, rows_npy, _ = _files(folder, rank, world)
            head = np.load(npy, mmap_mode="r", allow_pickle=False)
            shards.append((np.load(rows_npy, mmap_mode="r", allow_pickle=False), stack.enter_context(open(npy, "rb")),
                           int(head.offset), head.shape[1] if head.ndim == 2 else 0))
            del head
        dim = max((width for *_, width in shards), default=0)
        for start in range(0, n, step):
            stop = min(n, start + step)
            out = np.empty((stop - start, dim), dtype=np.float32)
            for rows, f, offset, width in shards:
                lo, hi = int(np.searchsorted(rows, start)), int(np.searchsorted(rows, stop))
                if hi > lo:
                    out[np.asarray(rows[lo:hi]) - start] = _read_rows(f, offset, width, lo, hi - lo)
            yield start, out


def rank_chunks(folder: str | Path, settings: dict[str, Any], rank: int,
                chunk_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """One rank, after the barrier: its own shard checked against its manifest, then its rows as ``(first row,
    float32 [m, dim] array)`` chunks of at most ``chunk_size`` consecutive rows (a build into which every rank
    inserts its own rows: ``drmix index --backend milvus`` against a server). A share cut inside a sort chunk
    holds rows that are not consecutive there: each run of consecutive rows is its own chunk."""
    folder = Path(folder)
    world = settings["world_size"]
    parts = shard_parts(settings["count"], world, settings["align"], settings["batch_size"])[rank]
    why = check_shard(folder, rank, settings, parts)
    if why is not None:
        raise DataError(f"shard {rank} of {world} cannot be read: {why}.", path=folder,
                        fix="run the same command again: it encodes only the shards that are not complete.")
    npy, rows_npy, _ = _files(folder, rank, world)
    rows = np.load(rows_npy, allow_pickle=False)
    if not len(rows):
        return
    cuts = np.flatnonzero(np.diff(rows) != 1) + 1
    head = np.load(npy, mmap_mode="r", allow_pickle=False)
    offset, width = int(head.offset), head.shape[1]
    del head
    step = max(1, int(chunk_size))
    with open(npy, "rb") as f:
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)]):
            for start in range(a, b, step):
                stop = min(b, start + step)
                yield int(rows[start]), _read_rows(f, offset, width, start, stop - start)


def merge_shards(folder: Path, settings: dict[str, Any]) -> np.ndarray:
    """Rank 0, after the barrier: every shard checked against its manifest, its rows put in their places."""
    world, n = settings["world_size"], settings["count"]
    _checked_shares(folder, settings)
    files = [_files(folder, rank, world) for rank in range(world)]
    parts = [np.load(npy, mmap_mode="r", allow_pickle=False) for npy, _, _ in files]
    out = np.empty((n, max((p.shape[1] for p in parts if p.ndim == 2), default=0)), dtype=np.float32)
    for part, (_, rows, _) in zip(parts, files):
        if len(part):
            out[np.load(rows, allow_pickle=False)] = part
    return out


# ----------------------------------------------------------------------------------------------- one run

def _settings(model: Any, texts: Sequence[str], world_size: int, *, prompt: str, max_length: int | None,
              normalize: bool, precision: str | None, batch_size: int, model_name: str) -> dict[str, Any]:
    return {"world_size": world_size, "model": model_name, "model_fingerprint": tensors_digest(model),
            "corpus_fingerprint": texts_digest(texts), "count": len(texts), "prompt": prompt,
            "max_length": max_length or getattr(model, "max_seq_length", None), "normalize": bool(normalize),
            "precision": precision or "auto", "batch_size": batch_size, "align": shard_align(),
            "split": SPLIT}


def agree(ranks: Ranks, error: DrmixError | None) -> None:
    """A collective: every rank stops with the first rank's error when any rank had one."""
    found = ranks.gather(None if error is None else (type(error).__name__, error.message, error.path, error.fix))
    if error is not None:
        raise error
    for rank, item in enumerate(found):
        if item is not None:
            cls = getattr(errors, item[0], DrmixError)
            raise cls(f"rank {rank} stopped: {item[1]}", path=item[2], fix=item[3])


def _encode_share(model: Any, texts: Sequence[str], parts: Sequence[Part], *, show_progress: bool, desc: str,
                  device: str | None, prompt: str, max_length: int | None, **encode_kw: Any
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(ascending rows, their embeddings) of a share: whole chunks through ``encode_texts`` ``BLOCK_CHUNKS`` at a
    time; a part of a chunk as its texts in the chunk's length order, which ``encode_texts`` (a stable sort)
    keeps, so it forms the batches one process forms there. The bar counts passages."""
    from tqdm.auto import tqdm

    from drmix.retrieval.encode import embedding_dim, encode_texts, length_order, token_lengths

    devices = [device] if device is not None else None
    kw = {"devices": devices, "prompt": prompt, "max_length": max_length, **encode_kw}
    rows, embs = [], []
    whole: list[Part] = []

    def flush() -> None:
        if whole:
            rows.append(np.arange(whole[0][0], whole[-1][1], dtype=np.int64))
            embs.append(encode_texts(model, texts[whole[0][0]:whole[-1][1]], **kw))
            bar.update(whole[-1][1] - whole[0][0])
            whole.clear()

    with tqdm(total=share_rows(parts), desc=desc, unit="passage", unit_scale=True, disable=not show_progress) as bar:
        for part in parts:
            start, stop, first, last = part
            if first == 0 and last == stop - start:
                whole.append(part)
                if len(whole) == BLOCK_CHUNKS:
                    flush()
                continue
            flush()
            picked = start + length_order(token_lengths(model, texts[start:stop], prompt, max_length))[first:last]
            emb = encode_texts(model, [texts[i] for i in picked], **kw)
            ascending = np.argsort(picked, kind="stable")
            rows.append(picked[ascending].astype(np.int64))
            embs.append(emb[ascending])
            bar.update(last - first)
        flush()
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros((0, embedding_dim(model)), dtype=np.float32)
    return np.concatenate(rows), np.concatenate(embs)


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
    shares = shard_parts(len(texts), ranks.world_size, settings["align"], batch_size)
    parts = shares[ranks.rank]
    if ranks.main and ranks.world_size > 1:
        log.info("%s", describe_shares(shares, len(texts), batch_size))
    why = check_shard(folder, ranks.rank, settings, parts)
    encoded, error = 0, None
    if why is not None:
        if why != "missing":
            log.warning("rank %d: %s; encoding it again", ranks.rank, why)
        try:
            rows, emb = _encode_share(model, texts, parts, show_progress=show_progress and ranks.main,
                                      desc=f"encoding shard {ranks.rank + 1}/{ranks.world_size}", device=device,
                                      batch_size=batch_size, prompt=prompt, max_length=max_length,
                                      normalize=normalize, precision=precision)
            write_shard(folder, ranks.rank, settings, parts, rows, emb)
            encoded = len(rows)
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
