"""Text is text: the one rule for lone surrogates.

A JSON string may hold a lone surrogate (``"\\ud800"``, valid JSON but no Unicode text; tokenizers and UTF-8
encoders fail on it). :func:`clean_text` and :func:`clean_json` replace each by U+FFFD (:data:`REPLACEMENT`)
where text enters drmix (:func:`drmix.io.read.iter_jsonl` and :func:`drmix.io.read.clean_records` for
other readers, LLM answers).
"""
from __future__ import annotations

import re
from typing import Any


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: a JSON escape of a surrogate: the only way one gets into text decoded strictly from UTF-8
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate (U+D800..U+DFFF; no Unicode text holds one) replaced by U+FFFD: the
    one rule for text entering drmix. Paired surrogates never reach here: ``json.loads`` joins them.
    :func:`clean_records` also counts and logs them per file."""
    return counted_clean_text(text)[0]


def counted_clean_text(text: str) -> tuple[str, int]:
    """:func:`clean_text` and how many lone surrogates it replaced."""
    if text.isascii():
        return text, 0
    return _LONE_SURROGATE.subn(REPLACEMENT, text)


def clean_json(obj: Any) -> tuple[Any, int]:
    """A JSON value with :func:`clean_text` applied to every string (keys included); ``(value, count)``."""
    if isinstance(obj, str):
        return counted_clean_text(obj)
    if isinstance(obj, dict):
        n = 0
        out = {}
        for k, v in obj.items():
            k, a = counted_clean_text(k) if isinstance(k, str) else (k, 0)
            v, b = clean_json(v)
            out[k] = v
            n += a + b
        return out, n
    if isinstance(obj, list):
        n = 0
        items = []
        for v in obj:
            v, a = clean_json(v)
            items.append(v)
            n += a
        return items, n
    return obj, 0


def may_hold_surrogates(raw_json: str) -> bool:
    """Whether a JSON text has a surrogate escape (cheap test before :func:`clean_json`)."""
    return "\\u" in raw_json and _SURROGATE_ESCAPE.search(raw_json) is not None
