"""The audit's run: the stages, the dev evaluation, the analysis, the files at the top of the folder."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drmix.recipes.audit.analysis import Analysis, analyse
from drmix.recipes.audit.config import AuditConfig
from drmix.recipes.audit.plan import AuditPlan, plan_audit, slug
from drmix.recipes.audit.stages import START, declare, models

log = logging.getLogger(__name__)


@dataclass
class AuditResult:
    """The audit's answer: the analysis (values, signals, agreement, verdicts, weights), the recommended weights
    file, the summary table and the run folders."""

    output_dir: Path
    analysis: Analysis
    weights_path: Path
    table: str
    plan: AuditPlan

    @property
    def verdicts(self) -> dict[str, str]:
        return self.analysis.verdicts

    @property
    def weights(self) -> dict[str, float]:
        return self.analysis.weights


def evaluate_dev(config: AuditConfig, plan: AuditPlan, *, cache_in: Path | None = None) -> dict[str, Any]:
    """Every run (and, for add-one-in, the starting model) on the dev sets: ``{label: {dataset: {query:
    nDCG@10}}}``, each cached next to its model (``audit-<split>.json``; the start model's in ``start/``; with
    ``cache_in``, every one in a folder of its own there) and keyed by content, on one seeded sample of dev
    queries the same for every run."""
    from drmix.evaluation.suite import evaluate_suite

    found = models(plan)
    cache = {START: plan.root / "start"} if START in found else {}
    if cache_in is not None:
        cache = {label: cache_in / slug(label) for label in found}
    a = config.audit
    suite = evaluate_suite(found, config.mixture.dev, cache_dirs=cache, kind="audit", split=config.mixture.dev_split,
                           max_queries=a.dev_max_queries, max_docs=a.dev_max_docs, seed=config.optim.seed,
                           max_length=config.data.doc_max_length, metrics=("ndcg@10",), device=config.run.device)
    return suite.scores()


def estimate_audit(config: AuditConfig) -> str:
    """Markdown: every stage's work and estimated minutes on ``--device`` (or a GPU when one is here), and the
    total; nothing is written."""
    from drmix.recipes.progress import estimate_device
    from drmix.recipes.stages import estimate

    plan = plan_audit(config)
    stages = declare(config, plan, lambda r: None)
    head = (f"drmix mixture audit: {len(plan.sources)} collections, {len(plan.seeds)} seed(s), "
            f"{config.audit.budget_steps} steps a run, {sum(len(r) for r in plan.runs.values())} short runs and "
            f"{sum(len(r) for r in plan.stage1.values())} stage-1 runs")
    return "\n".join([head, "", *estimate(stages, estimate_device(config.run.device))]) + "\n"


def run_audit(config: AuditConfig, *, progress: Callable[[str], None] | None = None) -> AuditResult | None:
    """Run every stage (reusing the finished ones made with the same settings from the same inputs), evaluate
    every run on the dev sets and write the audit's answer (``summary.md``, ``summary.json``, ``weights.json``,
    ``audit.png``, ``report.html``). Under torchrun / accelerate launch every rank calls it: rank 0 runs the
    stages and returns the answer, the other ranks take their part of each stage (:mod:`drmix.recipes.launch`:
    the short runs train over every rank), write nothing and return None."""
    from drmix.recipes.launch import follow, launched_recipe, release
    from drmix.recipes.progress import estimate_device
    from drmix.recipes.stages import run_stages

    with launched_recipe(config.run.output_dir) as ranks:
        plan = plan_audit(config)
        stages = declare(config, plan, lambda r: evaluate_dev(config, plan))
        if ranks is not None and not ranks.main:
            follow(stages)
            return None
        results = run_stages(stages, root=plan.root, record=("audit.yaml", config),
                             allow_changes=config.run.resume_with_changes, overwrite=config.run.overwrite,
                             progress=progress, device=estimate_device(config.run.device), recipe="mixture audit")
        release()  # under torchrun: the other ranks stop here; the answer is rank 0's
        return answer_audit(config, plan, results["dev evaluation"])


def answer_audit(config: AuditConfig, plan: AuditPlan, scores: dict[str, Any]) -> AuditResult:
    """The audit's answer from every finished run's dev scores (``{label: {dataset: {query: nDCG@10}}}``, the
    labels of :func:`~drmix.recipes.audit.stages.models`), written at the top of ``plan.root``: ``summary.md``,
    ``summary.json``, ``weights.json``, ``audit.png``, ``report.html``. :func:`run_audit` ends here; so can an
    analysis of the runs of separate one-seed audits pooled as the seeds of one."""
    from drmix.io.atomic import atomic_write_json, atomic_write_text
    from drmix.recipes.audit import report
    from drmix.report.html import write_report

    a = analyse(config, plan, scores)
    table = report.summary_markdown(a, plan.root, config)
    weights_path = plan.root / report.WEIGHTS
    atomic_write_json(weights_path, report.weights_file(a))
    report.plot(a, plan.root / report.FIGURE)
    atomic_write_text(plan.root / "summary.md", table)
    atomic_write_json(plan.root / "summary.json", report.summary_data(a, config))
    write_report(plan.root, runs=False)
    log.info("mixture audit: %s", report.headline(a))
    return AuditResult(plan.root, a, weights_path, table, plan)
