"""CLI command ``drmix compare``: deltas against a baseline with paired tests (:mod:`drmix.evaluation.compare`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.options import report_output_option, report_overwrite_option

COMPARE_HELP = """Compare evaluations against a baseline: per-dataset and average deltas, 95% intervals and paired
tests over queries (Student's t and Fisher's randomisation).

Each argument is an eval.json written by `drmix eval --output DIR` (or DIR itself), a pipeline stage folder
holding eval-<split>.json, or a `drmix pipeline tdro` output folder (every evaluated model, labelled as in
its summary). The first model is the baseline unless --baseline names another (label or index)."""


def compare_command(
    inputs: list[Path] = typer.Argument(..., help="eval.json files, `drmix eval --output` folders or pipeline "
                                                  "output folders; the first is the baseline by default."),
    baseline: Optional[str] = typer.Option(None, "--baseline", "-b", help="Baseline model: a label or a 0-based "
                                                                          "index (default: the first)."),
    metric: str = typer.Option("ndcg@10", "--metric", help="Metric to compare (must be in the evaluations)."),
    permutations: int = typer.Option(10000, "--permutations", min=1, help="Sign flips of the randomisation test."),
    seed: int = typer.Option(0, "--seed", help="Seed of the randomisation test."),
    alpha: float = typer.Option(0.05, "--alpha", min=0.0, max=1.0, help="Significance level marked with *."),
    intersect: bool = typer.Option(False, "--intersect", help="Accept evaluations over different queries of a "
                                   "dataset: compare the shared ones and count the dropped (default: refuse)."),
    output: Optional[Path] = report_output_option("compare.md and compare.json", "compare", "drmix report reads"),
    overwrite: bool = report_overwrite_option("compare.md and compare.json", "compare"),
) -> None:
    """Deltas vs a baseline with 95% intervals and paired significance tests."""
    from rich.table import Table

    from drmix.cli import make_console
    from drmix.errors import ConfigError
    from drmix.evaluation.compare import compare, load_scored
    from drmix.io.atomic import atomic_write_json, atomic_write_text
    from drmix.outputs import claim_output

    from drmix.cli.report import into_run, refresh_run

    output, run = into_run(output, "compare")
    if output is not None:
        claim_output(output, "compare", overwrite=overwrite, inputs=inputs)
    scored = []
    for path in inputs:
        scored.extend(load_scored(path))
    labels = [s.label for s in scored]
    for i, s in enumerate(scored):            # duplicate labels (two eval.json of "default"): make them unique
        if labels.count(s.label) > 1:
            s.label = f"{s.label}#{i}"
    if len(scored) < 2:
        raise ConfigError("compare needs at least two evaluated models.", fix="pass two or more evaluations.")
    base: int | str = 0
    if baseline is not None:
        base = int(baseline) if baseline.isdigit() else baseline
    comp = compare(scored, baseline=base, metric=metric.lower(), permutations=permutations, seed=seed, alpha=alpha,
                   intersect=intersect)
    counts = comp.dropped > 0
    table = Table(title=f"{comp.metric}: delta vs {comp.baseline} (95% interval; p: paired t / randomisation)")
    cols = ("model", "dataset", "n", *(("n base", "n model", "dropped") if counts else ()), "delta", "95% interval",
            "p t", "p rand.")
    for col in cols:
        table.add_column(col, justify="left" if col in ("model", "dataset") else "right")
    for label, rows in comp.rows.items():
        for d in rows:
            star = "*" if comp.significant(d) else ""
            extra = (str(d.baseline_queries), str(d.model_queries), str(d.dropped)) if counts else ()
            table.add_row(label, d.dataset, str(d.queries), *extra, f"{d.delta:+.4f}{star}",
                          f"[{d.low:+.4f}, {d.high:+.4f}]", f"{d.t_p:.4f}", f"{d.fisher_p:.4f}")
    make_console().print(table)
    if counts:
        make_console(stderr=True).print(f"warning: the evaluations cover different queries; {comp.dropped} evaluated "
                                        "for only one model were dropped (--intersect): n = compared, n base / "
                                        "n model = evaluated for each.", highlight=False, soft_wrap=True)
    if output is not None:
        atomic_write_text(output / "compare.md", comp.to_markdown())
        atomic_write_json(output / "compare.json", json.loads(json.dumps(comp.to_json())))
        make_console().print(f"wrote {output / 'compare.md'} and {output / 'compare.json'}")
        refresh_run(run)


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the main app."""
    app.command("compare", help=COMPARE_HELP)(compare_command)


register_area(CommandArea("compare", register))
