"""From the finished runs to the audit's answer: every collection's value, the cheap signals read from the runs,
their agreement with the reference, the verdicts, the recommended weights and the learned methods refused."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.recipes.audit.agreement import Signal, kendall, mean_signal, votes, weight_signal
from drmix.recipes.audit.config import SIGNALS, AuditConfig
from drmix.recipes.audit.plan import AuditPlan
from drmix.recipes.audit.stages import START
from drmix.recipes.audit.values import Value, flatten_scores, paired_value
from drmix.recipes.audit.verdict import recommend, refused, verdict


@dataclass
class Analysis:
    names: list[str]
    loo: dict[str, Value]
    aoi: dict[str, Value] = field(default_factory=dict)
    signals: list[Signal] = field(default_factory=list)
    agreement: dict[str, dict[str, float]] = field(default_factory=dict)       # signal -> tau, p, n (vs LOO)
    agreement_aoi: dict[str, dict[str, float]] = field(default_factory=dict)   # signal -> tau, p, n (vs AOI)
    votes: dict[str, list[str]] = field(default_factory=dict)                  # collection -> harmful marks; "" voters
    verdicts: dict[str, str] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    all_dropped: bool = False
    learned: dict[str, dict[str, float]] = field(default_factory=dict)         # method -> collection -> weight
    refused: dict[str, list[str]] = field(default_factory=dict)
    dev: dict[str, float] = field(default_factory=dict)                        # run label -> pooled dev nDCG@10


def _json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _stage1_dir(plan: AuditPlan, seed: int, strategy: str) -> Path:
    return Path(plan.stage1[seed][strategy].run.output_dir)


def learned_weights(plan: AuditPlan) -> dict[str, dict[str, float]]:
    """Each stage-1 method's transferred weights (``weights`` of its ``weights.json``: tDRO's and GroupDRO's final,
    DoReMi's mean), averaged over the seeds."""
    out: dict[str, dict[str, float]] = {}
    for strategy in next(iter(plan.stage1.values()), {}):
        per_seed = []
        for seed in plan.seeds:
            w = _json(_stage1_dir(plan, seed, strategy) / "weights.json")
            per_seed.append(dict(zip(w["collections"], w["weights"])))
        out[strategy] = {n: float(np.mean([w[n] for w in per_seed])) for n in plan.names}
    return out


def _excess_losses(plan: AuditPlan) -> dict[str, list[float]]:
    """DoReMi's per-step measurement (the excess loss) of every collection over every seed's stage 1."""
    from drmix.io.read import iter_jsonl

    samples: dict[str, list[float]] = {n: [] for n in plan.names}
    for seed in plan.seeds:
        for _, rec in iter_jsonl(_stage1_dir(plan, seed, "doremi") / "weights.jsonl"):
            for n, v in (rec.get("measurement") or {}).items():
                if n in samples and isinstance(v, (int, float)) and math.isfinite(v):
                    samples[n].append(float(v))
    return samples


def read_signals(config: AuditConfig, plan: AuditPlan, learned: Mapping[str, Mapping[str, float]]) -> list[Signal]:
    """The cheap signals asked for (``--signals``), in :data:`SIGNALS` order, read from the finished runs."""
    out = []
    probed = {"influence": {n: [] for n in plan.names}, "gradalign": {n: [] for n in plan.names}}
    if {"infdds", "gradalign"} & set(config.audit.signals):
        for seed in plan.seeds:
            found = _json(Path(plan.runs[seed]["all"].run.output_dir) / "weights.json")["signals"]
            for kind in probed:
                for n in plan.names:
                    probed[kind][n] += [float(x) for x in found[kind].get(n, [])]
    for name in SIGNALS:
        if name not in config.audit.signals:
            continue
        if name in ("tdro", "groupdro"):
            out.append(weight_signal(name, learned[name]))
        elif name == "doremi":
            out.append(mean_signal(name, _excess_losses(plan)))
        else:
            out.append(mean_signal(name, probed["influence" if name == "infdds" else "gradalign"], zero=0.0))
    return out


def analyse(config: AuditConfig, plan: AuditPlan, scores: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Analysis:
    """The audit's answer from the dev scores of every run (``{label: {dataset: {query: nDCG@10}}}``, labels of
    :func:`drmix.recipes.audit.stages.models`)."""
    flat = {label: flatten_scores(by) for label, by in scores.items()}
    names, seeds = plan.names, plan.seeds
    all_runs = [flat[f"seed{s}/all"] for s in seeds]
    loo = {n: paired_value(n, all_runs, [flat[f"seed{s}/without:{n}"] for s in seeds]) for n in names}
    aoi = {}
    if config.audit.add_one_in:
        aoi = {n: paired_value(n, [flat[f"seed{s}/only:{n}"] for s in seeds], [flat[START]] * len(seeds))
               for n in names}
    learned = learned_weights(plan) if plan.stage1 and any(plan.stage1.values()) else {}
    signals = read_signals(config, plan, learned)
    reference = {n: loo[n].mean for n in names}
    agreement = {s.name: kendall(s, reference) for s in signals}
    agreement_aoi = {s.name: kendall(s, {n: aoi[n].mean for n in names}) for s in signals} if aoi else {}
    marks = votes(signals, agreement)
    verdicts = {n: verdict(loo[n], marks.get(n, []), marks[""]) for n in names}
    weights, all_dropped = recommend(verdicts, down_weight=config.audit.down_weight)
    dev = {label: float(np.mean(list(v.values()))) for label, v in flat.items()}
    return Analysis(names, loo, aoi, signals, agreement, agreement_aoi, marks, verdicts, weights, all_dropped,
                    learned, refused(learned, verdicts), dev)
