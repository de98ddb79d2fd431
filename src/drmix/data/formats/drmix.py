"""drmix's own JSONL layout: ``{"query": str, "positive": str | [str, ...], "negatives": [str, ...]}``.

``"positives"`` is accepted for ``"positive"`` and ``"negative"`` for ``"negatives"``; ``negatives`` is optional;
optional teacher scores ``positive_scores`` / ``negative_scores`` are lists aligned with them; other keys
(``drmix mine``'s ``"mined"`` provenance, ids) are kept in the file and not read.
"""
from __future__ import annotations

import re

from drmix.data.formats import ST_LABEL_COLUMNS, Layout, register_layout

_NUMBERED = re.compile(r"^negative_?\d+$")


def _claims(keys) -> bool:
    keys = set(keys)
    return ("query" in keys and bool(keys & {"positive", "positives"}) and "anchor" not in keys
            and not keys & set(ST_LABEL_COLUMNS) and not any(_NUMBERED.match(k) for k in keys))


LAYOUT = register_layout(Layout(
    name="drmix", title="drmix", query=("query",), positive=("positive", "positives"),
    negatives=("negatives", "negative"), positive_scores=("positive_scores",), negative_scores=("negative_scores",),
    lists=frozenset({"positives", "negatives"}), claims=_claims, order=30,
    example='`{"query": "q", "positive": "p" or ["p1", "p2"], "negatives": ["n1", "n2"]}`',
    reads="as it is; `positives` for `positive` and `negative` for `negatives` are accepted; a string in "
          "`positives`/`negatives` is one text (warned); optional teacher scores `positive_scores`/"
          "`negative_scores` (aligned lists)"))
