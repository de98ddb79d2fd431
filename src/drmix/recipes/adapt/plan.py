"""Every stage's configuration of ``drmix adapt``, composed and checked before anything runs (the stages
themselves are declared in :mod:`drmix.recipes.adapt.stages`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from drmix.config import TrainConfig, format_validation
from drmix.data.corpus import check_corpus_names, corpus_file, corpus_name
from drmix.errors import ConfigError
from drmix.recipes.adapt.candidates import STATIC_SCHEMES, Candidate, candidate_plan
from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.synthetic import SYNTHETIC_DIR, synthetic_paths


@dataclass
class AdaptPlan:
    """Every stage's configuration, composed before anything runs."""

    root: Path
    corpora: dict[str, str]                        # name -> path
    synthetic_dirs: list[str]                      # the BEIR folders (dev / test qrels)
    train_files: list[str]                         # the synthetic train collections
    coco: Any                                      # CocoConfig
    baseline: TrainConfig
    candidates: dict[str, tuple[Candidate, TrainConfig]]
    stage1: dict[bool, TrainConfig]                # synthetic or not -> tDRO stage 1
    labels: dict[str, Any] = field(default_factory=dict)   # corpus -> labels.LabelSet (--dev-labels)
    audits: dict[bool, Any] = field(default_factory=dict)  # synthetic or not -> the audit's AuditConfig

    @cached_property
    def sizes(self) -> dict[str, int]:
        """Documents per target corpus (its non-empty lines), counted once: the work of the stages."""
        out = {}
        for name, path in self.corpora.items():
            with open(corpus_file(path), "rb") as f:
                out[name] = sum(1 for line in f if line.strip())
        return out


def train_config(config: AdaptConfig, what: str, **flat: Any) -> TrainConfig:
    """A fine-tuning stage: the training parts of ``config``, never an evaluation during training (the labelled
    directories are for the final table only), resumed when interrupted."""
    try:
        return TrainConfig.from_parts(config, **{**flat, "eval_data": [], "eval_every": 0, "resume": True})
    except ValidationError as e:
        raise ConfigError(f"invalid {what} configuration: {format_validation(e, TrainConfig)}.",
                          fix="check the training fields (drmix adapt --help).") from None


def _check_inputs(config: AdaptConfig) -> None:
    """Everything a stage will need, checked before the first one runs; the labelled directories only by name
    (``qrels/<split>.tsv`` must exist: it is not opened)."""
    from drmix.data.collections import check_sources

    t = config.target
    check_corpus_names(t.corpus)
    for p in t.corpus:
        corpus_file(p)
    if not config.data.collections:
        raise ConfigError("no training collections given.", fix="pass --data (the collections fine-tuned on).")
    check_sources(config.data.collections)
    for d in config.eval.eval_data:
        p = Path(d).expanduser()
        if not p.is_dir():
            raise ConfigError("eval_data: BEIR directory not found.", path=p,
                              fix="pass a folder holding corpus.jsonl, queries.jsonl and qrels/<split>.tsv.")
        if not (p / "qrels" / f"{config.eval.eval_split}.tsv").is_file():
            raise ConfigError(f"eval_data: no qrels/{config.eval.eval_split}.tsv.", path=p,
                              fix="pass a directory with that split, or change --eval-split.")
    from drmix.mixture.registry import check_config

    check_config(train_config(config, "options", strategy="infdds"))   # the influence and dro options, by their models


def _candidate_configs(config: AdaptConfig, root: Path, coco_model: str, extra: list[Any],
                       synthetic_dirs: list[str], audits: dict[bool, Any]) -> tuple[
                           dict[str, tuple[Candidate, TrainConfig]], dict[bool, TrainConfig]]:
    """Every candidate's fine-tuning, tDRO's stage 1 and the mixture audit (one per data: with or without the
    synthetic set; the audits into ``audits``)."""
    from drmix.recipes.adapt.audit import audit_config, audit_dir
    from drmix.recipes.optimize import stage1_config

    stage1_dir = {False: root / "tdro-stage1", True: root / "tdro-stage1-synthetic"}
    candidates: dict[str, tuple[Candidate, TrainConfig]] = {}
    stage1: dict[bool, TrainConfig] = {}
    for c in candidate_plan(config.stages.candidates):
        data = list(config.data.collections) + (extra if c.synthetic else [])
        common = dict(model=coco_model, data=data, output_dir=str(root / c.folder), reference_model=None,
                      weights_file=None, transfer=None, strategy="static", mixture="uniform")
        what = f"candidate {c.label}"
        if c.scheme in STATIC_SCHEMES:
            cfg = train_config(config, what, **{**common, "mixture": c.scheme})
        elif c.scheme == "infdds":
            cfg = train_config(config, what, **{**common, "strategy": "infdds", "dev": synthetic_dirs,
                                                "dev_split": "dev"})
        elif c.scheme == "audit":
            if c.synthetic not in audits:
                audits[c.synthetic] = audit_config(config, root, coco_model, data, synthetic_dirs, c.synthetic)
            cfg = train_config(config, what, **{**common, "mixture": "file",
                                                "weights_file": str(audit_dir(root, c.synthetic) / "weights.json")})
        else:
            if c.synthetic not in stage1:
                reference = str(root / c.reference.folder / "model")
                base = train_config(config, "tDRO stage 1", **common)
                try:
                    stage1[c.synthetic] = stage1_config(base, strategy="tdro", reference=reference,
                                                        output_dir=stage1_dir[c.synthetic],
                                                        overrides={**config.stages.stage1, "eval_data": []})
                except ValidationError as e:
                    raise ConfigError(f"invalid stage1 override {format_validation(e, TrainConfig)}.",
                                      fix="fix --stage1 KEY=VALUE (the training fields).") from None
            cfg = train_config(config, what, **{**common, "batching": "homogeneous", "transfer": c.transfer,
                                                "weights_file": str(stage1_dir[c.synthetic] / "weights.json")})
        candidates[c.label] = (c, cfg)
    return candidates, stage1


def plan_adapt(config: AdaptConfig) -> AdaptPlan:
    """Check the inputs and compose every stage's configuration (nothing is written)."""
    from drmix.pretrain.runner import CocoConfig
    from drmix.recipes.adapt.labels import read_labels
    from drmix.recipes.coco import coco_stage_config
    from drmix.recipes.options import check_override

    _check_inputs(config)
    root = Path(config.run.output_dir)
    corpora = {corpus_name(p): p for p in config.target.corpus}
    labels = read_labels(config, corpora)
    paths = [synthetic_paths(root / SYNTHETIC_DIR, n) for n in corpora]
    synthetic_dirs, train_files = [str(d) for d, _ in paths], [str(f) for _, f in paths]
    extra: list[Any] = list(train_files)
    if config.data.format != "auto" or config.data.columns:   # --format / --columns describe the user's data
        extra = [{"path": f, "format": "drmix", "columns": {}} for f in train_files]
    coco = check_override(lambda: coco_stage_config(config, config.target.corpus, root / "coco", config.stages.coco,
                                                    eval_data=[], eval_every=0), "--coco", CocoConfig)
    baseline = train_config(config, "baseline", model=config.model.name_or_path, strategy="static", mixture="uniform",
                            output_dir=str(root / "base-uniform"))
    audits: dict[bool, Any] = {}
    candidates, stage1 = _candidate_configs(config, root, str(Path(coco.run.output_dir) / "model"), extra,
                                            synthetic_dirs, audits)
    return AdaptPlan(root, corpora, synthetic_dirs, train_files, coco, baseline, candidates, stage1, labels, audits)
