"""``drmix pretrain coco`` (continuous contrastive pretraining) and ``drmix pipeline coco`` (the COCO-DR recipe)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from drmix.cli.options import config_command
from drmix.config import load_config

COCO_HELP = """Continuous contrastive pretraining (COCO) on target corpora, no labels needed.

Each --corpus (a BEIR directory or a JSONL file with 'text' and optional 'title' per line) is split into
sentences, packed into chunks of at most --span-max-tokens tokens (a new chunk with probability
--new-chunk-probability before each sentence); documents with fewer than 2 chunks are dropped and counted.
Each time a document is drawn two distinct chunks are a positive pair; every other span of the batch is a
negative (bigger batches help: the paper used ~2,048 pairs). Writes model/ (a SentenceTransformer folder
that `drmix train --model OUT/model` fine-tunes), spans.json (documents kept and dropped per corpus),
metrics.jsonl and checkpoints/; --resume continues a killed run exactly. See docs/coco.md.
"""

PIPELINE_HELP = """Run the COCO-DR recipe: COCO on --corpus, fine-tuning on --data (--strategy static or
idro) from the COCO model and, for comparison, the same fine-tuning from --model without COCO; then
nDCG@10 of both on --test-data with a paired t-test over queries, as one table (summary.md / summary.json).

Training fields apply to the fine-tuning; --coco KEY=VALUE overrides a field of the COCO stage (e.g. --coco
max_steps=2000 --coco batch_size=256). Rerunning skips finished stages and resumes an interrupted one.
"""


#: training fields that mean nothing for COCO (no labelled data, no strategy, spans set the lengths)
COCO_SKIP = {"data", "strategy", "transfer", "weights_file", "reference_model", "dev", "dev_split", "tdro", "infdds",
             "idro", "num_negatives", "query_max_length", "doc_max_length", "in_batch_negatives",
             "mixture_temperature", "max_collection_size"}


def _paragraphs(text: str) -> str:
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def run_coco(config_path: Path | None, overrides: dict[str, Any]) -> None:
    from drmix.cli import console
    from drmix.pretrain.runner import CocoConfig, pretrain_coco

    config = load_config(CocoConfig, config_path, overrides)
    result = pretrain_coco(config)
    for s in getattr(result, "span_stats", []):
        console.print(s.describe(), highlight=False)
    console.print(f"[green]pretrained[/green] {result.steps} steps; model: {result.model_dir}")


def run_pipeline(config_path: Path | None, overrides: dict[str, Any]) -> None:
    from drmix.cli import console
    from drmix.recipes.coco import CocoPipelineConfig, run_coco_pipeline

    config = load_config(CocoPipelineConfig, config_path, overrides)
    result = run_coco_pipeline(config)
    console.print(result.table, highlight=False, soft_wrap=True)
    console.print(f"summary: {result.output_dir / 'summary.md'}")


def _group(app: typer.Typer, name: str, help_text: str) -> typer.Typer:
    """The sub-command group ``name`` (another area may have created it already)."""
    for info in app.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    group = typer.Typer(help=help_text, no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


def register(app: typer.Typer) -> None:
    from drmix.pretrain.runner import CocoConfig
    from drmix.recipes.coco import CocoPipelineConfig

    pretrain = _group(app, "pretrain", "Unsupervised pretraining on target corpora (COCO).")
    pretrain.command("coco", help=_paragraphs(COCO_HELP), no_args_is_help=True)(
        config_command(CocoConfig, run_coco, skip=COCO_SKIP))
    pipeline = _group(app, "pipeline", "Multi-stage recipes.")
    pipeline.command("coco", help=_paragraphs(PIPELINE_HELP), no_args_is_help=True)(
        config_command(CocoPipelineConfig, run_pipeline))
