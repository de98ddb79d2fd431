"""``drmix index``, ``drmix eval`` and ``drmix mine`` under ``torchrun`` / ``accelerate launch``: each corpus
encoded in shards, one per rank; and ``drmix index --estimate``. The library side is
:mod:`drmix.retrieval.shards` and :mod:`drmix.retrieval.plan`."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from drmix.errors import DrmixError


def shard_folder(output: Path) -> Path:
    """Where the shards of ``output`` go: ``OUTPUT.shards`` beside it."""
    output = output.expanduser()
    return output.with_name(output.name + ".shards")


def count_passages(corpus_file: Path) -> int:
    """Non-blank lines of a corpus ``.jsonl`` (one document each), counted without parsing them."""
    from drmix.errors import DataError

    if not corpus_file.is_file():
        raise DataError("corpus file not found.", path=corpus_file,
                        fix="pass --corpus with a BEIR directory or a corpus .jsonl file.")
    with open(corpus_file, "rb") as f:
        return sum(1 for line in f if line.strip())


def print_estimate(corpus_file: Path, *, gpus: int, rate: float | None, echo: Callable[[str], None],
                   model: str | None = None, max_length: int | None = None) -> None:
    """What ``drmix index --estimate`` prints: the corpus, the rate, the time on 1 and ``gpus`` GPUs. The rate is
    ``rate`` (--passages-per-s), else measured here on the GPU with ``model`` at ``max_length`` on the corpus's
    first passages (:func:`drmix.recipes.throughput.encoding_rate`: seconds), else assumed -- and then this
    machine's CPU is measured too, in a line of its own."""
    from itertools import islice

    import torch

    from drmix.data.beir import doc_text
    from drmix.io import iter_jsonl
    from drmix.recipes.throughput import encoding_rate
    from drmix.retrieval.plan import estimate_lines

    passages = count_passages(corpus_file)
    texts = [doc_text(obj) for _, obj in islice(iter_jsonl(corpus_file), 64)]
    echo(f"{corpus_file}:")
    source = None
    if rate is None and torch.cuda.is_available():
        measured = encoding_rate("cuda", model, texts, max_length)
        rate, source = (measured.per_s, f"measured: {measured.how}") if measured.measured else (None, None)
    for line in estimate_lines(passages, gpus=sorted({1, gpus}), rate=rate, source=source):
        echo(line)
    if rate is None:   # no GPU here to measure: the GPU lines are assumed, this machine's CPU is measured
        cpu = encoding_rate("cpu", model, texts, max_length)
        for line in estimate_lines(passages, gpus=[1], rate=cpu.per_s, device="cpu",
                                   source=f"{'measured' if cpu.measured else 'assumed'}: {cpu.how}; this machine"):
            echo(line)
    echo("Run it on N GPUs with: torchrun --nproc-per-node N -m drmix index ... (or accelerate launch; "
         "docs/evaluation.md, \"Sharded encoding over processes and GPUs\").")


def index_sharded(*, output: Path | None, corpus: Path, corpus_file: Path, load: Callable[[], Any],
                  check_room: Callable[[Any, dict], None], overwrite: bool, index_kwargs: dict[str, Any],
                  metadata: dict[str, Any], echo: Callable[[str], None], folder: Path | None = None,
                  claim: Callable[[], None] | None = None,
                  build: Callable[[Any, dict, Any], str] | None = None, chunk_size: int = 100_000) -> None:
    """Every rank: claim (rank 0), read the corpus, load the model, encode its shard; rank 0 merges and
    writes the index, then says where the shards and the index are.

    With ``build(encoder, docs, chunks) -> "indexed ... into WHERE"`` (a backend that builds from chunks),
    rank 0 does not merge: it streams the shards' rows, ``chunk_size`` at a time
    (:func:`drmix.retrieval.shards.shard_chunks`), into ``build``; ``claim()`` then checks the target (rank 0,
    before encoding) and ``folder`` is where the shards go (default ``OUTPUT.shards``)."""
    from drmix.data.beir import doc_text, read_corpus
    from drmix.io import check_free_space
    from drmix.model.encoder import document_prompt
    from drmix.outputs import check_output_dir, claim_output
    from drmix.retrieval.encode import embedding_dim, model_normalizes
    from drmix.retrieval.index import index_embeddings
    from drmix.retrieval.ranks import Ranks
    from drmix.retrieval.shards import agree, encode_sharded, shard_chunks

    ranks = Ranks.from_env()
    folder = folder or shard_folder(output)
    try:
        error = None
        if ranks.main:
            try:
                if claim is None:
                    check_output_dir(output, "index", overwrite=overwrite, inputs=[corpus])
                else:
                    claim()
                claim_output(folder, "shards", overwrite=overwrite, inputs=[corpus])
            except DrmixError as e:
                error = e
        agree(ranks, error)
        docs = read_corpus(corpus_file)
        encoder = load()
        error = None
        if ranks.main:
            try:
                check_room(encoder, docs)
                dim = embedding_dim(encoder)
                check_free_space(folder, len(docs) * dim * 4, what=f"the shards of {len(docs)} documents")
            except DrmixError as e:
                error = e
        agree(ranks, error)
        result = encode_sharded(encoder, [doc_text(docs[i]) for i in docs], folder, ranks=ranks,
                                batch_size=index_kwargs.pop("batch_size"), prompt=document_prompt(encoder),
                                max_length=index_kwargs.get("max_length"), normalize=model_normalizes(encoder),
                                precision=index_kwargs.get("precision"), model_name=str(metadata.get("model")),
                                overwrite=overwrite, merge=build is None)
        if not ranks.main:
            return
        reused = f", {len(result.reused)} reused from an earlier run" if result.reused else ""
        if build is not None:
            ids = list(docs)
            chunks = ((ids[row:row + len(part)], part) for row, part in shard_chunks(folder, result.settings,
                                                                                      chunk_size))
            done = build(encoder, docs, chunks)
            echo(f"{done}; {ranks.world_size} shards{reused} in {folder}")
            return
        index = index_embeddings(encoder, docs, result.embeddings, metadata=metadata, **index_kwargs)
        index.save(output)
        echo(f"indexed {len(index)} documents ({index.kind}, dim {index.dim}) into {output}; "
             f"{ranks.world_size} shards{reused} in {folder}")
    finally:
        ranks.close()


def shards_root(output: Path | None, name: str, *, folder: bool) -> Path:
    """Where ``drmix eval`` / ``drmix mine`` keep their corpus shards: ``OUTPUT/shards`` for an output folder,
    ``OUTPUT.shards`` beside an output file, else the drmix cache (``$DRMIX_CACHE/shards/<name>``)."""
    from drmix.io import cache_root

    if output is None:
        return cache_root() / "shards" / name
    output = output.expanduser()
    return output / "shards" if folder else output.with_name(output.name + ".shards")


@contextlib.contextmanager
def launched_shards(output: Path | None, name: str, *, folder: bool, overwrite: bool = False) -> Iterator[Any]:
    """Under torchrun / accelerate launch: join the ranks and encode every corpus in shards
    (:func:`drmix.retrieval.shards.sharded_corpora`); yields the ranks (``None`` in a plain process)."""
    from drmix.retrieval.ranks import Ranks, launched
    from drmix.retrieval.shards import sharded_corpora

    if not launched():
        yield None
        return
    ranks = Ranks.from_env()
    try:
        with sharded_corpora(ranks, shards_root(output, name, folder=folder), overwrite=overwrite):
            yield ranks
    finally:
        ranks.close()
