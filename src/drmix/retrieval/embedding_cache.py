"""Corpus embeddings cached by content: a passage a model has encoded is never encoded again.

``encode_texts(..., cache_embeddings=True)`` looks every text up here first and sends only the texts not
found to the model. An entry is keyed by

* the **settings**: the model's weights fingerprint (:func:`drmix.fingerprint.weights_fingerprint`:
  its files' content hash while it is as loaded), its tokenizer (:func:`drmix.data.tokenized.tokenizer_fingerprint`),
  its modules and their configuration (pooling, normalisation, Dense layers), the prompt, the token limit,
  ``normalize``, the precision as it resolves on the model's device, and ``truncate_dim`` -- one folder
  ``cache_root()/embedding-cache/<settings hash>/`` per combination;
* the **text**: the digest of its UTF-8 bytes (:func:`drmix.fingerprint.text_key`, 20 bytes).

So a second stage, a rerun or another command that encodes the same passages with the same model and
settings reads them back, and an edited passage (another hash) is encoded afresh. Each folder holds shards:
``<id>.emb.npy`` (float32 rows) and ``<id>.keys.npy`` (their text hashes), each written to a temporary file
and renamed; the keys file is written last and marks the shard complete, so a killed run leaves whole
shards (one per chunk of 16,384 texts encoded) that the next run reuses, and never half of one (an embeddings
file whose keys never came is deleted once it is an hour old).

Size: a row costs ``4 * dim + 20`` bytes (1,556 for a 384-dimensional model: 1.6 GB per million
passages). The whole cache is kept under ``DRMIX_EMBEDDING_CACHE_GB`` (default 20): after each write the
least recently used shards of any model are deleted until it fits (a shard read is marked used).
Opt out per call (``cache_embeddings=False``, the default of the Python API), per command
(``--no-cache-embeddings``), or for everything with ``DRMIX_EMBEDDING_CACHE=0``.
"""
from __future__ import annotations

import io
import logging
import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from drmix.fingerprint import DIGEST_SIZE

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
#: bytes of a text's key
KEY_BYTES = DIGEST_SIZE
DEFAULT_MAX_GB = 20.0


def cache_dir() -> Path:
    from drmix.io.checks import cache_root

    return cache_root() / "embedding-cache"


def disabled() -> bool:
    """True when ``DRMIX_EMBEDDING_CACHE`` is set to 0/false/no/off."""
    return os.environ.get("DRMIX_EMBEDDING_CACHE", "").strip().lower() in ("0", "false", "no", "off")


def max_bytes() -> int:
    from drmix.errors import ConfigError

    raw = os.environ.get("DRMIX_EMBEDDING_CACHE_GB", "")
    try:
        gb = float(raw) if raw.strip() else DEFAULT_MAX_GB
    except ValueError:
        raise ConfigError(f"DRMIX_EMBEDDING_CACHE_GB={raw!r} is not a number.",
                          fix="set it to the cache's size limit in GB, e.g. DRMIX_EMBEDDING_CACHE_GB=20, "
                              "or DRMIX_EMBEDDING_CACHE=0 to turn the cache off.") from None
    return int(gb * 1e9)


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """``[n, KEY_BYTES]`` uint8: each text's digest (:func:`drmix.fingerprint.text_key`)."""
    from drmix.fingerprint import text_key

    out = np.empty((len(texts), KEY_BYTES), dtype=np.uint8)
    for i, t in enumerate(texts):
        out[i] = np.frombuffer(text_key(t), dtype=np.uint8)
    return out


def _module_config(module: Any) -> Any:
    fn = getattr(module, "get_config_dict", None)
    try:
        return fn() if callable(fn) else None
    except Exception:  # noqa: BLE001 - a module without a serialisable config is keyed by its class only
        return None


def settings_key(model: Any, *, prompt: str, max_length: int | None, normalize: bool, precision: str | None) -> str:
    """The hash of everything besides the text that an embedding depends on (see the module docstring)."""
    from drmix.data.tokenized import tokenizer_fingerprint
    from drmix.device import model_device, resolve_precision
    from drmix.fingerprint import config_digest, weights_fingerprint

    device = model_device(model)
    precision = (precision or "auto").lower()
    resolved = precision if precision in ("int8", "onnx", "onnx-int8") else resolve_precision(precision, device)
    modules = [[type(m).__module__ + "." + type(m).__qualname__, _module_config(m)]
               for m in getattr(model, "_modules", {}).values()]
    tok = getattr(model, "tokenizer", None)
    payload = {"version": FORMAT_VERSION, "weights": weights_fingerprint(model),
               "tokenizer": tokenizer_fingerprint(model) or type(tok).__qualname__, "modules": modules,
               "prompt": prompt, "max_length": max_length or getattr(model, "max_seq_length", None),
               "normalize": bool(normalize), "precision": resolved, "device": device.type,
               "truncate_dim": getattr(model, "truncate_dim", None)}
    return config_digest(payload)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


class EmbeddingCache:
    """The cached embeddings of one model and one set of settings (one folder of shards)."""

    def __init__(self, model: Any, *, prompt: str, max_length: int | None, normalize: bool,
                 precision: str | None, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else cache_dir()
        self.folder = self.root / settings_key(model, prompt=prompt, max_length=max_length, normalize=normalize,
                                               precision=precision)
        self.used: set[Path] = set()

    def _shards(self) -> list[tuple[Path, np.ndarray]]:
        shards = []
        for keys_path in sorted(self.folder.glob("*.keys.npy")) if self.folder.is_dir() else []:
            try:
                keys = np.load(keys_path)
            except (OSError, ValueError) as e:
                log.warning("embedding cache shard %s unreadable (%s); ignored", keys_path, e)
                continue
            if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != KEY_BYTES:
                log.warning("embedding cache shard %s holds %s %s, not [n, %d] uint8 keys; ignored", keys_path,
                            keys.dtype, list(keys.shape), KEY_BYTES)
                continue
            shards.append((keys_path, keys))
        return shards

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(found mask, the found rows' embeddings in order) for ``keys`` from :func:`text_keys`."""
        found = np.zeros(len(keys), dtype=bool)
        rows: np.ndarray | None = None
        want = keys.view(np.dtype((np.void, KEY_BYTES))).ravel()
        for keys_path, stored in self._shards():
            if not len(stored):
                continue
            have = stored.view(np.dtype((np.void, KEY_BYTES))).ravel()
            order = np.argsort(have, kind="stable")
            pos = np.searchsorted(have[order], want)
            pos = np.minimum(pos, len(have) - 1)
            hit = (have[order][pos] == want) & ~found
            if not hit.any():
                continue
            try:
                emb = np.load(keys_path.with_name(keys_path.name[:-len(".keys.npy")] + ".emb.npy"), mmap_mode="r")
            except (OSError, ValueError) as e:
                log.warning("embedding cache shard %s unreadable (%s); ignored", keys_path, e)
                continue
            if emb.shape[0] != len(stored) or (rows is not None and emb.shape[1] != rows.shape[1]):
                continue
            if rows is None:
                rows = np.empty((len(keys), emb.shape[1]), dtype=np.float32)
            idx = np.nonzero(hit)[0]
            rows[idx] = emb[order[pos[idx]]]
            found |= hit
            self.used.add(keys_path)
        if rows is not None:
            self._touch()
        return found, rows

    def store(self, keys: np.ndarray, emb: np.ndarray) -> None:
        """Write one shard (embeddings first, then the keys that complete it), then keep the cache in bounds."""
        from drmix.io.atomic import atomic_write_bytes

        if not len(keys):
            return
        name = uuid.uuid4().hex
        try:
            atomic_write_bytes(self.folder / f"{name}.emb.npy", _npy(np.ascontiguousarray(emb, dtype=np.float32)))
            atomic_write_bytes(self.folder / f"{name}.keys.npy", _npy(np.ascontiguousarray(keys)))
        except OSError as e:  # a full disk costs the cache, never the run
            log.warning("could not write the embedding cache in %s (%s); continuing without it", self.folder, e)
            return
        self.used.add(self.folder / f"{name}.keys.npy")
        prune(self.root, max_bytes(), keep=self.used)

    def _touch(self) -> None:
        for p in self.used:
            try:
                os.utime(p)
            except OSError:
                pass


def prune(root: Path, limit: int, *, keep: set[Path] = frozenset()) -> int:
    """Delete the least recently used shards under ``root`` until it holds at most ``limit`` bytes (never
    the shards in ``keep``); returns the bytes deleted."""
    shards = []
    for keys_path in root.glob("*/*.keys.npy"):
        emb_path = keys_path.with_name(keys_path.name[:-len(".keys.npy")] + ".emb.npy")
        try:
            size = keys_path.stat().st_size + (emb_path.stat().st_size if emb_path.exists() else 0)
            shards.append((keys_path.stat().st_mtime, keys_path, emb_path, size))
        except OSError:
            continue
    freed = 0
    for emb_path in root.glob("*/*.emb.npy"):  # a run killed between a shard's two files, an hour ago or more
        keys_path = emb_path.with_name(emb_path.name[:-len(".emb.npy")] + ".keys.npy")
        try:
            if not keys_path.exists() and time.time() - emb_path.stat().st_mtime > 3600:
                emb_path.unlink()
        except OSError:
            pass
    total = sum(s[3] for s in shards)
    for _, keys_path, emb_path, size in sorted(shards, key=lambda s: s[0]):
        if total - freed <= limit:
            break
        if keys_path in keep:
            continue
        for p in (keys_path, emb_path):  # the keys first: a shard without them is never read
            try:
                p.unlink()
            except OSError:
                pass
        freed += size
    return freed


__all__ = ["EmbeddingCache", "text_keys", "settings_key", "cache_dir", "prune", "disabled", "max_bytes"]
