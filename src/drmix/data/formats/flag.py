"""FlagEmbedding's JSONL layout: ``{"query": str, "pos": [str], "neg": [str]}``, with optional teacher scores
``pos_scores``/``neg_scores`` (aligned with ``pos``/``neg``) and a per-row query instruction ``prompt``
(FlagEmbedding, ``AbsEmbedderTrainDataset``: the row's prompt takes the place of the query instruction).
"""
from __future__ import annotations

from drmix.data.formats import Layout, register_layout


def _claims(keys) -> bool:
    return "query" in keys and "pos" in keys


LAYOUT = register_layout(Layout(
    name="flag", title="FlagEmbedding", query=("query",), positive=("pos",), negatives=("neg",),
    positive_scores=("pos_scores",), negative_scores=("neg_scores",), prompt=("prompt",),
    lists=frozenset({"pos", "neg"}), claims=_claims, order=20,
    example='`{"query": "q", "pos": ["p"], "neg": ["n1", "n2"], "pos_scores": [0.9], "neg_scores": [0.2, 0.1], '
            '"prompt": "Represent this query: "}`',
    reads="`pos`/`neg` as positives/negatives; `pos_scores`/`neg_scores` kept as teacher scores; `prompt` "
          "prepended to the row's query"))
