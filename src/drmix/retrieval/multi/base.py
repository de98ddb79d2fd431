"""The interface every allocation policy implements."""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from drmix.retrieval.multi.types import Hit, QueryCandidates, Relevant

if TYPE_CHECKING:
    from drmix.retrieval.multi.types import CandidateSet


class AllocationPolicy(abc.ABC):
    """Turns the per-corpus candidates of one query into a merged top-k list of :class:`Hit`.

    ``name`` and ``needs_relevance`` are set by :func:`drmix.retrieval.multi.registry.register_policy`;
    ``needs_reference`` is true for a policy that learns label-free statistics from other queries' scores
    in :meth:`fit`. A policy's dataclass fields are its typed parameters (what ``name:args`` parses into).
    """

    name = "policy"
    needs_relevance = False
    needs_reference = False

    def fit(self, reference: "CandidateSet", k: int) -> "AllocationPolicy":
        """Learn label-free statistics from a reference candidate set (only policies with ``needs_reference``)."""
        return self

    @abc.abstractmethod
    def allocate(self, cands: QueryCandidates, k: int, relevant: Relevant | None = None) -> list[Hit]:
        """The merged top-``k`` for one query (``relevant``: qrels of the query, for the oracle only)."""

    @property
    def spec(self) -> str:
        """The string that :func:`drmix.retrieval.multi.parse_policy` turns back into this policy."""
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec}>"
