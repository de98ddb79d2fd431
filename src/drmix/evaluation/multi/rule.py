"""The dev rule of the policy sweep: each tunable family is tuned on a validation split disjoint from the
evaluated one (overlap is an error), reading dev labels only.

Families: each policy registered ``tunable`` (``fixed`` fractions, ``confidence`` thresholds) is one family; the
policies registered ``label_free`` (the ``zscore``/``calibrated``/``coverage`` variants) form the
``label-free`` family. Per family the spec with the best dev ``pc_recall@k`` is chosen (ties: higher dev
``pc_mrr@k``, then the first listed).
"""
from __future__ import annotations

from collections.abc import Sequence

from drmix.errors import ConfigError
from drmix.evaluation.multi.metrics import MultiQrels, evaluate_multi
from drmix.retrieval.multi import AllocationPolicy, CandidateSet, OraclePolicy, allocate_all, parse_policy, policy_info


LABEL_FREE_ROW = "label-free (dev-chosen)"


def family_of(spec: str) -> str:
    """The tuning family of a spec: ``label-free`` for a policy registered ``label_free``, else its name
    (a ``tunable`` policy's specs form one family, tuned on dev)."""
    info = policy_info(parse_policy(spec))
    return "label-free" if info.label_free else info.name


def _tuned_family(family: str) -> bool:
    return family == "label-free" or policy_info(family).tunable


def policy_for(spec: str | AllocationPolicy, mode: str) -> AllocationPolicy:
    """The policy of a spec, with the oracle optimising the credit mode being evaluated."""
    policy = parse_policy(spec)
    if isinstance(policy, OraclePolicy) and policy.mode != mode:
        return OraclePolicy(mode=mode)
    return policy


def tune_on_dev(cset_dev: CandidateSet, qrels_dev: MultiQrels, specs: Sequence[str], k: int,
                mode: str = "any") -> dict[str, str]:
    """The dev rule: per family, the spec with the best dev ``pc_recall@k``; ties: higher dev pc_mrr@k, then
    the first listed. Families: each policy registered ``tunable`` (``fixed``, ``confidence``) and
    ``label-free`` (the policies registered ``label_free``: ``zscore``/``calibrated`` variants, fitted on the
    dev queries' scores). Only dev labels are read."""
    best: dict[str, tuple[float, float, int, str]] = {}
    for i, spec in enumerate(specs):
        family = family_of(spec)
        if not _tuned_family(family):
            continue
        m = evaluate_multi(qrels_dev, allocate_all(cset_dev, spec, k, reference=cset_dev), k, mode=mode,
                           standard=())
        key = (round(m[f"pc_recall@{k}"], 12), round(m[f"pc_mrr@{k}"], 12), -i, spec)
        if family not in best or key > best[family]:
            best[family] = key
    return {fam: v[3] for fam, v in best.items()}


def check_disjoint(cset: CandidateSet, cset_dev: CandidateSet) -> None:
    """Refuse to tune on the split being evaluated (any shared query id)."""
    shared = set(cset.by_query) & set(cset_dev.by_query)
    if shared:
        raise ConfigError(f"the tuning split shares {len(shared)} of its queries with the evaluated split "
                          f"(e.g. {sorted(shared)[0]!r}); choices made on it would be chosen on the test labels.",
                          fix="tune on another split (--tune-split dev --split test) or pass --tune-split none.")
