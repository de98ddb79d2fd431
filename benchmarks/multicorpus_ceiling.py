"""How far can a per-query allocation computed from the scores go? Measured on the dev split only.

Per-corpus credit Recall@k is maximised, per query, by a greedy over every corpus's marginal gains
``P(the corpus's first relevant passage is at rank r | query)`` (the gains of a corpus sum to at most 1 and
only the first relevant passage counts, so they are its rank distribution; kept decreasing, the greedy
split is optimal for them). A label-free policy (``coverage``, ``calibrated``, ...) is such a greedy on an
*estimate* of that curve made from the scores. This script fits such curves **with the dev labels** and
evaluates them on the same dev queries (in-sample, so optimistic for what they can see):

* ``softmax T_c`` (two corpora only): ``coverage`` with one temperature per corpus, the pair chosen on the
  dev labels from a grid -- the ceiling of ``coverage``'s family (any label-free way of setting its
  temperatures per corpus is at most this on these queries);
* ``fitted rank``: ``P_c(r)`` per corpus and rank only (the best split that does not look at the query: it
  matches the best fixed fraction);
* ``fitted rank+gap`` / ``rank+z`` / ``rank+gap+z``: per corpus, rank and the bin of the query's top-1 score
  gap ``s_1 - s_2`` and/or of its top-1 score standardised against the corpus background -- supervised
  calibration from coarse features; not a ceiling for policies that read the whole score list (``coverage``
  can beat them);
* ``best split per gap / z bin pair`` (two corpora only): the best ``(k_1, k - k_1)`` for each pair of
  the two corpora's bins (6 x 6 pairs), chosen on the same queries' labels;
* per corpus, the share of judged dev queries whose relevant passage is in the corpus's top 1 / 10 / 100
  against the mass ``coverage``'s posterior puts there (how far the label-free curve is from the truth).

Only the dev split is read (queries, judgements and the benchmark's cached candidates); the test split is
never opened. Written by hand: no library computes this. Uses the candidates that
``benchmarks/bench_multicorpus.py`` caches under ``--out/cache``::

    python benchmarks/multicorpus_ceiling.py --out /tmp/drmix-mc-ft --bench walmart-amazon \
        --tags ft-walmart-s0,ft-walmart-s1,ft-walmart-s2
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import _common  # noqa: F401  (offline environment)

from bench_multicorpus import load_cset  # noqa: E402
from drmix.data.entity_matching import read_manifest  # noqa: E402
from drmix.evaluation.multi import evaluate_multi, load_multi_qrels  # noqa: E402
from drmix.retrieval.multi import allocate_all  # noqa: E402
from drmix.retrieval.multi.merge import merge_by_key, top_by_key  # noqa: E402
from drmix.retrieval.multi.policies.coverage import softmax_posterior  # noqa: E402
from drmix.retrieval.multi.policies.zscore import zscores  # noqa: E402

DEPTH = 30                                   # ranks whose probability is fitted (k = 10 never reaches past it)
GAP_BINS = (0.005, 0.01, 0.02, 0.04, 0.08)   # top-1 gap s_1 - s_2 (cosine)
Z_BINS = (3.0, 4.0, 5.0, 6.0, 7.0)           # top-1 z against the corpus background
TEMPERATURES = (0.01, 0.02, 0.03, 0.05, 0.08, 0.12)


def feature(cc, kind: str) -> int:
    """The query-level bin of one corpus's candidates (0 for ``rank``)."""
    if len(cc) == 0:
        return 0
    gap = float(cc.scores[0] - cc.scores[1]) if len(cc) > 1 else 0.0
    z1 = float(zscores(cc)[0])
    g, z = int(np.digitize(gap, GAP_BINS)), int(np.digitize(z1, Z_BINS))
    return {"rank": 0, "rank+gap": g, "rank+z": z, "rank+gap+z": 10 * g + z}[kind]


def first_relevant(cc, rel: set[str]) -> int | None:
    return next((r for r, d in enumerate(cc.ids) if d in rel), None)


def fitted_greedy(cset, qrels, kind: str, k: int) -> dict:
    """Fit ``P_c(first relevant at r | bin)`` on the labels of ``cset``'s queries; greedy split on the same queries."""
    hits, seen = defaultdict(int), defaultdict(int)
    bins = {}
    for q, by_c in cset.by_query.items():
        for c, cc in by_c.items():
            b = bins[q, c] = feature(cc, kind)
            rel = {d for d, g in qrels.get(q, {}).get(c, {}).items() if g > 0}
            first = first_relevant(cc, rel) if rel else None
            for r in range(min(DEPTH, len(cc))):
                seen[c, b, r] += 1
                hits[c, b, r] += int(first == r)
    run = {}
    for q, by_c in cset.by_query.items():
        keys = {}
        for c, cc in by_c.items():
            p = np.zeros(len(cc))
            for r in range(min(DEPTH, len(cc))):
                n = seen[c, bins[q, c], r]
                p[r] = hits[c, bins[q, c], r] / n if n else 0.0
            # decreasing gains keep the greedy a prefix of each corpus (ties by rank)
            keys[c] = np.minimum.accumulate(p) - 1e-9 * np.arange(len(cc))
        run[q] = merge_by_key(by_c, top_by_key(by_c, keys, k), keys)
    return run


def calibration(cset, qrels) -> dict[str, dict[str, float]]:
    """Per corpus: where its first relevant passage is (share of judged queries with it in the top 1 / 10 /
    100) against the mass that ``coverage``'s softmax posterior (T = 0.05) puts on those ranks."""
    out = {}
    for c in cset.corpora:
        first, mass, n = [], np.zeros(3), 0
        for q, by_c in cset.by_query.items():
            rel = {d for d, g in qrels.get(q, {}).get(c, {}).items() if g > 0}
            if not rel:
                continue
            n += 1
            r = first_relevant(by_c[c], rel)
            first.append(10 ** 9 if r is None else r)
            p = softmax_posterior(by_c[c], 0.05, 100)
            mass += [p[:1].sum(), p[:10].sum(), p[:100].sum()]
        first_a = np.array(first)
        out[c] = {f"relevant in top {t}": float(np.mean(first_a < t)) for t in (1, 10, 100)}
        out[c].update({f"coverage mass on top {t}": float(m / max(n, 1)) for t, m in zip((1, 10, 100), mass)})
    return out


def split_per_bin(cset, qrels, kind: str, k: int) -> float:
    """Two corpora: the best ``(k_1, k - k_1)`` per joint bin of both corpora, chosen on these queries' labels."""
    c0, c1 = cset.corpora
    by_bin: dict[tuple[int, int], np.ndarray] = defaultdict(lambda: np.zeros(k + 1))
    n = 0
    for q, by_c in cset.by_query.items():
        judged = {c: {d for d, g in qrels.get(q, {}).get(c, {}).items() if g > 0} for c in (c0, c1)}
        judged = {c: rel for c, rel in judged.items() if rel}
        if not judged:
            continue
        n += 1
        first = {c: first_relevant(by_c[c], rel) for c, rel in judged.items()}
        gain = np.zeros(k + 1)
        for k0 in range(k + 1):
            quota = {c0: k0, c1: k - k0}
            gain[k0] = sum(1.0 for c, r in first.items() if r is not None and r < quota[c]) / len(judged)
        by_bin[feature(by_c[c0], kind), feature(by_c[c1], kind)] += gain
    return 100 * sum(v.max() for v in by_bin.values()) / max(n, 1)


def softmax_pair(cset, qrels, k: int) -> tuple[float, tuple[float, float]]:
    """The best per-corpus temperature pair of ``coverage`` on these queries' labels."""
    c0 = cset.corpora[0]
    best = (-1.0, (0.0, 0.0))
    for t0 in TEMPERATURES:
        for t1 in TEMPERATURES:
            run = {}
            for q, by_c in cset.by_query.items():
                keys = {c: softmax_posterior(cc, t0 if c == c0 else t1, 100) for c, cc in by_c.items()}
                run[q] = merge_by_key(by_c, top_by_key(by_c, keys, k), keys)
            m = evaluate_multi(qrels, run, k, standard=())[f"pc_recall@{k}"]
            best = max(best, (m, (t0, t1)))
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the --out of bench_multicorpus.py (layouts/ and cache/)")
    ap.add_argument("--bench", required=True, help="walmart-amazon or amazon-google")
    ap.add_argument("--tags", default="base", help="cached models, comma-separated (base, ft-walmart-s0, ...)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--write", default=None, help="also write the numbers to this JSON file")
    args = ap.parse_args(argv)
    man = read_manifest(Path(args.out) / "layouts" / args.bench)
    queries, qrels = load_multi_qrels(man["corpus_dirs"], "dev")
    k = args.k
    rows: dict[str, list[float]] = defaultdict(list)
    for tag in args.tags.split(","):
        cset = load_cset(Path(args.out) / "cache" / f"{args.bench}-{tag}.json").subset(queries)

        def rec(run) -> float:
            return 100 * evaluate_multi(qrels, run, k, standard=())[f"pc_recall@{k}"]

        for spec in ("equal", "coverage"):
            rows[spec].append(rec(allocate_all(cset, spec, k)))
        fixed = [rec(allocate_all(cset, f"fixed:{f / 10:g}", k)) for f in range(11)]
        rows["best fixed on dev"].append(max(fixed))
        for kind in ("rank", "rank+gap", "rank+z", "rank+gap+z"):
            rows[f"fitted {kind} (dev labels, in-sample)"].append(rec(fitted_greedy(cset, qrels, kind, k)))
        if len(cset.corpora) == 2:
            for kind in ("rank+gap", "rank+z"):
                rows[f"best split per {kind[5:]} bin pair (dev labels, in-sample)"].append(
                    split_per_bin(cset, qrels, kind, k))
            best, pair = softmax_pair(cset, qrels, k)
            rows["softmax T_c (dev labels, in-sample)"].append(100 * best)
            print(f"{tag}: best temperature pair {pair}", file=sys.stderr)
        rows["oracle"].append(rec(allocate_all(cset, "oracle", k, qrels)))
        for c, vals in calibration(cset, qrels).items():
            for lab, v in vals.items():
                rows[f"{c}: {lab} (×100)"].append(100 * v)
    print(f"| row ({args.bench}, dev split, {args.tags}) | pc_recall@{k} ×100 (mean over models) |")
    print("| --- | --- |")
    for lab, vals in rows.items():
        print(f"| {lab} | {np.mean(vals):.2f} |")
    if args.write:
        Path(args.write).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
