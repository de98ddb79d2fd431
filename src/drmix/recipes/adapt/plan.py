"""Every stage's configuration of ``drmix adapt``, composed and checked before anything runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from drmix.config import TrainConfig, format_validation
from drmix.errors import ConfigError
from drmix.recipes.adapt.candidates import STATIC_SCHEMES, Candidate, candidate_plan
from drmix.recipes.adapt.config import AdaptConfig, index_fields, synthetic_fields
from drmix.recipes.stages import Stage


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
    stages: list[Stage]
    labels: dict[str, Any] = field(default_factory=dict)   # corpus -> labels.LabelSet (--dev-labels)


def _corpus_name(path: str) -> str:
    from drmix.pretrain.coco import corpus_name

    return corpus_name(path)


def _train_cfg(config: AdaptConfig, what: str, **flat: Any) -> TrainConfig:
    """A fine-tuning stage: the training parts of ``config``, never an evaluation during training (the labelled
    directories are for the final table only), resumed when interrupted."""
    try:
        return TrainConfig.from_parts(config, **{**flat, "eval_data": [], "eval_every": 0, "resume": True})
    except ValidationError as e:
        raise ConfigError(f"invalid {what} configuration: {format_validation(e, TrainConfig)}.",
                          fix="check the training fields (drmix adapt --help).") from None


def coco_config(config: AdaptConfig, root: Path):
    """The COCO stage: the training parts with COCO's own learning rate, the target corpora, then ``coco``."""
    from drmix.pretrain.runner import CocoConfig, CocoOptim

    values = {"corpus": list(config.target.corpus), "output_dir": str(root / "coco"), "resume": True,
              "learning_rate": CocoOptim.model_fields["learning_rate"].default, "data": [], **config.stages.coco,
              "eval_data": [], "eval_every": 0}
    try:
        return CocoConfig.from_parts(config, **values)
    except ValidationError as e:
        raise ConfigError(f"invalid --coco option {format_validation(e, CocoConfig)}.",
                          fix="see `drmix pretrain coco --help` for the fields.") from None


def _check_inputs(config: AdaptConfig) -> None:
    """Everything a stage will need, checked before the first one runs; the labelled directories only by name
    (``qrels/<split>.tsv`` must exist: it is not opened)."""
    from drmix.data.collections import check_sources
    from drmix.pretrain.coco import check_corpus_names, corpus_file

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

    check_config(_train_cfg(config, "options", strategy="infdds"))   # the influence and dro options, by their models


def plan_adapt(config: AdaptConfig) -> AdaptPlan:
    """Check the inputs and compose every stage's configuration (nothing is written)."""
    from drmix.recipes.optimize import stage1_config

    _check_inputs(config)
    root = Path(config.run.output_dir)
    corpora = {_corpus_name(p): p for p in config.target.corpus}
    from drmix.recipes.adapt.labels import read_labels

    labels = read_labels(config, corpora)
    syn = root / "synthetic"
    synthetic_dirs = [str(syn / n) for n in corpora]
    train_files = [str(syn / "train" / f"synthetic-{n}.jsonl") for n in corpora]
    extra: list[Any] = list(train_files)
    if config.data.format != "auto" or config.data.columns:   # --format / --columns describe the user's data
        extra = [{"path": f, "format": "drmix", "columns": {}} for f in train_files]
    coco = coco_config(config, root)
    coco_model = str(Path(coco.run.output_dir) / "model")
    baseline = _train_cfg(config, "baseline", model=config.model.name_or_path, strategy="static", mixture="uniform",
                          output_dir=str(root / "base-uniform"))
    stage1_dir = {False: root / "tdro-stage1", True: root / "tdro-stage1-synthetic"}
    candidates: dict[str, tuple[Candidate, TrainConfig]] = {}
    stage1: dict[bool, TrainConfig] = {}
    for c in candidate_plan(config.stages.candidates):
        data = list(config.data.collections) + (extra if c.synthetic else [])
        common = dict(model=coco_model, data=data, output_dir=str(root / c.folder), reference_model=None,
                      weights_file=None, transfer=None, strategy="static", mixture="uniform")
        if c.scheme in STATIC_SCHEMES:
            cfg = _train_cfg(config, f"candidate {c.label}", **{**common, "mixture": c.scheme})
        elif c.scheme == "infdds":
            cfg = _train_cfg(config, f"candidate {c.label}", **{**common, "strategy": "infdds",
                                                                  "dev": synthetic_dirs, "dev_split": "dev"})
        else:
            if c.synthetic not in stage1:
                reference = str(root / c.reference.folder / "model")
                base = _train_cfg(config, "tDRO stage 1", **common)
                try:
                    stage1[c.synthetic] = stage1_config(base, strategy="tdro", reference=reference,
                                                        output_dir=stage1_dir[c.synthetic],
                                                        overrides={**config.stages.stage1, "eval_data": []})
                except ValidationError as e:
                    raise ConfigError(f"invalid stage1 override {format_validation(e, TrainConfig)}.",
                                      fix="fix --stage1 KEY=VALUE (the training fields).") from None
            cfg = _train_cfg(config, f"candidate {c.label}", **{
                **common, "batching": "homogeneous", "transfer": c.transfer,
                "weights_file": str(stage1_dir[c.synthetic] / "weights.json")})
        candidates[c.label] = (c, cfg)
    values = config.flat()
    stages = [Stage("synthetic", {k: values[k] for k in synthetic_fields()}, output_dir=syn,
                    record=root / "adapt.yaml", kind=AdaptConfig),
              Stage("COCO", coco, record=Path(coco.run.output_dir) / "coco.yaml"),
              Stage("uniform fine-tuning", baseline)]
    stages += [Stage(f"candidate {label}", cfg) for label, (_, cfg) in candidates.items()]
    if config.search.index:   # its record: index/index.yaml, the settings it was made with (drmix.recipes.adapt.index)
        stages.append(Stage("index", {k: values[k] for k in index_fields()}, output_dir=root / "index",
                            record=root / "index" / "index.yaml", kind=AdaptConfig))
    stages += [Stage(f"tDRO stage 1{' (+synthetic)' if s else ''}", cfg) for s, cfg in stage1.items()]
    return AdaptPlan(root, corpora, synthetic_dirs, train_files, coco, baseline, candidates, stage1, stages, labels)

