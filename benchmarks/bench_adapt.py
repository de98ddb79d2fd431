"""``drmix adapt`` benchmark: SciFact and NFCorpus as targets with their labels withheld from every choice; the
adapted model against uniform fine-tuning on the same collections and against COCO -> uniform, 3 seeds.

Per seed one ``drmix adapt`` run (:func:`drmix.recipes.adapt.run_adapt`) with ``--corpus`` SciFact and NFCorpus
(their corpora only), ``--data`` the six source collections of build_collections.py that bench_coco.py fine-tunes
on (AltLex, MSRP, SICK, XQuAD, Walmart-Amazon, Amazon-Google; 1,000 examples each at most; the SciFact and
NFCorpus training collections are never built, so no target label is read for training), and ``--eval-data``
SciFact / NFCorpus: their test qrels are opened only by the recipe's final evaluation, after the candidate was
chosen on the synthetic dev. Nothing in the presets was tuned on a test result.

Reported: per model the mean over seeds of the average nDCG@10 (SciFact, NFCorpus) with a 95% t-interval over
seeds; paired tests over the test queries (each query's nDCG@10 averaged over the seeds) of the adapted model
against uniform fine-tuning and against COCO -> uniform, and of COCO -> uniform against uniform fine-tuning;
per seed the candidate chosen and Kendall's tau between the candidates' synthetic-dev and labelled rankings;
the synthetic set's counts.

    python benchmarks/bench_adapt.py --preset medium --data ../shared/data --out /tmp/drmix-adapt --seeds 0
    python benchmarks/bench_adapt.py --preset medium --data ../shared/data --out /tmp/drmix-adapt --report-only
    python benchmarks/bench_adapt.py --preset gpu --estimate

``--report-only`` trains nothing and prints the table of the seeds already finished in ``--out``, byte for byte
as docs/adapt.md holds it.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

log = logging.getLogger("bench_adapt")
TARGETS = ("scifact", "nfcorpus")
SOURCES = ("altlex", "msrp", "sick", "xquad", "walmart_amazon", "amazon_google")
BASE, UNIFORM, COCO_UNIFORM = "base model", "uniform fine-tuning", "COCO → uniform"

#: per preset: the recipe's preset, the starting model (layers of all-MiniLM-L6-v2 kept; None = all) and the
#: recipe fields the benchmark sets beyond the preset
PRESETS = {
    "cpu": dict(recipe="cpu", model_layers=2, fields=dict(save_every=1000, log_every=10)),
    # bench_coco.py --preset medium's model and scale (COCO -> fine-tune +0.0262 nDCG@10 there)
    "medium": dict(recipe="medium", model_layers=2, fields=dict(save_every=100, log_every=10)),
    "gpu": dict(recipe="gpu", model_layers=None, fields=dict(save_every=1000, log_every=50)),
}


def build_sources(data: Path, out: Path, *, max_per_collection: int = 1000, seed: int = 0) -> list[str]:
    """The six source collections (bench_coco.py's, built the same way: build_collections.py, 1,000 examples at
    most, documents cut to 120 words); the targets' own training collections are not built."""
    import build_collections as bc

    from drmix.io import write_jsonl_atomic

    builders = {"altlex": lambda: bc.altlex(data, max_words=120, seed=seed, limit=2 * max_per_collection),
                "msrp": lambda: bc.msrp(data, max_words=120, seed=seed),
                "sick": lambda: bc.sick(data, max_words=120, seed=seed),
                "xquad": lambda: bc.xquad(data, max_words=120, seed=seed),
                "walmart_amazon": lambda: bc.entity_matching(data / "walmart-amazon", seed=seed),
                "amazon_google": lambda: bc.entity_matching(data / "amazon-google", seed=seed)}
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SOURCES:
        path = out / f"{name}.jsonl"
        if not path.exists():
            write_jsonl_atomic(path, bc.cap(builders[name](), max_per_collection, seed))
        paths.append(str(path))
    return paths


def config_for(args, p: dict, seed: int, model: str | None, collections: list[str]):
    from drmix.recipes.adapt import AdaptConfig

    return AdaptConfig(preset=p["recipe"], seed=seed, model=model, corpus=[str(args.data / t) for t in TARGETS],
                       data=collections, eval_data=[str(args.data / t) for t in TARGETS],
                       output_dir=str(args.out / f"seed{seed}"), show_progress=False, **p["fields"])


def estimate(args, p: dict):
    """Device time (:mod:`_lease`) of one seed's run, from the recipe's own stage plan."""
    from _lease import Estimate

    from drmix.recipes.adapt import plan_work

    est = Estimate()
    cfg = config_for(args, p, 0, None, build_sources(args.data, args.collections or args.out / "collections"))
    for w in plan_work(cfg):
        if w.examples:
            est.train(w.name, w.examples)
        est.encode(w.passages)
    return est


def t_interval(values: list[float]) -> tuple[float, float, float]:
    from drmix.evaluation.significance import t_interval as mean_half

    m, half = mean_half(values)
    return m, m - half, m + half


def seed_result(out: Path) -> dict | None:
    """A finished seed's summary.json and the per-query labelled nDCG@10 of its report models."""
    path = out / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    if not summary.get("labelled"):
        return None
    per_query = {}
    for label, model in summary["models"].items():
        cache = (out / "eval" / "base" if label == BASE else Path(model).parent) / "eval-test.json"
        per_query[label] = {d: {q: v["ndcg@10"] for q, v in qs.items()}
                            for d, qs in json.loads(cache.read_text(encoding="utf-8"))["per_query"].items()}
    summary["per_query"] = per_query
    return summary


def report(args, seeds: list[int], results: dict[int, dict]) -> str:
    from drmix.recipes.coco import paired_test

    def avg(run: dict) -> float:
        return float(np.mean([np.mean(list(s.values())) for s in run.values()]))

    def adapted(r: dict) -> str:
        return next(lb for lb in r["per_query"] if lb.startswith("adapted"))

    def seed_mean(runs: list[dict]) -> dict:
        return {d: {q: float(np.mean([r[d][q] for r in runs])) for q in runs[0][d]} for d in runs[0]}

    rows = {BASE: [], UNIFORM: [], COCO_UNIFORM: [], "adapted": []}
    for s in seeds:
        r = results[s]
        for label in (BASE, UNIFORM, COCO_UNIFORM):
            rows[label].append(r["per_query"][label])
        rows["adapted"].append(r["per_query"][adapted(r)])
    first = results[seeds[0]]
    lines = [f"Preset `{args.preset}`, seeds {seeds}; nDCG@10 on the SciFact and NFCorpus test splits (a seeded "
             "sample of the same queries and documents for every seed), read only by the recipe's final evaluation.",
             "", "| model | " + " | ".join(TARGETS)
             + " | average (mean over seeds) | per seed | 95% interval (seeds) |",
             "|---|" + "---:|" * len(TARGETS) + "---:|---|---|"]
    for label, runs in rows.items():
        per_seed = [avg(r) for r in runs]
        m, lo, hi = t_interval(per_seed)
        name = "adapted (chosen on synthetic dev)" if label == "adapted" else label
        lines.append(f"| {name} | " + " | ".join(f"{np.mean([np.mean(list(r[d].values())) for r in runs]):.4f}"
                                                 for d in TARGETS)
                     + f" | {m:.4f} | " + " / ".join(f"{v:.4f}" for v in per_seed) + " | "
                     + (f"[{lo:.4f}, {hi:.4f}]" if len(runs) > 1 else "– (one seed)") + " |")
    lines += ["", "| comparison | queries | mean difference | 95% interval | p (paired t over queries) | per-seed "
                  "difference | p (paired t over seeds) |", "|---|---:|---:|---|---:|---|---:|"]
    from drmix.evaluation.significance import t_test

    for name, a, b in (("adapted vs uniform fine-tuning", UNIFORM, "adapted"),
                       ("adapted vs COCO → uniform", COCO_UNIFORM, "adapted"),
                       ("COCO → uniform vs uniform fine-tuning", UNIFORM, COCO_UNIFORM)):
        t = paired_test(seed_mean(rows[a]), seed_mean(rows[b]))
        diffs = [avg(y) - avg(x) for x, y in zip(rows[a], rows[b])]
        p_seeds = t_test(diffs)[0] if len(diffs) > 1 else float("nan")
        lines.append(f"| {name} | {t['n']} | {t['mean']:+.4f} | [{t['low']:+.4f}, {t['high']:+.4f}] | {t['p']:.3g} | "
                     + " / ".join(f"{d:+.4f}" for d in diffs) + f" | {p_seeds:.3g} |")
    lines += ["", "| seed | chosen on synthetic dev | Kendall's tau (synthetic dev vs labelled, candidates) | "
                  "synthetic dev nDCG@10 of the chosen / of uniform |", "|---:|---|---:|---|"]
    for s in seeds:
        r = results[s]
        k = r.get("kendall") or {}
        dev = r["selection_average"]
        lines.append(f"| {s} | {r['selected']} | {k.get('tau', float('nan')):+.3f} (p {k.get('p', float('nan')):.2g}, "
                     f"{k.get('candidates', 0)}) | {dev[r['selected']]:.4f} / {dev['uniform']:.4f} |")
    cands = list(first["selection_average"])
    lines += ["", "Candidates (mean over seeds): synthetic dev nDCG@10 / labelled test nDCG@10.", "",
              "| candidate | synthetic dev | labelled test |", "|---|---:|---:|"]
    for c in cands:
        dev = np.mean([results[s]["selection_average"][c] for s in seeds])
        lab = np.mean([np.mean([v["ndcg@10"] for v in results[s]["labelled"][c].values()]) for s in seeds])
        lines.append(f"| {c} | {dev:.4f} | {lab:.4f} |")
    lines += ["", "Synthetic set (seed " + str(seeds[0]) + "): pseudo-queries generated / failed the round trip / "
              "kept; train / dev / test queries.", "", "| corpus | generated | failed | kept | train / dev / test |",
              "|---|---:|---:|---:|---|"]
    for name, st in first["synthetic"].items():
        q = st["queries"]
        lines.append(f"| {name} | {sum(st['generated'].values()):,} | {sum(st['filtered'].values()):,} | "
                     f"{sum(st['kept'].values()):,} | {q['train']:,} / {q['dev']:,} / {q['test']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="shared data (read-only)")
    ap.add_argument("--collections", type=Path, default=None, help="built collections (default: OUT/collections)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/drmix-adapt"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time of one seed and exit")
    ap.add_argument("--report-only", action="store_true",
                    help="train nothing: print the table of the seeds already finished in --out")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    p = PRESETS[args.preset]
    args.data = args.data.resolve()
    if args.estimate or (args.preset == "gpu" and not args.report_only):
        from _lease import estimate_line

        print(estimate_line(estimate(args, p), "one seed"), flush=True)
        if args.estimate:
            return 0
    if not args.report_only:
        import datasets

        datasets.disable_progress_bars()
        from _models import truncated_minilm

        from drmix.recipes.adapt import run_adapt

        collections = build_sources(args.data, args.collections or args.out / "collections")
        model = truncated_minilm(p["model_layers"], args.out)
        for seed in args.seeds:
            t0 = time.perf_counter()
            run_adapt(config_for(args, p, seed, model, collections))
            (args.out / f"seed{seed}" / "bench-seconds.json").write_text(
                json.dumps({"seconds": time.perf_counter() - t0}))
    results = {s: r for s in args.seeds if (r := seed_result(args.out / f"seed{s}")) is not None}
    done = [s for s in args.seeds if s in results]
    if not done:
        print("no finished seed in", args.out)
        return 1
    text = report(args, done, results)
    (args.out / "report.md").write_text(text, encoding="utf-8")
    print(text, end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
