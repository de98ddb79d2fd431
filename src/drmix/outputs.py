"""The output contract of every drmix command that writes: nothing a user has is lost.

Each writing command names its output *kind* (:data:`KINDS`) and calls :func:`claim_output` before any work
starts. The contract, in one place (docs/outputs.md has it per command):

* a **new** output (a path that does not exist, or an empty folder) is created;
* an existing output **of the same kind** (recognised by the files its writer always produces) is handled
  as the kind's ``existing`` policy says and the command documents: ``replace`` (replaced without a flag:
  an index, a benchmark build), ``continue`` (continued without a flag: the recipes skip finished stages),
  ``resume`` (continued only with ``--resume``; the trainer's own checks apply), ``overwrite`` (replaced
  only with ``--overwrite``); a folder holding only the command's own working folders, before its marker is
  written (``shards/`` of a sharded ``drmix eval`` that was killed), is its interrupted output and is continued;
  drmix's lock file (:mod:`drmix.lock`: a run holding the folder) is never content;
* anything else is **refused with the reason and the flag**, before any work starts: a user's file where
  a folder is written (or a folder where a file is written), a folder with content the command did not
  write (a whole-folder output may replace it with ``--overwrite``: the user asked), an existing file
  (replaced only with ``--overwrite``), and -- even with ``--overwrite`` -- an output that is one of the
  command's inputs, lies inside one, or contains one;
* **replacement is atomic** and touches nothing but the output itself: whole folders through
  :func:`drmix.io.atomic.atomic_dir` (the path holds the complete old or the complete new folder at every instant;
  a sibling ``.NAME.old`` of the user's is never touched), files through :mod:`drmix.io`'s atomic writes; a
  command that writes files into a folder writes only its own names. "Its own names" go down into the
  folders a command writes (``train/<name>.jsonl`` of a benchmark), so a user's file anywhere in an
  earlier output is foreign;
* an output that cannot be written (a path under a file, a read-only folder) is refused before the work
  (:func:`drmix.io.checks.check_writable`), and the hidden folders of a killed replacement are recovered or
  removed first (:func:`drmix.io.atomic.recover_swap`);
* an LLM cache (``--cache``) is an output too (:func:`claim_cache`): never an input, never a file that is
  not a drmix cache.
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
from drmix.lock import LOCK_NAME


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


#: the files of an index folder written before its meta.json recorded them (memory and faiss-disk)
INDEX_FILES = ("index.faiss", "vectors.npy", "ids.json", "meta.json", "docs.jsonl", "docs.offsets.npy",
               "lists.ivfdata", "vectors.f32")


def _recorded_index_files(folder: Path) -> tuple[str, ...]:
    """The files an index's ``meta.json`` records (``files``: every folder backend's build writes the record,
    drmix.retrieval.backends.folder); empty for an index written before that record."""
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    files = meta.get("files") if isinstance(meta, dict) else None
    return tuple(n for n in files if isinstance(n, str) and "/" not in n) if isinstance(files, dict) else ()


def _index_files(folder: Path) -> tuple[str, ...]:
    recorded = _recorded_index_files(folder)
    return ("meta.json", *recorded) if recorded else INDEX_FILES


def _is_index(folder: Path) -> bool:
    return _json_has("meta.json", "format_version")(folder) and (
        (folder / "index.faiss").is_file() or (folder / "vectors.npy").is_file()
        or bool(_recorded_index_files(folder)))


def _multicorpus_files(folder: Path) -> tuple[str, ...]:
    """What drmix multicorpus build wrote in ``folder``, from its manifest: the manifest, one BEIR folder
    per corpus and ``train/<name>.jsonl`` per side."""
    try:
        man = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        man = {}
    corpora = man.get("corpora") if isinstance(man, dict) else None
    train = man.get("train") if isinstance(man, dict) else None
    out = ["manifest.json"]
    for rel in (corpora.values() if isinstance(corpora, dict) else ()):
        if isinstance(rel, str) and rel and "/" not in rel.strip("/"):
            rel = rel.strip("/")
            out += [f"{rel}/corpus.jsonl", f"{rel}/queries.jsonl", f"{rel}/qrels/*.tsv"]
    for rel in (train.values() if isinstance(train, dict) else ()):
        if isinstance(rel, str) and rel:
            out.append(rel.strip("/"))
    return tuple(out)


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
    # a pattern without "/" owns a top-level entry with all below it; "train/*.jsonl" owns files below a
    # folder (the others in it are foreign)
    own: Callable[[Path], tuple[str, ...]] | None = None  # the names read from the folder (its manifest)

    def own_names(self, folder: Path) -> tuple[str, ...]:
        return self.own(folder) if self.own is not None else self.names


def model_saved(folder: str | Path) -> bool:
    """Whether ``folder`` holds a saved SentenceTransformer model (its ``modules.json`` is written last)."""
    return (Path(folder) / "modules.json").is_file()


def run_finished(run_dir: str | Path) -> bool:
    """Whether the training run in ``run_dir`` (``drmix train``, ``drmix pretrain``, a recipe's stage) finished:
    its final model is saved in ``run_dir/model``."""
    return model_saved(Path(run_dir) / "model")



KINDS: dict[str, OutputKind] = {k.name: k for k in (
    OutputKind("shards", "the shards of a sharded encoding (shards.json, rank-*-of-*.npy/.rows.npy/.json)", "files", "continue",
               _json_has("shards.json", "corpus_fingerprint"),
               ("shards.json", "rank-*-of-*.npy", "rank-*-of-*.json", ".rank-*-of-*.*.tmp", ".shards.json.*.tmp")),
    OutputKind("index", "an index written by drmix index (vectors.npy or index.faiss, meta.json)", "folder", "replace",
               _is_index, INDEX_FILES, own=_index_files),
    OutputKind("multicorpus", "a benchmark written by drmix multicorpus build (manifest.json)", "folder", "replace",
               _json_has("manifest.json", "format", "drmix-multicorpus"), own=_multicorpus_files),
    OutputKind("localdocs", "collections written by drmix localdocs build (train/, stats.json)", "folder", "replace",
               lambda d: (d / "train").is_dir() and _json_has("stats.json", "families")(d),
               ("train/*.jsonl", "beir/*/corpus.jsonl", "beir/*/queries.jsonl", "beir/*/qrels/*.tsv",
                "stats.json")),
    OutputKind("model", "a backbone written by drmix prune (modules.json, drmix_prune.json)", "folder", "overwrite",
               lambda d: model_saved(d) and (d / "drmix_prune.json").is_file()),
    OutputKind("train", "a drmix training run (metrics.jsonl, checkpoints/, model/)", "files", "resume",
               _metrics_run),
    OutputKind("recipe", "a drmix pipeline output (pipeline.yaml / drama.yaml / adapt.yaml / audit.yaml / "
               "summary.json and stage folders)",
               "files", "continue",
               lambda d: any((d / n).is_file() for n in ("pipeline.yaml", "drama.yaml", "adapt.yaml", "audit.yaml",
                                                         "summary.json"))
               or any(_metrics_run(c) for c in d.iterdir() if c.is_dir())),
    OutputKind("demo", "an earlier drmix demo (demo.json)", "files", "overwrite", lambda d: (d / "demo.json").is_file(),
               ("data", "runs", "eval", "results.md", "results.json", "demo.json")),
    OutputKind("eval", "an evaluation written by drmix eval (eval.json, eval.md)", "files", "overwrite",
               _json_has("eval.json", "results"), ("eval.json", "eval.md", "mteb", "shards")),
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
    from drmix.io.checks import resolved_path

    return resolved_path(path)


#: the marker :meth:`drmix.retrieval.ranks.Ranks.check_shared` writes in a folder every node must share, for the
#: moment the other ranks take to read it: not an entry of the folder (another rank may claim it meanwhile)
SHARED_MARKER = ".drmix-shared.{}.tmp"


def _entries(folder: Path) -> list[Path]:
    """The entries of ``folder`` that are content: drmix's lock (and its temporary: a run holding the folder,
    drmix.lock) and a shared-folder marker of the moment are not."""
    return [p for p in folder.iterdir()
            if not p.name.startswith(LOCK_NAME) and not fnmatch.fnmatchcase(p.name, SHARED_MARKER.format("*"))]


def _matches(rel: tuple[str, ...], pattern: str) -> bool:
    parts = pattern.split("/")
    return len(parts) == len(rel) and all(fnmatch.fnmatchcase(r, p) for r, p in zip(rel, parts))


def _foreign(folder: Path, kind: OutputKind) -> list[str]:
    """Entries of ``folder`` the command did not write, as relative paths (a wholly foreign folder once)."""
    patterns = kind.own_names(folder)
    whole = [p for p in patterns if "/" not in p]
    nested = [p for p in patterns if "/" in p]
    out: list[str] = []
    for entry in sorted(_entries(folder)):
        if any(fnmatch.fnmatchcase(entry.name, p) for p in whole):
            continue
        inner = [p for p in nested if fnmatch.fnmatchcase(entry.name, p.split("/", 1)[0])]
        if not inner or entry.is_symlink() or not entry.is_dir():
            out.append(entry.name + ("/" if entry.is_dir() else ""))
            continue
        for p in sorted(entry.rglob("*")):
            if p.is_dir() and not p.is_symlink():
                continue
            rel = p.relative_to(folder).parts
            if not any(_matches(rel, pat) for pat in inner):
                out.append("/".join(rel))
    return out


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
    from drmix.io.atomic import recover_swap
    from drmix.io.checks import check_writable, write_target

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
    if k.layout == "folder":
        recover_swap(write_target(path))  # a killed replacement: the complete folder back at path, the hidden rest removed
    check_writable(path, into=k.layout == "files")
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
        entries = _entries(path)  # a lock or a shared-folder marker is no content
    except PermissionError:
        raise ConfigError("the output folder cannot be read.", path=path,
                          fix="check its permissions or choose another folder.") from None
    if not entries:
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
    if k.layout == "files" and not foreign and k.names != ("*",) and all(p.is_dir() for p in entries):
        return path  # only the command's own working folders (eval's shards/), no marker yet: an interrupted run
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
            v = v.get("path") if isinstance(v, dict) else getattr(v, "path", v)
            if isinstance(v, (str, Path)) and str(v) and Path(v).expanduser().exists():
                out.append(Path(v).expanduser())
    return out


def claim_run(config: object, kind: str = "train") -> Path:
    """:func:`claim_output` for a config-driven command (train, pretrain, mixture optimize: ``train``; the
    pipelines: ``recipe``): its ``output_dir`` against its inputs and ``--resume``."""
    return claim_output(_field(config, "output_dir"), kind, inputs=config_inputs(config),
                        resume=bool(_field(config, "resume")))


def is_llm_cache(path: str | Path, *, lines: int = 5) -> bool:
    """Whether ``path`` holds a drmix LLM cache (:mod:`drmix.llm.cache`): its first complete lines are
    ``{"key": <hex digest>, "text": ...}`` records (an empty file counts; a torn last line is ignored). The key
    is the 40-digit digest of :meth:`drmix.llm.base.ChatRequest.key`, or the 64-digit SHA-256 of a cache written
    by an earlier version (still drmix's file: appended to, its old answers not found)."""
    import re

    key = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return False
    complete = head.split(b"\n")[:-1] if not head.endswith(b"\n") else head.split(b"\n")
    seen = 0
    for raw in complete:
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return False
        if not (isinstance(obj, dict) and isinstance(obj.get("key"), str) and key.fullmatch(obj["key"])
                and isinstance(obj.get("text"), str)):
            return False
        seen += 1
        if seen >= lines:
            break
    return seen > 0 or not head.strip()


def claim_cache(path: str | Path, *, inputs: Iterable[str | Path | None] = (),
                outputs: Iterable[str | Path] = ()) -> Path:
    """The output contract for an LLM cache (``--cache``), before any work: it is appended to, so it may not
    be (or lie inside) an input or be one of the command's other outputs, and an existing file must be a
    drmix LLM cache (:func:`is_llm_cache`); a user's file is never appended to."""
    from drmix.io.checks import check_writable

    path = Path(path).expanduser()
    resolved = _resolved(path)
    for src in inputs:
        if src is None or not Path(src).expanduser().exists():
            continue
        s = _resolved(src)
        if resolved == s or s in resolved.parents:
            raise ConfigError(f"the LLM cache {'is' if resolved == s else 'lies inside'} the input {src}; "
                              "drmix appends to its cache and would change the input.", path=path,
                              fix="choose a cache file outside the inputs (or leave --cache out).")
    for out in outputs:
        if resolved == _resolved(out):
            raise ConfigError("the LLM cache is also an output file of this command.", path=path,
                              fix="give --cache another file name (or leave it out).")
    if path.is_dir():
        raise ConfigError("the LLM cache path is a folder; a JSONL file is written here.", path=path,
                          fix="name a file such as run.llm-cache.jsonl.")
    if path.exists() and not is_llm_cache(path):
        raise ConfigError("the LLM cache file exists and is not a drmix LLM cache (its lines are not "
                          "{\"key\", \"text\"} records); drmix appends to its cache.", path=path,
                          fix="choose a new cache file (the file is left as it is).")
    check_writable(path, what="LLM cache")
    return path
