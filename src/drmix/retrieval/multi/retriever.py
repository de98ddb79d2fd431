"""The retriever: one dense index per named corpus, candidates fetched once, a policy applied per query.

``drmix search --corpus NAME=DIR ...`` runs :func:`multi_search`. A corpus is a BEIR directory (encoded
on the fly into an exact inner-product index) or a saved index of any backend (an index folder, a faiss-disk
folder, a Milvus collection ``PATH.db#NAME`` or ``http://HOST:19530#NAME``); an empty directory or an empty
``corpus.jsonl`` is an empty corpus that contributes no candidates. A seeded random sample of each corpus's
vectors (its *background*) gives ``zscore`` and ``calibrated`` the query's score statistics there.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import ConfigError, DataError
from drmix.retrieval.backends.base import is_location
from drmix.retrieval.multi.apply import allocate_all, refuse_labelled
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.registry import parse_policy
from drmix.retrieval.multi.types import CandidateSet, CorpusCandidates, Hit

log = logging.getLogger(__name__)


def parse_corpus_args(values: Sequence[str]) -> dict[str, Path | str]:
    """Parse ``NAME=DIR`` options (order kept; the first is the seen corpus for fixed/confidence). DIR is a BEIR
    directory, an index folder, or an index of another backend: a location that a backend writing to URIs claims
    (a Milvus collection ``PATH.db#COLLECTION``, ``http://HOST:19530#COLLECTION``) is kept as the string it is."""

    out: dict[str, Path | str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise ConfigError(f"--corpus {value!r} is not NAME=DIR.",
                              fix="write --corpus walmart=data/wa/walmart (one per corpus, the seen corpus first).")
        if "/" in name or name in out:
            raise ConfigError(f"--corpus name {name!r} is {'repeated' if name in out else 'not allowed (no /)'}.",
                              fix="give each corpus a distinct name without '/'.")
        if is_location(path):
            out[name] = path
            continue
        p = Path(path).expanduser()
        if not p.exists():
            from drmix.retrieval.backends import BACKENDS

            elsewhere = "".join(f", or {s.location_help}" for s in BACKENDS if s.target == "uri" and s.location_help)
            raise DataError("corpus directory not found.", path=p,
                            fix=f"pass a BEIR directory, a saved index{elsewhere}.")
        out[name] = p
    if not out:
        raise ConfigError("no corpus given.", fix="pass --corpus NAME=DIR at least once.")
    return out


def background_stats(query_emb: np.ndarray, sample_emb: np.ndarray) -> np.ndarray:
    """``[n_queries, 2]`` mean and std of each query's inner products with a corpus sample."""
    if sample_emb.size == 0:
        return np.zeros((len(query_emb), 2), dtype=np.float64)
    s = query_emb.astype(np.float32) @ sample_emb.astype(np.float32).T
    return np.stack([s.mean(axis=1), s.std(axis=1)], axis=1).astype(np.float64)


def sample_view(query_emb: np.ndarray, sample_emb: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query: ``(mean, std)`` of its inner products with a corpus sample, and its top-``depth`` of them
    (sorted descending): the query's view of the corpus in a centralised sample index."""
    s = query_emb.astype(np.float32) @ sample_emb.astype(np.float32).T
    stats = np.stack([s.mean(axis=1), s.std(axis=1)], axis=1).astype(np.float64)
    d = min(depth, s.shape[1])
    top = -np.sort(-s, axis=1)[:, :d].astype(np.float64)
    return stats, top


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """Seeded sorted sample of ``min(n, size)`` row numbers."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=min(n, size), replace=False)) if n else np.zeros(0, dtype=int)


@dataclass
class MultiCorpusRetriever:
    """One dense index per named corpus plus allocation policies over the merged top-k budget.

    ``indexes`` maps corpus name -> an index of any backend (:class:`drmix.retrieval.backends.base.Index`) in corpus order (the first is
    the seen corpus); ``backgrounds`` optionally maps corpus name -> embeddings of a seeded random sample of
    that corpus, from which ``zscore`` takes its per-query statistics and ``redde``/``crcs`` the query's
    top ``sample_depth`` sample scores (its view of the centralised sample index).
    """

    model: Any
    indexes: dict[str, Any]
    backgrounds: dict[str, np.ndarray] = field(default_factory=dict)
    depth: int = 100
    batch_size: int = 64
    prompt: str | None = None
    sample_depth: int = 256

    @classmethod
    def from_dirs(cls, model: Any, dirs: Mapping[str, str | Path], *, depth: int = 100, batch_size: int = 64,
                  background_size: int = 1000, seed: int = 42, show_progress: bool = False,
                  max_length: int | None = None) -> "MultiCorpusRetriever":
        """Open each corpus: a saved index directory is loaded, a BEIR directory is encoded and indexed."""
        indexes: dict[str, Any] = {}
        backgrounds: dict[str, np.ndarray] = {}
        for name, d in dirs.items():
            idx, sample = _open_corpus(model, d if isinstance(d, str) and is_location(d) else Path(d),
                                       batch_size=batch_size, background_size=background_size, seed=seed,
                                       show_progress=show_progress, max_length=max_length)
            indexes[name] = idx
            if sample is not None:
                backgrounds[name] = sample
            log.info("corpus %s: %d passages", name, len(idx))
        return cls(model, indexes, backgrounds, depth=depth, batch_size=batch_size)

    @property
    def corpora(self) -> list[str]:
        return list(self.indexes)

    def encode_queries(self, queries: Mapping[str, str], *, show_progress: bool = False) -> np.ndarray:
        from drmix.model.encoder import query_prompt
        from drmix.retrieval.encode import encode_texts, model_normalizes

        prompt = self.prompt if self.prompt is not None else (query_prompt(self.model) or "")
        return encode_texts(self.model, list(queries.values()), batch_size=self.batch_size, prompt=prompt,
                            show_progress=show_progress, normalize=model_normalizes(self.model))

    def candidates(self, queries: Mapping[str, str], *, k: int = 10, show_progress: bool = False) -> CandidateSet:
        """Top ``max(depth, k)`` candidates of every corpus for every query (computed once, reused by policies)."""
        qids = list(queries)
        emb = self.encode_queries(queries, show_progress=show_progress)
        depth = max(self.depth, k)
        cset = CandidateSet(self.corpora, {q: {} for q in qids})
        for name, idx in self.indexes.items():
            n = len(idx)
            if n == 0 or not qids:
                for q in qids:
                    cset.by_query[q][name] = CorpusCandidates([], np.zeros(0))
                continue
            scores, ids = idx.search(emb, min(depth, n))
            sample = self.backgrounds.get(name)
            bg = top = None
            if sample is not None and sample.size:
                bg, top = sample_view(emb, sample, self.sample_depth)
            for i, q in enumerate(qids):  # approximate indexes may return fewer ids (trailing -inf scores)
                cset.by_query[q][name] = CorpusCandidates(
                    list(ids[i]), np.asarray(scores[i][:len(ids[i])], dtype=np.float64),
                    None if bg is None else (float(bg[i, 0]), float(bg[i, 1])),
                    None if top is None else top[i], n, None if top is None else len(sample))
        return cset

    def search(self, queries: Mapping[str, str], k: int = 10, policy: str | AllocationPolicy = "equal", *,
               reference_queries: Mapping[str, str] | None = None,
               show_progress: bool = False) -> dict[str, list[Hit]]:
        """Merged top-k per query under an allocation policy.

        ``reference_queries`` (texts only, no labels) calibrate ``calibrated``; by default the queries
        searched are their own reference.
        """
        policy = parse_policy(policy)
        refuse_labelled(policy)
        reference = None
        if policy.needs_reference and reference_queries:
            reference = self.candidates(reference_queries, k=k, show_progress=show_progress)
        return allocate_all(self.candidates(queries, k=k, show_progress=show_progress), policy, k,
                            reference=reference)


@dataclass
class EmptyIndex:
    """Stands in for the index of a corpus with no passages: it contributes no candidates."""

    path: Path
    ids: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return 0

    def doc(self, doc_id: str) -> None:
        return None


def _is_empty_corpus(d: Path) -> bool:
    """A directory with no entries, or whose ``corpus.jsonl`` holds no record (blank lines only)."""
    corpus = d / "corpus.jsonl"
    if corpus.is_file():
        with corpus.open("rb") as fh:
            return not any(line.strip() for line in fh)
    return d.is_dir() and not any(d.iterdir())


def _open_corpus(model: Any, d: Path | str, *, batch_size: int, background_size: int, seed: int,
                 show_progress: bool, max_length: int | None) -> tuple[Any, np.ndarray | None]:
    """A BEIR directory is encoded into a flat index; any other directory must be a saved index.

    An empty directory, or an empty ``corpus.jsonl``, is an empty corpus (a private corpus may have no
    passages yet): it gets an :class:`EmptyIndex` and contributes nothing to a multi-corpus search.
    """
    from drmix.retrieval.backends import open_index
    from drmix.retrieval.index import index_corpus

    if isinstance(d, str):  # an index at a URI (a Milvus collection)
        idx = open_index(d, model)
        return idx, (_reconstruct_sample(idx, background_size, seed) if background_size > 0 else None)
    if _is_empty_corpus(d):
        log.warning("corpus %s has no passages; it contributes nothing", d)
        return EmptyIndex(d), None
    if (d / "corpus.jsonl").exists():
        from drmix.data.beir import read_corpus

        idx = index_corpus(model, read_corpus(d / "corpus.jsonl"), batch_size=batch_size, max_length=max_length,
                           show_progress=show_progress, metadata={"corpus": str(d)})
    else:
        idx = open_index(d, model)
    sample = _reconstruct_sample(idx, background_size, seed) if background_size > 0 else None
    return idx, sample


def _reconstruct_sample(idx: Any, size: int, seed: int) -> np.ndarray | None:
    """Embeddings of a seeded sample of an index's rows (None when the index cannot give them back: zscore
    then uses candidate statistics). Every backend's index has ``sample_vectors``."""
    get = getattr(idx, "sample_vectors", None)
    sample = get(size, seed) if get is not None else None
    if sample is None:
        log.info("index cannot reconstruct vectors; zscore falls back to candidate statistics")
    return sample


def multi_search(model: Any, corpus_dirs: Mapping[str, str | Path], queries: Mapping[str, str], *, k: int = 10,
                 allocation: str | AllocationPolicy = "equal", depth: int = 100, batch_size: int = 64,
                 with_text: bool = True, show_progress: bool = False) -> list[dict[str, Any]]:
    """Search several corpora with one top-k budget (what ``drmix search --corpus NAME=DIR ...`` runs).

    ``corpus_dirs`` maps names to BEIR directories (encoded on the fly) or saved index directories, in
    corpus order (the first is the seen corpus). Returns one row per query, shaped like the single-corpus
    search: ``{"query_id", "query", "hits": [{"rank", "corpus", "doc_id", "score", "text"?}]}``.
    """
    from drmix.data.beir import doc_text

    policy = parse_policy(allocation)
    refuse_labelled(policy)  # before encoding anything
    retriever = MultiCorpusRetriever.from_dirs(model, corpus_dirs, depth=depth, batch_size=batch_size,
                                               show_progress=show_progress)
    results = retriever.search(queries, k, policy, show_progress=show_progress)
    rows = []
    for qid, hits in results.items():
        out_hits = []
        for rank, h in enumerate(hits, start=1):
            hit: dict[str, Any] = {"rank": rank, "corpus": h.corpus, "doc_id": h.doc_id, "score": round(h.score, 6)}
            doc = retriever.indexes[h.corpus].doc(h.doc_id) if with_text else None
            if doc is not None:
                hit["text"] = doc_text(doc)
            out_hits.append(hit)
        rows.append({"query_id": qid, "query": queries[qid], "hits": out_hits})
    return rows
