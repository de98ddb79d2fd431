"""The output contract of every drmix command that writes: nothing a user has is lost.

Each writing command names its output *kind* (:data:`KINDS`) and calls :func:`claim_output` before any work
starts. The contract, in one place (docs/outputs.md has it per command):

* a **new** output (a path that does not exist, or an empty folder) is created;
* an existing output **of the same kind** (recognised by the files its writer always produces) is handled
  as the kind's ``existing`` policy says and the command documents: ``replace`` (replaced without a flag:
  an index, a benchmark build), ``continue`` (continued without a flag: the recipes skip finished stages),
  ``resume`` (continued only with ``--resume``; the trainer's own checks apply), ``overwrite`` (replaced
  only with ``--overwrite``);
* anything else is **refused with the reason and the flag**, before any work starts: a user's file where
  a folder is written (or a folder where a file is written), a folder with content the command did not
  write (a whole-folder output may replace it with ``--overwrite``: the user asked), an existing file
  (replaced only with ``--overwrite``), and -- even with ``--overwrite`` -- an output that is one of the
  command's inputs, lies inside one, or contains one;
* **replacement is atomic** and touches nothing but the output itself: whole folders through
  :func:`drmix.io.atomic_dir` (a sibling ``.NAME.old`` of the user's is never touched), files through
  :mod:`drmix.io`'s atomic writes; a command that writes files into a folder writes only its own names.
"""
from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


def _metrics_run(folder: Path) -> bool:
    """A drmix training run: a checkpoint, a saved model, or a metrics.jsonl whose first line is a JSON object."""
    if (folder / "checkpoints").is_dir() or model_saved(folder / "model"):
        return True
    try:
        with open(folder / "metrics.jsonl", encoding="utf-8") as f:
            return isinstance(json.loads(f.readline()), dict)
    except (OSError, ValueError):
        return False


def _sweep_results(path: Path) -> bool:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(obj, list) and all(isinstance(r, dict) and "setting" in r for r in obj)


@dataclass(frozen=True)
class OutputKind:
    """What a command writes and how an existing one is treated (see the module docstring)."""

    name: str
    what: str                                   # how the user recognises it (in the messages)
    layout: Literal["folder", "files", "file"]  # a whole folder (replaced atomically) / own files in a folder / a file
    existing: Literal["replace", "continue", "resume", "overwrite"]
    marker: Callable[[Path], bool] = lambda p: False
    names: tuple[str, ...] = ("*",)             # entries the command writes in its folder (glob patterns)


def model_saved(folder: str | Path) -> bool:
    """Whether ``folder`` holds a saved SentenceTransformer model (its ``modules.json`` is written last)."""
    return (Path(folder) / "modules.json").is_file()


def run_finished(run_dir: str | Path) -> bool:
    """Whether the training run in ``run_dir`` (``drmix train``, ``drmix pretrain``, a recipe's stage) finished:
    its final model is saved in ``run_dir/model``."""
    return model_saved(Path(run_dir) / "model")



KINDS: dict[str, OutputKind] = {k.name: k for k in (
    OutputKind("index", "an index written by drmix index (vectors.npy or index.faiss, meta.json)", "folder", "replace",
               lambda d: ((d / "index.faiss").is_file() or (d / "vectors.npy").is_file())
               and _json_has("meta.json", "format_version")(d),
               ("index.faiss", "vectors.npy", "ids.json", "meta.json", "docs.jsonl", "docs.offsets.npy")),
    OutputKind("multicorpus", "a benchmark written by drmix multicorpus build (manifest.json)", "folder", "replace",
               _json_has("manifest.json", "format", "drmix-multicorpus")),
    OutputKind("localdocs", "collections written by drmix localdocs build (train/, stats.json)", "folder", "replace",
               lambda d: (d / "train").is_dir() and _json_has("stats.json", "families")(d),
               ("train", "beir", "stats.json")),
    OutputKind("model", "a backbone written by drmix prune (modules.json, drmix_prune.json)", "folder", "overwrite",
               lambda d: model_saved(d) and (d / "drmix_prune.json").is_file()),
    OutputKind("train", "a drmix training run (metrics.jsonl, checkpoints/, model/)", "files", "resume",
               _metrics_run),
    OutputKind("recipe", "a drmix pipeline output (pipeline.yaml / drama.yaml / adapt.yaml / summary.json and stage "
               "folders)",
               "files", "continue",
               lambda d: any((d / n).is_file() for n in ("pipeline.yaml", "drama.yaml", "adapt.yaml", "summary.json"))
               or any(_metrics_run(c) for c in d.iterdir() if c.is_dir())),
    OutputKind("demo", "an earlier drmix demo (demo.json)", "files", "overwrite", lambda d: (d / "demo.json").is_file(),
               ("data", "runs", "eval", "results.md", "results.json", "demo.json")),
    OutputKind("eval", "an evaluation written by drmix eval (eval.json, eval.md)", "files", "overwrite",
               _json_has("eval.json", "results"), ("eval.json", "eval.md", "mteb")),
    OutputKind("compare", "a comparison written by drmix compare (compare.json, compare.md)", "files", "overwrite",
               _json_has("compare.json", "baseline"), ("compare.json", "compare.md")),
    OutputKind("shift", "an analysis written by drmix analyze shift (shift.json, shift.md, plots)", "files",
               "overwrite", lambda d: (d / "shift.json").is_file(),
               ("shift.json", "shift.md", "query_types.png", "jaccard.png")),
    OutputKind("sweep", "a sweep written by drmix multicorpus sweep (table.md, results.json, plots)", "files",
               "overwrite", lambda d: _sweep_results(d / "results.json"),
               ("table.md", "results.json", "recall_vs_k-*.png")),
    OutputKind("file", "a file", "file", "overwrite"),
)}

#: kind -> (test that a folder holds drmix's output of that kind, how the user recognises it)
MARKERS: dict[str, tuple[Callable[[Path], bool], str]] = {k: (v.marker, v.what) for k, v in KINDS.items()}


def is_output_of(folder: str | Path, kind: str) -> bool:
    """Whether ``folder`` holds drmix's own output of ``kind`` (see :data:`KINDS`)."""
    return KINDS[kind].marker(Path(folder))


def _overlaps(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def _resolved(path: str | Path) -> Path:
    return Path(os.path.abspath(Path(path).expanduser())).resolve()


def _foreign(folder: Path, kind: OutputKind) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not any(fnmatch.fnmatch(p.name, n) for n in kind.names))


def claim_output(path: str | Path, kind: str, *, inputs: Iterable[str | Path | None] = (), overwrite: bool = False,
                 resume: bool = False, flag: str = "--overwrite", sidecars: Iterable[str | Path] = ()) -> Path:
    """Check ``path`` against the output contract for ``kind`` before any work; return it or raise ConfigError.

    Args:
        path: the output (a folder, or a file for the ``file`` kind).
        kind: a key of :data:`KINDS`.
        inputs: paths the command reads (None and paths that do not exist are skipped); the output may not
            be, contain or lie inside any of them, whatever the flags.
        overwrite: the user passed ``flag`` (replace an own output of an ``overwrite`` kind, an existing
            file, or a whole folder with other content).
        resume: the user passed ``--resume`` (continue an own output of a ``resume`` kind).
        flag: the option that sets ``overwrite``, named in the errors' fixes.
        sidecars: files written next to a ``file`` output (e.g. ``OUT.stats.json``): they count as the output.
    """
    k = KINDS[kind]
    path = Path(path).expanduser()
    resolved = _resolved(path)
    for src in inputs:
        if src is None or not Path(src).expanduser().exists():
            continue
        if _overlaps(resolved, _resolved(src)):
            what = ("is" if resolved == _resolved(src) else "lies inside" if _resolved(src) in resolved.parents
                    else "contains")
            raise ConfigError(f"the output overlaps the input {src} (it {what} it); writing it would overwrite "
                              "the input.", path=path, fix="choose an output outside the inputs.")
    if path.is_symlink() and not path.exists():
        raise ConfigError("the output path is a broken symbolic link.", path=path, fix="remove it or choose another path.")
    if k.layout == "file":
        if path.is_dir():
            raise ConfigError("the output path is a folder; a file is written here.", path=path,
                              fix="name a file (the folder is left as it is).")
        existing = [p for p in (path, *map(Path, sidecars)) if p.exists()]
        if existing and not overwrite:
            raise ConfigError(f"the output file exists ({', '.join(str(p) for p in existing)}).", path=path,
                              fix=f"pass {flag} to replace it, or choose another output file.")
        return path
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
    if empty:
        return path
    foreign = _foreign(path, k)
    if k.marker(path) and not foreign:
        if k.existing in ("replace", "continue") or (k.existing == "overwrite" and overwrite) \
                or (k.existing == "resume" and (resume or overwrite)):
            return path
        if k.existing == "resume":
            raise ConfigError(f"the output folder holds {k.what}.", path=path,
                              fix="pass --resume to continue it, or choose another folder.")
        raise ConfigError(f"the output folder holds {k.what}.", path=path,
                          fix=f"pass {flag} to replace it, or choose another folder.")
    if k.layout == "folder" and overwrite:
        return path
    shown = (": " + ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")) if foreign else ""
    if k.layout == "folder":
        raise ConfigError(f"the output folder is not empty and does not hold {k.what}{shown}.", path=path,
                          fix=f"choose a new or empty folder, or pass {flag} to replace it (its contents are deleted).")
    raise ConfigError(f"the output folder holds files drmix did not write{shown}; it writes {k.what}.", path=path,
                      fix="choose a new or empty folder (nothing in this one is touched).")


def check_output_dir(path: str | Path, kind: str, *, overwrite: bool = False,
                     inputs: Iterable[str | Path] = (), flag: str = "--overwrite") -> Path:
    """:func:`claim_output` for a whole-folder output (kept for callers of the earlier name)."""
    return claim_output(path, kind, overwrite=overwrite, inputs=inputs, flag=flag)


#: config fields that name what a command reads (training data, models, test sets, corpora)
INPUT_FIELDS = ("data", "dev", "eval_data", "test_data", "select_on", "corpus", "model", "reference_model",
                "weights_file", "teacher", "prune_from")


def _field(config: object, name: str) -> object:
    """A config field by its flat name (a config of parts: :meth:`drmix.config.Config.flat`)."""
    flat = config.flat(mode="python") if hasattr(config, "flat") else {}
    return flat[name] if name in flat else getattr(config, name, None)


def config_inputs(config: object) -> list[Path]:
    """The existing local paths a config reads (see :data:`INPUT_FIELDS`); hub ids and names are skipped."""
    out: list[Path] = []
    for name in INPUT_FIELDS:
        value = _field(config, name)
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            v = getattr(v, "path", v)
            if isinstance(v, (str, Path)) and str(v) and Path(v).expanduser().exists():
                out.append(Path(v).expanduser())
    return out


def claim_run(config: object, kind: str = "train") -> Path:
    """:func:`claim_output` for a config-driven command (train, pretrain, mixture optimize: ``train``; the
    pipelines: ``recipe``): its ``output_dir`` against its inputs and ``--resume``."""
    return claim_output(_field(config, "output_dir"), kind, inputs=config_inputs(config),
                        resume=bool(_field(config, "resume")))
