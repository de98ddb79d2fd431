"""drmix.io.text: the one rule for text (lone surrogates become U+FFFD, nothing else changes)."""
from __future__ import annotations

from drmix.io.text import clean_json, clean_text, counted_clean_text


def test_clean_text_replaces_lone_surrogates_only():
    assert counted_clean_text("a\ud800b\udfffc") == ("a\ufffdb\ufffdc", 2)
    assert clean_text("a\ud800b") == "a\ufffdb"  # what other readers call per string (drmix.data.formats)
    text = "emoji 😀 rtl \u05d0 nul \x00 sep \u2028"
    assert counted_clean_text(text) == (text, 0) and clean_text(text) == text
    obj, n = clean_json({"q\ud800": ["x\udc00", {"y": "\ud83d"}], "n": 1})
    assert obj == {"q\ufffd": ["x\ufffd", {"y": "\ufffd"}], "n": 1} and n == 3
