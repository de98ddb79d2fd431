"""Inputs of the audit's tests: three small collections and a BEIR dev set."""
from __future__ import annotations

import json
from pathlib import Path

WORDS = {
    "animals": ["cat", "dog", "horse", "sheep", "goat", "mouse", "tiger", "lion", "zebra", "camel", "otter", "eagle"],
    "food": ["bread", "rice", "apple", "cheese", "pasta", "soup", "salad", "honey", "butter", "lemon", "olive", "melon"],
    "tools": ["hammer", "saw", "drill", "wrench", "chisel", "ladder", "shovel", "rake", "axe", "pliers", "file", "vise"],
}


def write_inputs(root: Path) -> tuple[Path, Path]:
    """Three collections of 12 examples (one hard negative each) and a BEIR dev set with a ``dev`` split."""
    from drmix.data.beir import write_beir

    train = root / "train"
    train.mkdir()
    for name, words in WORDS.items():
        rows = [{"query": f"what about the {w}", "positive": f"the {w} is a {name} word number {i}",
                 "negatives": [f"the {words[(i + 1) % len(words)]} is not it"]} for i, w in enumerate(words)]
        (train / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    docs = {f"d{i}": {"title": "", "text": f"the {w} is a {n} word"}
            for i, (n, w) in enumerate((n, w) for n, ws in WORDS.items() for w in ws[6:10])}
    queries = {f"q{i}": d["text"].split(" is ")[0] for i, d in enumerate(docs.values())}
    dev = write_beir(root / "dev", docs, queries, {"dev": {f"q{i}": {f"d{i}": 1} for i in range(len(docs))}})
    return train, dev
