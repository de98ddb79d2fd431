"""The corpus-encoding options that ``drmix index``, ``eval`` and ``mine`` share (``--tokenize-num-proc``,
``--cache-embeddings``), handed to every encode inside the command through
:func:`drmix.retrieval.encode.encode_defaults`."""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Optional

import typer

TOKENIZE_NUM_PROC_HELP = ("Worker processes that tokenise the corpus ahead of the encoder (default: every core "
                          "this process may use; 1: tokenise in this process, as before).")
CACHE_EMBEDDINGS_HELP = ("Reuse corpus embeddings this model already computed with the same settings, and keep "
                         "new ones, in $DRMIX_CACHE/embedding-cache (keyed by the weights' content, the settings "
                         "and each passage's text; a changed passage is encoded again; bounded by "
                         "DRMIX_EMBEDDING_CACHE_GB, default 20).")


def tokenize_num_proc_option() -> Optional[int]:
    return typer.Option(None, "--tokenize-num-proc", min=1, help=TOKENIZE_NUM_PROC_HELP)


def cache_embeddings_option() -> bool:
    return typer.Option(False, "--cache-embeddings/--no-cache-embeddings", help=CACHE_EMBEDDINGS_HELP)


def encoding(tokenize_num_proc: Optional[int], cache_embeddings: bool) -> AbstractContextManager:
    """The block in which the command's encodes use these options."""
    from drmix.retrieval.encode import encode_defaults

    return encode_defaults(tokenize_num_proc=tokenize_num_proc, cache_embeddings=cache_embeddings)
