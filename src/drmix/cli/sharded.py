"""``drmix eval`` and ``drmix mine`` under ``torchrun`` / ``accelerate launch``: each corpus encoded in shards,
one per rank; and ``drmix index --estimate``. The library side is :mod:`drmix.retrieval.shards` and
:mod:`drmix.retrieval.plan`; ``drmix index`` under a launcher is :func:`drmix.retrieval.build.index_corpus_file`."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable


def count_passages(corpus_file: Path) -> int:
    """Non-blank lines of a corpus ``.jsonl`` (one document each), counted without parsing them."""
    from drmix.errors import DataError

    if not corpus_file.is_file():
        raise DataError("corpus file not found.", path=corpus_file,
                        fix="pass --corpus with a BEIR directory or a corpus .jsonl file.")
    with open(corpus_file, "rb") as f:
        return sum(1 for line in f if line.strip())


def print_estimate(corpus_file: Path, *, gpus: int, rate: float | None, echo: Callable[[str], None]) -> None:
    """What ``drmix index --estimate`` prints: the corpus, the assumption, the time on 1 and ``gpus`` GPUs."""
    from drmix.retrieval.plan import estimate_lines

    echo(f"{corpus_file}:")
    for line in estimate_lines(count_passages(corpus_file), gpus=sorted({1, gpus}), rate=rate):
        echo(line)
    echo("Run it on N GPUs with: torchrun --nproc-per-node N -m drmix index ... (or accelerate launch; "
         "docs/evaluation.md, \"Sharded encoding over processes and GPUs\").")


def shards_root(output: Path | None, name: str, *, folder: bool) -> Path:
    """Where ``drmix eval`` / ``drmix mine`` keep their corpus shards: ``OUTPUT/shards`` for an output folder,
    ``OUTPUT.shards`` beside an output file, else the drmix cache (``$DRMIX_CACHE/shards/<name>``)."""
    from drmix.io.checks import cache_root

    if output is None:
        return cache_root() / "shards" / name
    output = output.expanduser()
    return output / "shards" if folder else output.with_name(output.name + ".shards")


@contextlib.contextmanager
def launched_shards(output: Path | None, name: str, *, folder: bool, overwrite: bool = False) -> Iterator[Any]:
    """Under torchrun / accelerate launch: join the ranks and encode every corpus in shards
    (:func:`drmix.retrieval.shards.sharded_corpora`); yields the ranks (``None`` in a plain process)."""
    from drmix.retrieval.ranks import Ranks, launched
    from drmix.retrieval.shards import shared_fix, sharded_corpora

    if not launched():
        yield None
        return
    from drmix.errors import DrmixError
    from drmix.lock import run_lock
    from drmix.retrieval.shards import agree

    ranks = Ranks.from_env()
    root = shards_root(output, name, folder=folder)
    held = contextlib.ExitStack()
    try:
        error = None
        if ranks.main and output is not None:  # the drmix cache's shard folders are keyed by content
            try:  # one sharded run at a time into an output (drmix.lock), before anything is written
                held.enter_context(run_lock(root, flag="--output"))
            except DrmixError as e:
                error = e
        agree(ranks, error)
        with sharded_corpora(ranks, root, overwrite=overwrite, shared_fix=shared_fix(root, "--output")):
            yield ranks
    finally:
        held.close()
        ranks.close()
