"""``drmix adapt``: a retriever for a new corpus without labels -- synthetic dev/test from the corpus, COCO on it,
fine-tuning with the mixture chosen on the synthetic dev, one report.

The user has target corpora (``--corpus``, no queries, no judgements), training collections (``--data``) and a
model. Every choice is made on a dev set built from the corpora alone; labelled data (``--eval-data``) is read
only for the final table. The stages, each a folder of ``output_dir`` reused on a rerun only when made with the
same settings (:mod:`drmix.recipes.stages`):

1. ``synthetic/`` -- pseudo-queries of each target corpus (cropped sentences, DRAMA arXiv:2502.18460 Sec. 3.1;
   with ``--llm`` also LLM-written queries, InPars arXiv:2202.05144), kept only when the teacher retrieves their
   source passage in its top ``filter_k`` (round-trip filter: Promptagator arXiv:2209.11755, in the spirit of
   InPars' and GPL's (arXiv:2112.07577) filtering of generated queries), split by passage into train / dev / test
   (:mod:`drmix.augment.synthetic`): ``synthetic/<corpus>/`` is a BEIR folder (dev and test qrels),
   ``synthetic/train/synthetic-<corpus>.jsonl`` a training collection, ``synthetic/stats.json`` the counts.
2. ``coco/`` -- COCO continuous contrastive pretraining on the target corpora (COCO-DR, Yu et al., EMNLP 2022,
   arXiv:2210.15212, Sec. 4.1; :mod:`drmix.pretrain.runner`).
3. ``base-uniform/`` -- the baseline: uniform fine-tuning of the base model on ``--data`` (no COCO, no synthetic
   data).
4. ``coco-<candidate>/`` -- fine-tuning of the COCO model under each candidate mixture (``candidates``):
   ``uniform`` (always a candidate: COCO -> uniform), ``size``, ``temperature``, ``tdro:TRANSFER`` (tDRO, Ma et
   al., AAAI 2025, arXiv:2408.10613: stage 1 ``tdro-stage1[-synthetic]/`` learns weights with the matching uniform
   candidate as its reference, the transfer top:K / reweight / loss fine-tunes), ``infdds`` (Inf-DDS: a sampling
   policy rewarded by the look-ahead influence of each collection on the *synthetic dev*, ``--dev`` = the
   synthetic BEIR folders); ``+synthetic`` adds the synthetic train collections to the candidate's data.
5. **selection** -- every candidate on the synthetic dev split (nDCG@10 averaged over the corpora; cached as
   ``select-dev.json`` in its folder); the best is the adapted model, copied to ``output_dir/model`` with a model
   card saying how it was made. Ties go to the earlier candidate (``uniform`` first).
6. **report** -- the base model, uniform fine-tuning, COCO -> uniform and the adapted model on the synthetic test
   split and on every ``--eval-data`` directory (its ``eval_split``; opened here for the first time), with paired
   tests over queries (:mod:`drmix.evaluation.compare`), the learned weights, and, with labels, Kendall's tau
   between the candidates' synthetic-dev ranking and their labelled ranking (``scipy.stats.kendalltau``):
   ``summary.md``, ``summary.json``, ``report.html``.

``--preset cpu|medium|gpu`` fills every setting it names that the user did not give (:data:`PRESETS`); a
progress line per stage gives its estimated time (:func:`plan_work`: examples trained and passages encoded, at
the throughput measured by the earlier stages of the run, or an assumed one before the first), and
``drmix adapt --estimate`` prints the plan without running it.
"""
from __future__ import annotations

import copy
import html
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from drmix.config import (INPUT, OPERATIONAL, Config, ContrastiveConfig, DataConfig, ModelConfig, OptimConfig, Part,
                          PipelineRun, TrainConfig, format_validation, setting)
from drmix.errors import ConfigError
from drmix.recipes.stages import Stage, prepare_stages, record_config, run_stage, train_stage, write_summary

log = logging.getLogger(__name__)

SYNTHETIC = "+synthetic"
STATIC_SCHEMES = ("uniform", "size", "temperature")
#: the labelled evaluation subsamples with this seed whatever the training seed, so that runs with different
#: seeds are scored on the same queries and can be paired
LABELLED_SEED = 0
#: the labels of the report's four models
BASE, UNIFORM, COCO_UNIFORM = "base model", "uniform fine-tuning", "COCO → uniform"


# ---------------------------------------------------------------------------------------------- presets
PRESETS: dict[str, dict[str, Any]] = {
    # minutes on a laptop's CPU: enough to see every stage run, not to move a model
    "cpu": dict(max_steps=40, batch_size=16, learning_rate=5e-5, query_max_length=16, doc_max_length=64,
                max_collection_size=300, num_negatives=0, max_docs=400, dev_queries=50, test_queries=50,
                coco=dict(max_steps=20, batch_size=16, learning_rate=5e-5, max_documents=300, span_max_length=32),
                stage1=dict(max_steps=20), influence=dict(warmup_steps=10, update_every=10, subset_size=4),
                candidates=["uniform", "uniform+synthetic", "infdds+synthetic"],
                eval_max_queries=100, eval_max_docs=500),
    # the scale of benchmarks/bench_coco.py --preset medium (COCO's +0.026 nDCG@10 there), every candidate
    "medium": dict(max_steps=300, batch_size=32, learning_rate=5e-5, query_max_length=8, doc_max_length=24,
                   max_collection_size=1500, num_negatives=0, max_docs=1500, dev_queries=100, test_queries=100,
                   coco=dict(max_steps=100, batch_size=32, learning_rate=5e-5, max_documents=300, span_max_length=24),
                   stage1=dict(max_steps=100), influence=dict(subset_size=4),
                   candidates=["uniform", "uniform+synthetic", "size+synthetic", "tdro:reweight+synthetic",
                               "tdro:top:0.7+synthetic", "infdds+synthetic"],
                   eval_max_queries=100, eval_max_docs=800),
    # one 10-minute command on one H100 for two BEIR-sized targets (drmix adapt --preset gpu --estimate); the
    # pseudo-queries of at most 20,000 documents a corpus (all of a BEIR-sized target's) keep the synthetic set's
    # size and its round-trip search bounded on a corpus of millions
    "gpu": dict(max_steps=400, batch_size=64, learning_rate=2e-5, query_max_length=64, doc_max_length=256,
                max_collection_size=None, num_negatives=1, max_docs=20_000, dev_queries=300, test_queries=300,
                coco=dict(max_steps=400, batch_size=128, learning_rate=1e-4, span_max_length=128),
                stage1=dict(max_steps=150),
                candidates=["uniform", "uniform+synthetic", "size+synthetic", "tdro:reweight+synthetic",
                            "tdro:top:0.7+synthetic", "infdds+synthetic"],
                eval_max_queries=None, eval_max_docs=None),
}


# ---------------------------------------------------------------------------------------------- candidates
@dataclass(frozen=True)
class Candidate:
    """One candidate mixture: ``scheme`` (uniform | size | temperature | tdro | infdds), tDRO's ``transfer``, and
    whether the synthetic train collections are part of its data."""

    scheme: str
    transfer: str | None = None
    synthetic: bool = False

    @property
    def label(self) -> str:
        base = f"tdro:{self.transfer}" if self.scheme == "tdro" else self.scheme
        return base + (SYNTHETIC if self.synthetic else "")

    @property
    def folder(self) -> str:
        return "coco-" + re.sub(r"[^A-Za-z0-9._-]+", "-", self.label).strip("-")

    @property
    def reference(self) -> "Candidate":
        """The uniform candidate on the same data: tDRO's reference model (its stage 0)."""
        return Candidate("uniform", None, self.synthetic)


def parse_candidate(text: str) -> Candidate:
    """``uniform``, ``size``, ``temperature``, ``tdro:TRANSFER`` (top:K, reweight, loss) or ``infdds``, each
    optionally followed by ``+synthetic``."""
    s = str(text).strip().lower().replace(" ", "")
    synthetic = s.endswith(SYNTHETIC)
    base = s[:-len(SYNTHETIC)] if synthetic else s
    if base in STATIC_SCHEMES or base == "infdds":
        return Candidate(base, None, synthetic)
    if base.startswith("tdro:"):
        transfer = base[len("tdro:"):]
        if transfer.startswith("top"):
            from drmix.mixture.transfer import parse_top_fraction

            parse_top_fraction(transfer)
        elif transfer not in ("reweight", "loss"):
            raise ValueError(f"unknown tDRO transfer {transfer!r} in candidate {text!r} (use top:K, reweight or loss)")
        return Candidate("tdro", transfer, synthetic)
    raise ValueError(f"unknown candidate {text!r}: use uniform, size, temperature, tdro:TRANSFER or infdds, "
                     f"optionally with {SYNTHETIC}")


def candidate_plan(specs: list[str]) -> list[Candidate]:
    """The candidates trained, in order: ``uniform`` first (always: it is COCO -> uniform), each tDRO
    candidate's reference before it, no duplicates."""
    out: list[Candidate] = [Candidate("uniform")]
    for spec in specs:
        c = parse_candidate(spec)
        if c.scheme == "tdro" and c.reference not in out:
            log.info("candidate %s: its reference %s is trained as a candidate too", c.label, c.reference.label)
            out.append(c.reference)
        if c not in out:
            out.append(c)
    return out


#: the candidates are compared on a sub-corpus of this many documents per corpus (the dev queries' passages and
#: a seeded sample of distractors): six candidates on two corpora encode 1.2M passages, about 2 minutes on one
#: GPU at the assumed 10,000 passages/s, whatever the corpus size (docs/adapt.md)
SELECT_MAX_DOCS = 100_000


# ---------------------------------------------------------------------------------------------- the config
class AdaptRun(PipelineRun):
    output_dir: str = setting("runs/adapt", role=OPERATIONAL, description="Root directory; each stage writes a "
                                                                          "subdirectory, the adapted model is model/.")


class AdaptTarget(Part):
    """The target corpora and the preset."""

    title: ClassVar[str] = "Target corpora"

    corpus: list[str] = setting(default_factory=list, role=INPUT, description="Target corpora: BEIR directories or "
                                "corpus .jsonl files; only the corpus is read (never queries or qrels).")
    preset: Literal["cpu", "medium", "gpu"] | None = setting(
        None, role=OPERATIONAL, description="Fill every setting the preset names that is not given: cpu (minutes, a "
                                            "smoke run), medium (the measured CPU scale of docs/adapt.md), gpu (one "
                                            "10-minute command on one H100); see docs/adapt.md.")


class SyntheticOptions(Part):
    """How the synthetic train / dev / test set is made from the corpora."""

    title: ClassVar[str] = "Synthetic dev/test (from the corpus alone)"

    max_docs: int | None = setting(1000, ge=1, description="Documents sampled per corpus as sources of cropped-"
                                                          "sentence queries (seeded; none = all).")
    min_words: int = setting(4, ge=1, description="Shortest sentence kept as a cropped query, in words.")
    max_per_doc: int | None = setting(1, ge=1, description="Cropped queries per sampled document at most.")
    teacher: str | None = setting(None, role=INPUT, description="Retriever of the round-trip filter, of the synthetic "
                                  "train set's hard negatives and of tDRO's missing negatives (default: the bundled "
                                  "all-MiniLM-L6-v2).")
    filter_k: int = setting(3, ge=1, description="Keep a pseudo-query only when the teacher retrieves its source "
                                                 "passage in its top k from the whole corpus.")
    negative_ranks: str = setting("30:50", description="Teacher ranks that become hard negatives of the synthetic "
                                                       "train queries (DRAMA's 30:50).")
    dev_queries: int = setting(100, ge=1, description="Synthetic dev queries per corpus (whole passages: none shared "
                                                      "with another split).")
    test_queries: int = setting(100, ge=1, description="Synthetic test queries per corpus.")
    llm: str | None = setting(None, role=INPUT, description="Also generate queries with an LLM: smollm2 (the packaged "
                              "GGUF), a model folder, .gguf file or hub id, or an OpenAI-compatible endpoint "
                              "http(s)://HOST/v1 (then --llm-model names the served model).")
    llm_model: str | None = setting(None, description="The served model name at an --llm endpoint.")
    llm_options: dict[str, Any] = setting(default_factory=dict, role=OPERATIONAL, description="More LLM options "
                                          "(timeout, max_retries, concurrency, batch_size, device, api_key_env; "
                                          "docs/llm.md).")
    generate_max_docs: int = setting(200, ge=1, description="Sampled documents per corpus the LLM writes a query "
                                                            "for (with --llm).")

    @field_validator("negative_ranks")
    @classmethod
    def _window(cls, v: str) -> str:
        from drmix.augment.mine import RankWindow

        try:
            return str(RankWindow.parse(v))
        except ConfigError as e:
            raise ValueError(e.message) from None

    @field_validator("llm_options")
    @classmethod
    def _llm_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        from drmix.llm.factory import LLMConfig

        bad = sorted(set(v) - (set(LLMConfig.model_fields) - {"backend", "model", "base_url"}))
        if bad:
            raise ValueError(f"unknown LLM option {bad[0]!r} (use timeout, max_retries, concurrency, batch_size, "
                             "device, api_key_env; --llm and --llm-model name the model)")
        return v


class AdaptEval(Part):
    """The labelled evaluation, read only for the final table, and the caps of every evaluation."""

    title: ClassVar[str] = "Final evaluation (labelled; read only for the final table)"

    eval_data: list[str] = setting(default_factory=list, role=INPUT, description="Labelled BEIR directories of the "
                                   "targets, opened only after every choice is made: the final table and Kendall's "
                                   "tau of the candidates' rankings.")
    eval_split: str = setting("test", description="Qrels split of --eval-data.")
    eval_max_queries: int | None = setting(None, ge=1, description="Cap on labelled queries per dataset (a seeded "
                                                                   "sample, the same for every training seed).")
    eval_max_docs: int | None = setting(None, ge=1, description="Cap on the corpus of every evaluation, synthetic and "
                                                                "labelled (judged documents kept).")
    query_instructions: dict[str, str] = setting(default_factory=dict, description="Query instruction per dataset "
                                                 "name, used by every evaluation (see docs/llm.md).")


class AdaptStages(Part):
    """The candidate mixtures and the overrides of the stages that are not fine-tunings."""

    title: ClassVar[str] = "Candidates (chosen on the synthetic dev)"

    candidates: list[str] = setting(
        default_factory=lambda: ["uniform", "uniform+synthetic", "size+synthetic", "tdro:reweight+synthetic",
                                 "infdds+synthetic"],
        description="Mixtures fine-tuned from the COCO model, one chosen on the synthetic dev: uniform | size | "
                    "temperature | tdro:TRANSFER | infdds, each with an optional +synthetic (the synthetic train "
                    "collections join --data); uniform is always one.")
    coco: dict[str, Any] = setting(default_factory=dict, description="Overrides of COCO fields (max_steps, batch_size, "
                                   "learning_rate, span_max_length, max_documents, ...).")
    stage1: dict[str, Any] = setting(default_factory=dict, description="Overrides of training fields for tDRO's "
                                     "stage 1 (e.g. max_steps).")
    select_max_docs: int | None = setting(
        SELECT_MAX_DOCS, ge=1, description="Documents per corpus the candidates are compared on (the synthetic dev): "
                                           "the dev queries' source passages plus a seeded sample of the rest "
                                           "(none = the whole corpus; --eval-max-docs, when smaller, wins). The "
                                           "final evaluation is not capped by it.")

    @field_validator("candidates")
    @classmethod
    def _candidates(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one candidate (uniform is always one)")
        return [parse_candidate(s).label for s in v]


class AdaptConfig(Config):
    """``drmix adapt``: the training parts (shared by every fine-tuning and, through ``coco``, the COCO stage),
    the target corpora, the synthetic set, the candidates and the labelled final evaluation. Every stage's config
    is composed from these parts (:func:`plan_adapt`)."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    contrastive: ContrastiveConfig = Field(default_factory=ContrastiveConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: AdaptEval = Field(default_factory=AdaptEval)
    run: AdaptRun = Field(default_factory=AdaptRun)
    target: AdaptTarget = Field(default_factory=AdaptTarget)
    synthetic: SyntheticOptions = Field(default_factory=SyntheticOptions)
    stages: AdaptStages = Field(default_factory=AdaptStages)
    dro: dict[str, Any] = setting(default_factory=dict, aliases=("tdro",),
                                  description="Options of tDRO's stage 1 (see docs/mixture.md).")
    influence: dict[str, Any] = setting(default_factory=dict, aliases=("infdds",),
                                        description="Options of the Inf-DDS candidate (see docs/influence.md).")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        """The preset's values for every field it names that is not given (grouped or flat)."""
        if not isinstance(data, Mapping):
            return data
        nested = cls.nest(data)
        target = nested.get("target")
        preset = target.get("preset") if isinstance(target, Mapping) else getattr(target, "preset", None)
        if preset not in PRESETS:
            return nested
        fields = cls.flat_fields()
        for flat, value in PRESETS[preset].items():
            f = fields[flat]
            if f.group is None:
                nested.setdefault(flat, copy.deepcopy(value))
                continue
            part = nested.setdefault(f.group, {})
            if isinstance(part, Part):
                part = nested[f.group] = part.model_dump(exclude_unset=True)
            part.setdefault(f.name, copy.deepcopy(value))
        return nested


def synthetic_fields() -> list[str]:
    """Fields (flat names) the synthetic set depends on: the corpora, every synthetic setting but the operational
    ones, and the seed."""
    fields = AdaptConfig.flat_fields()
    return ["corpus"] + [k for k, f in fields.items() if f.group == "synthetic" and f.role != OPERATIONAL] + ["seed"]


# ---------------------------------------------------------------------------------------------- the plan
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
    stages += [Stage(f"tDRO stage 1{' (+synthetic)' if s else ''}", cfg) for s, cfg in stage1.items()]
    return AdaptPlan(root, corpora, synthetic_dirs, train_files, coco, baseline, candidates, stage1, stages)


# ---------------------------------------------------------------------------------------------- time estimates
#: assumed throughput before a stage of the run has been measured: (training examples/s, passages encoded/s).
#: cuda: the assumption of benchmarks/_lease.py (one H100, pre-tokenised inputs, all-MiniLM-L6-v2); cpu: measured
#: on two shared cores with a 2-layer MiniLM at 8/24 tokens (docs/adapt.md) -- slower models take longer, and the
#: progress lines switch to the run's own measured rates after the first training and encoding stages.
ASSUMED_RATES = {"cuda": (1000.0, 10000.0), "cpu": (60.0, 150.0)}


@dataclass
class StageWork:
    """What a stage does, in the units the estimate counts."""

    name: str
    examples: float = 0.0          # training examples (a COCO span pair counts as one)
    passages: float = 0.0          # texts encoded without gradients (mining, filtering, evaluation)
    llm_calls: int = 0

    def seconds(self, rates: tuple[float, float]) -> float:
        return self.examples / rates[0] + self.passages / rates[1]


def select_max_docs(config: AdaptConfig) -> int | None:
    """The corpus cap of the selection on the synthetic dev: ``--select-max-docs``, or ``--eval-max-docs`` when
    that is smaller (it caps every evaluation)."""
    caps = [c for c in (config.stages.select_max_docs, config.eval.eval_max_docs) if c is not None]
    return min(caps) if caps else None


def _corpus_sizes(config: AdaptConfig) -> dict[str, int]:
    from drmix.pretrain.coco import corpus_file

    out = {}
    for p in config.target.corpus:
        with open(corpus_file(p), "rb") as f:
            out[_corpus_name(p)] = sum(1 for line in f if line.strip())
    return out


def plan_work(config: AdaptConfig, plan: AdaptPlan | None = None,
              sizes: Mapping[str, int] | None = None) -> list[StageWork]:
    """The work of every stage, in the order they run (the estimate's input; hand-written, like
    benchmarks/_lease.py: no library estimates a training script's time). ``sizes``: documents per corpus, when
    already counted."""
    plan = plan or plan_adapt(config)
    sizes = sizes if sizes is not None else _corpus_sizes(config)
    s = config.synthetic
    n_corpus = sum(sizes.values())
    queries = sum(min(n, s.max_docs or n) * (s.max_per_doc or 3) for n in sizes.values())
    llm = len(sizes) * s.generate_max_docs if s.llm else 0
    cap = config.eval.eval_max_docs
    eval_docs = sum(min(n, cap or n) for n in sizes.values())
    select_docs = sum(min(n, select_max_docs(config) or n) for n in sizes.values())
    out = [StageWork("synthetic set", passages=n_corpus + queries + llm, llm_calls=llm),
           StageWork("COCO", examples=plan.coco.optim.max_steps * plan.coco.contrastive.batch_size)]

    def fine_tune(cfg: TrainConfig) -> float:
        return cfg.optim.max_steps * cfg.contrastive.batch_size * (1 + cfg.contrastive.num_negatives / 2)

    out.append(StageWork("uniform fine-tuning", examples=fine_tune(plan.baseline)))
    done_stage1: set[bool] = set()
    for label, (c, cfg) in plan.candidates.items():
        if c.scheme == "tdro" and c.synthetic not in done_stage1:
            s1 = plan.stage1[c.synthetic]
            # seven negatives per query and the reference's forward pass; missing negatives mined once
            out.append(StageWork(f"tDRO stage 1{' (+synthetic)' if c.synthetic else ''}",
                                 examples=s1.optim.max_steps * s1.contrastive.batch_size * 4.5,
                                 passages=2 * (config.data.max_collection_size or 2_000) * len(s1.data.collections)))
            done_stage1.add(c.synthetic)
        work = fine_tune(cfg)
        if c.scheme == "infdds":
            from drmix.mixture.influence.config import InfDDSConfig

            o = InfDDSConfig.model_validate(config.influence)
            updates = max(0, cfg.optim.max_steps - o.warmup_steps) // o.update_every
            k = o.subset_size or len(cfg.data.collections)
            bs = cfg.contrastive.batch_size
            work += updates * (k * o.lookahead_steps * (o.train_batch_size or bs)
                               + (k + 1) * len(plan.synthetic_dirs) * (o.dev_batch_size or bs) / 3)
        out.append(StageWork(f"candidate {label}", examples=work))
    n_models = len(plan.candidates) + 2
    out.append(StageWork("selection on synthetic dev", passages=len(plan.candidates) * select_docs))
    # the synthetic test: the report's four models (base, uniform fine-tuning, COCO -> uniform, adapted); the
    # labelled split: the base model, the baseline and every candidate (the report's others are cached among them)
    out.append(StageWork("final evaluation", passages=(4 + n_models * bool(config.eval.eval_data)) * eval_docs))
    return out


def estimate_device(config: AdaptConfig) -> str:
    """The device the estimate is for: ``--device``, else cuda for ``--preset gpu`` or when a GPU is here."""
    if config.run.device:
        return "cuda" if str(config.run.device).startswith("cuda") else "cpu"
    if config.target.preset == "gpu":
        return "cuda"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def gpu_hours(work: list[StageWork], gpus: int) -> tuple[float, float]:
    """(hours on one GPU, hours on ``gpus`` GPUs) of ``work`` at the assumed GPU rates. Over several GPUs every
    stage is split evenly (data-parallel training, sharded encoding): a lower bound, since the gradient
    all-reduce, the gather of sharded embeddings and the exact search on one device are not counted."""
    one = sum(w.seconds(ASSUMED_RATES["cuda"]) for w in work) / 3600
    return one, one / gpus


def estimate_table(config: AdaptConfig, gpus: int = 8) -> str:
    """Markdown: every stage's work and estimated minutes on the estimate's device, the total, and the hours of
    the whole run for this corpus on one GPU and on ``gpus`` (:func:`gpu_hours`)."""
    if gpus < 1:
        raise ConfigError(f"--estimate-gpus must be at least 1, got {gpus}.", fix="pass --estimate-gpus 8 (or 1).")
    sizes = _corpus_sizes(config)
    work = plan_work(config, sizes=sizes)
    device = estimate_device(config)
    rates = ASSUMED_RATES[device]
    lines = [f"Estimated time on {device} at {rates[0]:,.0f} training examples/s and {rates[1]:,.0f} passages/s "
             "(assumed; see docs/adapt.md):", "",
             "| stage | training examples | passages encoded | minutes |", "|---|---:|---:|---:|"]
    total = 0.0
    for w in work:
        sec = w.seconds(rates)
        total += sec
        lines.append(f"| {w.name} | {w.examples:,.0f} | {w.passages:,.0f} | {sec / 60:.1f} |")
    lines.append(f"| total | {sum(w.examples for w in work):,.0f} | {sum(w.passages for w in work):,.0f} | "
                 f"{total / 60:.1f} |")
    one, many = gpu_hours(work, gpus)
    lines += ["", f"For {sum(sizes.values()):,} target passages: {one:,.2f} h on one GPU, at least {many:,.2f} h on "
                  f"{gpus} GPUs (at {ASSUMED_RATES['cuda'][0]:,.0f} examples/s and {ASSUMED_RATES['cuda'][1]:,.0f} "
                  "passages/s a GPU, every stage split evenly over the GPUs)."]
    llm = sum(w.llm_calls for w in work)
    if llm:
        lines += ["", f"Plus {llm:,} LLM calls (not estimated: their speed is the LLM's)."]
    return "\n".join(lines) + "\n"


class Progress:
    """One line per stage: its place, what it does, its estimated time; then its measured time. The rates of the
    estimate start at :data:`ASSUMED_RATES` and become the run's own after its first measured stages."""

    def __init__(self, work: list[StageWork], device: str, emit: Callable[[str], None] | None = None) -> None:
        self.work = {w.name: w for w in work}
        self.order = [w.name for w in work]
        self.rates = list(ASSUMED_RATES[device])
        self.measured = [False, False]
        self.emit = emit or log.info

    def start(self, name: str, what: str = "") -> float:
        w = self.work.get(name, StageWork(name))
        i = self.order.index(name) + 1 if name in self.order else 0
        eta = w.seconds((self.rates[0], self.rates[1]))
        basis = "rates measured in this run" if (self.measured[0] or not w.examples) and (
            self.measured[1] or not w.passages) else "assumed rates"
        self.emit(f"adapt [{i}/{len(self.order)}] {name}{(': ' + what) if what else ''} -- estimated "
                  f"{_minutes(eta)} (at {basis})")
        return time.perf_counter()

    def reused(self, name: str) -> None:
        i = self.order.index(name) + 1 if name in self.order else 0
        self.emit(f"adapt [{i}/{len(self.order)}] {name}: reused (finished earlier with the same settings)")

    def finish(self, name: str, t0: float) -> None:
        seconds = time.perf_counter() - t0
        w = self.work.get(name)
        if w is not None and seconds > 1:
            if w.examples and not w.passages:
                self.rates[0], self.measured[0] = w.examples / seconds, True
            elif w.passages and not w.examples:
                self.rates[1], self.measured[1] = w.passages / seconds, True
        self.emit(f"adapt: {name} done in {_minutes(seconds)}")


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# ---------------------------------------------------------------------------------------------- stage 1: synthetic
def _llm_backend(config: AdaptConfig, cache: Path):
    from drmix.llm.factory import LLMConfig, build_backend

    s = config.synthetic
    if not s.llm:
        return None
    if re.match(r"^https?://", s.llm):
        if not s.llm_model:
            raise ConfigError("an --llm endpoint needs the served model's name.", fix="pass --llm-model NAME.")
        cfg = LLMConfig(backend="openai", base_url=s.llm, model=s.llm_model, **s.llm_options)
    else:
        cfg = LLMConfig(backend="transformers", model=None if s.llm.lower() in ("smollm2", "default") else s.llm,
                        **s.llm_options)
    return build_backend(cfg, cache_path=cache)


def teacher_ranker(teacher: Any, teacher_name: str | None) -> Callable[..., list[list[str]]]:
    """``rank(queries, doc_ids, doc_texts, top_n)`` by the teacher (cosine, exact), the corpus's embeddings cached
    under ``DRMIX_CACHE/embeddings/`` keyed by the teacher (its name and a fingerprint of a local folder's files),
    its document prompt and length, and the texts: another seed or another filter setting does not encode the
    corpus again (the teacher's corpus pass is most of the stage's time)."""
    import hashlib

    from drmix.augment.mine import rank
    from drmix.evaluation.suite import model_stamp
    from drmix.io import atomic_write_bytes, cache_root
    from drmix.model.encoder import document_prompt, query_prompt, resolve_model_path
    from drmix.retrieval.index import encode_texts

    name = resolve_model_path(teacher_name)
    dp, qp = document_prompt(teacher), query_prompt(teacher)

    def doc_embeddings(texts: list[str]) -> np.ndarray:
        import io

        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps([name, model_stamp(name), dp, getattr(teacher, "max_seq_length", None)]).encode())
        for t in texts:
            h.update(t.encode("utf-8", "surrogatepass") + b"\0")
        path = cache_root() / "embeddings" / f"{h.hexdigest()}.npy"
        try:
            emb = np.load(path)
            if emb.shape[0] == len(texts):
                return emb
        except (OSError, ValueError):
            pass
        emb = encode_texts(teacher, texts, prompt=dp, normalize=True, cache_embeddings=True)
        buf = io.BytesIO()
        np.save(buf, emb)
        atomic_write_bytes(path, buf.getvalue())
        return emb

    def ranker(queries: list[str], doc_ids: list[str], doc_texts: list[str], top_n: int) -> list[list[str]]:
        if not queries:
            return []
        q = encode_texts(teacher, queries, prompt=qp, normalize=True)
        return [[d for d, _ in r] for r in rank(q, doc_embeddings(list(doc_texts)), doc_ids, top_n=top_n)]

    return ranker


def build_synthetic(config: AdaptConfig, plan: AdaptPlan) -> dict[str, Any]:
    """Write ``synthetic/`` (BEIR folders, train collections, ``stats.json``) in one atomic step; returns the
    stats. Reads each target's corpus only."""
    from drmix.augment.synthetic import build_corpus_synthetic, write_corpus_synthetic
    from drmix.data.beir import read_corpus
    from drmix.io import atomic_dir, atomic_write_json
    from drmix.model.encoder import load_encoder
    from drmix.pretrain.coco import corpus_file

    s = config.synthetic
    teacher = load_encoder(s.teacher, device=config.run.device)
    backend = _llm_backend(config, plan.root / "llm-cache.jsonl")
    rank = teacher_ranker(teacher, s.teacher)

    stats: dict[str, Any] = {}
    with atomic_dir(plan.root / "synthetic") as tmp:
        (tmp / "train").mkdir()
        for name, path in plan.corpora.items():
            corpus = read_corpus(corpus_file(path))
            made = build_corpus_synthetic(name, corpus, rank, max_docs=s.max_docs, min_words=s.min_words,
                                          max_per_doc=s.max_per_doc, filter_k=s.filter_k,
                                          negative_ranks=s.negative_ranks, dev_queries=s.dev_queries,
                                          test_queries=s.test_queries, seed=config.optim.seed, backend=backend,
                                          generate_docs=s.generate_max_docs if backend is not None else 0)
            write_corpus_synthetic(made, corpus, tmp / name, tmp / "train" / f"synthetic-{name}.jsonl")
            stats[name] = made.stats
        atomic_write_json(tmp / "stats.json", {"teacher": s.teacher or "default", "corpora": stats})
    if backend is not None:
        backend.close()
    return stats


def read_synthetic_stats(root: Path) -> dict[str, Any]:
    return json.loads((root / "synthetic" / "stats.json").read_text(encoding="utf-8"))["corpora"]


# ---------------------------------------------------------------------------------------------- the result
@dataclass
class AdaptResult:
    output_dir: Path
    selected: str                                            # the candidate chosen on the synthetic dev
    models: dict[str, str]                                   # report label -> model
    candidates: dict[str, Path]                              # candidate label -> model folder
    synthetic: dict[str, Any] = field(default_factory=dict)  # corpus -> counts
    selection: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)   # candidate -> dev set -> metric
    synthetic_test: Any = None                               # SuiteResult of the report's models
    labelled: Any = None                                     # SuiteResult of the report's models and the candidates
    comparisons: dict[str, Any] = field(default_factory=dict)   # name -> drmix.evaluation.compare.Comparison
    kendall: dict[str, float] | None = None
    weights: dict[str, dict[str, float]] = field(default_factory=dict)  # candidate -> collection -> weight
    table: str = ""


def _md(text: Any) -> str:
    """A name as it may appear in the Markdown (and so the HTML) of the report: escaped, no table breaks."""
    return html.escape(str(text), quote=False).replace("|", "\\|")


def _escaped(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {_md(lb): {_md(d): v for d, v in by.items()} for lb, by in results.items()}


def _average(results: Mapping[str, Mapping[str, float]]) -> float:
    return float(np.mean([r["ndcg@10"] for r in results.values()]))


def kendall_tau(dev: Mapping[str, float], labelled: Mapping[str, float]) -> dict[str, float]:
    """Kendall's tau-b (``scipy.stats.kendalltau``) between two scorings of the same candidates, with its p and
    the number of candidates."""
    from scipy.stats import kendalltau

    names = [n for n in dev if n in labelled]
    res = kendalltau([dev[n] for n in names], [labelled[n] for n in names])
    return {"tau": float(res.statistic), "p": float(res.pvalue), "candidates": len(names)}


def _weights_of(folder: Path) -> dict[str, float]:
    try:
        w = json.loads((folder / "weights.json").read_text(encoding="utf-8"))
        return {str(n): float(v) for n, v in zip(w["collections"], w["weights"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


#: the file that marks ``output_dir/model`` as the recipe's copy (and says which candidate it is)
ADAPTED_MARKER = "drmix_adapt.json"


def _check_model_target(dst: Path) -> None:
    if (dst.exists() or dst.is_symlink()) and not (dst / ADAPTED_MARKER).is_file():
        raise ConfigError("output_dir/model exists and is not the adapted model drmix adapt wrote.", path=dst,
                          fix="move it away or choose another --output-dir.")


def _copy_model(src: Path, dst: Path, candidate: str) -> None:
    """``dst`` := a copy of the model folder ``src`` (hard links where the file system allows), atomically, with
    :data:`ADAPTED_MARKER`; a ``dst`` that is not such a copy is refused (it is not the recipe's to replace)."""
    from drmix.io import atomic_dir, atomic_write_json

    _check_model_target(dst)

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    with atomic_dir(dst) as tmp:
        shutil.copytree(src.resolve(), tmp, dirs_exist_ok=True, copy_function=link)
        atomic_write_json(tmp / ADAPTED_MARKER, {"candidate": candidate, "copied_from": str(src)})


# ---------------------------------------------------------------------------------------------- the recipe
def run_adapt(config: AdaptConfig, *, progress: Callable[[str], None] | None = None) -> AdaptResult:
    """Run every stage (reusing the finished ones made with the same settings) and write the report; see the
    module docstring. ``progress`` receives the progress lines (default: the log)."""
    from drmix.evaluation.suite import evaluate_suite
    from drmix.outputs import claim_run, run_finished
    from drmix.pretrain.runner import pretrain_coco

    plan = plan_adapt(config)
    root = plan.root
    claim_run(config, "recipe")
    _check_model_target(root / "model")
    prepare_stages(plan.stages, allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                   provenance=root / "provenance.json")
    record_config(root, "adapt.yaml", config)
    work = plan_work(config, plan)
    bar = Progress(work, estimate_device(config), progress)
    caps = dict(max_docs=config.eval.eval_max_docs, max_length=config.data.doc_max_length,
                query_instructions=config.eval.query_instructions or None)

    # 1. the synthetic set
    if (root / "synthetic" / "stats.json").is_file():
        bar.reused("synthetic set")
    else:
        t0 = bar.start("synthetic set", f"pseudo-queries of {', '.join(plan.corpora)}, round-trip filter, splits")
        build_synthetic(config, plan)
        bar.finish("synthetic set", t0)
    synthetic = read_synthetic_stats(root)

    # 2. COCO, 3. the baseline, 4. the candidates (tDRO's stage 1 before its first transfer)
    def stage(name: str, what: str, run: Callable[[], Any], folder: str | Path) -> Any:
        if run_finished(folder):          # changed stages were cleared above: a finished one is reused
            bar.reused(name)
            return run()
        t = bar.start(name, what)
        out = run()
        bar.finish(name, t)
        return out

    stage("COCO", f"{plan.coco.optim.max_steps} steps on the target corpora",
          lambda: run_stage("COCO", plan.coco, lambda: pretrain_coco(plan.coco), record="coco.yaml"),
          plan.coco.run.output_dir)
    baseline = stage("uniform fine-tuning", "the base model, uniform over --data (the baseline)",
                     lambda: train_stage("uniform fine-tuning", plan.baseline), plan.baseline.run.output_dir).model_dir
    models: dict[str, Path] = {}
    learned: set[bool] = set()
    for label, (c, cfg) in plan.candidates.items():
        if c.scheme == "tdro":
            if c.synthetic not in learned:
                _stage1(plan, c, stage, config)
                learned.add(c.synthetic)
            strategy = _transfer_strategy(cfg, c)
            out = stage(f"candidate {label}", "COCO model, tDRO weights transferred",
                        lambda cfg=cfg, strategy=strategy, label=label:
                        train_stage(f"candidate {label}", cfg, strategy=strategy), cfg.run.output_dir)
        else:
            out = stage(f"candidate {label}", f"COCO model, {c.scheme} mixture",
                        lambda cfg=cfg, label=label: train_stage(f"candidate {label}", cfg), cfg.run.output_dir)
        models[label] = out.model_dir

    # 5. selection on the synthetic dev (the only choice, made before any label is read)
    t = bar.start("selection on synthetic dev", f"{len(models)} candidates")
    dev = evaluate_suite(models, plan.synthetic_dirs, kind="select", split="dev", seed=config.optim.seed,
                         metrics=("ndcg@10",), **{**caps, "max_docs": select_max_docs(config)}).results
    dev_avg = {lb: _average(r) for lb, r in dev.items()}
    selected = next(iter(models))
    for lb, v in dev_avg.items():
        if v > dev_avg[selected] + 1e-12:
            selected = lb
    bar.finish("selection on synthetic dev", t)
    log.info("adapted model: %s (synthetic dev nDCG@10 %.4f; uniform %.4f)", selected, dev_avg[selected],
             dev_avg[next(iter(models))])

    # 6. the final evaluation: synthetic test, then (first read of any label) the labelled directories
    t = bar.start("final evaluation", "synthetic test" + (" and the labelled --eval-data" if config.eval.eval_data
                                                           else ""))
    report_models: dict[str, Any] = {BASE: config.model.name_or_path or "default",
                                     UNIFORM: baseline,
                                     COCO_UNIFORM: models["uniform"], f"adapted ({selected})": models[selected]}
    cache_dirs = {BASE: root / "eval" / "base"}
    result = AdaptResult(root, selected, {k: str(v) for k, v in report_models.items()}, models, synthetic, dev)
    result.synthetic_test = evaluate_suite(report_models, plan.synthetic_dirs, kind="synthetic", split="test",
                                           cache_dirs=cache_dirs, seed=config.optim.seed, **caps)
    if config.eval.eval_data:
        result.labelled = final_labelled_evaluation(config, report_models, models, cache_dirs, caps)
        labelled_avg = {lb: _average(result.labelled.results[lb]) for lb in models}
        if len(models) > 1:
            result.kendall = kendall_tau(dev_avg, labelled_avg)
    bar.finish("final evaluation", t)
    result.comparisons = _comparisons(result, config)
    result.weights = {lb: w for lb, m in models.items() if (w := _weights_of(Path(m).parent))}
    result.table = _summary(config, plan, result, dev_avg)
    _copy_model(Path(models[selected]), root / "model", selected)
    _write_card(config, plan, result)
    from drmix.report.html import check_report_target, write_report

    check_report_target(root)
    write_report(root)
    return result


def _stage1(plan: AdaptPlan, c: Candidate, stage: Callable[..., Any], config: AdaptConfig) -> None:
    from drmix.outputs import run_finished
    from drmix.recipes.optimize import optimize_weights

    cfg = plan.stage1[c.synthetic]
    name = f"tDRO stage 1{' (+synthetic)' if c.synthetic else ''}"
    stage(name, f"learned weights, reference {c.reference.label}",
          lambda: run_stage(name, cfg, lambda: optimize_weights(cfg, fill_negatives="mine",
                                                                miner=config.synthetic.teacher),
                            finished=lambda out: run_finished(out) and (out / "weights.json").exists()),
          cfg.run.output_dir)


def _transfer_strategy(cfg: TrainConfig, c: Candidate) -> Any:
    from drmix.data.collections import collections_for
    from drmix.mixture.transfer import build_transfer_strategy

    names = [x.name for x in collections_for(cfg)]
    return build_transfer_strategy(cfg.mixture.weights_file, c.transfer, names)


def final_labelled_evaluation(config: AdaptConfig, report_models: dict[str, Any], candidates: dict[str, Path],
                              cache_dirs: dict[str, Path], caps: dict[str, Any]) -> Any:
    """The only place the labelled directories are opened: the report's models and every candidate on
    ``eval_split`` (a seeded sample of :data:`LABELLED_SEED`, the same for every training seed)."""
    from drmix.evaluation.suite import evaluate_suite

    models = {**report_models, **{lb: m for lb, m in candidates.items()}}
    return evaluate_suite(models, config.eval.eval_data, kind="eval", split=config.eval.eval_split,
                          cache_dirs=cache_dirs, max_queries=config.eval.eval_max_queries, seed=LABELLED_SEED, **caps)


def _comparisons(result: AdaptResult, config: AdaptConfig) -> dict[str, Any]:
    """Paired tests over queries: every report model against uniform fine-tuning, and the adapted model against
    COCO -> uniform, on the synthetic test and on the labelled split."""
    from drmix.evaluation.compare import Scored, compare

    adapted = next(lb for lb in result.models if lb.startswith("adapted"))
    out = {}
    for name, suite in (("synthetic test", result.synthetic_test), (config.eval.eval_split, result.labelled)):
        if suite is None:
            continue
        pq = {lb: suite.per_query[lb] for lb in result.models}
        out[f"{name}: vs uniform fine-tuning"] = compare([Scored(lb, q) for lb, q in pq.items()], baseline=UNIFORM,
                                                         metric="ndcg@10", seed=config.optim.seed)
        out[f"{name}: adapted vs COCO → uniform"] = compare(
            [Scored(COCO_UNIFORM, pq[COCO_UNIFORM]), Scored(adapted, pq[adapted])], baseline=COCO_UNIFORM,
            metric="ndcg@10", seed=config.optim.seed)
    return out


def _synthetic_table(stats: Mapping[str, Any]) -> str:
    lines = ["| corpus | documents | sampled | generated | failed the round trip | kept | train / dev / test queries |",
             "|---|---:|---:|---|---|---|---|"]

    def kinds(d: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in d.items()) or "0"

    for name, s in stats.items():
        q = s["queries"]
        lines.append(f"| {_md(name)} | {s['documents']:,} | {s['sampled']:,} | {kinds(s['generated'])} | "
                     f"{kinds(s['filtered'])} | {kinds(s['kept'])} | {q['train']:,} / {q['dev']:,} / {q['test']:,} |")
    return "\n".join(lines) + "\n"


def _weights_md(weights: Mapping[str, Mapping[str, float]]) -> str:
    cols = list(weights)
    names = list(dict.fromkeys(n for w in weights.values() for n in w))
    lines = ["| collection | " + " | ".join(_md(c) for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    for n in names:
        lines.append(f"| {_md(n)} | " + " | ".join(f"{weights[c][n]:.4f}" if n in weights[c] else ""
                                                   for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _summary(config: AdaptConfig, plan: AdaptPlan, result: AdaptResult, dev_avg: dict[str, float]) -> str:
    from drmix.evaluation.suite import results_table

    t = config.synthetic
    parts = [f"# drmix adapt: {_md(', '.join(plan.corpora))}", "",
             f"Adapted model: **{_md(result.selected)}** (chosen on the synthetic dev split; `model/` holds it with "
             "its card). Every choice was made on synthetic data built from the corpora alone"
             + (f"; the labelled {_md(config.eval.eval_split)} split of "
                f"{_md(', '.join(Path(d).name for d in config.eval.eval_data))} was read only for the tables below."
                if config.eval.eval_data else "; no labelled data was given."), "",
             "## Synthetic set", "",
             f"Pseudo-queries (cropped sentences{'; LLM-generated queries by ' + _md(t.llm) if t.llm else ''}) kept "
             f"when the teacher ({_md(t.teacher or 'all-MiniLM-L6-v2')}) retrieves their source passage in its top "
             f"{t.filter_k}; split by passage, no passage in two splits.", "", _synthetic_table(result.synthetic),
             "## Selection on the synthetic dev split (nDCG@10)", "",
             results_table(_escaped(result.selection)), ""]
    st = result.synthetic_test
    parts += ["## Synthetic test split (nDCG@10, delta vs the base model)", "",
              results_table(_escaped(st.results)), ""]
    for name, comp in result.comparisons.items():
        if name.startswith("synthetic test"):
            parts += [f"### Paired tests, {_md(name)}", "", _escaped_comparison(comp), ""]
    if result.labelled is not None:
        lab = {lb: result.labelled.results[lb] for lb in result.models}
        parts += [f"## Labelled {_md(config.eval.eval_split)} split (nDCG@10, delta vs the base model)", "",
                  results_table(_escaped(lab)), ""]
        for name, comp in result.comparisons.items():
            if not name.startswith("synthetic test"):
                parts += [f"### Paired tests, {_md(name)}", "", _escaped_comparison(comp), ""]
        lab_avg = {lb: _average(result.labelled.results[lb]) for lb in result.candidates}
        parts += ["## Candidates: synthetic dev against labelled", "",
                  f"| candidate | synthetic dev nDCG@10 | labelled {_md(config.eval.eval_split)} nDCG@10 |",
                  "|---|---:|---:|"]
        parts += [f"| {_md(lb)} | {dev_avg[lb]:.4f} | {lab_avg[lb]:.4f} |" for lb in result.candidates]
        if result.kendall is not None:
            k = result.kendall
            parts += ["", f"Kendall's tau between the two rankings of the {k['candidates']} candidates: "
                          + (f"**{k['tau']:+.3f}** (p {k['p']:.3g}; scipy.stats.kendalltau)." if np.isfinite(k["tau"])
                             else "undefined (one of the rankings is a tie of every candidate).")]
        parts.append("")
    if result.weights:
        parts += ["## Mixture weights (weights.json of each candidate)", "", _weights_md(result.weights), ""]
    parts += ["Models: " + ", ".join(f"{_md(k)}: `{_md(v)}`" for k, v in result.models.items()), ""]
    text = "\n".join(parts)
    write_summary(result.output_dir, text, {
        "selected": result.selected, "models": result.models,
        "candidates": {k: str(v) for k, v in result.candidates.items()},
        "synthetic": result.synthetic, "selection": result.selection, "selection_average": dev_avg,
        "synthetic_test": st.results,
        "labelled": None if result.labelled is None else result.labelled.results,
        "eval_split": config.eval.eval_split,
        "comparisons": {k: v.to_json() for k, v in result.comparisons.items()},
        "kendall": result.kendall, "weights": result.weights})
    return text


def _escaped_comparison(comp: Any) -> str:
    import copy as _copy

    c = _copy.copy(comp)
    c.baseline = _md(comp.baseline)
    c.rows = {_md(lb): [_copy.copy(d) for d in rows] for lb, rows in comp.rows.items()}
    for rows in c.rows.values():
        for d in rows:
            d.dataset = _md(d.dataset)
    return c.to_markdown()


def _write_card(config: AdaptConfig, plan: AdaptPlan, result: AdaptResult) -> None:
    """The adapted model's card: the selected candidate's card with a section on how it was adapted."""
    from drmix.io import atomic_write_text
    from drmix.report.card import _insert

    card_path = plan.root / "model" / "README.md"
    try:
        card = card_path.read_text(encoding="utf-8")
    except OSError:
        card = "# Adapted retriever\n"
    lines = ["### Adapted with drmix adapt", "",
             f"Adapted to {', '.join(plan.corpora)} without labels: COCO continuous contrastive pretraining on the "
             f"corpora (COCO-DR, arXiv:2210.15212), then fine-tuning on {len(config.data.collections)} training "
             f"collection(s) under the mixture **{result.selected}**, chosen among "
             f"{', '.join(result.candidates)} on a synthetic dev split built from the corpora (cropped-sentence "
             "pseudo-queries, DRAMA arXiv:2502.18460, kept by a round-trip filter).", ""]
    for name, suite in (("synthetic test", result.synthetic_test), (config.eval.eval_split, result.labelled)):
        if suite is None:
            continue
        adapted = next(lb for lb in result.models if lb.startswith("adapted"))
        lines.append(f"nDCG@10 on the {name} split: " + ", ".join(
            f"{d} {v['ndcg@10']:.4f} (uniform fine-tuning {suite.results[UNIFORM][d]['ndcg@10']:.4f})"
            for d, v in suite.results[adapted].items()) + ".")
    lines += ["", "The full report: `summary.md` and `report.html` in the run folder.", ""]
    atomic_write_text(card_path, _insert(card, "\n".join(lines)))
