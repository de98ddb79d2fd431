"""The run of ``drmix adapt``: its declared stages (:mod:`drmix.recipes.adapt.stages`) run by
:func:`drmix.recipes.stages.run_stages` (reused when finished with the same settings), then the report."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.estimate import estimate_device
from drmix.recipes.adapt.launch import follow, launched_adapt, release
from drmix.recipes.adapt.plan import plan_adapt
from drmix.recipes.adapt.report import _check_model_target, _copy_model, _summary, _weights_of, _write_card
from drmix.recipes.adapt.selection import (AdaptResult, _average, _choice_comparison, _comparisons,
                                          final_labelled_evaluation, kendall_tau)
from drmix.recipes.adapt.stages import FINAL, SELECTION, _models, adapt_stages
from drmix.recipes.adapt.synthetic import read_synthetic_stats
from drmix.recipes.stages import run_stages


def run_adapt(config: AdaptConfig, *, progress: Callable[[str], None] | None = None,
              labelled: Callable[..., Any] = final_labelled_evaluation) -> AdaptResult | None:
    """Run every stage (reusing the finished ones made with the same settings) and write the report; see
    :mod:`drmix.recipes.adapt`. ``progress`` receives the progress lines (default: the log); ``labelled`` is the
    labelled final evaluation (:func:`final_labelled_evaluation`: the only reader of labels). Under torchrun /
    accelerate launch every rank calls it: rank 0 runs the recipe and returns its result, the other ranks take
    their part of each stage (:mod:`drmix.recipes.adapt.launch`), write nothing and return None."""
    with launched_adapt(config.run.output_dir) as ranks:
        plan = plan_adapt(config)
        stages = adapt_stages(config, plan, labelled)
        if ranks is not None and not ranks.main:
            follow(stages)
            return None
        return _run_main(config, plan, stages, progress)


def _run_main(config: AdaptConfig, plan: Any, stages: list, progress: Callable[[str], None] | None) -> AdaptResult:
    from drmix.outputs import claim_run

    root = plan.root
    claim_run(config, "recipe")
    _check_model_target(root / "model")
    results = run_stages(stages, root=root, record=("adapt.yaml", config),
                         allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                         progress=progress, device=estimate_device(config), recipe="adapt")
    release()  # under torchrun: the other ranks stop here; the report and the model copy are rank 0's
    models = _models(plan, results)
    dev, dev_avg, selected = results[SELECTION]
    result = results[FINAL]
    result.synthetic, result.selection = read_synthetic_stats(root), dev
    if result.labelled is not None and len(models) > 1:
        result.kendall = kendall_tau(dev_avg, {lb: _average(result.labelled.results[lb]) for lb in models})
    result.comparisons = _comparisons(result, config)
    result.choice_test = _choice_comparison(result, config)
    result.weights = {lb: w for lb, m in models.items() if (w := _weights_of(Path(m).parent))}
    if config.search.index:
        from drmix.recipes.adapt.index import read_index_record

        result.index = read_index_record(root)
    result.table = _summary(config, plan, result, dev_avg)
    from drmix.recipes.adapt.report import _at_a_glance

    result.table = _at_a_glance(config, plan, result, dev_avg)
    _copy_model(Path(models[selected]), root / "model", selected)
    _write_card(config, plan, result)
    from drmix.report.html import check_report_target, write_report

    check_report_target(root)
    write_report(root)
    return result
