"""The data a multi-corpus search passes around: hits, one corpus's candidates, a set of queries' candidates."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from drmix.errors import ConfigError


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its corpus, its id in that corpus, and its raw similarity score."""

    corpus: str
    doc_id: str
    score: float


@dataclass
class CorpusCandidates:
    """The top candidates of one corpus for one query, sorted by score (descending).

    ``background`` is ``(mean, std)`` of the query's scores over a random sample of the corpus, when
    known (used by ``zscore``). ``sample_scores`` are the query's highest scores over that sample (sorted
    descending), ``size`` the corpus's passage count and ``sample_size`` the sample's: together they are
    the query's view of a *centralised sample index* (used by ``redde`` and ``crcs``). Unsorted input is
    stable-sorted on construction.
    """

    ids: list[str]
    scores: np.ndarray
    background: tuple[float, float] | None = None
    sample_scores: np.ndarray | None = None
    size: int | None = None
    sample_size: int | None = None

    def __post_init__(self) -> None:
        self.ids = [str(i) for i in self.ids]
        self.scores = np.asarray(self.scores, dtype=np.float64).reshape(-1)
        if len(self.ids) != len(self.scores):
            raise ValueError(f"{len(self.ids)} ids but {len(self.scores)} scores")
        if len(self.scores) > 1 and np.any(np.diff(self.scores) > 0):
            order = np.argsort(-self.scores, kind="stable")
            self.ids = [self.ids[i] for i in order]
            self.scores = self.scores[order]
        if self.sample_scores is not None:
            self.sample_scores = -np.sort(-np.asarray(self.sample_scores, dtype=np.float64).reshape(-1))

    def __len__(self) -> int:
        return len(self.ids)


QueryCandidates = Mapping[str, CorpusCandidates]   # corpus name -> candidates, in corpus order
Relevant = Mapping[str, Mapping[str, int]]          # corpus name -> {doc id: grade}


def candidates_from_lists(lists: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, CorpusCandidates]:
    """Build a query's candidates from ``{corpus: [(doc_id, score), ...]}`` (a convenience for tests/users)."""
    return {c: CorpusCandidates([d for d, _ in pairs], np.array([s for _, s in pairs], dtype=np.float64))
            for c, pairs in lists.items()}


@dataclass
class CandidateSet:
    """Per-corpus candidates for a set of queries: ``by_query[qid][corpus] -> CorpusCandidates``."""

    corpora: list[str]
    by_query: dict[str, dict[str, CorpusCandidates]] = field(default_factory=dict)

    def reorder(self, first: str) -> "CandidateSet":
        """The same candidates with ``first`` as the first (seen) corpus."""
        if first not in self.corpora:
            raise ConfigError(f"unknown corpus {first!r}; corpora: {', '.join(self.corpora)}.",
                              fix="name one of the corpora given with --corpus.")
        order = [first] + [c for c in self.corpora if c != first]
        return CandidateSet(order, {q: {c: cs[c] for c in order} for q, cs in self.by_query.items()})

    def subset(self, qids: Iterable[str]) -> "CandidateSet":
        return CandidateSet(self.corpora, {q: self.by_query[q] for q in qids if q in self.by_query})
