"""What the benchmark scripts share (importing it sets the offline environment every benchmark runs in).

Statistics (intervals, paired tests) and cached evaluation are library functions:
:mod:`drmix.evaluation.significance` and :mod:`drmix.evaluation.suite`; a finished training run is
:func:`drmix.outputs.run_finished`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
#: the public datasets the benchmarks read (never copied into the repository)
DEFAULT_DATA = ROOT / ".." / "shared" / "data"


def apply_preset(args: Any, presets: dict[str, dict[str, Any]]) -> Any:
    """Override the parsed options with the chosen ``--preset``'s settings (none chosen: unchanged)."""
    for k, v in presets.get(getattr(args, "preset", None) or "", {}).items():
        setattr(args, k, v)
    return args


def scifact_passages(data: Path, n: int) -> list[str]:
    """The first ``n`` SciFact corpus passages (title and text, as drmix indexes them) from ``data/scifact``."""
    import json

    from drmix.data.beir import doc_text

    texts: list[str] = []
    with open(data / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            texts.append(doc_text(json.loads(line)))
            if len(texts) == n:
                break
    return texts


# ------------------------------------------------------------------------------------ reuse of earlier results
#: configuration fields that only change how fast a run goes (never what it computes): a run made on a machine
#: with more cores is reused on one with fewer
SPEED_ONLY = frozenset({"tokenize_num_proc", "num_proc", "input_workers", "input_prefetch"})


def _identity(value: Any, recorded: dict[str, Any] | None = None) -> Any:
    """What a path in a configuration stands for: a file by its content (BLAKE2b digest,
    :func:`drmix.provenance.file_fingerprint`), a benchmark's starting model (a folder with a ``done`` marker,
    e.g. the truncated MiniLM of ``_models.py``) by that marker, another folder by its real path, so runs of
    processes with their own ``--work`` (their own copies of the same collections, links to one shared
    ``loo-<target>``) compare equal. ``recorded``: the identities recorded when the run was made
    (:func:`record_identities`), which stand for the earlier run's paths instead of what is at them now -- so a
    file changed in place since is seen."""
    if not isinstance(value, str) or not value.startswith(os.sep):
        return value
    if recorded is not None and value in recorded:
        return recorded[value]
    p = Path(value)
    if p.is_file():
        from drmix.provenance import file_fingerprint

        return "file:" + file_fingerprint(p)["digest"]
    if (p / "done").is_file():
        return "model:" + (p / "done").read_text(encoding="utf-8").strip()
    if p.is_dir():          # a shared folder reached through a worker's link to it
        return os.path.realpath(p)
    return value


def _canonical(value: Any, recorded: dict[str, Any] | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(v, recorded) for k, v in value.items() if k not in SPEED_ONLY}
    if isinstance(value, list):
        return [_canonical(v, recorded) for v in value]
    return _identity(value, recorded)


def _paths(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in _paths(v)]
    return [value] if isinstance(value, str) and value.startswith(os.sep) else []


def identities_file(out: Path) -> Path:
    """Where the identities of a run's inputs are recorded: ``<out>.inputs.json`` beside the run's folder (the
    folder itself is the trainer's)."""
    return Path(out).parent / f"{Path(out).name}.inputs.json"


def record_identities(out: Path, config: Any) -> dict[str, Any]:
    """Record what every path of ``config`` stands for now (:func:`_identity`), before the run is made."""
    from drmix.io.atomic import atomic_write_json
    from drmix.recipes.stages import Stage

    ids = {p: _identity(p) for p in _paths(Stage(Path(out).name, config, Path(out)).settings())}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(identities_file(out), {"identities": ids})
    return ids


def recorded_identities(out: Path) -> dict[str, Any] | None:
    """The identities :func:`record_identities` wrote for ``out`` (None: a run made before they were recorded)."""
    import json

    try:
        raw = json.loads(identities_file(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ids = raw.get("identities") if isinstance(raw, dict) else None
    return ids if isinstance(ids, dict) else None


def settings_changes(out: Path, config: Any, record: str = "config.yaml") -> dict[str, dict[str, Any]]:
    """The fields in which the run recorded in ``out/record`` differs from ``config`` (empty: the same settings),
    by the recipes' reuse rules (:class:`drmix.recipes.stages.Stage`, the trainer's resume rules) with paths
    compared by what they hold (:func:`_identity`: the earlier run's by what they held when it was made, where
    recorded) and speed-only fields (:data:`SPEED_ONLY`) left out."""
    from drmix.recipes.stages import Stage
    from drmix.train.resume_check import training_changes

    stage = Stage(Path(out).name, config, Path(out), record=Path(out) / record)
    before = stage.recorded()
    if before is None:
        return {}
    return training_changes(_canonical(before, recorded_identities(out)), _canonical(stage.settings()))


def reusable(out: Path, config: Any, *, record: str = "config.yaml", finished=None) -> bool:
    """True when ``out`` holds a finished run made with ``config``'s settings from the same inputs; False when it
    holds no finished run (train it: what its inputs are now is recorded, :func:`record_identities`). A finished
    run made with other settings, or from an input changed since, stops the benchmark (``SystemExit`` naming the
    fields and the fix): a cached model is reused only when it was made with the settings asked for."""
    from drmix.outputs import run_finished

    if not (finished or run_finished)(Path(out)):
        record_identities(out, config)
        return False
    changes = settings_changes(out, config, record)
    if changes:
        listed = ", ".join(f"{k} {v['before']!r} -> {v['after']!r}" for k, v in changes.items())
        raise SystemExit(f"{out} was made with other settings or inputs ({listed}); it is not reused. Give another "
                         f"--work (or remove {out} to train it again).")
    if recorded_identities(out) is None:        # a run made before identities were recorded: they are these
        record_identities(out, config)
    return True


def keyed_read(path: Path, key: dict[str, Any]) -> Any | None:
    """The value cached in ``path`` when it was stored under ``key`` (see :func:`keyed_write`), else None."""
    import json

    try:
        stored = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != json.loads(json.dumps(key)):
        return None
    return stored.get("value")


def keyed_write(path: Path, key: dict[str, Any], value: Any) -> None:
    """Cache ``value`` in ``path`` (atomically) under ``key``: every setting it was computed with."""
    from drmix.io.atomic import atomic_write_json

    atomic_write_json(path, {"key": key, "value": value}, indent=None)


def dataset_key(dataset: Any) -> dict[str, Any]:
    """What an evaluation set is: its folder, split, a digest of the query and document ids it kept (so
    every cap, seed and subsampling rule is in it) and the content digest of the files that split reads
    (:func:`drmix.provenance.beir_fingerprint`: a text edited at the same path, same ids, is another set)."""
    import hashlib

    from drmix.provenance import beir_fingerprint

    h = hashlib.blake2b(digest_size=12)
    for part in (sorted(dataset.queries), sorted(dataset.corpus),
                 sorted((q, d, s) for q, r in dataset.qrels.items() for d, s in r.items())):
        h.update(repr(part).encode("utf-8"))
    root, split = getattr(dataset, "root", None), getattr(dataset, "split", None)
    files = beir_fingerprint(root, split or "test") if root else None
    return {"data": Path(root or "").name, "split": split, "queries": len(dataset.queries),
            "documents": len(dataset.corpus), "ids": h.hexdigest(), "files": (files or {}).get("digest")}
