"""An encoder and its tokenizer saved as a SentenceTransformer folder (mean pooling, L2 normalisation,
``query``/``document`` prompts), written atomically: the folder is built under a temporary name and swapped
into place by :func:`save_sentence_transformer` (the one place that swap happens)."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drmix.model.prune import QUERY_PROMPT


def save_sentence_transformer(encoder: Any, tokenizer: Any, output: str | Path, *, max_seq_length: int = 512,
                              query_prompt: str = QUERY_PROMPT,
                              finish: Callable[[Any, Path], Any] | None = None,
                              json_files: dict[str, Any] | None = None) -> Path:
    """Save ``encoder`` + ``tokenizer`` as a SentenceTransformer folder at ``output``, written atomically.

    ``finish(model, folder)`` is called with the SentenceTransformer and the folder being written, before it
    is moved into place (e.g. to write the model card into it); ``json_files`` (name -> object) are written
    inside the folder before it is swapped into place too (a marker such as ``drmix_prune.json`` is never
    missing from a complete folder).
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    from drmix.io.atomic import atomic_dir, atomic_write_json

    output = Path(output)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    with atomic_dir(output) as tmp:
        hf = tmp / "_hf"
        encoder.save_pretrained(hf)
        tokenizer.save_pretrained(hf)
        tr = Transformer(str(hf), max_seq_length=max_seq_length)
        st = SentenceTransformer(modules=[tr, Pooling(encoder.config.hidden_size, "mean"), Normalize()],
                                 prompts={"query": query_prompt, "document": ""}, device="cpu")
        st.save(str(tmp))
        if finish is not None:
            finish(st, tmp)
        shutil.rmtree(hf)
        for name, obj in (json_files or {}).items():
            atomic_write_json(tmp / name, obj)
    return output
