"""``drmix localdocs build``: training collections and held-out BEIR splits from the installed packages' docs.

Thin wrapper around :func:`drmix.data.builders.localdocs.build_localdocs`; the table is drawn here with ``rich``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area

_SHORT = {"train_pairs": "train", "signature_pairs": "sig", "summary_pairs": "sum", "package_pairs": "pkg",
          "test_queries": "test q", "dev_queries": "dev q", "corpus_docs": "corpus", "mean_positive_words": "words"}

LOCALDOCS_HELP = "Training collections built from the documentation of the installed Python packages."


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
    localdocs = typer.Typer(help=LOCALDOCS_HELP, no_args_is_help=True)
    localdocs.command("build", help="Write the documentation collections (JSONL) and held-out BEIR splits to OUT.",
                      no_args_is_help=True)(localdocs_build_command)
    app.add_typer(localdocs, name="localdocs")


register_area(CommandArea("localdocs", register))
