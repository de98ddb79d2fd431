"""drmix.retrieval.tokenize_pool: worker processes give the model tokenizer's ids, refuse themselves when
they do not, and the number of workers defaults to the available cores."""
from __future__ import annotations

import os

import pytest

from drmix.retrieval.tokenize_pool import TokenizePool, available_cpus, resolve_num_proc


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from drmix.model.encoder import default_model_path

    return AutoTokenizer.from_pretrained(default_model_path())


TEXTS = [f"passage {i} " + "about dense retrieval and tokenisers " * (i % 40) for i in range(1100)]


def test_workers_give_the_tokenizers_ids_with_long_texts_cut(tokenizer):
    pool = TokenizePool(tokenizer, prompt="passage: ", max_length=32, num_proc=2)
    try:
        ids = pool.result(pool.submit(TEXTS))                       # three pieces of 512, 512 and 76 texts
    finally:
        pool.close()
    reference = tokenizer(["passage: " + t for t in TEXTS], truncation=True, max_length=32)["input_ids"]
    assert pool.ok is True and pool.cut and len(ids) == 1100
    assert [list(map(int, a)) for a in ids] == reference
    assert pool.cut_texts == sum(len("passage: " + t) > 8 * 32 + 64 for t in TEXTS)


def test_workers_whose_ids_differ_are_not_used(tokenizer):
    pool = TokenizePool(tokenizer, prompt="", max_length=32, num_proc=2)
    try:
        pool.prompt = "other: "                                    # the in-process check now tokenises differently
        assert pool.result(pool.submit(TEXTS[:10])) is None and pool.ok is False
        assert pool.result(pool.submit(TEXTS[:10])) is None         # and stays refused
    finally:
        pool.close()


def test_no_length_limit_means_no_cut(tokenizer):
    pool = TokenizePool(tokenizer, prompt="", max_length=None, num_proc=2)
    try:
        ids = pool.result(pool.submit(TEXTS[:50]))
    finally:
        pool.close()
    assert not pool.cut and [list(map(int, a)) for a in ids] == tokenizer(TEXTS[:50])["input_ids"]


def test_num_proc_defaults_to_every_available_core():
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert available_cpus() == cores
    assert resolve_num_proc(None) == resolve_num_proc(0) == cores
    assert resolve_num_proc(3) == 3 and resolve_num_proc(1) == 1
