"""drmix.model.pretokenize: the character cut never changes the truncated ids, and the backend call gives
transformers' ids."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from drmix.model.pretokenize import (CHARS_PER_TOKEN, backend_for, cut_chars, cut_is_safe, cut_text,
                                     tokenize_ids)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from drmix.model.encoder import default_model_path

    return AutoTokenizer.from_pretrained(default_model_path())


def hf_ids(tokenizer, texts, max_length, prompt=""):
    return tokenizer([prompt + t for t in texts], add_special_tokens=True, truncation=True, max_length=max_length,
                     return_attention_mask=False, return_token_type_ids=False)["input_ids"]


def test_cut_text_cuts_at_the_first_space_from_the_bound_and_drops_trailing_whitespace():
    assert cut_text("abc def", 10) is None                      # short enough: not cut
    assert cut_text("aaaa bbbb cccc", 5) == "aaaa bbbb"          # the first space at or after 5 is at 9
    assert cut_text("aaaa   bbbb cccc", 4) == "aaaa"             # a run of spaces is dropped with the cut
    assert cut_text("aaaabbbbcccc dd", 4) == "aaaabbbbcccc"
    assert cut_text("aaaabbbbccccdddd", 4) is None               # no space after the bound: not cut
    assert cut_text("a\nb\tc d", 1) == "a\nb\tc"                 # only an ASCII space is a cut point
    assert cut_chars(256) == CHARS_PER_TOKEN * 256 + 64


def _spec_tokenizer(tokenizer, edit):
    """A copy of ``tokenizer`` whose backend JSON is changed by ``edit``."""
    import copy

    from tokenizers import Tokenizer

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    edit(spec)
    tok = copy.copy(tokenizer)
    tok._tokenizer = Tokenizer.from_str(json.dumps(spec))
    return tok


def test_cut_is_safe_only_for_pipelines_local_at_a_space(tokenizer):
    assert cut_is_safe(tokenizer)                                # BERT: BertNormalizer + BertPreTokenizer + WordPiece
    replace = {"type": "Replace", "pattern": {"String": "a b"}, "content": "x"}
    assert not cut_is_safe(_spec_tokenizer(tokenizer, lambda s: s.update(normalizer=replace)))
    split = {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Isolated", "invert": False}
    assert not cut_is_safe(_spec_tokenizer(tokenizer, lambda s: s.update(pre_tokenizer=split)))
    assert not cut_is_safe(_spec_tokenizer(tokenizer, lambda s: s.update(pre_tokenizer=None)))
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    assert not cut_is_safe(_spec_tokenizer(tokenizer, lambda s: s.update(pre_tokenizer=bl)))
    assert cut_is_safe(_spec_tokenizer(tokenizer, lambda s: s.update(pre_tokenizer={**bl, "use_regex": True})))

    def spaced_token(s):
        s["added_tokens"].append({**s["added_tokens"][0], "id": 30522, "content": "two words"})
    assert not cut_is_safe(_spec_tokenizer(tokenizer, spaced_token))
    left = _spec_tokenizer(tokenizer, lambda s: None)
    left.truncation_side = "left"
    assert not cut_is_safe(left)


def generated_texts(n=300, seed=0):
    """Words, punctuation, digits, accents, CJK, runs of spaces and newlines; a third of them far longer
    than 64 tokens, some with no space after the cut bound."""
    rng = random.Random(seed)
    words = ["retrieval", "dense", "encoder", "naïve", "Café", "ΟΔΟΣ", "don't", "3.14", "x-ray", "(see", "fig.)",
             "中文", "unbelievably", "a", "[MASK]", "[SEP]", "e-mail@example.com", "\u00ad", "co\u0301te"]
    seps = [" ", " ", " ", "  ", "\n", "\t", " \n "]
    out = []
    for i in range(n):
        k = rng.choice([3, 40, 150, 900])
        out.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(k)).strip())
    out += ["", "x" * 2000, "word " * 10, ("y" * 700 + " ") * 3]
    return out


@pytest.mark.parametrize("max_length", [16, 64])
def test_cut_ids_equal_uncut_and_transformers_ids_on_generated_texts(tokenizer, max_length):
    texts = generated_texts()
    backend = backend_for(tokenizer, max_length)
    cut, n_cut = tokenize_ids(backend, texts, max_length=max_length, cut=True, prompt="query: ")
    whole, none_cut = tokenize_ids(backend, texts, max_length=max_length, cut=False, prompt="query: ")
    reference = hf_ids(tokenizer, texts, max_length, prompt="query: ")
    assert none_cut == 0 and n_cut > 50                       # the cut really is taken on the long texts
    assert all(a.dtype == np.int32 for a in cut)
    assert [list(a) for a in cut] == [list(a) for a in whole] == [list(r) for r in reference]


def test_a_cut_that_keeps_too_few_tokens_is_undone(tokenizer):
    # at 16 tokens the bound is 192 characters: the cut keeps one 190-letter word ([UNK]) and "y", 2 tokens,
    # too few to overflow, so the text is tokenised whole (and not counted as cut)
    text = "z" * 190 + " " + "y " * 50
    backend = backend_for(tokenizer, 16)
    ids, n_cut = tokenize_ids(backend, [text], max_length=16, cut=True)
    assert n_cut == 0                                          # "zzz..." is one [UNK]: the cut part did not overflow
    assert list(ids[0]) == hf_ids(tokenizer, [text], 16)[0]


def _beir_texts(root):
    from drmix.data.beir import doc_text, read_corpus

    for d in sorted(p for p in root.iterdir() if (p / "corpus.jsonl").exists()):
        yield d.name, "corpus", [doc_text(x) for x in read_corpus(d / "corpus.jsonl").values()]
        if (d / "queries.jsonl").exists():
            qs = [json.loads(line)["text"] for line in (d / "queries.jsonl").read_text().splitlines() if line.strip()]
            yield d.name, "queries", qs


@pytest.mark.slow
def test_cut_ids_equal_transformers_ids_on_every_beir_text(tokenizer, shared_data):
    """Every corpus and query text of every BEIR set in the shared data, at MiniLM's 256 tokens and at 64."""
    seen = 0
    for max_length in (256, 64):
        backend = backend_for(tokenizer, max_length)
        for name, part, texts in _beir_texts(shared_data):
            ids, _ = tokenize_ids(backend, texts, max_length=max_length, cut=True)
            reference = backend.encode_batch(texts, add_special_tokens=True)  # uncut, the same truncation
            bad = [i for i, (a, r) in enumerate(zip(ids, reference)) if list(a) != r.ids]
            assert not bad, f"{name} {part} at {max_length}: {len(bad)} texts differ, first {bad[0]}"
            seen += len(texts)
    assert seen > 10_000
