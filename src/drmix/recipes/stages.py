"""What every multi-stage recipe does the same way: reuse a stage made with the same settings, train one, record
the run.

A stage writes its own subfolder of the recipe's ``output_dir`` and records there the configuration it was made
with (the trainer's ``config.yaml``; COCO's ``coco.yaml``). A rerun of the recipe **reuses** a stage only when
that record matches the stage configuration asked for now, by the trainer's resume rules
(:mod:`drmix.train.resume_check`: operational fields such as ``output_dir``, ``log_every`` or ``device`` may
differ, anything that shapes training may not). Otherwise the rerun is **refused** before anything is written,
with every differing field of every stage and the fix, unless the user asks for it:

* ``--resume-with-changes``: the changed stages, and every stage built on their outputs (a stage whose
  configuration names a path inside theirs), are **re-run**: their earlier outputs are removed and they
  train again; the other finished stages are reused. Which stages are re-run, and why, is logged;
* ``--overwrite``: every stage is re-run.

A stage is also made **from** its inputs: the files and folders its input fields name (training collections,
the starting model, a reference model, a weights file, dev sets, target corpora, a teacher; the fields whose
role is ``input``, :mod:`drmix.config.parts`). A path says nothing about what is at it, so the recipe records
each input's content fingerprint (:mod:`drmix.provenance`: a full content hash, rows and bytes of every file)
in ``provenance.json`` beside its own record, and a rerun compares them: an input changed at the same path
(a collection cut from 20 to 15 rows, a corpus rewritten, a model folder replaced) is refused like a changed
setting, naming the stage, the input and what changed, or re-run with ``--resume-with-changes`` together with
every stage built on it. Files inside another stage's folder (a stage's model, stage 1's ``weights.json``)
are that stage's outputs, followed by the rule above instead; the test and selection sets are not a stage's
input (the evaluation cache, :mod:`drmix.evaluation.suite`, is keyed by their content). A stage finished
before its recipe recorded ``provenance.json`` is taken as made from its inputs as they are now.

A stage is finished when its model is saved (:func:`drmix.outputs.run_finished`); an interrupted stage made
with the same settings is resumed from its last checkpoint (the recipes set ``resume: true`` on every stage's
config). The recipe writes its own record (``pipeline.yaml``, ``drama.yaml``) only after :func:`check_stages`
passed, so the record always names the settings of the stages beside it.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drmix.config import INPUT, Config, TrainConfig
from drmix.io.atomic import atomic_write_json, atomic_write_text
from drmix.provenance import corpus_fingerprint, describe_change, fingerprint
from drmix.outputs import run_finished
from drmix.recipes.progress import Progress, StageWork, estimate_rows
from drmix.train.resume_check import ResumeMismatchError, training_changes

log = logging.getLogger(__name__)


@dataclass
class StageOutput:
    name: str
    output_dir: Path
    model_dir: Path
    skipped: bool
    value: Any = None          # what the stage's ``run`` returned (None when reused)


@dataclass
class Stage:
    """One stage of a recipe, declared: what it is made with, what it makes, what it needs, how it is made.

    The record the reuse check reads: ``config``, what the stage is made with (a config of parts, or a mapping of
    flat names: a projection of a larger record; None for a step that writes no folder of its own, such as an
    evaluation, which is never reused); ``record``: the file that recorded the configuration of the earlier run
    (default ``output_dir/config.yaml``); ``outputs``: what a re-run removes (default: the stage's folder);
    ``kind``: the config class the record is read as (default: the config's own class, else TrainConfig). The
    stage's **inputs** are the files and folders its config's input fields name (:meth:`input_paths`).

    The declaration :func:`run_stages` executes: ``part``, the part of the recipe's config the stage reads (its
    settings); ``needs``, the stages that run before it (a stage re-run re-runs those that need it);
    ``run(results)``, what makes it (``results``: what the stages before it returned, by name); ``done(folder)``,
    whether a finished run is in its folder (default :func:`drmix.outputs.run_finished`); ``title`` and
    ``what``, its progress line; ``work``, what the estimate counts (:class:`~drmix.recipes.progress.StageWork`).
    """

    name: str
    config: Any = None
    output_dir: Path | None = None
    record: Path | None = None
    outputs: Sequence[Path] | None = None
    kind: type[Config] | None = None
    part: str | None = None
    needs: Sequence[str] = ()
    run: Callable[[dict[str, Any]], Any] | None = None
    done: Callable[[Path], bool] | None = None
    title: str | None = None
    what: str = ""
    work: StageWork | None = None

    def __post_init__(self) -> None:
        self.needs = tuple(self.needs)
        if self.output_dir is None and self.config is not None:
            self.output_dir = Path(self.config.run.output_dir)
        if self.output_dir is None:
            self.outputs = () if self.outputs is None else tuple(Path(p) for p in self.outputs)
            return
        self.output_dir = Path(self.output_dir)
        if self.record is None:
            self.record = self.output_dir / "config.yaml"
        self.outputs = (self.output_dir,) if self.outputs is None else tuple(Path(p) for p in self.outputs)

    @property
    def label(self) -> str:
        """The stage's name in the progress lines and the estimate."""
        return self.title or self.name

    @property
    def checked(self) -> bool:
        """Whether the stage has a record to compare (a step without a configuration is always run)."""
        return self.config is not None

    def finished(self) -> bool:
        """Whether a finished run of the stage is in its folder."""
        if not self.checked or self.output_dir is None:
            return False
        return (self.done or run_finished)(self.output_dir)

    @property
    def config_cls(self) -> type[Config]:
        """The config class the record is read as."""
        if self.kind is not None:
            return self.kind
        return type(self.config) if isinstance(self.config, Config) else TrainConfig

    def settings(self) -> dict[str, Any]:
        """The stage's configuration as a flat JSON-like mapping (``model``: the path the trainer records)."""
        values = self.config.flat() if isinstance(self.config, Config) else dict(self.config)
        model = values.get("model", False)
        if model is None or isinstance(model, str):
            from drmix.errors import DrmixError
            from drmix.model.encoder import resolve_model_path

            try:
                values["model"] = resolve_model_path(model)
            except DrmixError:     # a path a stage before this one has not written yet: compared as written
                pass
        return values

    def recorded(self) -> dict[str, Any] | None:
        """The configuration the earlier run recorded, or None when there is none."""
        try:
            raw = yaml.safe_load(Path(self.record).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            return None
        return raw if isinstance(raw, dict) else None

    def changes(self) -> dict[str, dict[str, Any]]:
        """``{field: {"before", "after"}}`` between the recorded and the asked-for configuration (empty: same)."""
        before = self.recorded()
        if before is None:
            return {}
        now = self.settings()
        before = self.config_cls.flatten(before)
        if not isinstance(self.config, Config):   # a projection of a larger record: compare its keys only
            before = {k: v for k, v in before.items() if k in now}
        return training_changes(before, now, self.config_cls)

    def exists(self) -> bool:
        return any(Path(p).exists() for p in self.outputs)

    def input_paths(self, products: Sequence[Path] = ()) -> dict[str, list[str]]:
        """``{field: [path, ...]}``: the existing files and folders named by the stage's input fields (role
        ``input``), less the test sets (:data:`NOT_STAGE_INPUTS`) and anything inside ``products`` (outputs
        of the recipe's stages) or the stage's own folder."""
        roles = self.config_cls.roles()
        inside = [os.path.abspath(p) for p in (*products, self.output_dir)]
        out: dict[str, list[str]] = {}
        for key, value in self.settings().items():
            if roles.get(key) != INPUT or key in NOT_STAGE_INPUTS:
                continue
            paths = [s for s in _strings(value) if s and Path(s).exists()
                     and not any(_within(os.path.abspath(s), root) for root in inside)]
            if paths:
                out[key] = list(dict.fromkeys(paths))
        return out

    def inputs(self, products: Sequence[Path] = ()) -> dict[str, dict[str, Any]]:
        """``{field: {path: fingerprint}}`` of :meth:`input_paths` (:func:`drmix.provenance.fingerprint`)."""
        return {key: {p: (corpus_fingerprint if key in CORPUS_INPUTS else fingerprint)(p) for p in paths}
                for key, paths in self.input_paths(products).items()}


#: input fields that are no stage's input: the sets evaluated at the end and those a model is selected on (their
#: evaluations are cached by content, :mod:`drmix.evaluation.suite`)
NOT_STAGE_INPUTS = frozenset({"test_data", "eval_data", "select_on"})
#: input fields that are target corpora: of a BEIR set only the corpus is read (its queries and qrels are never
#: opened, :func:`drmix.provenance.corpus_fingerprint`)
CORPUS_INPUTS = frozenset({"corpus"})


def _products(stages: Sequence[Stage]) -> list[Path]:
    """What the stages write: their outputs and folders (a path inside one is no input of the recipe)."""
    return [Path(o) for s in stages for o in (*s.outputs, s.output_dir)]


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def input_changes(before: dict[str, Any] | None, now: dict[str, dict[str, Any]]) -> dict[str, str]:
    """``{"field path": what changed}`` between a stage's recorded input fingerprints and those of now, for the
    paths named both times (a path added or dropped is a change of settings, reported as such)."""
    if not isinstance(before, dict):
        return {}
    out = {}
    for key, paths in now.items():
        for path, fp in paths.items():
            old = (before.get(key) or {}).get(path) if isinstance(before.get(key), dict) else None
            if old is None:
                continue
            change = describe_change(old, fp)
            if change is not None:
                out[f"{key} {path}"] = change
    return out


def read_provenance(path: str | Path | None) -> dict[str, Any]:
    """The recorded ``{stage name: {"inputs": ...}}`` of a recipe's ``provenance.json`` ({} when none)."""
    if path is None:
        return {}
    import json

    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    stages = raw.get("stages") if isinstance(raw, dict) else None
    return stages if isinstance(stages, dict) else {}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _uses(stage: Stage, output: Path) -> bool:
    """Whether ``stage``'s configuration names ``output`` or a path inside it (it is built on that output)."""
    root = os.path.abspath(output)
    for s in _strings(stage.settings()):
        if s and (os.path.abspath(s) == root or os.path.abspath(s).startswith(root + os.sep)):
            return True
    return False


def _describe(changes: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" if isinstance(v, str) else f"{k} {v['before']!r} -> {v['after']!r}"
                     for k, v in changes.items())


def check_stages(stages: Sequence[Stage], *, allow_changes: bool = False, overwrite: bool = False,
                 provenance: str | Path | None = None) -> list[Stage]:
    """Compare every stage's earlier run with its configuration and inputs now; return the stages to re-run.

    Raises :class:`~drmix.train.resume_check.ResumeMismatchError` naming every changed stage and field, and
    every changed input with what changed in it, when a stage was made with other settings or from other
    inputs and neither ``allow_changes`` (``--resume-with-changes``: re-run the changed stages and those built
    on them) nor ``overwrite`` (re-run every stage) is set. ``provenance``: the recipe's ``provenance.json``
    holding the inputs' fingerprints of the earlier run (None: inputs are not compared). Nothing is written;
    :func:`clear_stages` removes the outputs of the stages returned, :func:`record_provenance` records the
    inputs of now.
    """
    changed: dict[str, dict[str, Any]] = {s.name: c for s in stages if (c := s.changes())}
    if provenance is not None:
        recorded = read_provenance(provenance)
        products = _products(stages)
        for s in stages:
            if s.exists() and (c := input_changes((recorded.get(s.name) or {}).get("inputs"),
                                                  s.inputs(products))):
                changed[s.name] = {**changed.get(s.name, {}), **c}
    if changed and not (allow_changes or overwrite):
        listed = "; ".join(f"{name}: {_describe(c)}" for name, c in changed.items())
        folder = Path(os.path.commonpath([os.path.abspath(s.output_dir) for s in stages]))
        raise ResumeMismatchError(
            f"the earlier run was made with other settings or from other inputs, so its stages cannot be reused "
            f"({listed}).",
            path=folder, fix="pass --resume-with-changes to re-run the changed stages (and those built on them), "
                             "--overwrite to re-run every stage, or choose a new --output-dir.")
    if overwrite:
        rerun = [s for s in stages if s.exists()]
        for s in rerun:
            log.warning("%s: re-run (--overwrite); its earlier output in %s is replaced", s.name, s.output_dir)
        return rerun
    why = {name: _describe(c) for name, c in changed.items()}
    rerun_names = set(changed)
    grew = True
    while grew:   # a stage built on the output of a re-run stage is re-run too
        grew = False
        for s in stages:
            if s.name in rerun_names:
                continue
            base = next((r for r in stages if r.name in rerun_names
                         and (r.name in s.needs or any(_uses(s, o) for o in r.outputs))), None)
            if base is not None:
                rerun_names.add(s.name)
                why[s.name] = f"it is built on {base.name}"
                grew = True
    rerun = [s for s in stages if s.name in rerun_names and s.exists()]
    for s in rerun:
        log.warning("%s: re-run with the changed settings (%s); its earlier output in %s is replaced",
                    s.name, why[s.name], s.output_dir)
    return rerun


def clear_stages(stages: Iterable[Stage]) -> None:
    """Remove the outputs of stages that are re-run (a folder is renamed aside first, then deleted)."""
    for s in stages:
        for p in s.outputs:
            p = Path(p)
            if p.is_dir() and not p.is_symlink():
                aside = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".old", dir=p.parent))
                os.replace(p, aside)
                shutil.rmtree(aside)
            elif p.exists() or p.is_symlink():
                p.unlink()


def record_provenance(path: str | Path, stages: Sequence[Stage]) -> dict[str, Any]:
    """Write ``path`` (``provenance.json``, atomically): every stage's inputs with their fingerprints now.

    ``{"stages": {stage name: {"inputs": {field: {path: fingerprint}}}}}``; returns what was written."""
    products = _products(stages)
    data = {"stages": {s.name: {"inputs": s.inputs(products)} for s in stages}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(path), data)
    return data


def prepare_stages(stages: Sequence[Stage], *, allow_changes: bool = False, overwrite: bool = False,
                   provenance: str | Path | None = None) -> list[Stage]:
    """:func:`check_stages`, then :func:`clear_stages` on the stages to re-run, then (with ``provenance``, the
    recipe's ``provenance.json``) :func:`record_provenance`; returns the stages re-run."""
    rerun = check_stages(stages, allow_changes=allow_changes, overwrite=overwrite, provenance=provenance)
    clear_stages(rerun)
    if provenance is not None:
        record_provenance(provenance, stages)
    return rerun


def run_stage(name: str, config: Any, run: Callable[[], Any], *, record: str | Path | None = None,
              finished: Callable[[Path], bool] = run_finished) -> StageOutput:
    """Reuse the stage in ``config.output_dir`` when it finished with the same settings, else call ``run()``.

    ``config`` is the stage's configuration (its ``output_dir`` is the stage's folder; the model is
    ``output_dir/model``); ``record``: the file in that folder that recorded the earlier configuration
    (default ``config.yaml``). An earlier run with other settings is refused
    (:class:`~drmix.train.resume_check.ResumeMismatchError`), or, with ``config.resume_with_changes``,
    removed and re-run. A recipe of one stage (:func:`run_stages`).
    """
    out = Path(config.run.output_dir)
    stage = Stage(name, config, out, record=out / record if record is not None else None, run=lambda r: run(),
                  done=finished)
    return run_stages([stage], root=out.parent, provenance=False, allow_changes=config.run.resume_with_changes,
                      recipe=name)[name]


def train_stage(name: str, config: Any, **train_kwargs: Any) -> StageOutput:
    """One ``drmix train`` run (``config`` a TrainConfig) as a stage; keyword arguments go to ``train``."""
    from drmix.api import train

    return run_stage(name, config, lambda: train(config, **train_kwargs))


def record_config(root: str | Path, name: str, config: Any) -> Path:
    """Create the recipe's root folder and write the configuration it runs with (``root/name``, YAML).

    Call it after :func:`check_stages`: the record then names the settings of the stages in the folder."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / name, config.dump_yaml())
    return root / name


def write_summary(root: str | Path, markdown: str, data: dict[str, Any]) -> None:
    """``summary.md`` and ``summary.json`` of a recipe, each written atomically."""
    atomic_write_text(Path(root) / "summary.md", markdown)
    atomic_write_json(Path(root) / "summary.json", data)


# ---------------------------------------------------------------------------------------------- the runner
def stage_order(stages: Sequence[Stage]) -> list[Stage]:
    """The stages in the order they run: declared order, each after the stages it ``needs`` (a stable
    topological order). A need that names no stage, a name declared twice or a cycle is a recipe's bug
    (ValueError naming it)."""
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError(f"stage declared twice: {sorted({n for n in names if names.count(n) > 1})}")
    for s in stages:
        unknown = [n for n in s.needs if n not in names]
        if unknown:
            raise ValueError(f"stage {s.name!r} needs {unknown[0]!r}, which is not a stage of the recipe")
    done: list[Stage] = []
    left = list(stages)
    while left:
        ready = next((s for s in left if all(n in {d.name for d in done} for n in s.needs)), None)
        if ready is None:
            raise ValueError(f"the stages {[s.name for s in left]} need each other (a cycle)")
        done.append(ready)
        left.remove(ready)
    return done


def check_parts(stages: Sequence[Stage], config: Any) -> None:
    """Every declared ``part`` names a part (or a field of one: ``stages.coco``) of the recipe's ``config``; a
    part that is not there is a recipe's bug (ValueError naming the stage)."""
    for s in stages:
        if s.part is None:
            continue
        node = config
        for attr in s.part.split("."):
            if not hasattr(node, attr):
                raise ValueError(f"stage {s.name!r} reads part {s.part!r}, which {type(config).__name__} does not have")
            node = getattr(node, attr)


def estimate(stages: Sequence[Stage], device: str) -> list[str]:
    """Markdown lines: every stage's declared work and its estimated minutes on ``device``, and the total."""
    return estimate_rows([s.work or StageWork(s.label) for s in stage_order(stages)], device)


def run_stages(stages: Sequence[Stage], *, root: str | Path, record: tuple[str, Any] | None = None,
               allow_changes: bool = False, overwrite: bool = False, provenance: bool = True,
               progress: Callable[[str], None] | None = None, device: str = "cpu",
               recipe: str = "recipe") -> dict[str, Any]:
    """Execute a recipe's declared stages; returns what each returned, by name.

    Once for every recipe: the stages with a record are checked (:func:`prepare_stages`: an earlier run made
    with other settings or from other inputs is refused, or with ``allow_changes`` / ``overwrite`` re-run, with
    the stages that need it; inputs recorded in ``root/provenance.json`` unless ``provenance`` is false), the
    recipe's own record ``record = (file name, config)`` is written (every stage's ``part`` checked to be one of
    that config's, :func:`check_parts`), then each stage in :func:`stage_order`
    is **reused** when finished (its result a :class:`StageOutput` with ``skipped``), else made by its
    ``run`` (an interrupted stage resumes from its checkpoints: its config says ``resume: true``), one progress
    line each with its estimated time (:class:`~drmix.recipes.progress.Progress`). A stage with a record returns
    its :class:`StageOutput`; a step without one returns what its ``run`` returned; a record without a ``run``
    (a projection of the recipe's own record onto a stage's folder) is checked, never run."""
    root = Path(root)
    ordered = stage_order(stages)
    if record is not None:
        check_parts(ordered, record[1])
    prepare_stages([s for s in ordered if s.checked], allow_changes=allow_changes, overwrite=overwrite,
                   provenance=root / "provenance.json" if provenance else None)
    if record is not None:
        record_config(root, *record)
    ordered = [s for s in ordered if s.run is not None or not s.checked]   # a record without a run: checked only
    bar = Progress([s.work or StageWork(s.label) for s in ordered], device, progress, recipe=recipe)
    results: dict[str, Any] = {}
    for s in ordered:
        results[s.name] = _execute(s, results, bar)
    return results


def _execute(stage: Stage, results: dict[str, Any], bar: Progress) -> Any:
    if stage.finished():
        log.info("%s: finished earlier in %s with the same settings, reused", stage.name, stage.output_dir)
        bar.reused(stage.label)
        return StageOutput(stage.name, Path(stage.output_dir), Path(stage.output_dir) / "model", True)
    if stage.checked:
        log.info("%s: running into %s", stage.name, stage.output_dir)
    t = bar.start(stage.label, stage.what)
    value = stage.run(results) if stage.run is not None else None
    bar.finish(stage.label, t)
    if not stage.checked:
        return value
    return StageOutput(stage.name, Path(stage.output_dir), Path(stage.output_dir) / "model", False, value)
