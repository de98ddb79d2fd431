"""The policy sweep (the paper's Table 3): every policy on candidates fetched once, the dev-tuned rows of
:mod:`drmix.evaluation.multi.rule`, and the recall-vs-k curves."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from drmix.evaluation.multi.metrics import MultiQrels, evaluate_multi
from drmix.evaluation.multi.rule import LABEL_FREE_ROW, check_disjoint, policy_for, tune_on_dev
from drmix.retrieval.multi import CandidateSet, allocate_all


@dataclass
class SweepResult:
    """Metrics per policy row for one setting (one benchmark, one known corpus)."""

    setting: str
    k: int
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)       # row label -> metrics at k
    curves: dict[str, dict[int, float]] = field(default_factory=dict)   # row label -> {k: pc_recall@k}
    chosen: dict[str, str] = field(default_factory=dict)                # family -> spec chosen on dev

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting, "k": self.k, "rows": self.rows,
                "curves": {r: {str(kk): v for kk, v in c.items()} for r, c in self.curves.items()},
                "chosen_on_dev": self.chosen}


def sweep_policies(cset: CandidateSet, qrels: MultiQrels, specs: Sequence[str], k: int, *, setting: str = "",
                   ks: Sequence[int] = (), mode: str = "any", cset_dev: CandidateSet | None = None,
                   qrels_dev: MultiQrels | None = None, standard: Sequence[str] | None = None,
                   curves_for: Sequence[str] | None = None, per_query: bool = False) -> SweepResult:
    """Evaluate each policy at ``k`` (and ``pc_recall`` at each of ``ks`` for the plot).

    ``curves_for`` limits the recall-vs-k curves to these row labels (default: every row); ``per_query``
    keeps each row's per-query ``pc_recall``/``pc_mrr`` under ``rows[label]["per_query"]``.

    With a dev candidate set (whose queries must not overlap the evaluated ones), each tunable family gets
    one more row applying the spec chosen on dev by :func:`tune_on_dev` (recorded in ``chosen``): ``fixed
    (dev-tuned)``, ``confidence (dev-tuned)`` and ``label-free (dev-chosen)``, so those test numbers never
    depend on test labels. ``calibrated`` is fitted on the dev queries' scores when a dev set is given, else
    on the evaluated queries' own scores (no labels either way). ``oracle`` optimises the credit ``mode``.
    """
    res = SweepResult(setting, k)
    rows: list[tuple[str, str]] = [(s, s) for s in specs]
    if cset_dev is not None and qrels_dev is not None:
        check_disjoint(cset, cset_dev)
        res.chosen = tune_on_dev(cset_dev, qrels_dev, specs, k, mode)
        rows += [(LABEL_FREE_ROW if fam == "label-free" else f"{fam} (dev-tuned)", s) for fam, s in res.chosen.items()]
    relevant = qrels
    for label, spec in rows:
        policy = policy_for(spec, mode)
        m = evaluate_multi(qrels, allocate_all(cset, policy, k, relevant, reference=cset_dev), k, mode=mode,
                           standard=standard, per_query=per_query)
        m["spec"] = policy.spec
        res.rows[label] = m
        curve = {k: m[f"pc_recall@{k}"]}
        for kk in sorted(set(ks) - {k}) if curves_for is None or label in curves_for else ():
            r = allocate_all(cset, policy, kk, relevant, reference=cset_dev)
            curve[kk] = evaluate_multi(qrels, r, kk, mode=mode, standard=())[f"pc_recall@{kk}"]
        res.curves[label] = dict(sorted(curve.items()))
    return res
