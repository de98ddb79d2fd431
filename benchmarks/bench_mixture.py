"""Learned mixtures on real collections, with seeds and significance: do they beat uniform sampling?

Question: on leave-one-out targets (train on every collection of ``build_collections.py`` except the
target, evaluate zero-shot on the target's BEIR test split), does any learned mixture beat plain uniform
sampling by more than seed noise?

Arms (all fine-tune all-MiniLM-L6-v2 with task-homogeneous batches and in-batch negatives):

* ``uniform`` -- stage 0 of the tDRO pipeline; the seed-42 model is also the frozen reference of stage 1;
* ``size``, ``temperature`` (tau = 2) -- static mixtures;
* ``tdro:top:0.7``, ``tdro:reweight``, ``tdro:loss`` -- tDRO stage-1 weights transferred three ways;
* ``doremi:reweight``, ``groupdro:reweight`` -- the DRO baselines' weights;
* ``infdds``, ``multidds`` -- online policies rewarded on the target's *dev* split (NFCorpus dev; for
  SciFact, which has no dev split, its train queries, which no training collection of that target uses).

Seeds: every arm is trained with each seed of ``--seeds`` (stage 0 and stage 2 and the online policies).
Stage 1 (learning the tDRO / DoReMi / GroupDRO weights) runs once per target with the first seed and its
weights are transferred with every seed (the preset's budget; the seed-to-seed spread therefore does not
include stage 1's).

Reported per target and on the average over targets: the mean nDCG@10 over seeds, a 95% interval over
seeds (Student's t, n-1 degrees of freedom), and paired tests over test queries against uniform (each
query's score averaged over the seeds first): Student's paired t-test and Fisher's randomisation test
(:mod:`drmix.evaluation.compare`). ``*`` marks p < 0.05 in both.

Presets (``--preset``; explicit options override them):

* ``cpu`` -- fits 2 CPU cores shared with other work in about an hour (one process per target):
  8 steps at batch 4 and learning rate 1e-4 (query/doc 24/48 tokens), stage 1 4 steps at batch 11 (one
  example of each of the 11 training collections), Inf-DDS / MultiDDS policy updates at steps 3 and 6
  over a random subset of 3 collections (dev batch 8), test sets subsampled to 50 queries (SciFact) /
  20 queries (NFCorpus) with every judged document plus random others up to 150. At this scale the
  models move little from the pretrained one: it checks the
  machinery and bounds effects, it cannot show the paper's.
* ``gpu`` -- the scale of the H100 measurement in docs/benchmarks.md: 600 steps at batch 64 (64/256
  tokens), stage 1 300 steps at batch 96, the Inf-DDS paper's schedule (warm-up 50, update every 50),
  full test sets.

    for t in scifact nfcorpus; do OMP_NUM_THREADS=1 PYTHONPATH=src nohup nice -n 5 python \\
        benchmarks/bench_mixture.py --preset cpu --data ../shared/data --targets $t --work /tmp/mix-$t \\
        > /tmp/mix-$t.log 2>&1 & done; wait
    python benchmarks/bench_mixture.py --report-only --work /tmp/mix-scifact --merge /tmp/mix-nfcorpus

(``--seeds`` splits one target's seeds over processes: give each its own ``--work`` whose
``loo-<target>`` links ``uniform-s<first seed>`` and ``stage1-*`` of the first, then ``--merge`` them all;
with ``--seeds 44`` alone the process trains ``uniform-s44`` as its stage 0.)
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_collections import DEFAULT_DATA, build_all  # noqa: E402

log = logging.getLogger("bench_mixture")
TARGETS = ("scifact", "nfcorpus")
STAGE1 = ("tdro", "doremi", "groupdro")
TRANSFER_ARMS = [("tdro", "top:0.7"), ("tdro", "reweight"), ("tdro", "loss"), ("doremi", "reweight"),
                 ("groupdro", "reweight")]
ARMS = (["uniform", "size", "temperature"] + [f"{s}:{t}" for s, t in TRANSFER_ARMS] + ["infdds", "multidds"])

PRESETS = {
    "cpu": dict(steps=8, batch_size=4, stage1_steps=4, stage1_batch_size=11, lr=1e-4, query_len=24, doc_len=48,
                test_queries={"scifact": 50, "nfcorpus": 20}, test_docs=150, max_per_collection=1500,
                infdds={"warmup_steps": 2, "update_every": 3, "subset_size": 3, "dev_batch_size": 8},
                seeds=[42, 43, 44]),
    "gpu": dict(steps=600, batch_size=64, stage1_steps=300, stage1_batch_size=96, lr=2e-5, query_len=64,
                doc_len=256, test_queries={}, test_docs=None, max_per_collection=20000,
                infdds={"warmup_steps": 50, "update_every": 50}, seeds=[42, 43, 44]),
}


def dev_dir(args, target: str) -> tuple[Path, str]:
    """The target's dev split: NFCorpus dev; SciFact train queries (no training collection uses them here)."""
    src = args.data / target
    if (src / "qrels" / "dev.tsv").exists():
        return src, "dev"
    return src, "train"


def base_values(args, data: list[str], out: Path, seed: int) -> dict:
    return dict(model=None, data=data, output_dir=str(out), max_steps=args.steps, batch_size=args.batch_size,
                learning_rate=args.lr, warmup_ratio=0.1, query_max_length=args.query_len,
                doc_max_length=args.doc_len, num_negatives=1, seed=seed, log_every=5, save_every=100000,
                show_progress=False, device=args.device, resume=True)


def train_arm(args, arm: str, data: list[str], root: Path, seed: int, target: str,
              weights: dict[str, Path], reference: Path | None) -> Path:
    from drmix.config import TrainConfig
    from drmix.train.trainer import train

    out = root / f"{arm.replace(':', '-')}-s{seed}"
    if (out / "model" / "modules.json").exists():
        return out / "model"
    if arm == "uniform" and reference is not None and seed == args.seeds[0]:
        return reference
    v = base_values(args, data, out, seed)
    v.update(batching="homogeneous", mixture="uniform", strategy="static")
    if arm in ("size", "temperature"):
        v.update(mixture=arm, mixture_temperature=2.0)
    elif arm in ("infdds", "multidds"):
        d, split = dev_dir(args, target)
        v.update(strategy=arm, dev=[str(d)], dev_split=split, infdds=dict(args.infdds))
    elif ":" in arm:
        strat, transfer = arm.split(":", 1)
        v.update(transfer=transfer, weights_file=str(weights[strat]))
    t0 = time.perf_counter()
    result = train(TrainConfig.model_validate(v))
    log.info("%s %s seed %d trained in %.0f s", target, arm, seed, time.perf_counter() - t0)
    return result.model_dir


def learn_weights(args, data: list[str], root: Path, strategy: str, reference: Path) -> Path:
    from drmix.config import TrainConfig
    from drmix.pipeline import optimize_weights, stage1_config

    out = root / f"stage1-{strategy}"
    if (out / "weights.json").exists() and (out / "model" / "modules.json").exists():
        return out / "weights.json"
    base = TrainConfig.model_validate(base_values(args, data, out, args.seeds[0]))
    cfg = stage1_config(base, strategy=strategy, reference=None if strategy == "groupdro" else str(reference),
                        output_dir=out, overrides={"max_steps": args.stage1_steps,
                                                   "batch_size": args.stage1_batch_size})
    t0 = time.perf_counter()
    optimize_weights(cfg)
    log.info("stage 1 %s in %.0f s", strategy, time.perf_counter() - t0)
    return out / "weights.json"


def evaluate(args, model_dir: Path, dataset, cache: Path) -> dict[str, float]:
    """Per-query nDCG@10 of a model on the (subsampled) test set, cached next to the model."""
    from drmix.evaluation.evaluate import evaluate_dataset
    from drmix.model.encoder import load_encoder

    if cache.exists():
        return json.loads(cache.read_text())
    model = load_encoder(str(model_dir))
    per_query: dict = {}
    evaluate_dataset(model, dataset, metrics=("ndcg@10",), max_length=args.doc_len, per_query=per_query)
    scores = {q: v["ndcg@10"] for q, v in per_query.items()}
    cache.write_text(json.dumps(scores))
    return scores


def prepare_target(args, collections: Path, target: str, results: dict) -> dict:
    """Stage 0 (first seed: the uniform arm's first model and the frozen reference) and stage 1, once."""
    from drmix.config import TrainConfig
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample
    from drmix.train.trainer import train

    root = args.work / f"loo-{target}"
    root.mkdir(parents=True, exist_ok=True)
    data = sorted(str(p) for p in collections.glob("*.jsonl") if p.stem != target)
    test = subsample(load_beir(args.data / target, "test"), max_queries=args.test_queries.get(target),
                     max_docs=args.test_docs, seed=0)
    log.info("%s: %d training collections; test %d queries, %d documents", target, len(data), len(test.queries),
             len(test.corpus))
    tr = results.setdefault(target, {"arms": {}, "weights": {}, "seconds": {}})
    ref_out = root / f"uniform-s{args.seeds[0]}"
    if not (ref_out / "model" / "modules.json").exists():
        v = base_values(args, data, ref_out, args.seeds[0])
        v.update(batching="homogeneous", mixture="uniform", strategy="static")
        t0 = time.perf_counter()
        train(TrainConfig.model_validate(v))
        tr["seconds"]["stage0"] = round(time.perf_counter() - t0, 1)
    reference = ref_out / "model"
    weights = {}
    for strategy in STAGE1:
        t0 = time.perf_counter()
        weights[strategy] = learn_weights(args, data, root, strategy, reference)
        tr["seconds"].setdefault(f"stage1-{strategy}", round(time.perf_counter() - t0, 1))
        learned = json.loads(weights[strategy].read_text())
        tr["weights"][strategy] = {"weights": dict(zip(learned["collections"], learned["weights"])),
                                   "top70": learned.get("top", {}).get("70", [])}
    return {"root": root, "data": data, "test": test, "weights": weights, "reference": reference}


def run_arms(args, target: str, prep: dict, seed: int, results: dict, save) -> None:
    tr = results[target]
    for arm in args.arms:
        if arm in tr["arms"] and str(seed) in tr["arms"][arm]:
            continue
        t0 = time.perf_counter()
        model_dir = train_arm(args, arm, prep["data"], prep["root"], seed, target, prep["weights"], prep["reference"])
        scores = evaluate(args, model_dir, prep["test"], model_dir.parent / f"test-{target}.json")
        tr["arms"].setdefault(arm, {})[str(seed)] = scores
        tr["seconds"][f"{arm}-s{seed}"] = round(time.perf_counter() - t0, 1)
        log.info("%s %s seed %d: nDCG@10 %.4f", target, arm, seed, sum(scores.values()) / len(scores))
        save()


# ------------------------------------------------------------------------------------------------ report

def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% Student-t interval over seeds."""
    from scipy import stats

    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, float("nan")
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    return m, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def summarise(results: dict, arms: list[str] = ARMS) -> dict:
    """Per target and average: mean over seeds, 95% interval over seeds, paired tests vs uniform.

    Each arm is paired with uniform over the seeds both have run (a cut-short run may lack some): each
    query's score is averaged over those seeds for both, then compared query by query.
    """
    from drmix.evaluation.compare import Scored, compare

    targets = [t for t in results if "uniform" in results[t]["arms"]]
    out: dict = {"targets": targets, "arms": {}}

    def averaged(arm: str, seeds: dict[str, list[str]]) -> dict:
        pq = {}
        for t in targets:
            runs = [results[t]["arms"][arm][s] for s in seeds[t]]
            qids = set.intersection(*(set(r) for r in runs))
            pq[t] = {q: {"ndcg@10": sum(r[q] for r in runs) / len(runs)} for q in qids}
        return pq

    for arm in arms:
        if not all(arm in results[t]["arms"] for t in targets):
            continue
        seeds = {t: sorted(s for s in results[t]["arms"][arm] if s in results[t]["arms"]["uniform"]) for t in targets}
        if not all(seeds.values()):
            continue
        means = {t: [sum(r.values()) / len(r) for r in (results[t]["arms"][arm][s] for s in seeds[t])]
                 for t in targets}
        row = {}
        for t in targets:
            m, h = _mean_ci(means[t])
            row[t] = {"mean": m, "ci": h, "seeds": len(means[t])}
        n_seeds = min(len(v) for v in means.values())
        avg_per_seed = [sum(means[t][i] for t in targets) / len(targets) for i in range(n_seeds)]
        m, h = _mean_ci(avg_per_seed)
        row["average"] = {"mean": m, "ci": h, "seeds": n_seeds}
        if arm != "uniform":
            comp = compare([Scored("uniform", averaged("uniform", seeds)), Scored(arm, averaged(arm, seeds))],
                           metric="ndcg@10", permutations=10000, seed=0)
            for d in comp.rows[arm]:
                key = d.dataset if d.dataset in row else "average"
                row[key].update(delta=d.delta, t_p=d.t_p, fisher_p=d.fisher_p, significant=comp.significant(d),
                                queries=d.queries, low=d.low, high=d.high)
        out["arms"][arm] = row
    return out


def report(summary: dict, results: dict) -> str:
    targets = summary["targets"]
    cols = targets + (["average"] if len(targets) > 1 else [])
    lines = ["| arm | " + " | ".join(f"{c} nDCG@10 (95% CI over seeds) | Δ vs uniform (p t / p rand.)" for c in cols)
             + " |", "|---|" + "---:|---:|" * len(cols)]
    for arm, row in summary["arms"].items():
        cells = []
        for c in cols:
            r = row[c]
            cells.append(f"{r['mean']:.4f} ± {r['ci']:.4f} (n={r['seeds']})")
            if "delta" in r:
                star = "*" if r["significant"] else ""
                cells.append(f"{r['delta']:+.4f}{star} ({r['t_p']:.3f} / {r['fisher_p']:.3f})")
            else:
                cells.append("—")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", "Learned weights (stage 1, first seed), collections by tDRO weight; * = in tDRO's top-70%:", ""]
    for t in targets:
        w = results[t]["weights"]
        if "tdro" not in w:
            continue
        names = sorted(w["tdro"]["weights"], key=lambda n: -w["tdro"]["weights"][n])
        lines += [f"LOO {t}:", "", "| collection | tDRO | DoReMi | GroupDRO |", "|---|---:|---:|---:|"]
        for n in names:
            star = "*" if n in w["tdro"]["top70"] else ""
            lines.append(f"| {n}{star} | {w['tdro']['weights'][n]:.4f} | "
                         f"{w.get('doremi', {}).get('weights', {}).get(n, float('nan')):.4f} | "
                         f"{w.get('groupdro', {}).get('weights', {}).get(n, float('nan')):.4f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="learned mixtures vs uniform, leave-one-out nDCG@10, seeds and tests")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="scale (see the module docstring)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data directory (read-only)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/drmix-bench-mix"), help="work directory")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), help="leave-one-out targets")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds of every arm (preset: 42 43 44)")
    ap.add_argument("--steps", type=int, default=None, help="stage 0/2 optimiser steps")
    ap.add_argument("--arms", nargs="+", default=None, help=f"subset of {' '.join(ARMS)}")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from results.json")
    ap.add_argument("--merge", type=Path, nargs="+", default=[],
                    help="with --report-only: also read the results.json of these work directories "
                         "(one process per target)")
    args = ap.parse_args(argv)
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    args.data = args.data.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "filelock", "drmix.train.trainer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.arms = list(args.arms or ARMS)
    res_path = args.work / "results.json"
    results = json.loads(res_path.read_text())["results"] if res_path.exists() else {}
    for other in args.merge:                     # per target, per arm, per seed
        for target, tr in json.loads((other / "results.json").read_text())["results"].items():
            mine = results.setdefault(target, {"arms": {}, "weights": {}, "seconds": {}})
            for arm, seeds in tr["arms"].items():
                mine["arms"].setdefault(arm, {}).update(seeds)
            for key in ("weights", "seconds"):
                for k, v in tr[key].items():
                    mine[key].setdefault(k, v)

    def save() -> None:
        res_path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}))

    if not args.report_only:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
        collections = args.work / "collections"
        sizes = build_all(args.data, collections, seed=0, max_per_collection=args.max_per_collection)
        log.info("collections: %s", sizes)
        preps = {t: prepare_target(args, collections, t, results) for t in args.targets}
        save()
        for seed in args.seeds:                  # seed-major: a cut-short run still has every target
            for target in args.targets:
                run_arms(args, target, preps[target], seed, results, save)
            print(report(summarise(results, args.arms), results), flush=True)
    summary = summarise(results, args.arms)
    text = report(summary, results)
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.work / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
