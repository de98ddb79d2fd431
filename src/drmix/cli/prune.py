"""``drmix prune``: a decoder LM turned into a retriever backbone (DRAMA); thin over :mod:`drmix.recipes.prune`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area


def prune_command(
    output: Path = typer.Option(..., "--output", "-o", help="SentenceTransformer folder to write."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Causal LM: folder, hub id or .gguf file "
                                                                   "(default: the packaged SmolLM2-135M-Instruct)."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layers to keep, 0-based (e.g. 0,10,20,29 or 0-3,29)."),
    keep_layers: Optional[int] = typer.Option(None, "--keep-layers", min=1, help="Or: how many layers to keep "
                                              "(first and last, the rest evenly spaced)."),
    mlp_keep: Optional[int] = typer.Option(None, "--mlp-keep", min=1, help="Narrow every MLP to this many channels."),
    causal: bool = typer.Option(False, "--causal", help="Keep causal attention (default: bidirectional)."),
    max_seq_length: int = typer.Option(512, "--max-seq-length", min=8, help="Token cap of the saved encoder."),
    query_prompt: str = typer.Option("Query: ", "--query-prompt", help="Prompt prepended to queries."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier drmix prune output, or a "
                                                             "non-empty folder (its contents are deleted)."),
) -> None:
    """Turn a decoder LM into a retriever backbone: chosen layers, bidirectional attention, mean pooling."""
    from drmix.cli import console
    from drmix.recipes.prune import prune_to_sentence_transformer
    from drmix.outputs import claim_output

    claim_output(output, "model", overwrite=overwrite, inputs=[model])
    info = prune_to_sentence_transformer(model, output, layers=layers, keep_layers=keep_layers, mlp_keep=mlp_keep,
                                         bidirectional=not causal, max_seq_length=max_seq_length,
                                         query_prompt=query_prompt)
    console.print(f"kept layers {info['layers']} of {info['source_layers']}; "
                  f"{info['parameters'] / 1e6:.1f}M parameters; saved {output}")


def register(app: typer.Typer) -> None:
    app.command("prune", no_args_is_help=True)(prune_command)


register_area(CommandArea("prune", register))
