"""Held-out splits: each family's test/dev queries and distractors, written as a BEIR directory."""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from drmix.data.builders.localdocs.options import LocalDocsOptions, Pair
from drmix.fingerprint import text_digest


@dataclass
class FamilySplit:
    train: list[Pair]
    test: list[Pair]
    dev: list[Pair]
    distractors: list[Pair]


def split_family(pairs: list[Pair], opts: LocalDocsOptions, rng: random.Random) -> FamilySplit:
    """Shuffle, then take test, dev and distractor pairs first and train on (at most) the rest.

    When the family is small, the held-out parts shrink so that training keeps at least half the pairs.
    """
    pairs = list(pairs)
    rng.shuffle(pairs)
    n = len(pairs)
    held = opts.test_queries + opts.dev_queries + opts.distractors
    scale = min(1.0, (n // 2) / held) if held else 1.0
    n_test = max(1, int(opts.test_queries * scale)) if n >= 2 else 0
    n_dev = int(opts.dev_queries * scale)
    n_dis = int(opts.distractors * scale)
    test, dev = pairs[:n_test], pairs[n_test:n_test + n_dev]
    distractors = pairs[n_test + n_dev:n_test + n_dev + n_dis]
    train = pairs[n_test + n_dev + n_dis:][:opts.max_pairs_per_collection]
    return FamilySplit(train, test, dev, distractors)


def _doc_id(text: str) -> str:
    return "d" + text_digest(text)[:12]


def _write_beir_dir(root: Path, split: FamilySplit) -> Path:
    from drmix.data.beir import write_beir

    corpus: dict[str, dict[str, str]] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, dict[str, int]]] = {"test": {}, "dev": {}}
    for p in split.test + split.dev + split.distractors:
        corpus.setdefault(_doc_id(p.positive), {"title": "", "text": p.positive})
    for name, part in (("test", split.test), ("dev", split.dev)):
        for i, p in enumerate(part):
            qid = f"{name}-{i}"
            queries[qid] = p.query
            qrels[name][qid] = {_doc_id(p.positive): 1}
    if not qrels["dev"]:
        del qrels["dev"]
    return write_beir(root, corpus, queries, qrels)


