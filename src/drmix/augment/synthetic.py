"""A synthetic train / dev / test set from a target corpus alone: pseudo-queries, a round-trip filter, splits by
passage, BEIR folders.

What it is for: choosing among trained models (a mixture, a transfer, a candidate) needs a dev set of the target,
and a user with only a corpus has none. The pseudo-queries here stand in for one:

1. **queries** -- cropped sentences of sampled documents (DRAMA, "DRAMA: Diverse Augmentation from Large Language
   Models to Smaller Dense Retrievers", Ma et al., ACL 2025, arXiv:2502.18460, Sec. 3.1.1:
   :func:`drmix.augment.crop.crop_queries`), and, with an LLM, one generated query per sampled document (DRAMA
   Sec. 3.1.2; InPars, "InPars: Data Augmentation for Information Retrieval using Large Language Models", Bonifacio
   et al., SIGIR 2022, arXiv:2202.05144; :func:`drmix.augment.generate.generate_queries`). Each query remembers the
   passage it was made from (its *source*).
2. **round-trip filter** -- a query is kept only when its source passage is among the top ``k`` passages the
   filter model (a teacher retriever, or the base model) retrieves for it from the whole corpus
   (:func:`round_trip_keep`). This is the consistency filter of Promptagator ("Promptagator: Few-shot Dense
   Retrieval From 8 Examples", Dai et al., ICLR 2023, arXiv:2209.11755, Sec. 3.2, with a retriever in place of
   their trained one); InPars keeps the queries its generator scores highest and GPL ("GPL: Generative Pseudo
   Labeling for Unsupervised Domain Adaptation of Dense Retrieval", Wang et al., NAACL 2022, arXiv:2112.07577)
   relabels generated queries with a cross-encoder: all three drop pseudo-queries whose passage a model does not
   confirm, which is what makes them usable as labels. Counted per kind: ``generated``, ``filtered`` (dropped),
   ``kept``.
3. **splits by passage** -- the kept queries are grouped by source passage and the *passages* are split (seeded):
   ``test_queries`` queries' worth of passages to test, ``dev_queries`` to dev, the rest to train
   (:func:`split_by_passage`), so no passage is the source of queries in two splits, and a dev or test source
   passage is never a hard negative of a train query.
4. **files** -- per corpus a BEIR folder (``corpus.jsonl``: the whole corpus; ``queries.jsonl``; ``qrels/dev.tsv``,
   ``qrels/test.tsv``: query -> its source passage, relevance 1) that ``drmix eval``, the recipes' selection and
   Inf-DDS's ``--dev`` read, and a training collection (``query``, ``positive``: the source passage,
   ``negatives``: the filter model's ranks ``negative_ranks`` -- DRAMA's 30-50 -- without the source or any held-out
   passage).

Nothing here reads a query or a judgement of the target: only its corpus. Hand-written: no library builds
synthetic evaluation sets from a corpus (InPars and GPL ship training-data generators, not splits).
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.augment.mine import RankWindow
from drmix.errors import DataError

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


@dataclass
class SyntheticQuery:
    """One pseudo-query: its text, the passage it was made from and how it was made (``crop`` / ``generate``)."""

    qid: str
    text: str
    source: str
    kind: str


@dataclass
class CorpusSynthetic:
    """What :func:`build_corpus_synthetic` made of one corpus."""

    name: str
    splits: dict[str, list[SyntheticQuery]]                   # train / dev / test
    negatives: dict[str, list[str]]                           # train query id -> hard-negative passage ids
    stats: dict[str, Any] = field(default_factory=dict)


def round_trip_keep(queries: Sequence[SyntheticQuery], ranked: Sequence[Sequence[str]], k: int) -> list[bool]:
    """Whether each query's source passage is among the first ``k`` ids of its ranking (the round-trip filter)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if len(queries) != len(ranked):
        raise ValueError("one ranking per query")
    return [q.source in list(r[:k]) for q, r in zip(queries, ranked)]


def split_by_passage(queries: Sequence[SyntheticQuery], *, dev_queries: int, test_queries: int,
                     seed: int) -> dict[str, list[SyntheticQuery]]:
    """Split ``queries`` into train / dev / test by their source passage (seeded), never a passage in two splits.

    The passages are shuffled; passages go to test until it holds ``test_queries`` queries, then to dev until it
    holds ``dev_queries``, the rest to train. With few passages the held-out splits shrink so that each of the
    three keeps at least a quarter of the passages: test and dev each get at most ``n // 4`` passages (``n``
    passages in all), so a small corpus still trains on half of its queries. Raises :class:`DataError` below
    three passages (one per split is the least that can be split).
    """
    by_source: dict[str, list[SyntheticQuery]] = {}
    for q in queries:
        by_source.setdefault(q.source, []).append(q)
    sources = sorted(by_source)
    n = len(sources)
    if n < 3:
        raise DataError(f"only {n} source passage(s) kept after the round-trip filter; train, dev and test need "
                        "at least one each.", fix="give a --corpus with more passages or sample more of them "
                                                   "(--max-docs), raise --filter-k, or use a stronger --teacher.")
    order = [sources[i] for i in np.random.default_rng([seed, 7121]).permutation(n)]
    cap = max(1, n // 4)
    out: dict[str, list[SyntheticQuery]] = {s: [] for s in SPLITS}
    used = {"test": 0, "dev": 0}
    for src in order:
        for split, want in (("test", test_queries), ("dev", dev_queries)):
            if len(out[split]) < want and used[split] < cap:
                out[split].extend(by_source[src])
                used[split] += 1
                break
        else:
            out["train"].extend(by_source[src])
    return out


def _queries_of(name: str, corpus: Mapping[str, Mapping[str, str]], ids: Sequence[str], *, min_words: int,
                max_per_doc: int | None, seed: int, backend: Any, generate_ids: Sequence[str],
                llm_stats: dict[str, Any]) -> list[SyntheticQuery]:
    from drmix.augment.crop import crop_queries

    out = [SyntheticQuery(f"{name}-c{i}", q.query, q.doc_id, "crop")
           for i, q in enumerate(crop_queries({d: corpus[d] for d in ids}, min_words=min_words,
                                              max_per_doc=max_per_doc, seed=seed))]
    if backend is not None and generate_ids:
        from drmix.augment.generate import document_texts, generate_queries

        rows, stats = generate_queries(document_texts(corpus, list(generate_ids)), backend)
        llm_stats.update(stats.as_dict())
        out += [SyntheticQuery(f"{name}-g{i}", r["query"], r["doc_id"], "generate") for i, r in enumerate(rows)]
    return out


def build_corpus_synthetic(name: str, corpus: Mapping[str, Mapping[str, str]], rank: Callable[..., Any], *,
                           max_docs: int | None, min_words: int = 4, max_per_doc: int | None = 1,
                           filter_k: int = 3, negative_ranks: str | RankWindow = "30:50", dev_queries: int = 100,
                           test_queries: int = 100, seed: int = 0, backend: Any = None,
                           generate_docs: int = 0) -> CorpusSynthetic:
    """Queries, round-trip filter and splits of one corpus (see the module docstring).

    ``rank(queries, doc_ids, doc_texts, top_n)`` returns each query's ranked passage ids (the filter model);
    ``backend`` an LLM backend (None: cropped sentences only) that writes a query for ``generate_docs`` of the
    sampled documents.
    """
    from drmix.augment.generate import generation_ids
    from drmix.augment.steps import sample_ids
    from drmix.data.beir import doc_text

    window = RankWindow.parse(negative_ranks)
    ids = sample_ids(list(corpus), max_docs, seed)
    llm_stats: dict[str, Any] = {}
    gen_ids = generation_ids(ids, generate_docs, seed) if backend is not None and generate_docs else []
    queries = _queries_of(name, corpus, ids, min_words=min_words, max_per_doc=max_per_doc, seed=seed,
                          backend=backend, generate_ids=gen_ids, llm_stats=llm_stats)
    doc_ids = list(corpus)
    ranked = rank([q.text for q in queries], doc_ids, [doc_text(corpus[d]) for d in doc_ids],
                  max(filter_k, window.end))
    keep = round_trip_keep(queries, ranked, filter_k)
    kept = [q for q, k in zip(queries, keep) if k]
    rankings = {q.qid: r for q, r in zip(queries, ranked)}
    splits = split_by_passage(kept, dev_queries=dev_queries, test_queries=test_queries, seed=seed)
    held_out = {q.source for s in ("dev", "test") for q in splits[s]}
    negatives = {q.qid: [d for d in window.take(list(rankings[q.qid])) if d != q.source and d not in held_out]
                 for q in splits["train"]}
    generated, passed = Counter(q.kind for q in queries), Counter(q.kind for q in kept)
    stats: dict[str, Any] = {
        "documents": len(corpus), "sampled": len(ids),
        "generated": dict(generated), "filtered": {k: generated[k] - passed[k] for k in generated},
        "kept": dict(passed),
        "queries": {s: len(splits[s]) for s in SPLITS},
        "passages": {s: len({q.source for q in splits[s]}) for s in SPLITS},
        "filter_k": filter_k,
    }
    if llm_stats:
        stats["llm"] = llm_stats
    log.info("%s: %d pseudo-queries generated (%s), %d kept by the round-trip filter (top %d); train %d, dev %d, "
             "test %d", name, len(queries), dict(generated), len(kept), filter_k, len(splits["train"]),
             len(splits["dev"]), len(splits["test"]))
    return CorpusSynthetic(name, splits, negatives, stats)


def write_corpus_synthetic(made: CorpusSynthetic, corpus: Mapping[str, Mapping[str, str]], beir_dir: Path,
                           train_file: Path) -> None:
    """The BEIR folder (dev and test qrels, the whole corpus) and the training collection of one corpus."""
    from drmix.data.beir import doc_text, write_beir
    from drmix.io.atomic import write_jsonl_atomic

    held = made.splits["dev"] + made.splits["test"]
    write_beir(beir_dir, {d: {"title": doc.get("title", "") or "", "text": doc.get("text", "") or ""}
                          for d, doc in corpus.items()},
               {q.qid: q.text for q in held},
               {s: {q.qid: {q.source: 1} for q in made.splits[s]} for s in ("dev", "test") if made.splits[s]})
    if not made.splits["train"]:
        raise DataError(f"{made.name}: no synthetic train query left after the dev and test splits.",
                        path=train_file, fix="sample more documents (--max-docs) or lower --dev-queries / "
                                             "--test-queries.")
    write_jsonl_atomic(train_file, [
        {"query": q.text, "positive": doc_text(corpus[q.source]),
         "negatives": [doc_text(corpus[d]) for d in made.negatives.get(q.qid, [])],
         "augment": f"{q.kind}+roundtrip", "source_doc": q.source, "negative_ids": made.negatives.get(q.qid, [])}
        for q in made.splits["train"]])
