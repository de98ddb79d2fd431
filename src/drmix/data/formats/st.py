"""sentence-transformers rows: by column name (``anchor``/``query``, ``positive``, ``negative`` or
``negative_1..n``) or, as ``SentenceTransformerTrainer`` reads any dataset, by position (anchor, positive,
negative_1, ...), its label columns (``label``, ``labels``, ``score``, ``scores``) apart.

A label is kept as teacher scores the way sentence-transformers' distillation losses define it (MarginMSELoss:
``M(q, p) - M(q, n_i)`` per negative; DistillKLDivLoss: ``[M(q, p), M(q, n_1), ...]``); pair rows with a label
and no negative (pair-score data for CoSENT, AnglE, CosineSimilarityLoss) are scored pairs under ``--loss cosent``
/ ``angle`` (:func:`drmix.data.formats.reading_scored_pairs`) and refused otherwise.
"""
from __future__ import annotations

import re

from drmix.data.formats import ST_LABEL_COLUMNS, Layout, register_layout

_ID = re.compile(r"^(id|_id|.*_id|.*_ids|.*_idx)$")


def _claims(keys) -> bool:
    keys = list(keys)
    if {"anchor", "query"} & set(keys) and "positive" in keys:
        return True
    texts = [k for k in keys if k not in ST_LABEL_COLUMNS]
    # by position, like sentence-transformers; an id column means these are not text rows (a BEIR corpus file)
    return len(texts) >= 2 and not any(_ID.match(k) for k in keys)


LAYOUT = register_layout(Layout(
    name="st", title="sentence-transformers", query=("anchor", "query"), positive=("positive",),
    negatives=("negative", "negatives"), label=ST_LABEL_COLUMNS, numbered_negatives=True, positional=True,
    claims=_claims, order=40,
    example='`{"anchor": "q", "positive": "p", "negative": "n"}`, `negative_1..n` columns, or any columns in '
            'that order (`question, answer`); optional `score`/`label`',
    reads="by name, else by position (anchor, positive, negatives...); a label is kept as teacher scores "
          "(one margin per negative, or `[positive, negatives...]`); pairs with a label and no negative are "
          "refused"))
