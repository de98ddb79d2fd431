"""Every run of ``drmix mixture audit``, composed and checked before anything trains.

Per seed ``s`` (``--seed``, ``--seed + 1``, ... ``--seeds`` of them), under ``output_dir``:

* ``runs/seed<s>/all`` -- the uniform mixture of every collection, ``--budget-steps`` steps, with the probe that
  measures each collection's influence and gradient alignment on the dev sets (:mod:`~drmix.recipes.audit.probe`);
* ``runs/seed<s>/without-<name>`` -- the same without one collection (leave-one-out), one run per collection;
* ``runs/seed<s>/only-<name>`` -- with ``--add-one-in``, fine-tuning on that collection alone;
* ``stage1/<strategy>-seed<s>`` -- tDRO / DoReMi / GroupDRO's stage 1 (:func:`drmix.recipes.optimize.stage1_config`,
  the authors' setting) for the signals that need it, with the seed's ``all`` model as the frozen reference
  (GroupDRO needs none); their missing hard negatives are mined once into ``negatives/``.

Every run samples the same rows of each collection (``max_collection_size`` is a seeded sample by collection
name), starts from ``--model`` and differs from ``all`` only by the collection it leaves out (or keeps).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from drmix.config import CollectionSpec, TrainConfig, format_validation
from drmix.errors import ConfigError
from drmix.recipes.audit.config import AuditConfig

DRO_SIGNALS = ("tdro", "doremi", "groupdro")


@dataclass
class Source:
    """One audited collection: its name and the spec that loads it alone."""

    name: str
    spec: str | CollectionSpec
    slug: str
    short: bool = False            # some example has fewer than stage 1's seven hard negatives
    rows: int = 0


@dataclass
class AuditPlan:
    """Every run's configuration (``runs[seed][label]``: ``all``, ``without:<name>``, ``only:<name>``) and the
    stage-1 runs (``stage1[seed][strategy]``)."""

    root: Path
    sources: list[Source]
    seeds: list[int]
    runs: dict[int, dict[str, TrainConfig]] = field(default_factory=dict)
    stage1: dict[int, dict[str, TrainConfig]] = field(default_factory=dict)
    probe_points: list[int] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    @property
    def negatives_dir(self) -> Path:
        return self.root / "negatives"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "collection"


def check_audit(config: AuditConfig) -> None:
    """What the audit cannot run with, refused before anything loads: no dev set, a dev set without the split,
    no collections (a training field the audit sets itself is refused when the config is made: ``left_out``)."""
    if not config.mixture.dev:
        raise ConfigError("the audit needs dev sets: every collection is judged by how it moves their nDCG@10.",
                          fix="pass --dev DIR (a BEIR directory; --dev-split names its labelled split, default dev; "
                              "never a test split).")
    from drmix.recipes.tdro import _check_beir_dirs

    _check_beir_dirs(config.mixture.dev, config.mixture.dev_split, "dev")
    from drmix.data.collections import check_sources

    if not config.data.collections:
        raise ConfigError("no training collections given.", fix="pass --data (the collections to audit).")
    check_sources(config.data.collections)


def resolve_sources(config: AuditConfig) -> list[Source]:
    """Each collection with a spec that loads it alone: a plain folder is taken file by file; a spec that names
    several collections otherwise (a YAML list) is refused."""
    from drmix.data.collections import collection_folder_entries, load_collection_spec

    specs: list[str | CollectionSpec] = []
    for spec in config.data.collections:
        path = spec.path if isinstance(spec, CollectionSpec) else str(spec)
        entries = collection_folder_entries(path)
        if entries is not None and not (isinstance(spec, CollectionSpec) and spec.name):
            specs += [str(e) if isinstance(spec, str) else spec.model_copy(update={"path": str(e)}) for e in entries]
        else:
            specs.append(spec)
    sources: list[Source] = []
    for spec in specs:
        loaded = load_collection_spec(spec, format=config.data.format, columns=config.data.columns)
        if len(loaded) != 1:
            raise ConfigError(f"{spec} names {len(loaded)} collections; the audit leaves them out one at a time.",
                              path=Path(spec.path if isinstance(spec, CollectionSpec) else spec),
                              fix="pass each collection as its own --data (or their folder).")
        from drmix.recipes.optimize import STAGE1_NEGATIVES

        short = any(len(n) < STAGE1_NEGATIVES for n in loaded[0].dataset["negatives"])
        sources.append(Source(loaded[0].name, spec, slug(loaded[0].name), short, len(loaded[0])))
    if len(sources) < 2:
        raise ConfigError("the audit needs at least two collections to leave one out.", fix="pass more --data.")
    for kind, values in (("named", [s.name for s in sources]), ("named (as folders)", [s.slug for s in sources])):
        dup = sorted({v for v in values if values.count(v) > 1})
        if dup:
            raise ConfigError(f"two collections are {kind} {dup[0]!r}.", fix="give them distinct names (name: in "
                                                                              "a YAML collection list).")
    return sources


def run_config(config: AuditConfig, output_dir: Path, data: list, seed: int, *, dev: bool = False,
               **flat: Any) -> TrainConfig:
    """A short run: the training parts of ``config``, ``data``, ``--budget-steps`` steps with ``seed``, uniform,
    never an evaluation during training, no final checkpoint (a short run is never continued: a finished one is
    reused, a changed one re-run); the dev sets only for the probed run."""
    values = {"data": data, "output_dir": str(output_dir), "max_steps": config.audit.budget_steps, "seed": seed,
              "mixture": "uniform", "strategy": "static", "transfer": None, "weights_file": None,
              "reference_model": None, "eval_data": [], "eval_every": 0, "resume": True,
              "save_final_checkpoint": False,
              **({} if dev else {"dev": []}), **flat}
    try:
        return TrainConfig.from_parts(config, **values)
    except ValidationError as e:
        raise ConfigError(f"invalid run configuration: {format_validation(e, TrainConfig)}.",
                          fix="check the training fields (drmix mixture audit --help).") from None


def stage1_data(plan: AuditPlan, mine: bool) -> list:
    """The stage-1 runs' collections: with ``mine``, the mined copy (:func:`mined_paths`) of each collection that
    has too few hard negatives (same name and rows, so the same seeded sample); the collection itself otherwise."""
    out = []
    mined = mined_paths(plan)
    for s in plan.sources:
        path = mined[s.name] if mine and s.short else None
        if path is None:
            out.append(s.spec)
        elif isinstance(s.spec, CollectionSpec):
            out.append(s.spec.model_copy(update={"path": path, "name": s.name, "format": "drmix", "columns": None}))
        else:
            out.append(CollectionSpec(path=path, name=s.name, format="drmix"))
    return out


def plan_audit(config: AuditConfig) -> AuditPlan:
    """Check the audit (:func:`check_audit`) and compose every run's TrainConfig; nothing is written."""
    from drmix.recipes.optimize import stage1_config

    check_audit(config)
    a = config.audit
    root = Path(config.run.output_dir)
    sources = resolve_sources(config)
    seeds = [config.optim.seed + j for j in range(a.seeds)]
    from drmix.recipes.audit.probe import probe_steps  # imports torch: not at the CLI's start

    plan = AuditPlan(root, sources, seeds, probe_points=probe_steps(a.budget_steps, a.probe_points))
    specs = [s.spec for s in sources]
    for seed in seeds:
        folder = root / "runs" / f"seed{seed}"
        runs = {"all": run_config(config, folder / "all", specs, seed, dev=True)}
        for s in sources:
            runs[f"without:{s.name}"] = run_config(config, folder / f"without-{s.slug}",
                                                   [x.spec for x in sources if x is not s], seed)
        if a.add_one_in:
            for s in sources:
                runs[f"only:{s.name}"] = run_config(config, folder / f"only-{s.slug}", [s.spec], seed)
        plan.runs[seed] = runs
        stage1: dict[str, TrainConfig] = {}
        for strategy in (x for x in a.signals if x in DRO_SIGNALS):
            reference = None if strategy == "groupdro" else str(folder / "all" / "model")
            overrides = {"max_steps": a.stage1_steps or max(1, a.budget_steps // 2), "seed": seed,
                         "batch_size": a.stage1_batch_size or config.contrastive.batch_size, "dev": [],
                         "eval_data": [], "eval_every": 0,
                         "data": stage1_data(plan, a.stage1_fill_negatives == "mine"),
                         **({"temperature": a.stage1_temperature} if a.stage1_temperature else {})}
            try:
                stage1[strategy] = stage1_config(config, strategy=strategy, reference=reference,
                                                 output_dir=root / "stage1" / f"{strategy}-seed{seed}",
                                                 overrides=overrides)
            except ValidationError as e:
                raise ConfigError(f"invalid stage-1 configuration: {format_validation(e, TrainConfig)}.",
                                  fix="check --stage1-batch-size and the training fields.") from None
        plan.stage1[seed] = stage1
    return plan


def mined_paths(plan: AuditPlan) -> dict[str, str]:
    """Where the mined copy of every collection is written (``negatives/<slug>.jsonl``; only those with too few
    hard negatives are)."""
    return {s.name: str(plan.negatives_dir / f"{s.slug}.jsonl") for s in plan.sources}
