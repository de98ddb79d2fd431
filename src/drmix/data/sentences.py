"""Sentence splitting for the methods that cut documents into sentences (DRAMA's cropped queries, COCO's spans).

Sentences come from ``pysbd``'s rule-based segmenter (``clean=False``: the text is not rewritten), which ships
its rules and works offline, unlike nltk's punkt (which downloads data at run time). Where the two callers
differ is newlines, so that is a parameter:

* ``newlines="break"`` (DRAMA's crop, :mod:`drmix.augment.crop`): a line break ends a sentence, so a title line
  or a list item never runs into the next line;
* ``newlines="space"`` (COCO, :mod:`drmix.pretrain.coco`): all whitespace, newlines included, is collapsed to
  one space first, so a sentence wrapped over several lines stays one sentence.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from drmix.errors import DataError

_BREAKS = re.compile(r"\n\s*\n|\r?\n")
_SPACE = re.compile(r"\s+")


@lru_cache(maxsize=8)
def segmenter(language: str = "en"):
    """pysbd's segmenter for ``language`` (cached); an unknown language is a :class:`DataError` with the fix."""
    import pysbd

    try:
        return pysbd.Segmenter(language=language, clean=False)
    except ValueError as e:
        raise DataError(f"no sentence rules for language {language!r} ({e}).",
                        fix="pass a two-letter code pysbd supports, e.g. --language en.") from None


def split_sentences(text: str, language: str = "en", *, newlines: Literal["break", "space"] = "break") -> list[str]:
    """Sentences of ``text``, whitespace-stripped, empty ones dropped; ``newlines`` as the module docstring says."""
    if newlines == "space":
        pieces = [_SPACE.sub(" ", text or "").strip()]
    elif newlines == "break":
        pieces = _BREAKS.split(text or "")
    else:
        raise ValueError(f"newlines must be 'break' or 'space', got {newlines!r}")
    seg = segmenter(language)
    return [s.strip() for piece in pieces if piece.strip() for s in seg.segment(piece) if s.strip()]
