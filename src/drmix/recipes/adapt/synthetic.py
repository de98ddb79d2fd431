"""The synthetic stage of ``drmix adapt``: pseudo-queries of the target corpora, the round-trip filter, the
splits (``synthetic/``)."""
from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import ConfigError
from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.plan import AdaptPlan


def _llm_backend(config: AdaptConfig, cache: Path):
    from drmix.llm.factory import LLMConfig, build_backend

    s = config.synthetic
    if not s.llm:
        return None
    if re.match(r"^https?://", s.llm):
        if not s.llm_model:
            raise ConfigError("an --llm endpoint needs the served model's name.", fix="pass --llm-model NAME.")
        cfg = LLMConfig(backend="openai", base_url=s.llm, model=s.llm_model, **s.llm_options)
    else:
        cfg = LLMConfig(backend="transformers", model=None if s.llm.lower() in ("smollm2", "default") else s.llm,
                        **s.llm_options)
    return build_backend(cfg, cache_path=cache)


def teacher_ranker(teacher: Any, teacher_name: str | None) -> Callable[..., list[list[str]]]:
    """``rank(queries, doc_ids, doc_texts, top_n)`` by the teacher (cosine, exact). The corpus's embeddings come
    from the content-keyed embedding cache (:mod:`drmix.retrieval.embedding_cache`: the teacher's weights, its
    document prompt and length, each text), so another seed, another filter setting or a rerun does not encode
    the corpus again (the teacher's corpus pass is most of the stage's time); under ``torchrun`` the corpus is
    encoded in shards over the ranks (:func:`drmix.retrieval.shards.encode_corpus`). ``teacher_name`` is kept for
    callers that name the teacher; the cache is keyed by its weights."""
    from drmix.augment.mine import rank
    from drmix.model.encoder import document_prompt, query_prompt
    from drmix.retrieval.encode import encode_texts
    from drmix.retrieval import shards
    from drmix.retrieval.shards import encode_corpus

    dp, qp = document_prompt(teacher), query_prompt(teacher)

    def ranker(queries: list[str], doc_ids: list[str], doc_texts: list[str], top_n: int) -> list[list[str]]:
        if not queries and shards.active() is None:  # under torchrun every rank takes its part of the pass
            return []
        d = encode_corpus(teacher, list(doc_texts), prompt=dp, normalize=True, cache_embeddings=True)
        if not queries:
            return []
        q = encode_texts(teacher, queries, prompt=qp, normalize=True)
        return [[d_id for d_id, _ in r] for r in rank(q, d, doc_ids, top_n=top_n)]

    return ranker


def build_synthetic(config: AdaptConfig, plan: AdaptPlan) -> dict[str, Any]:
    """Write ``synthetic/`` (BEIR folders, train collections, ``stats.json``) in one atomic step; returns the
    stats. Reads each target's corpus only."""
    from drmix.augment.synthetic import build_corpus_synthetic, write_corpus_synthetic
    from drmix.data.beir import read_corpus
    from drmix.io.atomic import atomic_dir, atomic_write_json
    from drmix.model.encoder import load_encoder
    from drmix.pretrain.coco import corpus_file
    from drmix.retrieval.shards import writes_here

    s = config.synthetic
    teacher = load_encoder(s.teacher, device=config.run.device)
    here = writes_here()  # under torchrun the other ranks take their part of the teacher's passes, write nothing
    backend = _llm_backend(config, plan.root / "llm-cache.jsonl") if here else None
    rank = teacher_ranker(teacher, s.teacher)

    stats: dict[str, Any] = {}
    with atomic_dir(plan.root / "synthetic") if here else contextlib.nullcontext() as tmp:
        if tmp is not None:
            (tmp / "train").mkdir()
        for name, path in plan.corpora.items():
            corpus = read_corpus(corpus_file(path))
            made = build_corpus_synthetic(name, corpus, rank, max_docs=s.max_docs, min_words=s.min_words,
                                          max_per_doc=s.max_per_doc, filter_k=s.filter_k,
                                          negative_ranks=s.negative_ranks, dev_queries=s.dev_queries,
                                          test_queries=s.test_queries, seed=config.optim.seed, backend=backend,
                                          generate_docs=s.generate_max_docs if backend is not None else 0)
            if tmp is not None:
                write_corpus_synthetic(made, corpus, tmp / name, tmp / "train" / f"synthetic-{name}.jsonl")
            stats[name] = made.stats
        if tmp is not None:
            atomic_write_json(tmp / "stats.json", {"teacher": s.teacher or "default", "corpora": stats})
    if backend is not None:
        backend.close()
    return stats


def read_synthetic_stats(root: Path) -> dict[str, Any]:
    return json.loads((root / "synthetic" / "stats.json").read_text(encoding="utf-8"))["corpora"]
