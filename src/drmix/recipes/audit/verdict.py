"""The verdict on every collection, the weights the audit recommends, and the learned methods it refuses:
pure functions of the values (:mod:`~drmix.recipes.audit.values`) and the signals' votes
(:mod:`~drmix.recipes.audit.agreement`).

The rule, stated before any result was seen and never fitted to a test set:

* **drop** -- the whole 95% interval of the leave-one-out value lies below 0: the runs without the collection
  score higher on the dev sets than the runs with it, beyond the spread of the queries;
* **down-weight** -- not dropped, the value's point estimate is below 0 (removing it helped, but within noise),
  and more than half of the cheap signals that agree with leave-one-out in this audit (Kendall's tau > 0) mark
  it harmful (below their zero point): two independent kinds of evidence lean the same way;
* **keep** -- everything else: a collection that helps, or whose effect is indistinguishable from none.

The recommended weights start from the uniform mixture the reference runs trained on (every collection
``1/k``), multiply a down-weighted collection's share by ``down_weight`` (0.5) and a dropped one's by 0, and
renormalise. When every collection is dropped the uniform weights are kept and the report says so (no mixture
of these collections helped the dev sets; check the dev sets and the budget).

A **learned method is refused** for this mixture when its weights put more than the uniform share ``1/k`` on a
collection the audit drops or down-weights: training with them would sample more of what the reference says
hurts (GroupDRO, which up-weights whatever keeps a high loss, does this with a noisy set by design).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from drmix.recipes.audit.values import Value

KEEP, DOWN_WEIGHT, DROP = "keep", "down-weight", "drop"
VERDICTS = (KEEP, DOWN_WEIGHT, DROP)


def verdict(value: Value, harmful_votes: Sequence[str], voters: Sequence[str]) -> str:
    """The verdict on one collection: ``value`` its leave-one-out value, ``harmful_votes`` the agreeing signals
    that mark it harmful, ``voters`` every agreeing signal (module docstring)."""
    if value.high < 0:
        return DROP
    if value.mean < 0 and voters and len(harmful_votes) > len(voters) / 2:
        return DOWN_WEIGHT
    return KEEP


def recommend(verdicts: Mapping[str, str], *, down_weight: float = 0.5) -> tuple[dict[str, float], bool]:
    """``(weights, all_dropped)``: the recommended weights (summing to 1, in the order of ``verdicts``) and
    whether every collection was dropped (then the weights are uniform)."""
    factor = {KEEP: 1.0, DOWN_WEIGHT: down_weight, DROP: 0.0}
    raw = {n: factor[v] for n, v in verdicts.items()}
    total = sum(raw.values())
    if total <= 0:
        return {n: 1.0 / len(raw) for n in raw}, True
    return {n: w / total for n, w in raw.items()}, False


def refused(learned: Mapping[str, Mapping[str, float]], verdicts: Mapping[str, str]) -> dict[str, list[str]]:
    """``{method: [collections]}``: for each learned method (its weights by collection) the dropped or
    down-weighted collections it weights above the uniform share; methods with none are left out."""
    out = {}
    for method, weights in learned.items():
        k = len(weights)
        bad = [n for n, w in weights.items() if verdicts.get(n, KEEP) != KEEP and w > 1.0 / k + 1e-12]
        if bad:
            out[method] = bad
    return out
