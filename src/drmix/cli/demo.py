"""``drmix demo`` (the end-to-end demo) and ``drmix localdocs build`` (its data, on its own).

Thin wrappers around :func:`drmix.demo.run_demo` and :func:`drmix.data.builders.localdocs.build_localdocs`;
the tables are drawn here with ``rich``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

DEMO_HELP = (
    "Run drmix end to end on data it builds from the installed packages' documentation (no download).\n\n"
    "Builds one training collection per library family (stdlib, numerics, ml, tooling) with held-out BEIR "
    "test/dev splits, evaluates the base model, trains it twice on the same batches (uniform family weights vs "
    "weights learned by GroupDRO), evaluates both and prints nDCG@10 per family, the learned weights and "
    "why they moved. Under 5 minutes on 2 CPU cores; --quick is about half of that. Outputs: "
    "OUTPUT/results.md, results.json, data/, runs/, eval/."
)

_SHORT = {"train_pairs": "train", "signature_pairs": "sig", "summary_pairs": "sum", "package_pairs": "pkg",
          "test_queries": "test q", "dev_queries": "dev q", "corpus_docs": "corpus", "mean_positive_words": "words"}

LOCALDOCS_HELP = "Training collections built from the documentation of the installed Python packages."


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
    from drmix.demo import run_demo

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


def localdocs_build_command(
    out: Path = typer.Argument(..., help="Folder to write (replaced atomically): train/, beir/, stats.json. A "
                                         "non-empty folder that is not such a build is refused."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    max_pairs: int = typer.Option(3000, "--max-pairs", min=1, help="Cap on training pairs per family."),
    family: Optional[list[str]] = typer.Option(None, "--family", help="Build only this family (repeatable): stdlib, numerics, ml, tooling."),
    test_queries: int = typer.Option(50, "--test-queries", min=1, help="Held-out test queries per family."),
    dev_queries: int = typer.Option(25, "--dev-queries", min=0, help="Held-out dev queries per family."),
    distractors: int = typer.Option(200, "--distractors", min=0, help="Extra same-family documents per held-out corpus."),
    negatives: int = typer.Option(2, "--negatives", min=0, help="Hard negatives per training pair."),
    max_words: int = typer.Option(200, "--max-words", min=8, help="Truncate every text to this many words."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty OUT folder that is not a "
                                                             "documentation build (its contents are deleted)."),
) -> None:
    from rich.table import Table

    from drmix.cli import console
    from drmix.data.builders.localdocs import STATS_COLUMNS, LocalDocsOptions, build_localdocs
    from drmix.outputs import check_output_dir

    check_output_dir(out, "localdocs", overwrite=overwrite)

    opts = LocalDocsOptions(test_queries=test_queries, dev_queries=dev_queries, distractors=distractors,
                            num_negatives=negatives, max_words=max_words)
    data = build_localdocs(out, seed=seed, max_pairs_per_collection=max_pairs, families=list(family) if family else None,
                           options=opts)
    table = Table(title=f"documentation collections in {data.root}")
    for c in STATS_COLUMNS:
        table.add_column(_SHORT.get(c, c), justify="left" if c == "family" else "right")
    for row in data.stats:
        table.add_row(*(str(row.get(c, "")) for c in STATS_COLUMNS))
    console.print(table)
    console.print(f"training collections: {data.train_dir} (use --data {data.train_dir}); "
                  f"held-out BEIR directories: {data.root / 'beir'}/<family>")


def register(app: typer.Typer) -> None:
    app.command("demo", help=DEMO_HELP)(demo_command)
    localdocs = typer.Typer(help=LOCALDOCS_HELP, no_args_is_help=True)
    localdocs.command("build", help="Write the documentation collections (JSONL) and held-out BEIR splits to OUT.",
                      no_args_is_help=True)(localdocs_build_command)
    app.add_typer(localdocs, name="localdocs")
