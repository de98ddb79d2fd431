"""How many labelled dev queries does ``drmix adapt --dev-labels`` need to choose better than the synthetic dev?

Given finished ``drmix adapt`` runs on SciFact and NFCorpus (bench_adapt.py's: their candidate models, the
synthetic-dev choice and every candidate's labelled test scores, per query, from the recipe's final
evaluation), every candidate is evaluated once on a labelled **dev pool** -- NFCorpus's ``dev`` split and,
SciFact having none, its ``train`` queries; never a test query -- at the corpus cap the recipe's own labelled
selection would use (``select_max_docs``: the run's ``--select-max-docs`` or ``--eval-max-docs``, the smaller).
Then, for n in ``--sizes`` labelled queries per corpus, ``--draws`` seeded samples of n pool queries per
corpus each make the choice ``--select-on labels`` would make (the best mean nDCG@10 over the two corpora,
ties to the earlier candidate, uniform first), and that choice is scored on the labelled **test** split against
the synthetic-dev choice of the same run.

Reported per n (pooled over the runs given): the mean test nDCG@10 (average of SciFact and NFCorpus) of the
labelled choice and of the synthetic choice, their mean difference with the 2.5-97.5 percentile range over the
draws (what one user with n labels may get), and the win / tie / loss shares of the labelled choice (a tie:
the same test score, mostly the same candidate) with Wilson 95% intervals over the draws; a row for the whole
pool and one for the best candidate on test (the ceiling of any choice among these candidates); and the mean
test nDCG@10 of the ``--select-on both`` choice (the mean of the synthetic-dev and the labelled averages). Caveat
printed with it: two target sets, a handful of candidates per run.

    python benchmarks/bench_dev_labels.py --runs '/tmp/adapt-r2/seed*' --data ../shared/data --out /tmp/devlabels
    python benchmarks/bench_dev_labels.py --out /tmp/devlabels --report-only

The runs are read, never written (the pool evaluations are cached under ``--out``). ``--report-only`` evaluates
nothing and prints the table from ``--out/results.json``, byte for byte as docs/adapt.md holds it. Over
``--preset cpu`` runs (``--device cpu``): the pool evaluation takes about 40 s of CPU time a candidate (two-layer
MiniLM, 1,133 pool queries, corpora capped at 500 documents; measured: two minutes of wall time a candidate on a
shared two-core machine), the draws a second. Over ``--preset gpu`` runs (``--device cuda``): six candidates on
the full corpora (8,800 documents) are estimated at about one minute of device time (owed: no GPU figure is
reported here).
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

log = logging.getLogger("bench_dev_labels")
#: the labelled dev pool of each target: its split that is not the test split
POOL = {"scifact": "train", "nfcorpus": "dev"}
SIZES = (10, 20, 50)


def run_inputs(run: Path) -> dict | None:
    """A finished adapt run: its candidates (label -> model folder), the synthetic-dev choice, every candidate's
    per-query labelled test nDCG@10 and the caps of its evaluations; None when it has not finished."""
    import yaml

    from drmix.recipes.adapt import AdaptConfig

    path = run / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    if not summary.get("labelled"):
        return None
    flat = AdaptConfig.flatten(yaml.safe_load((run / "adapt.yaml").read_text(encoding="utf-8")))
    caps = [c for c in (flat.get("select_max_docs"), flat.get("eval_max_docs")) if c is not None]
    test = {}
    for label, model in summary["candidates"].items():
        cache = json.loads((Path(model).parent / f"eval-{summary.get('eval_split', 'test')}.json").read_text(
            encoding="utf-8"))
        test[label] = {d: {q: v["ndcg@10"] for q, v in qs.items()} for d, qs in cache["per_query"].items()}
    return {"candidates": summary["candidates"], "synthetic_average": summary["selection_average"],
            "test": test, "max_docs": min(caps) if caps else None, "seed": flat.get("seed", 0),
            "max_length": flat.get("doc_max_length")}


def pool_scores(run: dict, data: Path, cache: Path,
                device: str | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """``{candidate: {corpus: {query: nDCG@10}}}`` on the dev pool (cached under ``cache``)."""
    from drmix.evaluation.suite import evaluate_suite

    out: dict[str, dict[str, dict[str, float]]] = {c: {} for c in run["candidates"]}
    for corpus, split in POOL.items():
        suite = evaluate_suite(run["candidates"], [str(data / corpus)], kind=f"pool-{corpus}", split=split,
                               cache_dirs={c: cache / c.replace(":", "-").replace("+", "-")
                                           for c in run["candidates"]},
                               max_docs=run["max_docs"], seed=run["seed"], max_length=run["max_length"],
                               metrics=("ndcg@10",), device=device)
        for c, by in suite.scores().items():
            out[c].update(by)
    return out


def _round(x: dict) -> dict:
    return {k: (_round(v) if isinstance(v, dict) else round(float(v), 6)) for k, v in x.items()}


def stored_run(run: dict, pool: dict) -> dict:
    """What --report-only needs of a run: candidates in order, synthetic-dev averages, per-query test and pool."""
    return {"candidates": list(run["candidates"]), "synthetic_average": _round(run["synthetic_average"]),
            "test": _round(run["test"]), "pool": _round(pool)}


def _first_best(scores: dict[str, float]) -> str:
    """The best candidate, ties to the earlier one: the recipe's own choice."""
    from drmix.recipes.adapt.selection import select_candidate

    return select_candidate(scores)


def _test_average(run: dict, c: str) -> float:
    return float(np.mean([np.mean(list(qs.values())) for qs in run["test"][c].values()]))


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score 95% interval of a share k / n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(centre - half), float(centre + half)


def draws(runs: dict[str, dict], n: int | None, count: int, seed: int,
          both: list[float] | None = None) -> list[tuple[float, float]]:
    """``(test of the labelled choice, test of the synthetic choice)`` per draw and run: n pool queries per corpus
    (None: the whole pool, one draw); ``both`` receives the test of the ``--select-on both`` choice of each draw
    (the mean of the synthetic-dev and the labelled average)."""
    rng = np.random.default_rng(seed)
    out = []
    for name in sorted(runs):
        run = runs[name]
        cands = run["candidates"]
        syn = _test_average(run, _first_best({c: run["synthetic_average"][c] for c in cands}))
        test = {c: _test_average(run, c) for c in cands}
        corpora = sorted(run["pool"][cands[0]])
        qids = {d: sorted(run["pool"][cands[0]][d]) for d in corpora}
        for _ in range(1 if n is None else count):
            picked = {d: (qids[d] if n is None else [qids[d][i] for i in
                                                     rng.choice(len(qids[d]), size=min(n, len(qids[d])),
                                                                replace=False)]) for d in corpora}
            scores = {c: float(np.mean([np.mean([run["pool"][c][d][q] for q in picked[d]]) for d in corpora]))
                      for c in cands}
            out.append((test[_first_best(scores)], syn))
            if both is not None:
                both.append(test[_first_best({c: (scores[c] + run["synthetic_average"][c]) / 2 for c in cands})])
    return out


def report(runs: dict[str, dict], sizes: list[int], count: int, seed: int) -> str:
    """The table docs/adapt.md holds (deterministic: seeded draws)."""
    names = sorted(runs)
    syn = np.mean([_test_average(runs[r], _first_best({c: runs[r]["synthetic_average"][c]
                                                         for c in runs[r]["candidates"]})) for r in names])
    best = np.mean([max(_test_average(runs[r], c) for c in runs[r]["candidates"]) for r in names])
    cands = sorted({len(runs[r]["candidates"]) for r in names})
    pool = {d: len(next(iter(runs[names[0]]["pool"].values()))[d]) for d in POOL}
    lines = [f"Runs {', '.join(names)} ({'/'.join(map(str, cands))} candidates each); labelled dev pool: "
             + ", ".join(f"{d} {POOL[d]} ({pool[d]} queries)" for d in POOL)
             + f"; {count} seeded draws of n queries per corpus per run; test: nDCG@10, the mean of SciFact and "
               "NFCorpus test.", "",
             "| labelled dev queries per corpus | choices | labelled choice: test nDCG@10 | synthetic-dev choice | "
             "difference (mean, 95% of draws) | win / tie / loss | win share, 95% interval | --select-on both |",
             "|---|---:|---:|---:|---|---|---|---:|"]
    for n in [*sizes, None]:
        both: list[float] = []
        got = draws(runs, n, count, seed, both)
        diff = np.array([a - b for a, b in got])
        k = {"win": int((diff > 1e-9).sum()), "tie": int((np.abs(diff) <= 1e-9).sum()),
             "loss": int((diff < -1e-9).sum())}
        lo, hi = wilson(k["win"], len(got))
        label = str(n) if n is not None else "the whole pool"
        lines.append(f"| {label} | {len(got)} | {np.mean([a for a, _ in got]):.4f} | {np.mean([b for _, b in got]):.4f} | "
                     f"{diff.mean():+.4f} [{np.percentile(diff, 2.5):+.4f}, {np.percentile(diff, 97.5):+.4f}] | "
                     f"{k['win'] / len(got):.0%} / {k['tie'] / len(got):.0%} / {k['loss'] / len(got):.0%} | "
                     f"[{lo:.0%}, {hi:.0%}] | {np.mean(both):.4f} |")
    lines += ["", f"The best candidate on test (the ceiling of any choice among them): {best:.4f}; the synthetic-dev "
                  f"choice: {syn:.4f}. Two target sets and a handful of candidates per run: a reading of these "
                  "sets, not a law."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="/tmp/adapt-r2/seed*", help="glob of finished drmix adapt run folders")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="shared data (read-only)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/devlabels"))
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="device of the pool evaluation: cpu, cuda (default: cuda when "
                                                   "one is here)")
    ap.add_argument("--report-only", action="store_true",
                    help="evaluate nothing: print the table from --out/results.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    results = args.out / "results.json"
    if args.report_only:
        stored = json.loads(results.read_text(encoding="utf-8"))
    else:
        stored = {"runs": {}}
        for folder in sorted(glob.glob(args.runs)):
            run = run_inputs(Path(folder))
            if run is None:
                log.info("%s: not finished, left out", folder)
                continue
            pool = pool_scores(run, args.data.resolve(), args.out / "cache" / Path(folder).name, args.device)
            stored["runs"][Path(folder).name] = stored_run(run, pool)
        if not stored["runs"]:
            print("no finished drmix adapt run in", args.runs)
            return 1
        from drmix.io.atomic import atomic_write_json

        atomic_write_json(results, stored)
    text = report(stored["runs"], args.sizes, args.draws, args.seed)
    print(text, end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
