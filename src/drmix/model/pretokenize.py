"""Token ids of long texts without tokenising what truncation throws away: a character cut proved safe.

Encoding truncates every text to ``max_length`` tokens, yet a fast tokenizer normalises, splits and
tokenises the whole text first, so a 100,000-character document costs as much as 400 passages to produce
the 256 ids that are kept. :func:`tokenize_ids` cuts such a text before the tokenizer, where the cut
provably cannot change the ids it returns.

The proof. Write the text as ``T = P + " " + R`` where the cut point is an ASCII space and ``P`` does not
end in whitespace, and tokenise ``P`` instead of ``T``. :func:`cut_is_safe` admits a tokenizer only when
every stage of its pipeline is *local at a space*:

* added tokens (matched before normalisation) contain no whitespace, so no match spans the space;
* the normaliser is a sequence of per-character maps (BERT's, lowercasing, accent stripping, Unicode
  NFC/NFD/NFKC/NFKD: U+0020 is a starter that composes with nothing, so composition never crosses it;
  the final-sigma rule of lowercasing sees "end of word" in both ``P`` and ``T``) or ``Strip`` (which
  leaves a ``P`` without trailing whitespace alone);
* the pre-tokeniser splits at whitespace (BERT's, ``Whitespace``, ``WhitespaceSplit``, ``Metaspace``,
  ``ByteLevel`` with its GPT-2 regex, ``Punctuation`` and ``Digits`` after one of these), so every piece
  of ``P`` is a piece of ``T``, in the same order, and ``T`` only has more pieces after them;
* the model (WordPiece, BPE without dropout, Unigram, WordLevel) tokenises each piece on its own;
* truncation keeps the *first* tokens (``truncation_side == "right"``, one sequence) and the
  post-processor only adds special tokens around what is kept.

So the content tokens of ``P`` are the first content tokens of ``T``. If ``P`` alone has more content
tokens than truncation keeps -- the tokenizer reports *overflowing* tokens for ``P`` -- then both keep
the same first tokens and get the same special tokens: the ids are equal. A cut text that does not
overflow is tokenised again in full, so the cut is only ever an optimisation; where it is taken
(``cut_chars``: 8 characters per kept token plus 64, well above English text's 4-5 characters per
WordPiece/BPE token, so a fallback is rare) decides how often it pays, never what the ids are.
tests/model/test_pretokenize.py checks the ids with and without the cut on every text of every BEIR set
it finds.

:func:`tokenize_ids` calls the backend ``tokenizers.Tokenizer`` the way transformers'
``PreTrainedTokenizerFast.__call__`` does (truncation ``longest_first`` at ``max_length``, stride 0, the
tokenizer's truncation side, no padding, special tokens added) and returns each text's ids as an int32
array; :class:`drmix.retrieval.tokenize_pool.TokenizePool` runs it in worker processes and checks its
first ids against the transformers tokenizer's before trusting it.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

CHARS_PER_TOKEN = 8  # cut at 8 characters per kept token (plus CUT_SLACK): an efficiency choice, see above
CUT_SLACK = 64
_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents", "Strip"}
_SPLIT_PRETOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Metaspace", "ByteLevel"}
_AFTER_SPLIT = {"Punctuation", "Digits"}
_MODELS = {"WordPiece", "BPE", "Unigram", "WordLevel"}


def _normalizer_local(spec: dict | None) -> bool:
    if spec is None:
        return True
    if spec.get("type") == "Sequence":
        return all(_normalizer_local(s) for s in spec.get("normalizers", []))
    return spec.get("type") in _LOCAL_NORMALIZERS


def _pretokenizer_splits(spec: dict | None) -> bool:
    if spec is None:
        return False
    parts = spec.get("pretokenizers", []) if spec.get("type") == "Sequence" else [spec]
    splits = False
    for p in parts:
        kind = p.get("type")
        if kind == "ByteLevel" and not p.get("use_regex", True):
            return False
        if kind == "Metaspace" and p.get("split") is False:
            return False
        if kind in _SPLIT_PRETOKENIZERS:
            splits = True
        elif kind not in _AFTER_SPLIT:
            return False
    return splits


def cut_is_safe(tokenizer: Any) -> bool:
    """True when cutting a text at a space cannot change its truncated ids (the module docstring's proof)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "truncation_side", "right") != "right":
        return False
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    if model.get("type") not in _MODELS or model.get("dropout") not in (None, 0, 0.0):
        return False
    if any(any(c.isspace() for c in t.get("content", "")) for t in spec.get("added_tokens") or []):
        return False
    return _normalizer_local(spec.get("normalizer")) and _pretokenizer_splits(spec.get("pre_tokenizer"))


def cut_chars(max_length: int) -> int:
    """Texts longer than this many characters are cut (at the first space from here on)."""
    return CHARS_PER_TOKEN * int(max_length) + CUT_SLACK


def cut_text(text: str, chars: int) -> str | None:
    """``text`` up to the first space at or after ``chars`` (trailing whitespace dropped); None: not cut."""
    if len(text) <= chars:
        return None
    p = text.find(" ", chars)
    if p < 0:
        return None
    head = text[:p].rstrip()
    return head if head and head != text else None


def backend_for(tokenizer: Any, max_length: int | None) -> Any:
    """A copy of ``tokenizer``'s backend set up as ``tokenizer(texts, truncation=True, max_length=...)`` sets it."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()
    if max_length:
        backend.enable_truncation(int(max_length), stride=0, strategy="longest_first",
                                  direction=getattr(tokenizer, "truncation_side", "right"))
    else:
        backend.no_truncation()
    return backend


def tokenize_ids(backend: Any, texts: Sequence[str], *, prompt: str = "", max_length: int | None = None,
                 cut: bool = False) -> tuple[list[np.ndarray], int]:
    """Each ``prompt + text``'s truncated ids (int32 arrays) and how many texts were cut.

    ``backend`` comes from :func:`backend_for`; ``cut`` (only when :func:`cut_is_safe`) cuts long texts
    first and keeps a cut text's ids only when the cut part overflowed ``max_length``."""
    full = [prompt + t for t in texts]
    chars = cut_chars(max_length) if cut and max_length else 0
    heads = [cut_text(t, chars) for t in full] if chars else [None] * len(full)
    encodings = backend.encode_batch([h if h is not None else t for h, t in zip(heads, full)],
                                     add_special_tokens=True)
    out = [np.asarray(e.ids, dtype=np.int32) for e in encodings]
    redo = [i for i, (h, e) in enumerate(zip(heads, encodings)) if h is not None and not e.overflowing]
    if redo:  # the cut kept too few tokens: these texts are tokenised in full
        for i, e in zip(redo, backend.encode_batch([full[i] for i in redo], add_special_tokens=True)):
            out[i] = np.asarray(e.ids, dtype=np.int32)
    return out, sum(h is not None for h in heads) - len(redo)


__all__ = ["cut_is_safe", "cut_chars", "cut_text", "backend_for", "tokenize_ids", "CHARS_PER_TOKEN"]
