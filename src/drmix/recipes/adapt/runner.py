"""The run of ``drmix adapt``: every stage in order (reused when finished with the same settings), the selection,
the final evaluation and the report."""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.recipes.adapt.candidates import Candidate
from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.estimate import Progress, estimate_device, plan_work, select_max_docs
from drmix.recipes.adapt.plan import AdaptPlan, plan_adapt
from drmix.recipes.adapt.report import _check_model_target, _copy_model, _summary, _weights_of, _write_card
from drmix.recipes.adapt.selection import (BASE, COCO_UNIFORM, UNIFORM, AdaptResult, _average, _comparisons,
                                           final_labelled_evaluation, kendall_tau, select_candidate)
from drmix.recipes.adapt.synthetic import build_synthetic, read_synthetic_stats
from drmix.recipes.stages import prepare_stages, record_config, run_stage, train_stage

log = logging.getLogger(__name__)


def _caps(config: AdaptConfig) -> dict[str, Any]:
    """The caps of every evaluation (``--eval-max-docs``, the document length, the query instructions)."""
    return dict(max_docs=config.eval.eval_max_docs, max_length=config.data.doc_max_length,
                query_instructions=config.eval.query_instructions or None)


def run_adapt(config: AdaptConfig, *, progress: Callable[[str], None] | None = None,
              labelled: Callable[..., Any] = final_labelled_evaluation) -> AdaptResult:
    """Run every stage (reusing the finished ones made with the same settings) and write the report; see
    :mod:`drmix.recipes.adapt`. ``progress`` receives the progress lines (default: the log); ``labelled`` is the
    labelled final evaluation (:func:`final_labelled_evaluation`: the only reader of labels)."""
    from drmix.outputs import claim_run

    plan = plan_adapt(config)
    root = plan.root
    claim_run(config, "recipe")
    _check_model_target(root / "model")
    prepare_stages(plan.stages, allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                   provenance=root / "provenance.json")
    record_config(root, "adapt.yaml", config)
    bar = Progress(plan_work(config, plan), estimate_device(config), progress)
    synthetic = _synthetic_stage(config, plan, bar)
    baseline, models = _train_stages(config, plan, bar)
    dev, dev_avg, selected = _selection(config, plan, bar, models)
    result = _final_evaluation(config, plan, bar, baseline, models, selected, labelled)
    result.synthetic, result.selection = synthetic, dev
    if result.labelled is not None and len(models) > 1:
        result.kendall = kendall_tau(dev_avg, {lb: _average(result.labelled.results[lb]) for lb in models})
    result.comparisons = _comparisons(result, config)
    result.weights = {lb: w for lb, m in models.items() if (w := _weights_of(Path(m).parent))}
    result.table = _summary(config, plan, result, dev_avg)
    _copy_model(Path(models[selected]), root / "model", selected)
    _write_card(config, plan, result)
    from drmix.report.html import check_report_target, write_report

    check_report_target(root)
    write_report(root)
    return result


def _synthetic_stage(config: AdaptConfig, plan: AdaptPlan, bar: Progress) -> dict[str, Any]:
    """1. the synthetic set (reused when ``synthetic/stats.json`` is there); returns its counts."""
    if (plan.root / "synthetic" / "stats.json").is_file():
        bar.reused("synthetic set")
    else:
        t0 = bar.start("synthetic set", f"pseudo-queries of {', '.join(plan.corpora)}, round-trip filter, splits")
        build_synthetic(config, plan)
        bar.finish("synthetic set", t0)
    return read_synthetic_stats(plan.root)


def _timed(bar: Progress, name: str, what: str, run: Callable[[], Any], folder: str | Path) -> Any:
    """``run()`` with its progress lines: reused when finished (changed stages were cleared before), else timed."""
    from drmix.outputs import run_finished

    if run_finished(folder):
        bar.reused(name)
        return run()
    t = bar.start(name, what)
    out = run()
    bar.finish(name, t)
    return out


def _train_stages(config: AdaptConfig, plan: AdaptPlan, bar: Progress) -> tuple[Path, dict[str, Path]]:
    """2. COCO, 3. the baseline, 4. the candidates (tDRO's stage 1 before its first transfer); returns the
    baseline's model and every candidate's."""
    from drmix.pretrain.runner import pretrain_coco

    _timed(bar, "COCO", f"{plan.coco.optim.max_steps} steps on the target corpora",
           lambda: run_stage("COCO", plan.coco, lambda: pretrain_coco(plan.coco), record="coco.yaml"),
           plan.coco.run.output_dir)
    baseline = _timed(bar, "uniform fine-tuning", "the base model, uniform over --data (the baseline)",
                      lambda: train_stage("uniform fine-tuning", plan.baseline),
                      plan.baseline.run.output_dir).model_dir
    models: dict[str, Path] = {}
    learned: set[bool] = set()
    for label, (c, cfg) in plan.candidates.items():
        if c.scheme == "tdro":
            if c.synthetic not in learned:
                _stage1(plan, c, bar, config)
                learned.add(c.synthetic)
            strategy = _transfer_strategy(cfg, c)
            out = _timed(bar, f"candidate {label}", "COCO model, tDRO weights transferred",
                         lambda cfg=cfg, strategy=strategy, label=label:
                         train_stage(f"candidate {label}", cfg, strategy=strategy), cfg.run.output_dir)
        else:
            out = _timed(bar, f"candidate {label}", f"COCO model, {c.scheme} mixture",
                         lambda cfg=cfg, label=label: train_stage(f"candidate {label}", cfg), cfg.run.output_dir)
        models[label] = out.model_dir
    return baseline, models


def _selection(config: AdaptConfig, plan: AdaptPlan, bar: Progress,
               models: dict[str, Path]) -> tuple[dict[str, Any], dict[str, float], str]:
    """5. every candidate on the synthetic dev (the only choice, made before any label is read); returns the
    results, their averages and the selected candidate."""
    from drmix.evaluation.suite import evaluate_suite

    t = bar.start("selection on synthetic dev", f"{len(models)} candidates")
    dev = evaluate_suite(models, plan.synthetic_dirs, kind="select", split="dev", seed=config.optim.seed,
                         metrics=("ndcg@10",), **{**_caps(config), "max_docs": select_max_docs(config)}).results
    dev_avg = {lb: _average(r) for lb, r in dev.items()}
    selected = select_candidate({lb: dev_avg[lb] for lb in models})
    bar.finish("selection on synthetic dev", t)
    log.info("adapted model: %s (synthetic dev nDCG@10 %.4f; uniform %.4f)", selected, dev_avg[selected],
             dev_avg[next(iter(models))])
    return dev, dev_avg, selected


def _final_evaluation(config: AdaptConfig, plan: AdaptPlan, bar: Progress, baseline: Path, models: dict[str, Path],
                      selected: str, labelled: Callable[..., Any]) -> AdaptResult:
    """6. the report's models on the synthetic test, then (first read of any label) on the labelled directories."""
    from drmix.evaluation.suite import evaluate_suite

    t = bar.start("final evaluation", "synthetic test" + (" and the labelled --eval-data" if config.eval.eval_data
                                                           else ""))
    report_models: dict[str, Any] = {BASE: config.model.name_or_path or "default",
                                     UNIFORM: baseline,
                                     COCO_UNIFORM: models["uniform"], f"adapted ({selected})": models[selected]}
    cache_dirs = {BASE: plan.root / "eval" / "base"}
    result = AdaptResult(plan.root, selected, {k: str(v) for k, v in report_models.items()}, models)
    result.synthetic_test = evaluate_suite(report_models, plan.synthetic_dirs, kind="synthetic", split="test",
                                           cache_dirs=cache_dirs, seed=config.optim.seed, **_caps(config))
    if config.eval.eval_data:
        result.labelled = labelled(config, report_models, models, cache_dirs, _caps(config))
    bar.finish("final evaluation", t)
    return result


def _stage1(plan: AdaptPlan, c: Candidate, bar: Progress, config: AdaptConfig) -> None:
    from drmix.outputs import run_finished
    from drmix.recipes.optimize import optimize_weights

    cfg = plan.stage1[c.synthetic]
    name = f"tDRO stage 1{' (+synthetic)' if c.synthetic else ''}"
    _timed(bar, name, f"learned weights, reference {c.reference.label}",
           lambda: run_stage(name, cfg, lambda: optimize_weights(cfg, fill_negatives="mine",
                                                                 miner=config.synthetic.teacher),
                             finished=lambda out: run_finished(out) and (out / "weights.json").exists()),
           cfg.run.output_dir)


def _transfer_strategy(cfg: TrainConfig, c: Candidate) -> Any:
    from drmix.data.collections import collections_for
    from drmix.mixture.transfer import build_transfer_strategy

    names = [x.name for x in collections_for(cfg)]
    return build_transfer_strategy(cfg.mixture.weights_file, c.transfer, names)
