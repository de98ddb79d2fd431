"""drmix.data.sentences: one sentence splitter; a line break ends a sentence (DRAMA's crop) or is a space (COCO)."""
import pytest

from drmix.data.sentences import split_sentences
from drmix.errors import DataError

TEXT = ("Dr. Smith studied the mitochondria in 2004. They make most of the ATP in a cell.\nShort one. The cristae "
        "fold the inner\nmembrane many times.")


def test_newlines_break_sentences_for_crop():
    assert split_sentences(TEXT) == [
        "Dr. Smith studied the mitochondria in 2004.", "They make most of the ATP in a cell.", "Short one.",
        "The cristae fold the inner", "membrane many times."]
    assert split_sentences("A title\n\nA paragraph.\r\nAnother") == ["A title", "A paragraph.", "Another"]


def test_newlines_are_spaces_for_coco():
    assert split_sentences(TEXT, newlines="space") == [
        "Dr. Smith studied the mitochondria in 2004.", "They make most of the ATP in a cell.", "Short one.",
        "The cristae fold the inner membrane many times."]
    assert split_sentences(" \n\t ", newlines="space") == [] and split_sentences("") == []


def test_unknown_language_and_mode_are_refused():
    with pytest.raises(DataError, match="no sentence rules for language 'xx'"):
        split_sentences("Hello there.", "xx")
    with pytest.raises(ValueError, match="newlines"):
        split_sentences("Hello there.", newlines="keep")
