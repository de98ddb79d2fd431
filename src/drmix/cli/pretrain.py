"""``drmix pretrain coco``: continuous contrastive pretraining (the COCO-DR recipe is ``drmix pipeline coco``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.options import config_command, load_checked, paragraphs
from drmix.cli.report import after_run, before_run
from drmix.outputs import claim_run

COCO_HELP = """Continuous contrastive pretraining (COCO) on target corpora, no labels needed.

Each --corpus (a BEIR directory or a JSONL file with 'text' and optional 'title' per line) is split into
sentences, packed into chunks of at most --span-max-tokens tokens (a new chunk with probability
--new-chunk-probability before each sentence); documents with fewer than 2 chunks are dropped and counted.
Each time a document is drawn two distinct chunks are a positive pair; every other span of the batch is a
negative (bigger batches help: the paper used ~2,048 pairs). Writes model/ (a SentenceTransformer folder
that `drmix train --model OUT/model` fine-tunes), spans.json (documents kept and dropped per corpus),
metrics.jsonl and checkpoints/; --resume continues a killed run exactly. See docs/coco.md.
"""

def run_coco(config_path: Path | None, overrides: dict[str, Any]) -> None:
    from drmix.cli import console
    from drmix.pretrain.runner import CocoConfig, pretrain_coco

    config = load_checked(CocoConfig, config_path, overrides)
    claim_run(config)                   # the output contract (drmix.outputs), before anything loads
    before_run(config)
    result = pretrain_coco(config)
    from drmix.retrieval.ranks import main_process

    if not main_process():  # under a launcher: global rank 0 prints the outcome and pushes (--push-to-hub)
        return
    for s in result.details.get("span_stats", []):
        console.print(s.describe(), highlight=False)
    console.print(f"[green]pretrained[/green] {result.steps} steps; model: {result.model_dir}")
    after_run(result.output_dir, config)


def register(app: typer.Typer) -> None:
    from drmix.pretrain.runner import COCO_SKIP, CocoConfig

    pretrain = typer.Typer(help="Unsupervised pretraining on target corpora (COCO).", no_args_is_help=True)
    pretrain.command("coco", help=paragraphs(COCO_HELP), no_args_is_help=True)(
        config_command(CocoConfig, run_coco, skip=COCO_SKIP))
    app.add_typer(pretrain, name="pretrain")


register_area(CommandArea("pretrain", register))
