"""CLI command ``drmix mine``: retriever-mined hard negatives for collection JSONL files."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import AREAS, CommandArea
from drmix.cli.options import ATTN_HELP, TORCH_DTYPE_HELP, model_kwargs
from drmix.errors import ConfigError, DataError


def mine_command(
    data: str = typer.Option(..., "--data", help="A collection in any layout drmix trains on (JSONL, JSON, "
                                                 "parquet, CSV/TSV, Arrow, a saved dataset, a BEIR folder, a Hub id; "
                                                 "NAME:split), or a folder of collection files (one output per file)."),
    output: Path = typer.Option(..., "--output", "-o", help="Where the mined collection(s) go: a .jsonl file for "
                                                            "a file, a directory for a directory (same file names)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The retriever that ranks: any "
                                        "SentenceTransformer folder, hub id or drmix run (default: all-MiniLM-L6-v2)."),
    ranks: str = typer.Option("1:30", "--ranks", help="Rank window START:END (1-based, inclusive) of the "
                              "retriever's list, positives removed, that negatives come from."),
    num_negatives: int = typer.Option(1, "--num-negatives", min=1, help="Hard negatives per query."),
    sampling: str = typer.Option("top", "--sampling", help="top: the best-ranked candidates in the window; "
                                 "random: drawn from the window (seeded)."),
    max_score_ratio: float = typer.Option(0.95, "--max-score-ratio", help="Skip candidates scoring above this "
                                          "times the query's lowest positive score (likely unlabelled positives); "
                                          "0 turns the filter off."),
    keep_negatives: bool = typer.Option(False, "--keep-negatives", help="Append mined negatives to the existing "
                                        "ones instead of replacing them."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    seed: int = typer.Option(42, "--seed", help="Seed of --sampling random."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
    query_instruction: Optional[str] = typer.Option(None, "--query-instruction", help="Instruction prepended to "
                                                    "every query when ranking (default: the model's query prompt)."),
    torch_dtype: Optional[str] = typer.Option(None, "--torch-dtype", help=TORCH_DTYPE_HELP),
    attn_implementation: Optional[str] = typer.Option(None, "--attn-implementation", help=ATTN_HELP),
    format: Optional[str] = typer.Option(None, "--format", help="Layout of the rows: drmix | st | tevatron | flag | "
                                         "beir | auto (default: detected; docs/data.md)."),
    columns: Optional[str] = typer.Option(None, "--columns", help="Column mapping ROLE=COLUMN,... (e.g. "
                                          "query=question,positive=answer); see docs/data.md."),
) -> None:
    """Mine hard negatives for training collections with a retriever over each collection's own documents."""
    from drmix.augment.mine import RankWindow, mine_collection
    from drmix.cli import console
    from drmix.model.encoder import load_encoder

    if sampling not in ("top", "random"):
        raise ConfigError(f"unknown --sampling {sampling!r}.", fix="pass --sampling top or --sampling random.")
    if max_score_ratio < 0:
        raise ConfigError("--max-score-ratio must not be negative.", fix="pass a ratio such as 0.95, or 0 for off.")
    from drmix.data.collections import check_sources, collection_folder_entries
    from drmix.data.spec import FORMATS, parse_columns

    window = RankWindow.parse(ranks)
    if format is not None and format not in FORMATS:
        raise ConfigError(f"unknown --format {format!r}.", fix=f"use one of: {', '.join(FORMATS)}.")
    try:
        column_map = parse_columns(columns)
    except ValueError as e:
        raise ConfigError(f"--columns: {e}.", fix="write --columns query=COL,positive=COL[,negatives=COL].") from None
    check_sources([data])
    path = Path(data).expanduser()
    entries = collection_folder_entries(path)
    if entries is not None:
        if not entries:
            raise DataError("folder holds no collection files.", path=path,
                            fix="pass a collection file or a folder of them.")
        if output.exists() and not output.is_dir():
            raise ConfigError("--output is a file but --data is a folder.", path=output,
                              fix="pass a directory for --output.")
        pairs = [(f, output / f"{f.stem if f.is_file() else f.name}.jsonl") for f in entries]
        data = path
    else:
        if output.is_dir():
            raise ConfigError("--output is a directory but --data is one collection.", path=output,
                              fix="pass a .jsonl file path for --output.")
        pairs = [(data, output)]
    from drmix.outputs import claim_output

    for src, dst in pairs:                       # the output contract (drmix.outputs), before the model loads
        claim_output(dst, "file", overwrite=overwrite, inputs=[data, src])
    from drmix.model.instructions import query_prompt_for

    encoder = load_encoder(model, model_kwargs=model_kwargs(torch_dtype, attn_implementation))
    qp = None if query_instruction is None else query_prompt_for(encoder, None, explicit=query_instruction)
    for src, dst in pairs:
        stats = mine_collection(src, dst, encoder, window=window, num_negatives=num_negatives, sampling=sampling,
                                max_score_ratio=max_score_ratio or None, keep_negatives=keep_negatives, seed=seed,
                                batch_size=batch_size, model_name=model or "all-MiniLM-L6-v2", query_prompt=qp,
                                format=format, columns=column_map)
        console.print(f"{Path(src).name}: {stats.queries} queries, pool {stats.pool} documents, {stats.negatives} "
                      f"negatives mined (ranks {window}; {stats.filtered} filtered as likely positives; "
                      f"{stats.short} queries short) -> {dst}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``mine`` to the main app."""
    app.command("mine")(mine_command)


AREAS.register(CommandArea("mine", register))
