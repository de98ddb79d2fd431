"""BEIR folders as training data: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``; each query with
its relevant documents (score > 0) as positives (read by :func:`drmix.data.collections.load_beir_collection`)."""
from __future__ import annotations

from drmix.data.formats import Layout, register_layout

LAYOUT = register_layout(Layout(
    name="beir", title="BEIR folder", directory=True, order=50,
    example="`corpus.jsonl`, `queries.jsonl`, `qrels/train.tsv`",
    reads="each query of the split (`NAME:split`, default `train`) with its relevant documents (score > 0) as "
          "positives, `title + \" \" + text`; no negatives"))
