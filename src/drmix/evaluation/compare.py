"""Compare evaluated models against a baseline: per-dataset and average deltas, paired tests, intervals.

Inputs are the per-query scores that ``drmix eval`` writes into ``eval.json`` (``per_query``) and that
``drmix pipeline tdro`` keeps in each model's ``eval-<split>.json``. An ``eval.json`` of ``drmix eval --mteb``
holds per-query scores for MTEB's retrieval tasks only: its other tasks (STS, classification ...) are left out
with a warning naming the reason, and an evaluation with none at all -- or one of MTEB's own result files,
which hold only means -- is refused with that reason. For every model, dataset and metric:

* ``delta`` = mean over the dataset's queries of ``s_model(q) - s_baseline(q)``. Both evaluations must cover
  the same queries: when they do not (a ``--max-queries`` sample, a different split), :func:`compare` refuses
  and names the counts, unless ``intersect=True`` (``--intersect``), which compares the shared queries and
  reports for each row the queries evaluated for the baseline, for the model, shared, and dropped;
* a 95% interval of that mean from Student's t over the paired differences
  (``mean ± t_{0.975, n-1} · sd / sqrt(n)``);
* two paired tests over queries: Student's paired t-test and Fisher's randomisation (sign-flip) test,
  two-sided, through scipy's ``stats.permutation_test`` (exact when ``2^n <= permutations``, otherwise
  seeded random sign patterns); the formulas are in :mod:`drmix.evaluation.significance`.

The **average** row is the unweighted mean over datasets (each dataset counts once, as in BEIR's tables):
its delta is ``sum_d mean_q(delta_dq) / D``, and the tests run on the per-query differences weighted by
``1 / (D n_d)`` (the randomisation test flips them; the t-test and interval use ``N · w_q · d_q``, whose
mean is the same delta).
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import DataError
from drmix.evaluation.significance import paired_summary, randomization_test, t_test

log = logging.getLogger(__name__)

AVERAGE = "average"
PerQuery = dict[str, dict[str, dict[str, float]]]      # dataset -> query id -> metric -> value


@dataclass
class Scored:
    """Per-query scores of one model (as loaded from an eval file)."""

    label: str
    per_query: PerQuery
    source: str = ""
    unpaired: dict[str, str] = field(default_factory=dict)  # dataset -> why it has no per-query scores (MTEB)


@dataclass
class Delta:
    """One model vs the baseline on one dataset (or the average)."""

    dataset: str
    baseline: float
    value: float
    delta: float
    low: float
    high: float
    t_p: float
    fisher_p: float
    queries: int               # compared: evaluated for both
    baseline_queries: int = 0  # evaluated for the baseline
    model_queries: int = 0     # evaluated for the model
    dropped: int = 0           # evaluated for only one of them (left out by --intersect)


@dataclass
class Comparison:
    metric: str
    baseline: str
    rows: dict[str, list[Delta]] = field(default_factory=dict)     # model label -> per dataset (+ average)
    alpha: float = 0.05

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "baseline": self.baseline, "alpha": self.alpha,
                "models": {label: [d.__dict__ for d in rows] for label, rows in self.rows.items()}}

    @property
    def dropped(self) -> int:
        """Queries left out because only one evaluation scored them (non-zero only with ``intersect``)."""
        return sum(d.dropped for rows in self.rows.values() for d in rows if d.dataset != AVERAGE)

    def to_markdown(self) -> str:
        from drmix.markdown import md_cell, md_code

        counts = self.dropped > 0
        lines = [f"{md_cell(self.metric)}, delta vs {md_code(self.baseline)} with 95% interval; p: paired t-test / Fisher "
                 f"randomisation over queries; * = both p < {self.alpha}."
                 + (f" The evaluations cover different queries (--intersect): only the shared ones are compared, "
                    f"{self.dropped} dropped; each row counts the queries compared, evaluated for the baseline, "
                    "for the model, and dropped." if counts else ""), "",
                 "| model | dataset | queries | " + ("baseline q. | model q. | dropped | " if counts else "")
                 + "baseline | model | delta | 95% interval | p (t) | p (rand.) |",
                 "|---|---|---:|" + ("---:|---:|---:|" if counts else "") + "---:|---:|---:|---|---:|---:|"]
        for label, rows in self.rows.items():
            for d in rows:
                star = "*" if self.significant(d) else ""
                extra = f"{d.baseline_queries} | {d.model_queries} | {d.dropped} | " if counts else ""
                lines.append(f"| {md_cell(label)} | {md_cell(d.dataset)} | {d.queries} | {extra}{d.baseline:.4f} | {d.value:.4f} | "
                             f"{d.delta:+.4f}{star} | [{d.low:+.4f}, {d.high:+.4f}] | {_p(d.t_p)} | {_p(d.fisher_p)} |")
        return "\n".join(lines) + "\n"

    def significant(self, d: Delta) -> bool:
        return d.t_p < self.alpha and d.fisher_p < self.alpha

    def average(self, label: str) -> Delta:
        rows = self.rows[label]
        return next((d for d in rows if d.dataset == AVERAGE), rows[-1])


def _p(p: float) -> str:
    return "" if not math.isfinite(p) else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")


def query_sets(base: dict[str, Any], model: dict[str, Any], dataset: str, labels: tuple[str, str] = ("baseline",
               "model"), *, intersect: bool = False) -> list[str]:
    """The query ids to compare on ``dataset``: all of them when both evaluations scored the same queries;
    the shared ones with ``intersect``; otherwise a :class:`DataError` naming the counts."""
    shared = sorted(set(base) & set(model))
    only_base, only_model = len(base) - len(shared), len(model) - len(shared)
    if not shared:
        raise DataError(f"no query of '{dataset}' was scored for both models ({labels[0]}: {len(base)}, "
                        f"{labels[1]}: {len(model)}).", fix="compare evaluations of the same dataset and split.")
    if (only_base or only_model) and not intersect:
        raise DataError(f"'{labels[1]}' and '{labels[0]}' were evaluated on different queries of '{dataset}': "
                        f"{len(model)} and {len(base)} queries, {len(shared)} shared, {only_base + only_model} "
                        f"evaluated for only one ({only_base} only for {labels[0]}, {only_model} only for "
                        f"{labels[1]}).",
                        fix="evaluate both on the same queries (same split and --max-queries), or pass "
                            f"--intersect to compare the {len(shared)} shared queries (the table then shows the "
                            "counts).")
    return shared


def paired(base: dict[str, dict[str, float]], model: dict[str, dict[str, float]], metric: str,
           dataset: str, *, permutations: int, seed: int, intersect: bool = False,
           labels: tuple[str, str] = ("baseline", "model")) -> tuple[Delta, np.ndarray, np.ndarray]:
    qids = query_sets(base, model, dataset, labels, intersect=intersect)
    a = np.array([base[q][metric] for q in qids])
    b = np.array([model[q][metric] for q in qids])
    d = b - a
    t_p, low, high = t_test(d)
    return (Delta(dataset, float(a.mean()), float(b.mean()), float(d.mean()), low, high, t_p,
                  randomization_test(d, permutations=permutations, seed=seed), len(qids),
                  len(base), len(model), len(base) + len(model) - 2 * len(qids)), a, b)


def paired_test(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, float]:
    """Paired t-test over every query of every dataset (``b - a``, ``{dataset: {query: score}}``, the queries both
    scored): ``{n, mean, low, high, p}`` (:func:`drmix.evaluation.significance.paired_summary`)."""
    return paired_summary([b[d][q] - a[d][q] for d in a for q in a[d] if q in b.get(d, {})])


def compare(scored: list[Scored], *, baseline: int | str = 0, metric: str = "ndcg@10", permutations: int = 10000,
            seed: int = 0, alpha: float = 0.05, intersect: bool = False) -> Comparison:
    """Every model of ``scored`` against the baseline (an index or a label) on the datasets they share.

    Per dataset both must have scored the same queries, or with ``intersect`` only the shared queries are
    compared and each row counts what was dropped (see :func:`query_sets`)."""
    labels = [s.label for s in scored]
    if isinstance(baseline, str):
        if baseline not in labels:
            raise DataError(f"baseline '{baseline}' is not among the models ({', '.join(labels)}).",
                            fix="pass --baseline with one of those labels or an index.")
        baseline = labels.index(baseline)
    if not 0 <= baseline < len(scored):
        raise DataError(f"baseline index {baseline} is out of range (0..{len(scored) - 1}).",
                        fix="pass --baseline with a valid index or label.")
    base = scored[baseline]
    out = Comparison(metric=metric, baseline=base.label, alpha=alpha)
    for s in scored:
        if s is base:
            continue
        datasets = [d for d in base.per_query if d in s.per_query]
        unpaired = {d: why for d, why in {**s.unpaired, **base.unpaired}.items()
                    if (d in base.per_query or d in base.unpaired) and (d in s.per_query or d in s.unpaired)
                    and d not in datasets}
        if not datasets:
            if unpaired:
                raise DataError(f"'{s.label}' and '{base.label}' share no dataset with per-query scores: "
                                + "; ".join(f"{d}: {why}" for d, why in unpaired.items()) + ".",
                                fix="the paired tests need per-query scores: compare MTEB retrieval tasks (drmix "
                                    "eval --mteb records theirs), or compare the main scores of these tasks "
                                    "without a test.")
            raise DataError(f"'{s.label}' and '{base.label}' share no dataset.",
                            fix="compare evaluations of the same datasets.")
        for d, why in unpaired.items():
            log.warning("%s vs %s: %s is left out of the comparison: no per-query scores (%s)", s.label,
                        base.label, d, why)
        for d in datasets:
            for q in list(base.per_query[d].values())[:1] + list(s.per_query[d].values())[:1]:
                if metric not in q:
                    raise DataError(f"metric '{metric}' was not evaluated for '{d}'.",
                                    fix=f"pass --metric with one of {', '.join(q)}.")
        rows, diffs, weights = [], [], []
        for d in datasets:
            delta, a, b = paired(base.per_query[d], s.per_query[d], metric, d, permutations=permutations, seed=seed,
                                 intersect=intersect, labels=(base.label, s.label))
            if delta.dropped:
                log.warning("%s vs %s on %s: %d of %d queries compared, %d evaluated for only one dropped "
                            "(--intersect)", s.label, base.label, d, delta.queries,
                            delta.queries + delta.dropped, delta.dropped)
            rows.append(delta)
            diffs.append(b - a)
            weights.append(np.full(len(a), 1.0 / (len(datasets) * len(a))))
        if len(datasets) > 1:
            dd, ww = np.concatenate(diffs), np.concatenate(weights)
            t_p, low, high = t_test(len(dd) * ww * dd)
            rows.append(Delta(AVERAGE, float(np.mean([r.baseline for r in rows])),
                              float(np.mean([r.value for r in rows])), float((ww * dd).sum()), low, high, t_p,
                              randomization_test(dd, ww, permutations=permutations, seed=seed), len(dd),
                              sum(r.baseline_queries for r in rows), sum(r.model_queries for r in rows),
                              sum(r.dropped for r in rows)))
        out.rows[s.label] = rows
    return out


# ---------------------------------------------------------------------------------------------- loading

def _from_eval_json(path: Path, data: dict, label: str | None) -> Scored:
    from drmix.evaluation.mteb import is_mteb_result, mteb_unpaired

    if is_mteb_result(data):
        raise _mteb_file_error(path)
    pq = data.get("per_query")
    unpaired = mteb_unpaired(data)
    if not pq:
        if unpaired:
            raise DataError("this MTEB evaluation has no per-query scores, so no paired test can be run: "
                            + "; ".join(f"{d}: {why}" for d, why in unpaired.items()) + ".", path=path,
                            fix="compare MTEB retrieval tasks (drmix eval --mteb records their per-query scores), "
                                "or read these tasks' main scores in eval.md.")
        raise DataError("this evaluation has no per-query scores.", path=path,
                        fix="re-run `drmix eval` (it now writes them) and compare the new eval.json.")
    return Scored(label or data.get("model") or path.parent.name, pq, str(path), unpaired)


def _mteb_file_error(path: Path) -> DataError:
    return DataError("this is one of MTEB's own result files: it holds only each task's mean scores, and the "
                     "paired tests need per-query scores.", path=path,
                     fix="evaluate with `drmix eval --mteb TASK --output DIR` (it keeps the per-query scores of "
                         "retrieval tasks) and compare DIR.")


def load_scored(path: str | Path, label: str | None = None) -> list[Scored]:
    """Models from ``path``: an ``eval.json``, a folder holding one, a pipeline stage folder with an
    ``eval-<split>.json``, or a pipeline root (``summary.json``: every evaluated model, labelled)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError("no such evaluation or run.", path=p, fix="pass an eval.json, a `drmix eval --output` "
                                                                  "folder or a `drmix pipeline` output folder.")
    if p.is_dir():
        if (p / "summary.json").exists():
            summary = _read(p / "summary.json")
            out = []
            for lab, model_dir in summary.get("models", {}).items():
                caches = sorted(Path(model_dir).parent.glob("eval-*.json"))
                if caches:
                    out.append(_from_eval_json(caches[0], _read(caches[0]), lab))
            if out:
                return out
        candidates = [p / "eval.json"] + sorted(p.glob("eval-*.json"))
        found = [c for c in candidates if c.exists()]
        if not found:
            for f in sorted(p.rglob("*.json"))[:50]:   # a folder of MTEB's own results (mteb/results/...)
                try:
                    obj = json.loads(f.read_text(encoding="utf-8"))
                except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                    continue
                from drmix.evaluation.mteb import is_mteb_result

                if is_mteb_result(obj):
                    raise _mteb_file_error(f)
            raise DataError("the folder holds no eval.json, eval-<split>.json or summary.json.", path=p,
                            fix="run `drmix eval --output DIR` first and pass DIR.")
        p = found[0]
    return [_from_eval_json(p, _read(p), label or (p.parent.name if p.name != "eval.json" else None))]


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"cannot read the evaluation ({e}).", path=path,
                        fix="pass a JSON file written by `drmix eval` or `drmix pipeline`.") from None
