"""``drmix mixture optimize``: learn collection weights (stage 1 of tDRO; the whole recipe is ``drmix pipeline tdro``)."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.options import config_command, load_checked, paragraphs
from drmix.config import TrainConfig
from drmix.outputs import claim_run

OPTIMIZE_HELP = """Learn collection weights (stage 1 of tDRO; DoReMi and GroupDRO as baselines).

A proxy model trains on mixed batches (every collection, equal share) with hard-negative-only InfoNCE while
a frozen reference model (--reference-model, a model fine-tuned with uniform weights) is forwarded on the
same inputs; the strategy turns per-collection losses into weights: tdro = proxy/reference ratio,
doremi = excess loss, groupdro = raw loss (no reference needed). Writes weights.json (final, mean, EMA,
top-K% selections), weights.jsonl (trajectory) and weights.png into --output-dir. Transfer the weights
with `drmix train --weights-file RUN/weights.json --transfer top:0.7|reweight|loss`.
Stage 1 is the authors' setting: 7 hard negatives per query (missing ones mined) at temperature 0.002.
Strategy options: --tdro KEY=VALUE (lr, normalize_gradient, max_grad_norm, absent, objective, mean_counts_initial,
accumulation, smoothing, output, ema, reference_guard, min_relative_reference, measurement, top_percents);
see docs/mixture.md.
"""

def run_optimize(config_path: Path | None, overrides: dict[str, Any], paper_settings: bool = True) -> None:
    from drmix.cli import console
    from drmix.recipes.optimize import optimize_weights, stage1_config

    if overrides.get("strategy") is None:
        raw = load_checked(TrainConfig, config_path, overrides)
        if raw.mixture.strategy == "static":
            overrides = {**overrides, "strategy": "tdro"}
    config = load_checked(TrainConfig, config_path, overrides)
    if paper_settings:
        resume = config.run.resume           # stage1_config turns resume on; keep the user's choice here
        given = {k: overrides[k] for k in ("num_negatives", "temperature") if overrides.get(k) is not None}
        config = stage1_config(config, strategy=config.mixture.strategy, reference=config.mixture.reference_model,
                               output_dir=config.run.output_dir, overrides=given).replace(resume=resume)
    claim_run(config)                   # the output contract (drmix.outputs), before anything loads
    result = optimize_weights(config)
    weights = result.weights_path
    console.print(f"[green]learned weights[/green] over {result.steps} steps: {weights}")
    if weights is not None:
        import json

        data = json.loads(weights.read_text(encoding="utf-8"))
        for name, w in sorted(zip(data["collections"], data["weights"]), key=lambda x: -x[1]):
            console.print(f"  {w:.4f}  {name}")
        console.print(f"top-70%: {', '.join(data.get('top', {}).get('70', []))}")


AUDIT_HELP = """Which training collections help the dev sets, which hurt, and how sure: one value per collection
with a 95% interval, a verdict (keep / down-weight / drop) and weights to train with.

The reference is leave-one-out fine-tuning: per seed (--seeds N: --seed, --seed + 1, ...) the uniform mixture of
every --data collection and each mixture without one of them, --budget-steps steps each from --model (k + 1 short
runs in one process; --add-one-in also fine-tunes on each collection alone), scored by nDCG@10 on the --dev sets
(their --dev-split, labelled queries that are never a test split). The cheap signals drmix computes are checked
against it with Kendall's tau (--signals: tdro and groupdro stage-1 weights, doremi excess loss, infdds
influence on the dev sets, gradalign gradient alignment with them). Verdicts: drop when the whole interval says
removing the collection raises the dev score; down-weight when it does within noise and the cheap signals that
agree with leave-one-out mark it harmful; keep otherwise (docs/mixture.md). Writes summary.md, report.html,
audit.png and weights.json (train with it: drmix train --mixture file --weights-file OUTPUT_DIR/weights.json).
Every run is a folder of --output-dir: a rerun reuses the finished ones made with the same settings from the
same inputs and resumes an interrupted one; a changed one is refused unless --resume-with-changes or
--overwrite re-runs it. --estimate prints every run's estimated time and exits.
"""

_ESTIMATE = inspect.Parameter(
    "estimate", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
    default=typer.Option(False, "--estimate", help="Print every run's work and estimated time and exit without "
                                                   "running anything."))


def run_audit_command(config_path: Path | None, overrides: dict[str, Any], estimate: bool = False) -> None:
    from drmix.cli import console
    from drmix.cli.pipeline import _run_recipe
    from drmix.recipes.audit import AuditConfig, estimate_audit, run_audit

    config = load_checked(AuditConfig, config_path, overrides)
    if estimate:
        console.print(estimate_audit(config), highlight=False, soft_wrap=True, markup=False, emoji=False)
        return
    from drmix.recipes.launch import follower

    if follower():  # under torchrun, a rank other than 0: its part of each stage; rank 0 claims, writes, reports
        run_audit(config)
        return
    result = _run_recipe(config, run_audit)
    console.print(result.table, highlight=False, soft_wrap=True, markup=False, emoji=False)
    console.print(f"summary: {result.output_dir / 'summary.md'}", highlight=False, soft_wrap=True)
    console.print(f"report: {result.output_dir / 'report.html'}", highlight=False, soft_wrap=True)
    console.print(f"next: drmix train --data ... --mixture file --weights-file {result.weights_path}",
                  highlight=False, soft_wrap=True, markup=False)


def register(app: typer.Typer) -> None:
    mixture = typer.Typer(help="Learn collection weights (tDRO, DoReMi, GroupDRO) and audit a mixture.",
                          no_args_is_help=True)
    paper = inspect.Parameter(
        "paper_settings", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
        default=typer.Option(True, "--paper-settings/--as-given",
                             help="Use tDRO's stage-1 settings (mixed equal-share batches, hard-negative-only "
                                  "InfoNCE with 7 negatives at temperature 0.002 unless --num-negatives / "
                                  "--temperature are given, uniform sampling); --as-given keeps the config's "
                                  "batching, negatives and temperature."))
    mixture.command("optimize", help=paragraphs(OPTIMIZE_HELP), no_args_is_help=True)(
        config_command(TrainConfig, run_optimize, extra=[paper]))
    from drmix.recipes.audit.config import AuditConfig

    mixture.command("audit", help=paragraphs(AUDIT_HELP), no_args_is_help=True)(
        config_command(AuditConfig, run_audit_command, extra=[_ESTIMATE]))
    app.add_typer(mixture, name="mixture")


register_area(CommandArea("mixture", register))
