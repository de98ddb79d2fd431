"""Tevatron's JSONL layout: ``{"query_id", "query", "positive_passages": [{"docid", "title", "text"}],
"negative_passages": [...]}`` (Tevatron, ``tevatron.retriever.dataset.TrainDataset``: a passage's text is
title + " " + text).

Tevatron's id-only layout (``positive_document_ids`` with a separate corpus) is refused with the fix: drmix
trains on texts, so resolve the ids first.
"""
from __future__ import annotations

from drmix.data.formats import Layout, register_layout


def _claims(keys) -> bool:
    return "positive_passages" in keys or "positive_document_ids" in keys


def _refuse(keys):
    if "positive_document_ids" in keys and "positive_passages" not in keys:
        return ("Tevatron rows with document ids (positive_document_ids) name passages of a separate corpus; "
                "drmix trains on texts.",
                "resolve the ids to passages first (e.g. sentence_transformers.util.resolve_ids, or Tevatron's "
                "positive_passages layout), then pass that file.")
    return None


LAYOUT = register_layout(Layout(
    name="tevatron", title="Tevatron", query=("query", "query_text"), positive=("positive_passages",),
    negatives=("negative_passages",), lists=frozenset({"positive_passages", "negative_passages"}), claims=_claims,
    refuse=_refuse, order=10,
    example='`{"query_id": "1", "query": "q", "positive_passages": [{"docid": "7", "title": "T", "text": "p"}], '
            '"negative_passages": [...]}`',
    reads="each passage as `title + \" \" + text`; ids are not read"))
