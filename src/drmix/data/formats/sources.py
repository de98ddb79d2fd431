"""Where training rows come from: JSONL read line by line (so an error names its line), and everything else
through ``datasets`` (parquet, CSV/TSV, JSON arrays, Arrow files, ``save_to_disk`` folders, Hub dataset ids),
memory-mapped Arrow so a large file keeps memory flat.

A Hub dataset id fails in seconds when the Hub cannot be used: in offline mode (``HF_HUB_OFFLINE``)
``datasets`` answers from its cache at once, and otherwise one HEAD request with a short timeout is made
before ``datasets.load_dataset`` (whose own retries take over a minute without a network).
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from drmix.errors import DataError

log = logging.getLogger(__name__)

#: file extensions drmix reads as collections, and how
FILE_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv",
              ".tsv": "tsv", ".arrow": "arrow"}

#: seconds the Hub reachability check waits
HUB_TIMEOUT = 5.0

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_PATH_SUFFIXES = {*FILE_KINDS, ".yaml", ".yml", ".gz", ".zip", ".txt"}


def file_kind(path: Path) -> str | None:
    """``jsonl``, ``json`` (a JSON array), ``parquet``, ``csv``, ``tsv`` or ``arrow``; None for other files.

    A ``.json`` file whose first character is not ``[`` is JSON Lines.
    """
    kind = FILE_KINDS.get(path.suffix.lower())
    if kind == "json" and not _json_is_array(path):
        return "jsonl"
    return kind


def _json_is_array(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1] == b"["


def is_saved_dataset(p: Path) -> bool:
    """A ``Dataset.save_to_disk`` folder."""
    return p.is_dir() and ((p / "state.json").is_file() or (p / "dataset_info.json").is_file())


def is_saved_dataset_dict(p: Path) -> bool:
    """A ``DatasetDict.save_to_disk`` folder."""
    return p.is_dir() and (p / "dataset_dict.json").is_file()


def looks_like_hub_id(text: str) -> bool:
    """``owner/name`` that is not a path (no leading ``.``, ``/`` or ``~``, no data-file extension)."""
    if not _HUB_ID.match(text) or text.startswith((".", "~")):
        return False
    return Path(text).suffix.lower() not in _PATH_SUFFIXES


def hub_offline() -> bool:
    """Whether the Hub is switched off in this process (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``)."""
    try:
        import datasets

        if getattr(datasets.config, "HF_HUB_OFFLINE", False):
            return True
    except ImportError:  # pragma: no cover
        pass
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_endpoint() -> str:
    env = os.environ.get("HF_ENDPOINT")
    if env:
        return env.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def hub_unreachable(timeout: float = HUB_TIMEOUT) -> str | None:
    """Why the Hub cannot be reached (one HEAD request, ``timeout`` seconds, proxies honoured), or None."""
    import socket
    import urllib.error
    import urllib.request

    url = hub_endpoint()
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except (urllib.error.URLError, socket.timeout, OSError) as e:
        reason = getattr(e, "reason", e)
        return f"{url} cannot be reached: {reason}"
    return None


def _hub_fix(repo_id: str) -> str:
    return (f"if {repo_id!r} is meant as a local path, check it; for the Hub dataset, run once with a network (it "
            "is then cached), or save it with datasets (`load_dataset(...).save_to_disk(DIR)`) and pass DIR.")


def load_hub(repo_id: str, subset: str | None, split: str) -> Any:
    """``datasets.load_dataset(repo_id, subset, split=split)``, failing in seconds without the Hub."""
    import datasets

    if not hub_offline():
        why = hub_unreachable()
        if why is not None:
            raise DataError(f"not a local path, and the Hugging Face Hub dataset {repo_id!r} cannot be loaded: "
                            f"{why}.", path=repo_id, fix=_hub_fix(repo_id))
    try:
        with quiet():
            return datasets.load_dataset(repo_id, subset, split=split)
    except (ConnectionError, OSError) as e:
        offline = " (offline mode: HF_HUB_OFFLINE is set and it is not in the cache)" if hub_offline() else ""
        raise DataError(f"not a local path, and the Hugging Face Hub dataset {repo_id!r} cannot be loaded"
                        f"{offline}: {_first_line(e)}", path=repo_id, fix=_hub_fix(repo_id)) from None
    except ValueError as e:  # unknown split or config
        raise DataError(f"Hub dataset {repo_id!r}: {_first_line(e)}", path=repo_id,
                        fix="pick an existing split with NAME:split (or NAME:subset:split).") from None
    except Exception as e:  # DatasetNotFoundError and friends
        raise DataError(f"Hub dataset {repo_id!r} cannot be loaded: {_first_line(e)}", path=repo_id,
                        fix=_hub_fix(repo_id)) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class quiet:
    """``datasets``' progress bars off for the duration (restored after)."""

    def __enter__(self):
        import datasets

        self.was = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        return self

    def __exit__(self, *exc):
        import datasets

        if self.was:
            datasets.enable_progress_bars()
        return False


def load_table(kind: str, path: Path, cache_dir: Path) -> Any:
    """A parquet / CSV / TSV / JSON-array / Arrow file as a memory-mapped ``datasets.Dataset``.

    ``cache_dir`` receives the Arrow copy ``datasets`` builds (an Arrow stream file is mapped as it is).
    """
    import datasets

    try:
        with quiet():
            if kind == "arrow":
                try:
                    return datasets.Dataset.from_file(str(path))
                except Exception:  # an Arrow IPC *file* (Feather v2) rather than a stream: let datasets convert
                    return datasets.load_dataset("arrow", data_files=str(path), split="train", cache_dir=str(cache_dir))
            builder, kw = {"parquet": ("parquet", {}), "json": ("json", {}),
                           "csv": ("csv", {"keep_default_na": False}),
                           "tsv": ("csv", {"sep": "\t", "keep_default_na": False})}[kind]
            return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(cache_dir), **kw)
    except DataError:
        raise
    except Exception as e:
        cause = e.__cause__ or e.__context__ or e
        raise DataError(f"cannot be read as {kind} ({_first_line(cause)}).", path=path,
                        fix=f"check that the file is valid {kind} (the format is chosen by its extension).") from None


def load_saved(path: Path, split: str) -> Any:
    """A ``save_to_disk`` folder (Dataset, or the ``split`` of a DatasetDict), memory-mapped."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:
        raise DataError(f"saved dataset cannot be read ({_first_line(e)}).", path=path,
                        fix="pass a folder written by Dataset.save_to_disk or DatasetDict.save_to_disk.") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"saved DatasetDict has no split {split!r} (splits: {', '.join(ds)}).", path=path,
                            fix=f"pick one with {path}:SPLIT (e.g. {path}:{next(iter(ds), 'train')}).")
        return ds[split]
    return ds


def dataset_content_key(ds: Any) -> str:
    """A key of a saved dataset's content: the digests of its Arrow files (``cp -p`` proof, like JSONL)."""
    from drmix.data.pages import dataset_files
    from drmix.fingerprint import file_digest, hasher

    h = hasher()
    files = dataset_files(ds)
    for f in files:
        h.update(file_digest(f).encode())
    if not files:
        h.update(str(getattr(ds, "_fingerprint", "")).encode())
    indices = getattr(ds, "_indices", None)
    if indices is not None:
        h.update(str(getattr(ds, "_fingerprint", "")).encode())
    return h.hexdigest()


def first_jsonl_record(path: Path) -> tuple[int, dict[str, Any]] | None:
    """The first record of a JSONL file (its line number), or None for an empty file."""
    from drmix.io.read import iter_jsonl

    return next(iter(iter_jsonl(path)), None)


#: where collections come from, for the docs' table: (source, example, how drmix reads it, collection name)
SOURCE_KINDS = (
    ("JSONL file (`.jsonl`, `.ndjson`; `.json` not starting with `[`)", "`data/nq.jsonl`",
     "line by line (errors name the line), rows in any layout", "file stem"),
    ("JSON array (`.json`)", "`[{\"anchor\": ..., \"positive\": ...}, ...]`", "`datasets` (json)", "file stem"),
    ("parquet (`.parquet`)", "`train.parquet`", "`datasets` (parquet), memory-mapped", "file stem"),
    ("CSV / TSV (`.csv`, `.tsv`)", "`pairs.csv`", "`datasets` (csv; empty cells are empty texts)", "file stem"),
    ("Arrow (`.arrow`)", "`data-00000-of-00001.arrow`", "`datasets` (memory-mapped as it is)", "file stem"),
    ("saved `Dataset` / `DatasetDict`", "`my_ds/`, `my_dd:dev`", "`datasets.load_from_disk`; a DatasetDict's split "
     "with `NAME:split` (default `train`)", "folder name (`-split` when not train)"),
    ("Hub dataset id", "`owner/name`, `owner/name:split`, `owner/name:subset:split`", "`datasets.load_dataset`; "
     "without the Hub it fails in seconds", "`name` (`-subset`, `-split`)"),
    ("folder of the above", "`my_collections/`", "one collection per file (and per saved dataset), sorted",
     "file stems"),
    ("BEIR folder", "`scifact/`", "qrels split (`NAME:split`, default `train`): see the layout table", "folder name"),
    ("YAML list", "`mix.yaml`", "each item a collection with its own `name`, `instruction`, `weight`, `split`, "
     "`format`, `columns`", "as given"),
)


def sources_table() -> str:
    """The Markdown table of :data:`SOURCE_KINDS` (docs/data.md prints it with ``python -m drmix.data.formats``)."""
    lines = ["| source | example | how drmix reads it | collection name |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in SOURCE_KINDS]
    return "\n".join(lines)


__all__ = ["SOURCE_KINDS", "sources_table", "FILE_KINDS", "file_kind", "is_saved_dataset", "is_saved_dataset_dict", "looks_like_hub_id", "load_hub",
           "load_table", "load_saved", "hub_offline", "hub_unreachable", "dataset_content_key",
           "first_jsonl_record"]
