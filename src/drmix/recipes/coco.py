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
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from drmix.config import PipelineBaseConfig, TrainConfig
from drmix.errors import ConfigError
from drmix.evaluation.significance import paired_summary
from drmix.evaluation.suite import evaluate_suite
from drmix.recipes.stages import Stage, prepare_stages, record_config, run_stage, train_stage, write_summary

log = logging.getLogger(__name__)


class CocoPipelineConfig(PipelineBaseConfig):
    """``drmix pipeline coco``: the fine-tuning fields, the target corpora, COCO overrides and the test sets."""

    corpus: list[str] = Field(default_factory=list, description="Target corpora for COCO (BEIR dirs or JSONL).")
    output_dir: str = Field("runs/coco-pipeline", description="Root directory; each stage writes a subdirectory.")
    strategy: Literal["static", "idro"] = Field("static", description="Fine-tuning strategy: static (uniform) or idro.")
    coco: dict[str, Any] = Field(default_factory=dict, description="Overrides of COCO fields (max_steps, batch_size, "
                                                                   "learning_rate, span_max_tokens, max_documents, ...).")


@dataclass
class CocoPipelineResult:
    output_dir: Path
    models: dict[str, Path]
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)   # label -> dataset -> qid -> v
    table: str = ""


def _own_fields() -> set[str]:
    return set(CocoPipelineConfig.model_fields) - set(TrainConfig.model_fields)


def coco_stage_config(config: CocoPipelineConfig):
    from drmix.pretrain.runner import CocoConfig

    values = config.model_dump(exclude=_own_fields() | {"strategy", "data", "mixture", "learning_rate",
                                                        "output_dir", "idro", "tdro", "infdds", "eval_data", "transfer",
                                                        "weights_file", "reference_model", "dev"})
    values.update(corpus=list(config.corpus), output_dir=str(Path(config.output_dir) / "coco"), resume=True)
    values.update(config.coco)
    try:
        return CocoConfig.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"invalid --coco option {'.'.join(map(str, err['loc']))}: {err['msg']}.",
                          fix="see `drmix pretrain coco --help` for the fields.") from None


def finetune_config(config: CocoPipelineConfig, model: str | None, out: Path) -> TrainConfig:
    values = config.model_dump(exclude=_own_fields())
    values.update(model=model, output_dir=str(out), resume=True)
    return TrainConfig.model_validate(values)


def paired_test(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, float]:
    """Paired t-test over every query of every dataset (``b - a``): mean difference, 95% interval, p
    (:func:`drmix.evaluation.significance.paired_summary`)."""
    return paired_summary([b[d][q] - a[d][q] for d in a for q in a[d] if q in b.get(d, {})])


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


def run_coco_pipeline(config: CocoPipelineConfig) -> CocoPipelineResult:
    """Run every stage (skipping finished ones) and write ``summary.md`` / ``summary.json``."""
    from drmix.pretrain.runner import pretrain_coco

    if not config.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR (repeatable).")
    if not config.data:
        raise ConfigError("no fine-tuning data given.", fix="pass --data (training collections).")
    if not config.test_data:
        raise ConfigError("no test data given.", fix="pass --test-data BEIR_DIR (repeatable).")
    root = Path(config.output_dir)
    coco_cfg = coco_stage_config(config)
    coco_out = Path(coco_cfg.output_dir)
    strat = "uniform" if config.strategy == "static" else config.strategy
    finetunes = {}
    for label, start in ((f"no COCO + {strat}", config.model), (f"COCO + {strat}", str(coco_out / "model"))):
        out = root / f"finetune-{'coco' if start != config.model else 'base'}-{strat}"
        finetunes[label] = finetune_config(config, start, out)
    # the earlier run's stages are reused only when made with these settings (refused or re-run otherwise)
    prepare_stages([Stage("COCO", coco_cfg, record=coco_out / "coco.yaml"),
                    *(Stage(f"fine-tuning ({label})", cfg) for label, cfg in finetunes.items())],
                   allow_changes=config.resume_with_changes, overwrite=config.overwrite)
    record_config(root, "pipeline.yaml", config)
    run_stage("COCO", coco_cfg, lambda: pretrain_coco(coco_cfg), record="coco.yaml")
    models: dict[str, Path] = {label: train_stage(f"fine-tuning ({label})", cfg).model_dir
                               for label, cfg in finetunes.items()}
    result = CocoPipelineResult(root, models)
    result.scores = evaluate_suite(models, config.test_data, split=config.test_split,
                                   max_queries=config.test_max_queries, max_docs=config.test_max_docs,
                                   seed=config.seed).scores("ndcg@10")
    base, other = list(models)
    result.table = comparison_table(result.scores, base, other)
    write_summary(root, "# COCO-DR pipeline\n\n" + result.table, {
        "models": {k: str(v) for k, v in models.items()},
        "ndcg@10": {k: {d: float(np.mean(list(s.values()))) for d, s in v.items()} for k, v in result.scores.items()},
        "paired": paired_test(result.scores[base], result.scores[other])})
    return result
