"""Retriever-mined hard negatives (``drmix mine``) and the teacher ranking that DRAMA's augmentation reuses.

* :func:`mine_ranked` ranks a document pool for each query with a bi-encoder (exact inner-product search over
  L2-normalised embeddings, chunked so the score matrix never exceeds ``_SCORE_CHUNK`` queries at a time) and
  returns each query's top ``top_n`` as ``(doc_id, score)``, skipping the ids in ``exclude[i]``.
* :class:`RankWindow` is a 1-based, inclusive rank range such as ``30:50`` (DRAMA: cropped-sentence queries take
  ranks 1-10 of the teacher as positives and 30-50 as hard negatives).
* :func:`mine_collection` rewrites a collection (any layout drmix reads) as drmix JSONL with mined hard negatives drawn from the
  collection's own documents (every positive and negative text in the file), never a positive of the same query.
  A positive-aware filter (``max_score_ratio``, after NV-Retriever's "TopK-PercPos": a candidate scoring above
  ``ratio x`` the query's lowest positive score is treated as a likely false negative and skipped) guards
  against unlabelled positives. Every other field of the input line is kept; the line gains provenance
  ``"mined": {"model", "ranks", "scores"}``.

``sentence_transformers.util.mine_hard_negatives`` mines one row per (anchor, positive) pair and returns only
the sampled negatives; drmix needs the teacher's ranked list with scores per query (DRAMA takes positives from
it too), rows with several positives, and line-level provenance, so the ranking is done here with drmix's own
encoder (:func:`drmix.retrieval.encode.encode_texts`) and a torch top-k.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from drmix.errors import ConfigError, DataError

log = logging.getLogger(__name__)

_SCORE_CHUNK = 1024  # queries scored against the whole pool at once


@dataclass(frozen=True)
class RankWindow:
    """Ranks ``start..end`` of a ranked list, 1-based and inclusive."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 1 or self.end < self.start:
            raise ConfigError(f"rank window {self.start}:{self.end} is empty or starts below 1.",
                              fix="write START:END with 1 <= START <= END, e.g. 30:50.")

    @classmethod
    def parse(cls, text: str | RankWindow) -> RankWindow:
        if isinstance(text, RankWindow):
            return text
        parts = str(text).split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            return cls(int(parts[0]), int(parts[1]))
        except ValueError:
            raise ConfigError(f"cannot read rank window {text!r}.",
                              fix="write START:END (1-based, inclusive), e.g. 30:50.") from None

    def take(self, ranked: Sequence[Any]) -> list[Any]:
        """The items of ``ranked`` (rank 1 first) that fall in the window."""
        return list(ranked[self.start - 1:self.end])

    def __str__(self) -> str:
        return f"{self.start}:{self.end}"


def top_k_scores(queries: np.ndarray, docs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` inner products of every query row against every document row (scores descending)."""
    import torch

    k = min(k, docs.shape[0])
    if k == 0 or queries.shape[0] == 0:
        return np.zeros((queries.shape[0], 0), np.float32), np.zeros((queries.shape[0], 0), np.int64)
    d = torch.from_numpy(np.ascontiguousarray(docs, dtype=np.float32))
    scores, index = [], []
    for start in range(0, queries.shape[0], _SCORE_CHUNK):
        q = torch.from_numpy(np.ascontiguousarray(queries[start:start + _SCORE_CHUNK], dtype=np.float32))
        s, i = torch.topk(q @ d.T, k, dim=1)  # topk breaks ties by lower index first on CPU
        scores.append(s.numpy())
        index.append(i.numpy())
    return np.concatenate(scores), np.concatenate(index)


def embed(model: Any, queries: Sequence[str], doc_texts: Sequence[str], *, batch_size: int = 64,
          query_prompt: str | None = None, doc_prompt: str | None = None,
          show_progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """L2-normalised query and document embeddings; prompts default to the model's own."""
    from drmix.model.encoder import document_prompt, query_prompt as model_query_prompt
    from drmix.retrieval.encode import encode_texts
    from drmix.retrieval.shards import encode_corpus  # in shards under torchrun (drmix mine)

    qp = model_query_prompt(model) if query_prompt is None else query_prompt
    dp = document_prompt(model) if doc_prompt is None else doc_prompt
    d_emb = encode_corpus(model, doc_texts, batch_size=batch_size, prompt=dp, normalize=True,
                          show_progress=show_progress)
    q_emb = encode_texts(model, queries, batch_size=batch_size, prompt=qp, normalize=True,
                         show_progress=show_progress)
    return q_emb, d_emb


def rank(q_emb: np.ndarray, d_emb: np.ndarray, doc_ids: Sequence[str], *, top_n: int,
         exclude: Sequence[set[str]] | None = None) -> list[list[tuple[str, float]]]:
    """Each query row's top ``top_n`` ``(doc_id, score)`` by inner product, ids in ``exclude[i]`` skipped."""
    extra = max((len(e) for e in exclude), default=0) if exclude is not None else 0
    scores, index = top_k_scores(q_emb, d_emb, top_n + extra)
    ranked: list[list[tuple[str, float]]] = []
    for i in range(q_emb.shape[0]):
        skip = exclude[i] if exclude is not None else ()
        row = [(doc_ids[j], float(s)) for j, s in zip(index[i], scores[i]) if doc_ids[j] not in skip]
        ranked.append(row[:top_n])
    return ranked


def mine_ranked(queries: Sequence[str], doc_ids: Sequence[str], doc_texts: Sequence[str], model: Any, *,
                top_n: int = 50, exclude: Sequence[set[str]] | None = None, batch_size: int = 64,
                query_prompt: str | None = None, doc_prompt: str | None = None,
                show_progress: bool = False) -> list[list[tuple[str, float]]]:
    """Rank ``doc_texts`` for every query with ``model``; each query's top ``top_n`` ``(doc_id, score)``.

    Scores are cosines (embeddings are L2-normalised). ``exclude[i]`` holds ids never returned for query ``i``
    (its positives, say); the list is still ``top_n`` long when the pool allows. Prompts default to the model's
    own ``query``/``document`` prompts.
    """
    if top_n < 1:
        raise ConfigError(f"top_n must be at least 1, got {top_n}.", fix="ask for 1 or more candidates.")
    if len(doc_ids) != len(doc_texts):
        raise ValueError("doc_ids and doc_texts differ in length")
    if exclude is not None and len(exclude) != len(queries):
        raise ValueError("exclude must hold one set per query")
    if not queries:
        return []
    if not doc_ids:
        return [[] for _ in queries]
    q_emb, d_emb = embed(model, queries, doc_texts, batch_size=batch_size, query_prompt=query_prompt,
                         doc_prompt=doc_prompt, show_progress=show_progress)
    return rank(q_emb, d_emb, doc_ids, top_n=top_n, exclude=exclude)


@dataclass
class MineStats:
    """What :func:`mine_collection` did, for the log and the CLI."""

    queries: int = 0
    pool: int = 0
    negatives: int = 0
    short: int = 0           # queries that got fewer negatives than asked
    filtered: int = 0        # candidates dropped by the positive-aware filter


def _mine_rows(in_path: str | Path, format: str | None, columns: Any) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """``(line or row number, record to write back, canonical row)`` of one collection, read by
    :func:`drmix.data.collections.load_collection_spec` (any layout). A drmix JSONL file keeps its records
    (every other field of a line is written back); other layouts are written as drmix records."""
    from drmix.data.collections import load_collection_spec
    from drmix.io.read import iter_jsonl

    cols = load_collection_spec(str(in_path), format=format, columns=columns)
    if len(cols) != 1:
        raise DataError(f"names {len(cols)} collections; mining reads one at a time.", path=in_path,
                        fix="pass one collection file (or mine a folder: one output file per collection).")
    (c,) = cols
    ds = c.dataset.select_columns(["query", "positives", "negatives"])
    canon = ds.to_list()
    p = Path(c.source)
    if c.layout == "drmix" and p.is_file() and p.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        records = list(iter_jsonl(p))
        if len(records) == len(canon):
            out = []
            for (line, obj), ex in zip(records, canon):
                obj = dict(obj)
                if "positive" not in obj and "positives" not in obj:
                    obj["positive"] = ex["positives"]
                out.append((line, obj, ex))
            return out
    return [(i + 1, {"query": ex["query"], "positive": ex["positives"], "negatives": ex["negatives"]}, ex)
            for i, ex in enumerate(canon)]


def mine_collection(in_path: str | Path, out_path: str | Path, model: Any, *, window: RankWindow | str = "1:30",
                    num_negatives: int = 1, sampling: Literal["top", "random"] = "top",
                    max_score_ratio: float | None = 0.95, keep_negatives: bool = False, seed: int = 42,
                    batch_size: int = 64, model_name: str | None = None,
                    query_prompt: str | None = None, format: str | None = None, columns: Any = None,
                    show_progress: bool = False) -> MineStats:
    """Mine hard negatives for one collection into the drmix JSONL file ``out_path`` (written atomically).

    ``in_path`` is anything :func:`drmix.data.collections.load_collections` reads as one collection (any layout,
    ``format``/``columns`` as ``--format``/``--columns``); a drmix JSONL file keeps every other field of its
    lines. The pool is every distinct positive and negative text of the collection. For each row the
    candidates are the pool ranked by ``model`` for the query (its own positives removed), cut to ``window``,
    then filtered by ``max_score_ratio`` (None: off); ``num_negatives`` are taken from the top of what remains
    (``sampling=top``) or drawn at random, seeded by ``seed`` and the line (row) number. ``keep_negatives``
    appends them to the row's existing negatives instead of replacing them. Teacher scores of the input
    (``positive_scores``/``negative_scores``) are replaced by the mining model's scores (inner products of the
    normalised embeddings) of the row's positives and new negatives, aligned with them: the teacher scores
    ``--loss margin_mse`` / ``--loss kl`` distil (:mod:`drmix.train.distill`). ``show_progress``: a bar in
    passages/s with the time left for the pool's and the queries' encoding passes.
    """
    from drmix.io.atomic import atomic_write_text

    in_path, window = Path(in_path), RankWindow.parse(window)
    if num_negatives < 1:
        raise ConfigError(f"num_negatives must be at least 1, got {num_negatives}.", fix="pass --num-negatives 1 or more.")
    if max_score_ratio is not None and not max_score_ratio > 0:
        raise ConfigError(f"max_score_ratio must be positive, got {max_score_ratio}.",
                          fix="pass a ratio such as 0.95, or turn the filter off.")
    rows = _mine_rows(in_path, format, columns)
    if not rows:
        raise DataError("collection is empty.", path=in_path, fix="add at least one example line.")
    pool_index: dict[str, int] = {}
    for _, _, ex in rows:
        for text in ex["positives"] + ex["negatives"]:
            pool_index.setdefault(text, len(pool_index))
    pool = list(pool_index)
    ids = [str(i) for i in range(len(pool))]
    queries = [ex["query"] for _, _, ex in rows]  # as written: a YAML instruction applies at training time
    pos_ids = [[pool_index[t] for t in ex["positives"]] for _, _, ex in rows]
    q_emb, d_emb = embed(model, queries, pool, batch_size=batch_size, query_prompt=query_prompt,
                         show_progress=show_progress)
    ranked = rank(q_emb, d_emb, ids, top_n=window.end, exclude=[{ids[j] for j in p} for p in pos_ids])
    # the positive-aware filter's reference: each query's lowest cosine to one of its own positives
    pos_scores = np.array([float((d_emb[p] @ q_emb[r]).min()) for r, p in enumerate(pos_ids)])
    stats = MineStats(queries=len(rows), pool=len(pool))
    out_lines = []
    for r, ((line, obj, ex), cands) in enumerate(zip(rows, ranked)):
        limit = None if max_score_ratio is None else max_score_ratio * pos_scores[r]
        chosen = _choose(window.take(cands), stats, limit=limit, sampling=sampling, num_negatives=num_negatives,
                         seed=[seed, line])
        stats.negatives += len(chosen)
        stats.short += len(chosen) < num_negatives
        mined = [pool[int(doc_id)] for doc_id, _ in chosen]
        new = dict(obj)
        for stale in ("negative", "positive_scores", "negative_scores"):
            new.pop(stale, None)
        new["negatives"] = (ex["negatives"] + [m for m in mined if m not in ex["negatives"]]) if keep_negatives else mined
        given = new.get("positives", new.get("positive"))
        if (given if isinstance(given, list) else [given]) != ex["positives"]:  # keep the scores aligned
            new.pop("positive", None)
            new["positives"] = ex["positives"]
        # the mining model's scores of every text of the row, aligned (what loss=margin_mse / kl distil)
        new["positive_scores"] = [round(float(d_emb[pool_index[t]] @ q_emb[r]), 6) for t in ex["positives"]]
        new["negative_scores"] = [round(float(d_emb[pool_index[t]] @ q_emb[r]), 6) for t in new["negatives"]]
        new["mined"] = {"model": model_name or _name(model), "ranks": str(window),
                        "scores": [round(s, 6) for _, s in chosen]}
        out_lines.append(json.dumps(new, ensure_ascii=False) + "\n")
    from drmix.retrieval.shards import writes_here

    if writes_here():  # under torchrun: rank 0 only
        atomic_write_text(out_path, "".join(out_lines))
    if stats.short:
        log.warning("%s: %d of %d queries got fewer than %d mined negatives (small pool, window %s or the filter).",
                    in_path, stats.short, stats.queries, num_negatives, window)
    return stats


def _choose(cands: list[tuple[str, float]], stats: MineStats, *, limit: float | None, sampling: str,
            num_negatives: int, seed: list[int]) -> list[tuple[str, float]]:
    """The mined negatives of one row from its ranked candidates: those scoring above ``limit`` dropped (counted
    in ``stats.filtered``), then the top ``num_negatives`` or, with ``sampling=random``, a seeded draw of them."""
    if limit is not None:
        kept = [c for c in cands if c[1] <= limit]
        stats.filtered += len(cands) - len(kept)
        cands = kept
    if sampling == "random" and len(cands) > num_negatives:
        rng = np.random.default_rng(seed)
        pick = sorted(rng.choice(len(cands), size=num_negatives, replace=False).tolist())
        return [cands[i] for i in pick]
    return cands[:num_negatives]


def _name(model: Any) -> str:
    from drmix.retrieval.index import model_name

    return model_name(model)


def top_up_negatives(queries: Sequence[str], positives: Sequence[Sequence[str]], negatives: Sequence[Sequence[str]],
                     model: Any, *, num_negatives: int, window: RankWindow | str = "1:30",
                     max_score_ratio: float | None = 0.95, batch_size: int = 64,
                     query_prompt: str | None = None) -> tuple[list[list[str]], MineStats]:
    """Give every example at least ``num_negatives`` hard negatives, mining the missing ones with ``model``.

    The examples are one collection's: the pool is every distinct positive and negative text of it (as
    :func:`mine_collection`). An example that already has ``num_negatives`` keeps its negatives as they are;
    one with fewer keeps them and gains the best-ranked candidates of ``window`` that are neither its positives
    nor its negatives and pass the positive-aware filter (``max_score_ratio`` x its lowest positive score),
    until it has ``num_negatives`` (fewer when the window runs out: counted in ``short``). Returns the new
    negative lists and the counts (``negatives`` = how many were mined). Only the examples that need negatives
    are embedded as queries; the pool is embedded once.
    """
    window = RankWindow.parse(window)
    if num_negatives < 1:
        raise ConfigError(f"num_negatives must be at least 1, got {num_negatives}.", fix="ask for 1 or more.")
    out = [list(n) for n in negatives]
    need = [i for i, n in enumerate(negatives) if len(n) < num_negatives]
    stats = MineStats(queries=len(need))
    if not need:
        return out, stats
    pool_index: dict[str, int] = {}
    for i in range(len(queries)):
        for text in list(positives[i]) + list(negatives[i]):
            pool_index.setdefault(text, len(pool_index))
    pool = list(pool_index)
    stats.pool = len(pool)
    ids = [str(j) for j in range(len(pool))]
    q_emb, d_emb = embed(model, [queries[i] for i in need], pool, batch_size=batch_size, query_prompt=query_prompt)
    known = [{ids[pool_index[t]] for t in list(positives[i]) + list(negatives[i])} for i in need]
    ranked = rank(q_emb, d_emb, ids, top_n=window.end, exclude=known)
    for r, i in enumerate(need):
        cands = window.take(ranked[r])
        if max_score_ratio is not None:
            lowest = float((d_emb[[pool_index[t] for t in positives[i]]] @ q_emb[r]).min())
            kept = [c for c in cands if c[1] <= max_score_ratio * lowest]
            stats.filtered += len(cands) - len(kept)
            cands = kept
        missing = num_negatives - len(out[i])
        mined = [pool[int(doc_id)] for doc_id, _ in cands[:missing]]
        out[i].extend(mined)
        stats.negatives += len(mined)
        stats.short += len(mined) < missing
    return out, stats
