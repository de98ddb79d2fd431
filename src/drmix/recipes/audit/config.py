"""``drmix mixture audit``'s configuration: the fine-tuning parts every short run is composed from, the output
folder, and the audit's own part (budget, seeds, references, cheap signals, dev caps)."""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from drmix.config import INPUT, Part, PipelineRun, setting
from drmix.config.train import FineTuningParts

#: the cheap signals the audit can compute, in the order the report lists them
SIGNALS = ("tdro", "doremi", "groupdro", "infdds", "gradalign")
DEFAULT_SIGNALS = ("tdro", "doremi", "infdds", "gradalign")

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


class AuditConfig(FineTuningParts):
    """``drmix mixture audit`` options: the fine-tuning parts every short run is composed from (the model, the
    collections, batches, learning rate; the dev sets ``--dev`` with ``--dev-split``), the output folder and the
    audit's own part. Every run's TrainConfig is composed by :func:`drmix.recipes.audit.plan.plan_audit`."""

    run: AuditRun = Field(default_factory=AuditRun)  # type: ignore[valid-type]
    audit: AuditOptions = Field(default_factory=AuditOptions)
