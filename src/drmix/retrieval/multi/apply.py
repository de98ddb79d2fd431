"""Applying one allocation policy to every query of a candidate set."""
from __future__ import annotations

from collections.abc import Mapping

from drmix.errors import ConfigError
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.registry import parse_policy
from drmix.retrieval.multi.types import CandidateSet, Hit, Relevant

NEEDS_LABELS_FIX = "use oracle only in evaluation (drmix multicorpus sweep)."


def refuse_labelled(policy: AllocationPolicy) -> None:
    """Refuse a policy that needs relevance judgements where none exist (search)."""
    if policy.needs_relevance:
        raise ConfigError(f"the {policy.name} policy needs relevance judgements (qrels).", fix=NEEDS_LABELS_FIX)


def allocate_all(cset: CandidateSet, policy: AllocationPolicy | str, k: int,
                 relevant: Mapping[str, Relevant] | None = None,
                 reference: CandidateSet | None = None) -> dict[str, list[Hit]]:
    """Apply a policy to every query of a candidate set; ``relevant[qid][corpus][doc]`` for the oracle.

    A policy that learns from unlabelled queries (``calibrated``) is fitted on ``reference`` (candidates of
    other queries, e.g. the tuning split's), or on ``cset`` itself when none is given; labels are never used.
    Only a policy registered with ``needs_labels`` is given the queries' judgements.
    """
    policy = parse_policy(policy)
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}.", fix="pass --k 10 or another positive number.")
    if policy.needs_reference:
        policy.fit(reference if reference is not None else cset, k)
    out: dict[str, list[Hit]] = {}
    for qid, cands in cset.by_query.items():
        rel = None
        if policy.needs_relevance:
            if relevant is None:
                refuse_labelled(policy)
            rel = relevant.get(qid, {})
        out[qid] = policy.allocate(cands, k, rel)
    return out
