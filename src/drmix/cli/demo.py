"""``drmix demo``: the end-to-end demo (its data on its own is ``drmix localdocs build``).

Thin wrapper around :func:`drmix.recipes.demo.run_demo`; the table is drawn here with ``rich``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area

DEMO_HELP = (
    "Run drmix end to end on data it builds from the installed packages' documentation (no download).\n\n"
    "Builds one training collection per library family (stdlib, numerics, ml, tooling) with held-out BEIR "
    "test/dev splits, evaluates the base model, trains it twice on the same batches (uniform family weights vs "
    "weights learned by GroupDRO), evaluates both and prints nDCG@10 per family, the learned weights and "
    "why they moved. Under 5 minutes on 2 CPU cores; --quick is about half of that. Outputs: "
    "OUTPUT/results.md, results.json, data/, runs/, eval/."
)


def _print_demo(result) -> None:
    from rich.table import Table

    from drmix.cli import console

    table = Table(title=f"nDCG@10 on held-out documentation queries ({result.data.root / 'beir'}); base: "
                        "untrained; uniform / learned: trained on the same batches with equal / GroupDRO weights")
    table.add_column("family")
    for col in result.columns:
        table.add_column(col, justify="right")
    table.add_column("learned weight", justify="right")
    table.add_column("mean train loss", justify="right")
    learned = result.weights.get("learned", {})
    for fam, row in result.table.items():
        best = max(row.values())
        cells = [f"[bold]{row[c]:.4f}[/bold]" if row[c] == best else f"{row[c]:.4f}" for c in result.columns]
        extra = [f"{learned[fam]:.3f}" if fam in learned else "",
                 f"{result.losses[fam]:.3f}" if fam in result.losses else ""]
        table.add_row(fam, *cells, *extra, end_section=(fam == list(result.table)[-2]))
    console.print(table)
    console.print(result.explanation, highlight=False)
    console.print(f"[green]done[/green] in {result.seconds.get('total', 0):.0f} s. Results: {result.results_md} "
                  f"(and {result.results_json.name}); data: {result.data.root}; "
                  f"models: {', '.join(str(d / 'model') for d in result.run_dirs.values())}; "
                  f"evaluations: {result.output_dir / 'eval'}")
    from drmix.cli.report import after_run, print_outcome

    after_run(result.output_dir, None, pipeline=True)  # report.html: both runs, results.md, every file
    learned = result.run_dirs.get("learned", next(iter(result.run_dirs.values()), None))
    print_outcome(result.output_dir, data=[result.data.beir_dirs[f] for f in result.data.families], model=learned)


def demo_command(
    output: Path = typer.Option(Path("demo-output"), "--output", "-o", help="Folder for every output of the demo."),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Training steps per run (default 30; 12 with --quick).", show_default=False),
    batch_size: int = typer.Option(16, "--batch-size", min=2, help="Training batch size."),
    learning_rate: float = typer.Option(5e-5, "--learning-rate", help="Peak learning rate of both runs."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data build, sampling and training."),
    model: Optional[str] = typer.Option(None, "--model", help="Base model: SentenceTransformer folder or hub id (default: the bundled all-MiniLM-L6-v2).", show_default=False),
    max_pairs: int = typer.Option(3000, "--max-pairs", min=1, help="Cap on training pairs per family."),
    family: Optional[list[str]] = typer.Option(None, "--family", help="Build only this family (repeatable): stdlib, numerics, ml, tooling."),
    quick: bool = typer.Option(False, "--quick", help="Smaller demo: families stdlib and tooling, 12 steps, 20 test queries each."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the outputs of an earlier demo in --output."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    from drmix.recipes.demo import run_demo

    if not progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    overrides = {"batch_size": batch_size, "learning_rate": learning_rate, "seed": seed, "model": model,
                 "max_pairs": max_pairs, "quick": quick, "overwrite": overwrite, "show_progress": progress}
    if steps is not None:
        overrides["steps"] = steps
    if family:
        overrides["families"] = list(family)
    _print_demo(run_demo(output, **overrides))


def register(app: typer.Typer) -> None:
    app.command("demo", help=DEMO_HELP)(demo_command)


register_area(CommandArea("demo", register))
