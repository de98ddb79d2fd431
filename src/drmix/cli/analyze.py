"""``drmix analyze shift``: how far the target data is from the source data (COCO-DR Sec. 3.2, App. C, H)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area

SHIFT_HELP = ("Distribution shift between source and target datasets: weighted Jaccard of corpus and query "
              "unigrams and of query-type distributions (what/when/who/how/where/why/which/yes-no/declarative), "
              "per dataset the query-type shares and, with --model, alignment and uniformity of its embeddings. "
              "Sources and targets are BEIR directories or training-collection JSONL files. Writes shift.md, "
              "shift.json, query_types.png and jaccard.png (a heat-map over all datasets) to --output-dir.")


def shift(
    source: list[str] = typer.Option(..., "--source", help="Source (training) dataset: BEIR dir or collection JSONL; repeatable."),
    target: list[str] = typer.Option(..., "--target", help="Target dataset: BEIR dir or collection JSONL; repeatable."),
    model: Optional[str] = typer.Option(None, "--model", help="Model for alignment/uniformity (default: none computed)."),
    output_dir: Path = typer.Option(Path("runs/shift"), "--output-dir", help="Where the table and plots go."),
    split: str = typer.Option("test", "--split", help="Qrels split giving the queries and positive pairs of BEIR dirs."),
    max_docs: Optional[int] = typer.Option(None, "--max-docs", min=1, help="Seeded sample of documents per dataset (default: all)."),
    max_queries: Optional[int] = typer.Option(None, "--max-queries", min=1, help="Seeded sample of queries per dataset."),
    max_pairs: int = typer.Option(1000, "--max-pairs", min=1, help="Positive pairs used for alignment."),
    max_uniformity_docs: int = typer.Option(1000, "--max-uniformity-docs", min=2, help="Documents used for uniformity."),
    seed: int = typer.Option(0, "--seed", help="Seed of every sample."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the files of an earlier drmix analyze "
                                                             "shift in --output-dir."),
) -> None:
    from drmix.analysis.shift import shift_report, write_shift_report
    from drmix.cli import console
    from drmix.outputs import claim_output

    claim_output(output_dir, "shift", overwrite=overwrite, inputs=[*source, *target])
    report = shift_report(source, target, model=model, split=split, max_docs=max_docs, max_queries=max_queries,
                          max_pairs=max_pairs, max_uniformity_docs=max_uniformity_docs, seed=seed)
    write_shift_report(report, output_dir)
    console.print(report.to_markdown(), highlight=False, soft_wrap=True)
    console.print(f"written to {output_dir}")


def register(app: typer.Typer) -> None:
    analyze = typer.Typer(help="Analyses of data and models (distribution shift).", no_args_is_help=True)
    analyze.command("shift", help=SHIFT_HELP, no_args_is_help=True)(shift)
    app.add_typer(analyze, name="analyze")


register_area(CommandArea("analyze", register))
