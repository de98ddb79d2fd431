"""``drmix mixture audit``'s configuration: the fine-tuning parts every short run is composed from, the output
folder, and the audit's own part (budget, seeds, references, cheap signals, dev caps)."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from drmix.config import (INPUT, ContrastiveConfig, MixtureConfig, OptimConfig, Part, PipelineRun, TrainConfig,
                          options_setting, setting)
from drmix.config.train import RECIPE_LEFT_OUT, EvalConfig, FineTuningParts

#: the cheap signals the audit can compute, in the order the report lists them
SIGNALS = ("tdro", "doremi", "groupdro", "infdds", "gradalign")
DEFAULT_SIGNALS = ("tdro", "doremi", "infdds", "gradalign")

AuditContrastive = ContrastiveConfig.without("AuditContrastive", "batching")
AuditMixture = MixtureConfig.without("AuditMixture", "scheme", "mixture_temperature", "weights_file", "transfer",
                                     "strategy", "reference_model")
AuditOptim = OptimConfig.without("AuditOptim", "max_steps", "epochs")
AuditEval = EvalConfig.without("AuditEval", "eval_data", "eval_every", "eval_split", "eval_max_queries", "evaluator")
AuditRun = PipelineRun.variant("AuditRun", output_dir=("runs/audit", "Root directory: every short run is a subfolder "
                                                                   "(runs/, stage1/), the report and the recommended "
                                                                   "weights.json are at its top."))


class AuditOptions(Part):
    """What the audit measures and how much it spends."""

    title: ClassVar[str] = "Audit"

    budget_steps: int = setting(200, ge=1, description="Optimiser steps of every short run: the whole mixture, each "
                                                       "leave-one-out and each add-one-in run (the training field "
                                                       "--max-steps is not used).")
    seeds: int = setting(1, ge=1, description="Seeds of every short run: --seed, --seed + 1, ...; each collection's "
                                              "value pools the per-query differences averaged over them.")
    add_one_in: bool = setting(False, description="Also fine-tune on each collection alone and compare it with the "
                                                  "starting model (k more runs a seed).")
    signals: list[str] = setting(default_factory=lambda: list(DEFAULT_SIGNALS),
                                 description="Cheap signals checked against leave-one-out: tdro (stage-1 weights), "
                                             "doremi (excess loss), groupdro (stage-1 weights, raw loss), infdds "
                                             "(look-ahead influence on the dev sets), gradalign (gradient cosine "
                                             "with the dev sets).")
    stage1_steps: int | None = setting(None, ge=1, description="Steps of the tdro / doremi / groupdro stage-1 runs "
                                                               "(default: half of --budget-steps).")
    stage1_batch_size: int | None = setting(None, ge=1, description="Mixed batch of the stage-1 runs, every "
                                                                    "collection an equal share (default: "
                                                                    "--batch-size).")
    stage1_temperature: float | None = setting(None, gt=0, description="Contrastive temperature of the stage-1 runs "
                                                                       "(default: the authors' 0.002 on cosine "
                                                                       "scores).")
    stage1_fill_negatives: Literal["mine", "random", "off"] = setting(
        "mine", description="Stage-1 examples with fewer than 7 hard negatives: mine the missing ones once for every "
                            "stage-1 run (negatives/), random same-collection positives, or off.")
    stage1_miner: str | None = setting(None, role=INPUT, description="The retriever that mines stage 1's missing "
                                                                     "negatives (default: drmix mine's model).")
    probe_points: int = setting(4, ge=1, description="Points of the whole-mixture run at which every collection's "
                                                     "influence and gradient alignment are measured (evenly spaced, "
                                                     "the last before the final step).")
    probe_draws: int = setting(2, ge=1, description="Batches of each collection measured at each probe point.")
    dev_max_queries: int | None = setting(300, ge=1, description="Cap on dev queries per dev set (a seeded sample, "
                                                                 "the same for every run).")
    dev_max_docs: int | None = setting(None, ge=1, description="Cap on each dev set's corpus (judged documents "
                                                               "kept).")
    down_weight: float = setting(0.5, gt=0, lt=1, description="Factor a down-weighted collection's uniform share "
                                                              "is multiplied by in the recommended weights.")

    @field_validator("signals", mode="before")
    @classmethod
    def _signals(cls, v: Any) -> Any:
        values = [v] if isinstance(v, str) else list(v or [])
        names = [n.strip().lower() for x in values for n in str(x).split(",") if n.strip()]
        bad = [n for n in names if n not in SIGNALS]
        if bad:
            raise ValueError(f"unknown signal {bad[0]!r}; use {', '.join(SIGNALS)}")
        return [n for n in SIGNALS if n in names]


_SETS_WEIGHTS = ("every short run is the uniform mixture of its collections (tDRO, DoReMi and GroupDRO's stage 1 "
                 "learns its own weights)",
                 "drop it; train with other weights afterwards, e.g. drmix train --mixture file --weights-file "
                 "OUTPUT_DIR/weights.json.")
#: the training fields drmix mixture audit does not carry: why, and what to do instead (``{value}``: the value given)
AUDIT_LEFT_OUT: dict[str, tuple[str, str]] = {
    **RECIPE_LEFT_OUT,
    **dict.fromkeys(("max_steps", "epochs"), ("every short run takes --budget-steps steps (stage 1 --stage1-steps)",
                                              "set the length of the runs with --budget-steps {value}.")),
    **dict.fromkeys(("mixture", "mixture_temperature", "weights_file", "transfer"), _SETS_WEIGHTS),
    "strategy": ("the learned weights the audit checks are its --signals (tdro, doremi, groupdro stage 1)",
                 "pass --signals tdro,doremi,groupdro,infdds,gradalign (those you want)."),
    "reference_model": ("each seed's whole-mixture run is stage 1's reference", "drop it."),
    "batching": ("the short runs use task-homogeneous batches and stage 1 mixed ones", "drop it."),
    **dict.fromkeys(("eval_data", "eval_every", "eval_split", "eval_max_queries", "evaluator"), (
        "no short run evaluates during training: every run is scored on the --dev sets once it is finished",
        "drop it; the dev sets are --dev (--dev-split, --dev-max-queries).")),
}


class AuditConfig(FineTuningParts):
    """``drmix mixture audit`` options: the fine-tuning parts every short run is composed from (the model, the
    collections, batches, learning rate; the dev sets ``--dev`` with ``--dev-split``) less the fields the audit sets
    itself (:data:`AUDIT_LEFT_OUT`, each refused in one line), stage 1's DRO options (``--dro``), the output folder
    and the audit's own part. Every run's TrainConfig is composed by :func:`drmix.recipes.audit.plan.plan_audit`."""

    command: ClassVar[str] = "drmix mixture audit"
    narrows: ClassVar[type | None] = TrainConfig
    left_out: ClassVar[dict[str, tuple[str, str]]] = AUDIT_LEFT_OUT

    contrastive: AuditContrastive = Field(default_factory=AuditContrastive)  # type: ignore[valid-type]
    mixture: AuditMixture = Field(default_factory=AuditMixture)  # type: ignore[valid-type]
    optim: AuditOptim = Field(default_factory=AuditOptim)  # type: ignore[valid-type]
    eval: AuditEval = Field(default_factory=AuditEval)  # type: ignore[valid-type]
    run: AuditRun = Field(default_factory=AuditRun)  # type: ignore[valid-type]
    dro: dict[str, Any] = options_setting("dro", "Options of stage 1's strategies (tdro, doremi, groupdro; see "
                                                 "docs/mixture.md).")
    audit: AuditOptions = Field(default_factory=AuditOptions)

    @model_validator(mode="after")
    def _typed(self) -> "AuditConfig":
        from drmix.recipes.options import check_options

        check_options(self)          # --dro KEY=VALUE by DROConfig, when the config is made
        return self
