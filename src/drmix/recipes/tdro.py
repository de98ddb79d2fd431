"""The tDRO recipe (``drmix pipeline tdro``) as a library function: reference, learned weights, transfer, evaluation.

Specification: tDRO ("Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
Ma et al., AAAI 2025, arXiv:2408.10613; Fig. 1 and "Settings"), stages as in the paper:

* **stage 0** -- the reference model: fine-tuning with uniform weights and task-homogeneous batches
  (``drmix train`` with ``mixture: uniform``); skipped when the config names ``reference_model``. It is
  also the uniform baseline of the final table (GroupDRO uses it only as that: it needs no reference).
* **stage 1** -- learned weights (:func:`drmix.recipes.optimize.optimize_weights`): a proxy model trained on
  *mixed* batches (every collection, equal share) with hard-negative-only InfoNCE, the frozen reference
  forwarded on the same inputs, and a DRO strategy (``tdro`` by default; ``doremi``/``groupdro`` for the baselines;
  GroupDRO needs no reference). Writes ``weights.json``, ``weights.jsonl`` and ``weights.png``.
* **stage 2** -- fine-tuning with each configured transfer (default ``top:0.7`` and ``reweight``; see
  :mod:`drmix.mixture.transfer`), task-homogeneous batches.
* **evaluation** -- every stage-2 model and the uniform baseline on the configured BEIR test sets
  (nDCG@10 etc. through :mod:`drmix.evaluation.evaluate`), ending with one Markdown table (uniform vs
  each transfer, per dataset and average) plus the learned weights (``summary.md``, ``summary.json``).

* **validation first** -- every stage's configuration (with its overrides), every transfer and every path
  (training data, test and selection directories with their splits) is checked before stage 0 trains
  (:func:`validate_pipeline`), so a typo fails in a second, not after hours.
* **selection on dev** (``select_on``: BEIR directories, split ``select_split``, default ``dev``) -- uniform
  and every transfer are evaluated on the dev split only (the test qrels are never read for it); the best
  average nDCG@10 is the pipeline's result (``selected`` in ``summary.json``, and ``model`` in
  ``output_dir`` links to it). A transfer that scores below uniform on dev is reported with a warning.
  Without ``select_on`` the result is ``default_selection`` (``uniform`` unless configured: in the
  leave-one-out benchmark of docs/benchmarks.md no learned transfer beat uniform significantly), and the
  summary says so; the test split never chooses.
* **significance** -- the summary compares every model with uniform per dataset and on average with
  paired tests over queries (:mod:`drmix.evaluation.compare`).

The uniform baseline is the stage-0 model (the paper's reference *is* a uniform fine-tune with the
fine-tuning recipe). When the config supplies ``reference_model``, no stage 0 runs and the baseline is
trained as stage 2 with uniform weights. Each stage writes to its own subdirectory of ``output_dir``
(``stage0-reference``, ``stage1-<strategy>``, ``stage2-<strategy>-<transfer>``, ``stage2-uniform``), so
several strategies can share one root and one reference; a rerun reuses the stages made with the same settings
(:mod:`drmix.recipes.stages`: a changed one is refused, or re-run with ``--resume-with-changes``) and resumes an
interrupted one from its last checkpoint; evaluations are cached in ``eval-<split>.json`` (selection:
``select-<split>.json``) next to each model (:mod:`drmix.evaluation.suite`).

Stage 1's setting is the authors' (:mod:`drmix.recipes.optimize`): seven hard negatives per query,
hard-negative-only InfoNCE at temperature 0.002 on cosine scores; ``stage1: {num_negatives: 1, temperature:
0.05}`` gives drmix's earlier setting. Examples with fewer than seven hard negatives get the missing ones mined
by drmix's miner (``stage1_fill_negatives: mine``, the default; the counts go to
``stage1-<strategy>/negatives.json``); ``random`` gives examples without negatives random positives of other
examples of the same collection (the earlier rule), ``off`` leaves the data as it is.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationError, field_validator, model_validator

from drmix.config import (INPUT, ContrastiveConfig, MixtureConfig, Part, PipelineRun, RecipeConfig, TrainConfig,
                          format_validation, options_setting, setting)
from drmix.errors import ConfigError
from drmix.evaluation.suite import evaluate_suite, results_table
from drmix.recipes.optimize import optimize_weights, stage1_config
from drmix.outputs import run_finished
from drmix.recipes.progress import estimate_device, training_work
from drmix.recipes.stages import Stage, run_stages, write_summary

log = logging.getLogger(__name__)

BASELINE = "uniform"


class TdroMixture(MixtureConfig.without("TdroMixtureParts", "scheme", "mixture_temperature", "weights_file", "transfer",
                                        "dev", "dev_split")):
    """Stage 1's strategy and the reference it measures against (every stage sets its own weights)."""

    strategy: str = setting("tdro", description="Stage-1 strategy: tdro (relative loss), doremi (excess loss) or "
                                              "groupdro (raw loss); the weight-learning strategies of "
                                              "docs/mixture.md.")

    @field_validator("strategy")
    @classmethod
    def _learns_weights(cls, v: str) -> str:
        from drmix.mixture.registry import strategy_names

        names = strategy_names(family="dro")
        if v.lower() not in names:
            raise ValueError(f"stage 1 learns weights with one of {', '.join(names)}, got {v!r}")
        return v.lower()


TdroRun = PipelineRun.variant("TdroRun", output_dir=("runs/pipeline", "Root directory; each stage writes a subdirectory."))
#: the batches: every stage sets how they are filled (stages 0 and 2 homogeneous, stage 1 mixed)
TdroContrastive = ContrastiveConfig.without("TdroContrastive", "batching")

#: the training fields drmix pipeline tdro does not carry: why, and what to do instead (``{value}``: the value given)
TDRO_LEFT_OUT: dict[str, tuple[str, str]] = {
    "mixture": ("every stage sets its own weights (uniform; stage 2 each transfer of stage 1's)",
                "set it for one stage, e.g. --stage0 mixture={value}."),
    "mixture_temperature": ("every stage sets its own weights (uniform; stage 2 each transfer of stage 1's)",
                            "set it for one stage, e.g. --stage0 mixture_temperature={value}."),
    "weights_file": ("stage 2 uses stage 1's learned weights",
                     "to train on a weights file of your own use `drmix train --mixture file --weights-file FILE`."),
    "transfer": ("the stage-2 transfers are --transfers", "list them with --transfers (e.g. --transfers {value})."),
    "batching": ("every stage sets its own batches (stages 0 and 2 homogeneous, stage 1 mixed)",
                 "set it for one stage, e.g. --stage2 batching={value}."),
    **dict.fromkeys(("dev", "dev_split"), (
        "no stage runs Inf-DDS, whose dev sets these are (stage 1 learns weights with a DRO strategy)",
        "drop it; to choose among uniform and the transfers on a dev split pass --select-on DEV_BEIR_DIR.")),
    **dict.fromkeys(("influence", "idro", "strategy_options"), (
        "stage 1 learns weights with a DRO strategy (its options: --dro) and stages 0 and 2 train with static "
        "weights: the options of other strategies are never read", "drop it; stage 1's options are --dro KEY=VALUE.")),
}


class TdroStages(Part):
    """The recipe's own settings: transfers, per-stage overrides, selection on dev."""

    title: ClassVar[str] = "tDRO stages"

    transfers: list[str] = setting(default_factory=lambda: ["top:0.7", "reweight"],
                                 description="Stage-2 transfers of the learned weights: top:K, reweight, loss.")
    stage0: dict[str, Any] = setting(default_factory=dict, description="Overrides of training fields for stage 0.")
    stage1: dict[str, Any] = setting(default_factory=dict, description="Overrides of training fields for stage 1.")
    stage2: dict[str, Any] = setting(default_factory=dict, description="Overrides of training fields for stage 2.")
    stage1_fill_negatives: Literal["mine", "random", "off"] = setting(
        "mine", description="Stage 1, examples with fewer hard negatives than num_negatives (7): mine = mine the "
                            "missing ones with drmix's miner; random = give examples without negatives random "
                            "same-collection positives; off = as they are (YAML true/false: mine/off).")
    select_on: list[str] = setting(default_factory=list, role=INPUT,
                                   description="BEIR directories whose dev split chooses among uniform and the "
                                               "transfers (never the test split).")
    select_split: str = setting("dev", description="Qrels split of the select_on directories.")
    select_max_queries: int | None = setting(None, ge=1, description="Cap on selection queries per dataset.")
    select_max_docs: int | None = setting(None, ge=1, description="Cap on corpus size per selection dataset.")
    default_selection: str = setting("uniform", description="The pipeline's result when no select_on is given: "
                                                          "uniform (the benchmark's evidence) or a transfer.")

    stage1_miner: str | None = setting(None, role=INPUT, description="Stage 1: the retriever that mines missing hard negatives "
                                                        "(folder or hub id; default: drmix mine's, the bundled "
                                                        "all-MiniLM-L6-v2; the tDRO authors used bge-base-en-v1.5).")

    @field_validator("stage1_fill_negatives", mode="before")
    @classmethod
    def _fill_from_bool(cls, v: Any) -> Any:
        """The earlier boolean form: true = mine (the default), false = off."""
        if isinstance(v, bool):
            return "mine" if v else "off"
        return v


class PipelineConfig(RecipeConfig):
    """``drmix pipeline tdro`` options: the fine-tuning parts every stage is composed from (its mixture part with
    stage 1's strategy and reference, its batches without ``batching``: every stage sets its own weights and
    batches), stage 1's strategy options, the recipe's output folder, the final evaluation and the stages' own
    part. Every stage's TrainConfig is composed from these parts by :func:`plan_tdro`; the strategy's options and
    every stage's overrides are checked when the config is made (:func:`check_stage_overrides`)."""

    command: ClassVar[str] = "drmix pipeline tdro"
    left_out: ClassVar[dict[str, tuple[str, str]]] = {**RecipeConfig.left_out, **TDRO_LEFT_OUT}

    contrastive: TdroContrastive = Field(default_factory=TdroContrastive)  # type: ignore[valid-type]
    mixture: TdroMixture = Field(default_factory=TdroMixture)
    run: TdroRun = Field(default_factory=TdroRun)  # type: ignore[valid-type]
    dro: dict[str, Any] = options_setting("dro", "Options of stage 1's strategy (tdro, doremi, groupdro; see "
                                                 "docs/mixture.md).")
    stages: TdroStages = Field(default_factory=TdroStages)

    @model_validator(mode="after")
    def _typed(self) -> "PipelineConfig":
        from drmix.recipes.options import check_options

        check_options(self, self.mixture.strategy)
        check_stage_overrides(self)
        return self


@dataclass
class TdroPlan:
    """Every stage's TrainConfig, composed from the recipe's parts before anything runs (:func:`plan_tdro`)."""

    root: Path
    reference: str | None              # the model stage 1 measures against (None: GroupDRO measures raw losses)
    stage0: TrainConfig | None         # the uniform reference / baseline (None: the config names reference_model)
    stage1: TrainConfig                # the learned weights
    stage2: dict[str, tuple[str | None, TrainConfig]]   # label -> (transfer, fine-tuning); "uniform" without stage 0

    @property
    def weights_path(self) -> Path:
        return Path(self.stage1.run.output_dir) / "weights.json"


@dataclass
class PipelineResult:
    output_dir: Path
    reference: str
    weights_path: Path
    weights: dict[str, float]
    models: dict[str, Path]                                    # label -> model dir (uniform + each transfer)
    results: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # label -> dataset -> metric
    table: str = ""
    selection: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # label -> dev dataset -> metric
    selected: str | None = None                                # label chosen on dev (None: no select_on)
    comparison: Any = None                                     # drmix.evaluation.compare.Comparison on test


def slug(text: str) -> str:
    """A directory-safe form of a transfer name: ``top:0.7`` -> ``top-0.7``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _stage_config(base: PipelineConfig, overrides: dict[str, Any], **fixed: Any) -> TrainConfig:
    """A stage's TrainConfig: the pipeline's training parts, static unless ``fixed`` says otherwise, then the
    stage's ``overrides`` (checked when the config is made: :func:`check_stage_overrides`); finished / interrupted
    stages continue instead of failing (``resume``)."""
    return TrainConfig.from_parts(base, **{"strategy": "static", **fixed, **overrides, "resume": True})


def weights_table(weights_json: dict[str, Any], *, kept: dict[str, list[str]] | None = None) -> str:
    """Markdown: collections sorted by learned weight, with which transfers keep them."""
    names = weights_json["collections"]
    w = dict(zip(names, weights_json["weights"]))
    from drmix.report.markdown import md_cell

    kept = kept or {}
    head = "| collection | weight | " + " | ".join(map(md_cell, kept)) + (" |" if kept else "|")
    lines = [head, "|---|---:|" + "---|" * len(kept)]
    for n in sorted(names, key=lambda x: -w[x]):
        marks = " | ".join("yes" if n in k else "" for k in kept.values())
        lines.append(f"| {md_cell(n)} | {w[n]:.4f} | " + marks + (" |" if kept else "|"))
    return "\n".join(lines) + "\n"


class _Transfers:
    """Each transfer's strategy from stage 1's weights, built once (when its stage 2 trains, or for the summary)."""

    def __init__(self, weights: Path, names: list[str]) -> None:
        self.weights, self.names, self.built = weights, names, {}

    def get(self, transfer: str | None) -> Any:
        from drmix.mixture.transfer import build_transfer_strategy

        if transfer is None:
            return None
        if transfer not in self.built:
            self.built[transfer] = build_transfer_strategy(str(self.weights), transfer, self.names)
        return self.built[transfer]


def _train(config: TrainConfig, strategy: Any = None) -> Any:
    from drmix import api

    return api.train(config, strategy=strategy)


def plan_tdro(config: PipelineConfig) -> TdroPlan:
    """Check the recipe (:func:`validate_pipeline`) and compose every stage's TrainConfig from its parts: stage 0
    (uniform, homogeneous batches; unless ``reference_model`` is given), stage 1 (:func:`stage1_config`) and a
    stage 2 per transfer (plus uniform without stage 0), each with its ``stage0`` / ``stage1`` / ``stage2``
    overrides and its own subfolder of ``output_dir``. Nothing is written."""
    needs_reference = validate_pipeline(config)
    root = Path(config.run.output_dir)
    reference = config.mixture.reference_model
    s0_cfg = None
    if reference is None:    # stage 0: the uniform baseline, and the reference of the ratio / difference measurements
        s0_cfg = _stage_config(config, config.stages.stage0, batching="homogeneous", mixture="uniform",
                               strategy="static", transfer=None, weights_file=None, reference_model=None,
                               output_dir=str(root / "stage0-reference"))
        if needs_reference:      # GroupDRO measures raw losses: no reference forward
            reference = str(Path(s0_cfg.run.output_dir) / "model")
    s1_cfg = stage1_config(config, strategy=config.mixture.strategy, reference=reference,
                           output_dir=root / f"stage1-{config.mixture.strategy}", overrides=config.stages.stage1)
    weights_path = Path(s1_cfg.run.output_dir) / "weights.json"
    runs: list[tuple[str, str | None]] = ([] if s0_cfg is not None else [(BASELINE, None)])
    runs += [(t, t) for t in config.stages.transfers]
    stage2 = {label: (transfer, _stage_config(
        config, config.stages.stage2, batching="homogeneous", strategy="static", reference_model=None,
        mixture="uniform", transfer=transfer, weights_file=str(weights_path) if transfer else None,
        output_dir=str(root / ("stage2-uniform" if transfer is None
                               else f"stage2-{config.mixture.strategy}-{slug(transfer)}"))))
        for label, transfer in runs}
    return TdroPlan(root, reference, s0_cfg, s1_cfg, stage2)


def run_tdro_pipeline(config: PipelineConfig) -> PipelineResult:
    """Stages 0, 1, 2 and the evaluation; see the module docstring. Finished stages are skipped."""
    from drmix.data.collections import collections_for

    # Every stage's configuration first: the earlier run's stages are reused only when made with these settings.
    plan = plan_tdro(config)
    root, reference, s0_cfg, s1_cfg = plan.root, plan.reference, plan.stage0, plan.stage1
    s1_out, weights_path = Path(s1_cfg.run.output_dir), plan.weights_path
    models: dict[str, Path] = {}
    strategies = _Transfers(weights_path, [c.name for c in collections_for(config)])
    stages = [] if s0_cfg is None else [Stage("stage 0", s0_cfg, part="stages.stage0", run=lambda r: _train(s0_cfg),
                                              work=training_work("stage 0", s0_cfg))]
    stages.append(Stage("stage 1", s1_cfg, part="stages.stage1", needs=tuple(s.name for s in stages),
                        run=lambda r: optimize_weights(s1_cfg, fill_negatives=config.stages.stage1_fill_negatives,
                                                       miner=config.stages.stage1_miner),
                        done=lambda out: run_finished(out) and (out / "weights.json").exists(),
                        work=training_work("stage 1", s1_cfg)))
    # how stage 1 completes missing hard negatives is a recipe field (pipeline.yaml), not a training field
    flat = config.flat()
    stages.append(Stage("stage 1 (missing negatives)", {k: flat[k] for k in ("stage1_fill_negatives", "stage1_miner")},
                        output_dir=s1_out, record=root / "pipeline.yaml", kind=type(config)))
    stages += [Stage(f"stage 2 ({label})", cfg, part="stages.stage2", needs=("stage 1",),
                     run=lambda r, cfg=cfg, transfer=transfer: _train(cfg, strategies.get(transfer)),
                     work=training_work(f"stage 2 ({label})", cfg))
               for label, (transfer, cfg) in plan.stage2.items()]
    results = run_stages(stages, root=root, record=("pipeline.yaml", config),
                         allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                         device=estimate_device(config.run.device), recipe="pipeline tdro")
    if s0_cfg is not None:
        models[BASELINE] = results["stage 0"].model_dir
    learned = json.loads(weights_path.read_text(encoding="utf-8"))
    kept: dict[str, list[str]] = {}
    for label, (transfer, _) in plan.stage2.items():
        strategy = strategies.get(transfer)
        if strategy is not None and "kept" in strategy.info:
            kept[label] = strategy.info["kept"]
        models[label] = results[f"stage 2 ({label})"].model_dir

    result = PipelineResult(root, reference or "", weights_path, dict(zip(learned["collections"], learned["weights"])),
                            models)
    if config.stages.select_on:
        select_models(config, result)
    else:
        result.selected = config.stages.default_selection
        _link_model(result.output_dir, result.models[result.selected])
    if config.test.test_data:
        suite = evaluate_suite(models, config.test.test_data, split=config.test.test_split,
                               max_queries=config.test.test_max_queries, max_docs=config.test.test_max_docs,
                               seed=config.optim.seed, max_length=config.data.doc_max_length)
        result.results = suite.results
        if len(models) > 1:
            from drmix.evaluation.compare import Scored, compare

            result.comparison = compare([Scored(lb, suite.per_query[lb]) for lb in models], baseline=BASELINE,
                                        metric="ndcg@10", seed=config.optim.seed)
    result.table = _summary(config, result, learned, kept)
    return result


def _check_beir_dirs(dirs: list[str], split: str, field_name: str) -> None:
    from drmix.data.beir import available_splits

    for d in dirs:
        p = Path(d).expanduser()
        if not p.is_dir():
            raise ConfigError(f"{field_name}: BEIR directory not found.", path=p,
                              fix="pass a folder holding corpus.jsonl, queries.jsonl and qrels/<split>.tsv.")
        if split not in available_splits(p):
            have = ", ".join(available_splits(p)) or "none"
            raise ConfigError(f"{field_name}: no qrels/{split}.tsv (splits: {have}).", path=p,
                              fix=f"pass a directory with a {split} split, or change the split option.")


def check_stage_overrides(config: PipelineConfig) -> None:
    """Every stage's configuration composed with its ``stage0`` / ``stage1`` / ``stage2`` overrides (typed by
    TrainConfig: a field that does not exist or a value it refuses is one :class:`ConfigError` naming the
    override); nothing is read or written."""
    from drmix.recipes.options import check_override

    st = config.stages
    check_override(lambda: _stage_config(config, st.stage0), "--stage0", TrainConfig)
    check_override(lambda: stage1_config(config, strategy=config.mixture.strategy, reference=None, output_dir="x",
                                         overrides=st.stage1), "--stage1", TrainConfig)
    check_override(lambda: _stage_config(config, st.stage2), "--stage2", TrainConfig)


def validate_pipeline(config: PipelineConfig) -> bool:
    """Check every stage's configuration, transfer and path before anything trains; returns whether the stage-1
    strategy needs a reference model (its registered spec says so, for its options).

    Raises :class:`ConfigError` (one line, the field and the fix) for unknown or invalid stage overrides,
    unknown transfers, missing training data, and test / selection directories without the split.
    """
    from drmix.mixture.registry import strategy_names, strategy_of
    from drmix.mixture.transfer import parse_top_fraction

    if not config.stages.transfers:
        raise ConfigError("no transfer configured.", fix="set transfers: [top:0.7, reweight] (or loss).")
    for t in config.stages.transfers:
        spec = t.strip().lower()
        if spec.startswith("top"):
            parse_top_fraction(spec)
        elif spec not in ("reweight", "loss"):
            raise ConfigError(f"unknown transfer {t!r}.", fix="use top:0.7 (any fraction), reweight or loss.")
    spec, options = strategy_of(config)
    if spec.family != "dro":
        raise ConfigError(f"unknown DRO strategy {config.mixture.strategy!r}.",
                          fix=f"use one of {list(strategy_names(family='dro'))}.")
    check_stage_overrides(config)
    from drmix.data.collections import check_sources

    check_sources(config.data.collections)
    if config.stages.default_selection not in (BASELINE, *config.stages.transfers):
        raise ConfigError(f"default_selection {config.stages.default_selection!r} is neither uniform nor a configured "
                          "transfer.", fix=f"use one of: {', '.join([BASELINE, *config.stages.transfers])}.")
    _check_beir_dirs(config.test.test_data, config.test.test_split, "test_data")
    _check_beir_dirs(config.stages.select_on, config.stages.select_split, "select_on")
    if config.stages.select_on and config.stages.select_split == config.test.test_split and set(
            str(Path(d).resolve()) for d in config.stages.select_on) & set(str(Path(d).resolve()) for d in config.test.test_data):
        raise ConfigError(f"select_on uses the {config.stages.select_split} split of a test_data directory: the choice "
                          "would be made on the test set.", fix="select on a dev split (select_split: dev).")
    return spec.needs_reference_with(options)


def select_models(config: PipelineConfig, result: PipelineResult) -> str:
    """Evaluate every model on the dev split of ``select_on`` and keep the best (average nDCG@10).

    Only ``qrels/<select_split>.tsv`` of the ``select_on`` directories is read. Ties go to uniform. A transfer
    below uniform on dev is logged as a warning. Links ``output_dir/model`` to the selected model.
    """
    scores = evaluate_suite(result.models, config.stages.select_on, kind="select", split=config.stages.select_split,
                            max_queries=config.stages.select_max_queries, max_docs=config.stages.select_max_docs,
                            seed=config.optim.seed, max_length=config.data.doc_max_length, metrics=("ndcg@10",)).results
    avg = {lb: float(np.mean([r["ndcg@10"] for r in by.values()])) for lb, by in scores.items()}
    best = BASELINE if BASELINE in avg else next(iter(avg))
    for lb, v in avg.items():
        if v > avg[best] + 1e-12:
            best = lb
    for lb, v in avg.items():
        if lb != BASELINE and BASELINE in avg and v < avg[BASELINE]:
            log.warning("transfer %s scores below uniform on %s (%s nDCG@10 %.4f vs %.4f); not selected",
                        lb, config.stages.select_split, ", ".join(scores[lb]), v, avg[BASELINE])
    result.selection = scores
    result.selected = best
    _link_model(result.output_dir, result.models[best])
    log.info("selected %s on %s (average nDCG@10 %.4f; uniform %.4f)", best, config.stages.select_split, avg[best],
             avg.get(BASELINE, float("nan")))
    return best


def _link_model(root: Path, target: Path) -> None:
    """``root/model`` -> ``target`` (a symlink; replaced when it is one, refused when it is anything else)."""
    link = root / "model"
    try:
        if link.is_symlink() or link.exists():
            if not link.is_symlink():
                raise ConfigError("output_dir/model exists and is not the pipeline's link.", path=link,
                                  fix="move it away or choose another --output-dir.")
            link.unlink()
        link.symlink_to(Path(target).resolve(), target_is_directory=True)
    except OSError as e:
        log.warning("could not link %s to the selected model (%s); use %s", link, e, target)


def _summary(config: PipelineConfig, result: PipelineResult, learned: dict, kept: dict[str, list[str]]) -> str:
    from drmix.report.markdown import md_cell, md_code

    parts = [f"# tDRO pipeline ({md_cell(config.mixture.strategy)})", ""]
    if result.selection:
        avg = {lb: float(np.mean([r["ndcg@10"] for r in by.values()])) for lb, by in result.selection.items()}
        losers = [lb for lb, v in avg.items() if lb != BASELINE and v < avg.get(BASELINE, -1)]
        parts += [f"## Selected: {md_cell(result.selected)}", "",
                  f"Chosen on the {md_cell(config.stages.select_split)} split of "
                  f"{', '.join(md_cell(Path(d).name) for d in config.stages.select_on)} "
                  f"(never the test split) by average nDCG@10; `model` in the output folder links to it.", "",
                  results_table(result.selection), ""]
        if losers:
            parts += [f"Warning: {', '.join(map(md_cell, losers))} scored below uniform on "
                      f"{md_cell(config.stages.select_split)}.", ""]
    elif result.selected is not None:
        parts += [f"## Selected: {md_cell(result.selected)} (default)", "",
                  "No --select-on dev set was given, so nothing was chosen by measurement: the result is "
                  f"`default_selection` ({md_cell(result.selected)}); `model` in the output folder links to it. In the "
                  "leave-one-out benchmark (docs/benchmarks.md) no learned transfer beat uniform significantly; "
                  "give a dev split of your target domains with --select-on to choose a transfer.", ""]
    if result.results:
        parts += [f"## {md_cell(config.test.test_split)} nDCG@10 (delta vs uniform)", "", results_table(result.results), ""]
    if result.comparison is not None:
        parts += [f"## Paired tests vs uniform ({md_cell(config.test.test_split)})", "", result.comparison.to_markdown(),
                  ""]
    parts += [f"## Learned weights ({learned.get('output', 'final')}, {learned.get('steps', '?')} steps)", "",
              weights_table(learned, kept=kept), "",
              "Models: " + ", ".join(f"{md_cell(k)}: {md_code(v)}" for k, v in result.models.items()), ""]
    text = "\n".join(parts)
    write_summary(result.output_dir, text, {
        "strategy": config.mixture.strategy, "reference": result.reference, "weights_file": str(result.weights_path),
        "weights": result.weights, "kept": kept, "models": {k: str(v) for k, v in result.models.items()},
        "results": result.results, "selected": result.selected, "selection": result.selection,
        "select_on": list(config.stages.select_on), "select_split": config.stages.select_split,
        "comparison": None if result.comparison is None else result.comparison.to_json()})
    return text
