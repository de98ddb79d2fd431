"""The run of ``drmix adapt`` and its estimate: the declared stages (:func:`~drmix.recipes.adapt.stages.adapt_stages`)
run by :func:`drmix.recipes.stages.run_stages` (reused when finished with the same settings), then the outputs
(:func:`~drmix.recipes.adapt.report.write_outputs`); or their work and estimated time without running them."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.estimate import check_gpus, estimate_device, estimate_text, machine_rates
from drmix.recipes.launch import follow, launched_recipe, release
from drmix.recipes.adapt.plan import AdaptPlan, plan_adapt
from drmix.recipes.adapt.selection import AdaptResult, complete, final_labelled_evaluation
from drmix.recipes.adapt.stages import FINAL, adapt_stages
from drmix.recipes.progress import StageWork
from drmix.recipes.stages import Stage, run_stages, stage_order
from drmix.recipes.throughput import Rates


def run_adapt(config: AdaptConfig, *, progress: Callable[[str], None] | None = None,
              labelled: Callable[..., Any] = final_labelled_evaluation,
              extra: Sequence[Stage] = ()) -> AdaptResult | None:
    """Run every stage (reusing the finished ones made with the same settings) and write the outputs; see
    :mod:`drmix.recipes.adapt`. ``progress`` receives the progress lines (default: the log); ``labelled`` is the
    labelled final evaluation (:func:`final_labelled_evaluation`: the only reader of labels); ``extra``: stages
    run beside the recipe's own, each after what it ``needs`` (their results are the runner's, by name). Under
    torchrun / accelerate launch every rank calls it: rank 0 runs the recipe and returns its result, the other
    ranks take their part of each stage (:mod:`drmix.recipes.launch`), write nothing and return None."""
    with launched_recipe(config.run.output_dir) as ranks:
        plan = plan_adapt(config)
        stages = [*adapt_stages(config, plan, labelled), *extra]
        if ranks is not None and not ranks.main:
            follow(stages)
            return None
        return _run_main(config, plan, stages, progress)


def _run_main(config: AdaptConfig, plan: AdaptPlan, stages: list[Stage],
              progress: Callable[[str], None] | None) -> AdaptResult:
    from drmix.lock import run_lock

    with run_lock(plan.root):  # one run at a time into an output directory (under torchrun: rank 0's)
        return _run_locked(config, plan, stages, progress)


def _run_locked(config: AdaptConfig, plan: AdaptPlan, stages: list[Stage],
                progress: Callable[[str], None] | None) -> AdaptResult:
    from drmix.outputs import claim_run
    from drmix.recipes.adapt.report import check_model_target, write_outputs
    from drmix.recipes.adapt.synthetic import read_synthetic_stats

    claim_run(config, "recipe")
    check_model_target(plan.root / "model")
    results = run_stages(stages, root=plan.root, record=("adapt.yaml", config),
                         allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                         progress=progress, device=estimate_device(config), recipe="adapt")
    release()  # under torchrun: the other ranks stop here; the report and the model copy are rank 0's
    result = complete(results[FINAL], config)
    result.synthetic = read_synthetic_stats(plan.root)
    if config.search.index:
        from drmix.recipes.adapt.index import read_index_record

        result.index = read_index_record(plan.root)
    result.table = write_outputs(config, plan, result)
    return result


def plan_work(config: AdaptConfig, plan: AdaptPlan | None = None, extra: Sequence[Stage] = ()) -> list[StageWork]:
    """The work of every stage, in the order they run (the estimate's input): what each declares."""
    plan = plan or plan_adapt(config)
    stages = stage_order([*adapt_stages(config, plan), *extra])
    return [s.work or StageWork(s.label) for s in stages]


def estimate_table(config: AdaptConfig, gpus: int = 8, extra: Sequence[Stage] = (), rates: Rates | None = None) -> str:
    """Markdown: every stage's work and estimated minutes on the estimate's device, at ``rates`` (default: measured
    on this machine with the run's model and lengths, :func:`~drmix.recipes.adapt.estimate.machine_rates`, or
    assumed where they cannot be, each said which), the total, and the hours of the whole run for this corpus on
    one GPU and on ``gpus`` (:func:`~drmix.recipes.adapt.estimate.gpu_hours`)."""
    check_gpus(gpus)
    plan = plan_adapt(config)
    work = plan_work(config, plan, extra)
    rates = rates or machine_rates(config, plan.corpora)
    return estimate_text(config, work, sum(plan.sizes.values()), rates, gpus)
