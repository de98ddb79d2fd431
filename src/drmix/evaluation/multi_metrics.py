"""Evaluation for queries whose relevant passages live in several corpora, and the policy sweep.

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 5.3 and Table 3. Notation: a query ``q`` has relevance judgements in several corpora; ``C_q`` is
the set of corpora holding at least one relevant passage of ``q`` (grade > 0); ``R_{q,c}`` the relevant
passages of ``q`` in corpus ``c``; ``L_q`` the merged top-k list an allocation policy returns.

* **Per-corpus credit recall** ``pc_recall@k`` (the paper's Recall@k: "1 if both passages are retrieved,
  0.5 if one is retrieved and 0 otherwise")::

      credit(q) = 1/|C_q| * sum_{c in C_q} hit_c(q)
      hit_c(q)  = 1 if L_q[:k] contains any passage of R_{q,c}            (mode "any", the default)
                = |L_q[:k] ∩ R_{q,c}| / |R_{q,c}|                          (mode "fraction")

  The paper has exactly one relevant passage per corpus, where both modes agree. With several relevant
  passages in one corpus (an entity matched to two listings) "any" asks for one passage from every
  corpus, which is what a reader needs; "fraction" is stricter. ``pc_recall@k`` is the mean over queries
  with ``|C_q| > 0``; a query with no result list scores 0.
* **Per-corpus MRR** ``pc_mrr@k`` (the paper's MRR, "the reciprocal of the rank at which the true
  passage appears", made per-corpus like the recall)::

      pc_rr(q) = 1/|C_q| * sum_{c in C_q} 1 / rank of the first passage of R_{q,c} in L_q[:k]   (0 if absent)

* **Standard metrics** (nDCG, MRR, Recall, MAP) through :func:`drmix.evaluation.metrics.evaluate_run`
  (pytrec_eval) over the merged list. Documents are qualified as ``corpus/doc_id`` so ids never collide,
  and each hit's run score is ``len(L_q) - rank`` so that the policy's order, not the raw similarity, is
  what gets evaluated (a policy may put a lower raw score above a higher one).

The sweep evaluates many policies on candidates fetched once, chooses within each family (``fixed``
fractions, ``confidence`` thresholds, the label-free ``zscore``/``calibrated`` variants) on a validation
split disjoint from the evaluated one (overlap is an error), writes Table 3 as Markdown + JSON, and plots recall against k.
"""
from __future__ import annotations

import json
import logging
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError
from drmix.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from drmix.retrieval.multi import (
    AllocationPolicy,
    CandidateSet,
    Hit,
    OraclePolicy,
    allocate_all,
    parse_policy,
    policy_info,
)
from drmix.retrieval.multi import default_policy_specs as default_policy_specs  # re-exported (the sweep's default)

log = logging.getLogger(__name__)

MultiQrels = dict[str, dict[str, dict[str, int]]]   # qid -> corpus -> doc id -> grade


def qualify(corpus: str, doc_id: str) -> str:
    """The id of a passage across corpora: ``corpus/doc_id``."""
    return f"{corpus}/{doc_id}"


def _judged(rel: Mapping[str, Mapping[str, int]]) -> dict[str, set[str]]:
    return {c: {d for d, g in docs.items() if g > 0} for c, docs in rel.items()
            if any(g > 0 for g in docs.values())}


def query_credit(hits: Sequence[Hit], rel: Mapping[str, Mapping[str, int]], k: int, mode: str = "any") -> float | None:
    """Per-corpus credit recall of one query (None when it has no relevant passage)."""
    judged = _judged(rel)
    if not judged:
        return None
    top = hits[:k]
    total = 0.0
    for c, docs in judged.items():
        found = sum(1 for h in top if h.corpus == c and h.doc_id in docs)
        total += (1.0 if found else 0.0) if mode == "any" else found / len(docs)
    return total / len(judged)


def query_rr(hits: Sequence[Hit], rel: Mapping[str, Mapping[str, int]], k: int) -> float | None:
    """Per-corpus reciprocal rank of one query (None when it has no relevant passage)."""
    judged = _judged(rel)
    if not judged:
        return None
    total = 0.0
    for c, docs in judged.items():
        for rank, h in enumerate(hits[:k], start=1):
            if h.corpus == c and h.doc_id in docs:
                total += 1.0 / rank
                break
    return total / len(judged)


def flatten_qrels(qrels: MultiQrels) -> dict[str, dict[str, int]]:
    return {q: {qualify(c, d): int(g) for c, docs in by_c.items() for d, g in docs.items()}
            for q, by_c in qrels.items()}


def flatten_run(results: Mapping[str, Sequence[Hit]]) -> dict[str, dict[str, float]]:
    """Run with ``corpus/doc_id`` ids and order-preserving scores ``len - rank``."""
    return {q: {qualify(h.corpus, h.doc_id): float(len(hits) - r) for r, h in enumerate(hits)}
            for q, hits in results.items()}


def evaluate_multi(qrels: MultiQrels, results: Mapping[str, Sequence[Hit]], k: int, *, mode: str = "any",
                   standard: Sequence[str] | None = None, per_query: bool = False) -> dict[str, Any]:
    """``pc_recall@k``, ``pc_mrr@k``, the share of the budget each corpus got, and standard metrics.

    ``standard`` defaults to ``ndcg@k``, ``mrr@k`` and ``recall@k`` (per-passage recall); pass ``()`` to skip
    pytrec_eval. With ``per_query`` the result also holds ``per_query: {qid: {pc_recall, pc_mrr}}``.
    """
    credits: dict[str, float] = {}
    rrs: dict[str, float] = {}
    share: dict[str, float] = {}
    for q, rel in qrels.items():
        hits = list(results.get(q, []))
        c = query_credit(hits, rel, k, mode)
        if c is None:
            continue
        credits[q] = c
        rrs[q] = query_rr(hits, rel, k) or 0.0
        for h in hits[:k]:
            share[h.corpus] = share.get(h.corpus, 0.0) + 1.0
    n = len(credits)
    out: dict[str, Any] = {
        f"pc_recall@{k}": sum(credits.values()) / n if n else 0.0,
        f"pc_mrr@{k}": sum(rrs.values()) / n if n else 0.0,
        "num_queries": n,
        "budget_share": {c: v / (n * k) for c, v in sorted(share.items())} if n else {},
    }
    metrics = list(standard) if standard is not None else [f"ndcg@{k}", f"mrr@{k}", f"recall@{k}"]
    if metrics and n:
        from drmix.evaluation.metrics import evaluate_run

        judged_q = set(credits)
        flat_q = {q: v for q, v in flatten_qrels(qrels).items() if q in judged_q}
        flat_r = flatten_run({q: list(results.get(q, [])[:k]) for q in judged_q})  # absent queries score 0
        out.update(evaluate_run(flat_q, flat_r, tuple(metrics)))
    if per_query:
        out["per_query"] = {q: {"pc_recall": credits[q], "pc_mrr": rrs[q]} for q in credits}
    return out


# --------------------------------------------------------------------------------------------------
# Loading multi-corpus judgements from BEIR directories
# --------------------------------------------------------------------------------------------------


def load_multi_qrels(corpus_dirs: Mapping[str, str | Path], split: str) -> tuple[dict[str, str], MultiQrels]:
    """Queries (union over the corpus directories) and ``qrels[qid][corpus][doc]`` of one split.

    Each directory is a BEIR directory; a corpus without ``qrels/{split}.tsv`` simply has no relevant
    passages. At least one directory must have the split.
    """
    from drmix.data.beir import available_splits, load_beir

    queries: dict[str, str] = {}
    qrels: MultiQrels = {}
    found = False
    for name, d in corpus_dirs.items():
        if split not in available_splits(d):
            continue
        found = True
        ds = load_beir(d, split=split, load_corpus=False)
        for q, text in ds.queries.items():
            queries.setdefault(q, text if isinstance(text, str) else str(text.get("text", "")))
        for q, docs in ds.qrels.items():
            qrels.setdefault(q, {})[name] = {str(doc): int(g) for doc, g in docs.items()}
    if not found:
        raise DataError(f"no corpus directory has qrels/{split}.tsv.", path=next(iter(corpus_dirs.values()), None),
                        fix="pass --split with a split that exists (e.g. dev or test).")
    return {q: queries[q] for q in qrels if q in queries}, qrels


# --------------------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------------------


LABEL_FREE_ROW = "label-free (dev-chosen)"


def family_of(spec: str) -> str:
    """The tuning family of a spec: ``label-free`` for a policy registered ``label_free``, else its name
    (a ``tunable`` policy's specs form one family, tuned on dev)."""
    info = policy_info(parse_policy(spec))
    return "label-free" if info.label_free else info.name


def _tuned_family(family: str) -> bool:
    return family == "label-free" or policy_info(family).tunable


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


def _cell(m: Mapping[str, Any] | None, k: int) -> str:
    if not m:
        return "-"
    return f"{100 * m[f'pc_recall@{k}']:.2f}/{m[f'pc_mrr@{k}']:.2f}"


def format_table(results: Sequence[SweepResult], *, bold_best: bool = True) -> str:
    """Markdown table in the shape of the paper's Table 3: policy rows, one column per setting.

    Cells are ``pc_recall@k (x100) / pc_mrr@k``; the best recall of each column (oracle excluded) is bold.
    """
    from drmix.report.markdown import md_cell

    labels: list[str] = []
    for r in results:
        labels += [lab for lab in r.rows if lab not in labels]
    header = "| Known corpus → | " + " | ".join(f"{md_cell(r.setting)} (k={r.k})" for r in results) + " |"
    lines = [header, "|---|" + "---|" * len(results)]
    best = {}
    for i, r in enumerate(results):
        vals = [m[f"pc_recall@{r.k}"] for lab, m in r.rows.items() if not lab.startswith("oracle")]
        best[i] = max(vals) if vals else None
    for lab in labels:
        cells = []
        for i, r in enumerate(results):
            m = r.rows.get(lab)
            c = _cell(m, r.k)
            if bold_best and m and not lab.startswith("oracle") and best[i] is not None \
                    and math.isclose(m[f"pc_recall@{r.k}"], best[i]):
                c = f"**{c}**"
            cells.append(c)
        lines.append(f"| {md_cell(lab)} | " + " | ".join(cells) + " |")
    chosen = [f"{md_cell(r.setting)}: {', '.join(map(md_cell, r.chosen.values()))}" for r in results if r.chosen]
    if chosen:
        lines += ["", "Chosen on the validation split: " + "; ".join(chosen) + "."]
    return "\n".join(lines) + "\n"


def write_sweep(results: Sequence[SweepResult], out_dir: str | Path, *, plot_top: int = 4) -> dict[str, Path]:
    """Write ``table.md``, ``results.json`` and one ``recall_vs_k-<setting>.png`` per setting."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"table": out / "table.md", "json": out / "results.json"}
    atomic_write_text(paths["table"], format_table(results))
    atomic_write_json(paths["json"], [r.to_json() for r in results])
    for r in results:
        if any(len(c) > 1 for c in r.curves.values()):
            p = out / f"recall_vs_k-{_slug(r.setting)}.png"
            plot_recall_vs_k(r, p, top=plot_top)
            paths[f"plot:{r.setting}"] = p
    return paths


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in text).strip("-") or "setting"


def best_rows(result: SweepResult, top: int = 4) -> list[str]:
    """Rows to plot: naive, oracle, and the best row of each other policy family (at most ``top``).

    Only rows with a curve (more than one k) are candidates. Families are policy names (fixed, confidence,
    zscore, calibrated); a dev-chosen row is its own family, and the grid rows are left out when it is
    plotted; families are ranked by their best pc_recall@k.
    """
    k = result.k
    has_curve = [lab for lab in result.rows if len(result.curves.get(lab, {})) > 1]
    always = [lab for lab in ("naive", "oracle") if lab in has_curve]
    dev_rows = [lab for lab in has_curve if "dev-tuned" in lab or "dev-chosen" in lab]
    best: dict[str, str] = {}
    for lab in has_curve:
        if lab in always:
            continue
        if lab in dev_rows:
            fam = lab
        else:
            fam = parse_policy(result.rows[lab].get("spec", lab)).name
            if any(d.startswith(fam) or (policy_info(fam).label_free and d.startswith("label-free"))
                   for d in dev_rows):
                continue
        if fam not in best or result.rows[lab][f"pc_recall@{k}"] > result.rows[best[fam]][f"pc_recall@{k}"]:
            best[fam] = lab
    ranked = sorted(best.values(), key=lambda lab: -result.rows[lab][f"pc_recall@{k}"])
    return always + ranked[:top]


def plot_recall_vs_k(result: SweepResult, path: str | Path, *, top: int = 4) -> None:
    """Line plot of per-corpus credit recall against k for naive, oracle and the best policies (PNG)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lab in best_rows(result, top):
        curve = result.curves[lab]
        xs = sorted(curve)
        ax.plot(xs, [100 * curve[x] for x in xs], marker="o", label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("k (retrieval budget)")
    ax.set_ylabel("Recall@k, per-corpus credit (%)")
    ax.set_title(textwrap.fill(result.setting, 60), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def load_sweep_json(path: str | Path) -> list[SweepResult]:
    """Read back ``results.json`` written by :func:`write_sweep`."""
    out = []
    for d in json.loads(Path(path).read_text(encoding="utf-8")):
        r = SweepResult(d["setting"], int(d["k"]), d["rows"],
                        {lab: {int(kk): v for kk, v in c.items()} for lab, c in d["curves"].items()},
                        d.get("chosen_on_dev", {}))
        out.append(r)
    return out
