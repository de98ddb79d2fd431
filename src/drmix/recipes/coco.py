"""The COCO-DR recipe (``drmix pipeline coco``): COCO on the target corpora, fine-tuning, evaluation.

Specification: COCO-DR ("COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and
Distributionally Robust Learning", Yu et al., EMNLP 2022, arXiv:2210.15212), Sec. 4 and Table 2 (the -COCO ablation):

1. ``coco/`` -- continuous contrastive pretraining on the target corpora (:mod:`drmix.pretrain.coco`);
2. ``finetune-coco-<strategy>/`` -- fine-tuning of the COCO model on the source collections with the
   chosen strategy (``static`` = uniform mixture, or ``idro``);
3. ``finetune-base-<strategy>/`` -- the same fine-tuning (same data, seed, steps and strategy) from the
   original model, i.e. without COCO;
4. evaluation of both on the BEIR test sets: nDCG@10 per dataset and on average, the difference, and a
   paired t-test over queries (every query of every dataset, COCO vs no COCO).

Each stage writes a subdirectory of ``output_dir`` (the recipe's own settings: ``pipeline.yaml``); rerunning
the command reuses the stages made with the same settings (:mod:`drmix.recipes.stages`: a changed one is refused,
or re-run with ``--resume-with-changes``) and resumes an interrupted one. Evaluations are cached in each fine-tuning folder's ``eval-<split>.json``
(:mod:`drmix.evaluation.suite`; ``drmix compare OUTPUT_DIR`` reads them). The table is written to
``summary.md`` / ``summary.json``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from drmix.config import INPUT, MixtureConfig, Part, PipelineRun, RecipeConfig, TrainConfig, options_setting, setting
from drmix.errors import ConfigError
from drmix.evaluation.compare import paired_test
from drmix.evaluation.suite import evaluate_suite
from drmix.recipes.progress import estimate_device, training_work
from drmix.recipes.stages import Stage, run_stages, write_summary

log = logging.getLogger(__name__)


CocoMixture = MixtureConfig.without("CocoMixtureParts", "reference_model", "dev", "dev_split").variant(
    "CocoMixture", strategy=("static", "Fine-tuning strategy: static (uniform) or idro.", Literal["static", "idro"]))
CocoPipelineRun = PipelineRun.variant(
    "CocoPipelineRun", output_dir=("runs/coco-pipeline", "Root directory; each stage writes a subdirectory."))

#: the training fields drmix pipeline coco does not carry: why, and what to do instead
COCO_LEFT_OUT: dict[str, tuple[str, str]] = {
    "reference_model": ("its fine-tunings train with static weights or iDRO, and neither measures losses against a "
                        "reference model", "drop it; a reference model is for `drmix train --strategy tdro` (or "
                        "doremi) and `drmix pipeline tdro`."),
    **dict.fromkeys(("dev", "dev_split"), ("its fine-tunings train with static weights or iDRO; dev sets are "
                                           "Inf-DDS's", "drop it; the final table is on --test-data.")),
    **dict.fromkeys(("dro", "influence", "strategy_options"), (
        "its fine-tunings train with static weights or iDRO (its options: --idro): the options of other strategies "
        "are never read", "drop it; iDRO's options are --idro KEY=VALUE.")),
}
#: the mixture fields only static weights read (iDRO samples the collections uniformly)
STATIC_ONLY = ("mixture", "mixture_temperature", "weights_file", "transfer")


class CocoRecipe(Part):
    """The target corpora and the COCO stage's own settings."""

    title: ClassVar[str] = "COCO-DR recipe"

    corpus: list[str] = setting(default_factory=list, role=INPUT,
                              description="Target corpora for COCO (BEIR dirs or JSONL).")
    coco: dict[str, Any] = setting(default_factory=dict, description="Overrides of COCO fields (max_steps, batch_size, "
                                                                   "learning_rate, span_max_tokens, max_documents, ...).")


class CocoPipelineConfig(RecipeConfig):
    """``drmix pipeline coco``: the fine-tuning parts (its strategy static or idro: no reference model, no dev
    sets), iDRO's options, the recipe's output folder, the test sets and the recipe's part (target corpora, COCO
    overrides). The COCO stage's config and both fine-tunings are composed from these parts by :func:`plan_coco`;
    iDRO's options, the static weights' settings and the ``coco`` overrides are checked when the config is made."""

    command: ClassVar[str] = "drmix pipeline coco"
    left_out: ClassVar[dict[str, tuple[str, str]]] = {**RecipeConfig.left_out, **COCO_LEFT_OUT}

    mixture: CocoMixture = Field(default_factory=CocoMixture)  # type: ignore[valid-type]
    run: CocoPipelineRun = Field(default_factory=CocoPipelineRun)  # type: ignore[valid-type]
    idro: dict[str, Any] = options_setting("idro", "Options of iDRO, with --strategy idro (see docs/coco.md).")
    recipe: CocoRecipe = Field(default_factory=CocoRecipe)

    @model_validator(mode="after")
    def _typed(self) -> "CocoPipelineConfig":
        from drmix.recipes.options import check_options, check_override, refuse_unread

        check_options(self, self.mixture.strategy)
        m, defaults = self.mixture, MixtureConfig.model_fields
        if m.strategy == "idro":
            refuse_unread(self, {flat: (getattr(m, name), defaults[name].default) for flat, name in
                                 zip(STATIC_ONLY, ("scheme", "mixture_temperature", "weights_file", "transfer"))},
                          "with --strategy idro (iDRO samples the collections uniformly and reweights query "
                          "clusters within each batch)", "drop {flag}, or fine-tune with --strategy static.")
        elif m.transfer and not m.weights_file:
            raise ConfigError("--transfer needs --weights-file (a weights.json from `drmix mixture optimize`).",
                              fix="add --weights-file RUN/weights.json, or drop --transfer.")
        from drmix.pretrain.runner import CocoConfig

        check_override(lambda: coco_stage_config(self), "--coco", CocoConfig)
        return self


@dataclass
class CocoPlan:
    """Every stage's config, composed from the recipe's parts before anything runs (:func:`plan_coco`)."""

    root: Path
    coco: Any                                # CocoConfig: continuous contrastive pretraining on the target corpora
    finetunes: dict[str, TrainConfig]        # label -> fine-tuning ("no COCO + ...", then "COCO + ...")


@dataclass
class CocoPipelineResult:
    output_dir: Path
    models: dict[str, Path]
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)   # label -> dataset -> qid -> v
    table: str = ""


def coco_stage_config(config: CocoPipelineConfig):
    """The COCO stage: the pipeline's model, batch, optimisation and output parts with COCO's own learning rate,
    no periodic evaluation, the target corpora, then the ``coco`` overrides (checked when the config is made)."""
    from drmix.pretrain.runner import CocoConfig, CocoOptim

    values = {"corpus": list(config.recipe.corpus), "output_dir": str(Path(config.run.output_dir) / "coco"),
              "resume": True, "learning_rate": CocoOptim.model_fields["learning_rate"].default, "eval_data": [],
              "data": [],
              **config.recipe.coco}
    return CocoConfig.from_parts(config, **values)


def finetune_config(config: CocoPipelineConfig, model: str | None, out: Path) -> TrainConfig:
    return TrainConfig.from_parts(config, model=model, output_dir=str(out), resume=True)


def plan_coco(config: CocoPipelineConfig) -> CocoPlan:
    """Check the recipe's inputs are given and compose every stage's config from its parts: COCO
    (:func:`coco_stage_config`) and the same fine-tuning from ``model`` (no COCO) and from the COCO model, each
    in its own subfolder of ``output_dir``. Nothing is written."""
    if not config.recipe.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR (repeatable).")
    if not config.data.collections:
        raise ConfigError("no fine-tuning data given.", fix="pass --data (training collections).")
    if not config.test.test_data:
        raise ConfigError("no test data given.", fix="pass --test-data BEIR_DIR (repeatable).")
    root = Path(config.run.output_dir)
    coco_cfg = coco_stage_config(config)
    strat = "uniform" if config.mixture.strategy == "static" else config.mixture.strategy
    start_model = config.model.name_or_path
    finetunes = {}
    for label, start in ((f"no COCO + {strat}", start_model),
                         (f"COCO + {strat}", str(Path(coco_cfg.run.output_dir) / "model"))):
        out = root / f"finetune-{'coco' if start != start_model else 'base'}-{strat}"
        finetunes[label] = finetune_config(config, start, out)
    return CocoPlan(root, coco_cfg, finetunes)


def comparison_table(scores: dict[str, dict[str, dict[str, float]]], base: str, other: str,
                     metric: str = "ndcg@10") -> str:
    """Markdown: per dataset and on average the two models, the difference and the paired test."""
    from drmix.report.markdown import md_cell

    lines = [f"| {md_cell(metric)} | {md_cell(base)} | {md_cell(other)} | difference | 95% interval | "
             "p (paired t, queries) |",
             "|---|---:|---:|---:|---|---:|"]
    for d in scores[base]:
        t = paired_test({d: scores[base][d]}, {d: scores[other][d]})
        a = float(np.mean(list(scores[base][d].values())))
        b = float(np.mean(list(scores[other][d].values())))
        lines.append(f"| {md_cell(d)} | {a:.4f} | {b:.4f} | {b - a:+.4f} | [{t['low']:+.4f}, {t['high']:+.4f}] | {t['p']:.3g} |")
    if len(scores[base]) > 1:
        a = float(np.mean([np.mean(list(v.values())) for v in scores[base].values()]))
        b = float(np.mean([np.mean(list(v.values())) for v in scores[other].values()]))
        t = paired_test(scores[base], scores[other])
        lines.append(f"| average | {a:.4f} | {b:.4f} | {b - a:+.4f} | all queries: [{t['low']:+.4f}, "
                     f"{t['high']:+.4f}] | {t['p']:.3g} |")
    return "\n".join(lines) + "\n"


def _train(config: TrainConfig) -> Any:
    from drmix import api

    return api.train(config)


def run_coco_pipeline(config: CocoPipelineConfig) -> CocoPipelineResult:
    """Run every stage (skipping finished ones) and write ``summary.md`` / ``summary.json``."""
    from drmix.pretrain.runner import pretrain_coco

    plan = plan_coco(config)
    root, coco_cfg, finetunes = plan.root, plan.coco, plan.finetunes
    coco_out = Path(coco_cfg.run.output_dir)
    # the earlier run's stages are reused only when made with these settings (refused or re-run otherwise)
    stages = [Stage("COCO", coco_cfg, record=coco_out / "coco.yaml", part="recipe",
                    run=lambda r: pretrain_coco(coco_cfg), what="continuous contrastive pretraining on the target corpora",
                    work=training_work("COCO", coco_cfg))]
    stages += [Stage(f"fine-tuning ({label})", cfg, part="optim", run=lambda r, cfg=cfg: _train(cfg),
                     needs=("COCO",) if label.startswith("COCO") else (),
                     work=training_work(f"fine-tuning ({label})", cfg))
               for label, cfg in finetunes.items()]
    results = run_stages(stages, root=root, record=("pipeline.yaml", config),
                         allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                         device=estimate_device(config.run.device), recipe="pipeline coco")
    models: dict[str, Path] = {label: results[f"fine-tuning ({label})"].model_dir for label in finetunes}
    result = CocoPipelineResult(root, models)
    result.scores = evaluate_suite(models, config.test.test_data, split=config.test.test_split,
                                   max_queries=config.test.test_max_queries, max_docs=config.test.test_max_docs,
                                   seed=config.optim.seed).scores("ndcg@10")
    base, other = list(models)
    result.table = comparison_table(result.scores, base, other)
    write_summary(root, "# COCO-DR pipeline\n\n" + result.table, {
        "models": {k: str(v) for k, v in models.items()},
        "ndcg@10": {k: {d: float(np.mean(list(s.values()))) for d, s in v.items()} for k, v in result.scores.items()},
        "paired": paired_test(result.scores[base], result.scores[other])})
    return result
