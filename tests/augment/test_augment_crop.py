"""Cropped-sentence queries on a hand-made corpus."""
from __future__ import annotations

import pytest

from drmix.augment.crop import crop_queries
from drmix.errors import DataError

CORPUS = {
    "d1": {"title": "Cells", "text": "Dr. Smith studied the mitochondria in 2004. They make most of the ATP in a cell."
                                     "\nShort one. The cristae fold the inner membrane many times."},
    "d2": {"title": "", "text": "Fig. 2."},
    "d3": "Plain strings work as documents too. Each sentence becomes a query here.",
}


def test_crop_breaks_sentences_at_newlines():
    """A line break ends a query: "...in a cell." and "Short one." stay apart though no space follows the dot."""
    qs = crop_queries({"d": "A first line without a full stop\nThe second line is a sentence."}, min_words=4)
    assert [q.query for q in qs] == ["A first line without a full stop", "The second line is a sentence."]


def test_every_long_enough_sentence_is_a_query_with_its_source():
    qs = crop_queries(CORPUS, min_words=4)
    assert [(q.doc_id, q.sentence, q.query) for q in qs] == [
        ("d1", 0, "Dr. Smith studied the mitochondria in 2004."),
        ("d1", 1, "They make most of the ATP in a cell."),
        ("d1", 3, "The cristae fold the inner membrane many times."),
        ("d3", 0, "Plain strings work as documents too."),
        ("d3", 1, "Each sentence becomes a query here."),
    ]


def test_max_per_doc_is_a_seeded_subset():
    a = crop_queries(CORPUS, max_per_doc=1, seed=3)
    assert a == crop_queries(CORPUS, max_per_doc=1, seed=3)
    assert [q.doc_id for q in a] == ["d1", "d3"]
    full = {(q.doc_id, q.sentence) for q in crop_queries(CORPUS)}
    assert {(q.doc_id, q.sentence) for q in a} <= full


def test_corpus_without_sentences_is_a_data_error():
    with pytest.raises(DataError, match="no sentence of at least 4 words"):
        crop_queries({"a": {"text": "Fig. 2."}, "b": {"text": ""}})
