"""Guarding output folders: a drmix command never deletes or renames what a user put there.

Commands that write a whole folder (``drmix index``, ``drmix multicorpus build``, ``drmix localdocs
build``) replace their output atomically. Before they compute anything they call :func:`check_output_dir`,
which accepts a path that does not exist, an empty folder, or a folder holding drmix's own output of
the *same kind* (an earlier index, benchmark or documentation build), and refuses, with a
:class:`~drmix.errors.ConfigError`:

* a path that is a file (a folder is written there; the file is never renamed or replaced);
* a non-empty folder that is not drmix's output of that kind, unless ``overwrite`` is given;
* a folder that is, or contains, or lies inside one of the command's inputs (indexing ``data/scifact``
  into ``data/scifact`` would delete the corpus), even with ``overwrite``.

Each kind is recognised by the files its writer always produces (listed in :data:`MARKERS`).
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from drmix.errors import ConfigError


def _json_has(name: str, key: str, value_prefix: str | None = None) -> Callable[[Path], bool]:
    def check(folder: Path) -> bool:
        try:
            obj = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if not isinstance(obj, dict) or key not in obj:
            return False
        return value_prefix is None or str(obj[key]).startswith(value_prefix)
    return check


#: kind -> (test that a folder holds drmix's output of that kind, how the user recognises it)
MARKERS: dict[str, tuple[Callable[[Path], bool], str]] = {
    "index": (lambda d: ((d / "index.faiss").is_file() or (d / "vectors.npy").is_file())
              and _json_has("meta.json", "format_version")(d),
              "an index written by drmix index (vectors.npy or index.faiss, meta.json)"),
    "multicorpus": (_json_has("manifest.json", "format", "drmix-multicorpus"),
                    "a benchmark written by drmix multicorpus build (manifest.json)"),
    "localdocs": (lambda d: (d / "train").is_dir() and _json_has("stats.json", "families")(d),
                  "collections written by drmix localdocs build (train/, stats.json)"),
}


def model_saved(folder: str | Path) -> bool:
    """Whether ``folder`` holds a saved SentenceTransformer model (its ``modules.json`` is written last)."""
    return (Path(folder) / "modules.json").is_file()


def run_finished(run_dir: str | Path) -> bool:
    """Whether the training run in ``run_dir`` (``drmix train``, ``drmix pretrain``, a recipe's stage) finished:
    its final model is saved in ``run_dir/model``."""
    return model_saved(Path(run_dir) / "model")


def is_output_of(folder: str | Path, kind: str) -> bool:
    """Whether ``folder`` holds drmix's own output of ``kind`` (see :data:`MARKERS`)."""
    return MARKERS[kind][0](Path(folder))


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def check_output_dir(path: str | Path, kind: str, *, overwrite: bool = False,
                     inputs: Iterable[str | Path] = (), flag: str = "--overwrite") -> Path:
    """Refuse an output folder whose replacement would destroy user files; return the path.

    Args:
        path: the folder the command will (atomically) replace.
        kind: a key of :data:`MARKERS`: what the command writes.
        overwrite: the user asked to replace a non-empty folder of another kind.
        inputs: paths the command reads; the output may not be, contain or lie inside any of them.
        flag: the option that sets ``overwrite`` (named in the error's fix).
    """
    if kind not in MARKERS:
        raise ValueError(f"unknown output kind {kind!r}")
    path = Path(path).expanduser()
    resolved = Path(os.path.abspath(path)).resolve()
    for src in inputs:
        src_r = Path(os.path.abspath(Path(src).expanduser())).resolve()
        if _overlaps(resolved, src_r):
            raise ConfigError(f"the output folder overlaps the input {src}; writing it would delete the input.",
                              path=path, fix="choose an output folder outside the inputs.")
    if path.is_symlink() and not path.exists():
        raise ConfigError("the output path is a broken symbolic link.", path=path, fix="remove it or choose another path.")
    if path.exists() and not path.is_dir():
        raise ConfigError("the output path is a file; a folder is written here.", path=path,
                          fix="choose a new folder (the file is left as it is).")
    if not path.exists():
        return path
    try:
        empty = not any(path.iterdir())
    except PermissionError:
        raise ConfigError("the output folder cannot be read.", path=path,
                          fix="check its permissions or choose another folder.") from None
    if empty or is_output_of(path, kind) or overwrite:
        return path
    raise ConfigError(f"the output folder is not empty and does not hold {MARKERS[kind][1]}.", path=path,
                      fix=f"choose a new or empty folder, or pass {flag} to replace it (its contents are deleted).")
