"""Inf-DDS vs static sampling vs MultiDDS: target-domain nDCG@10, sampling trajectories and cost.

Questions (the claims of the Inf-DDS paper, seed 002, tested at CPU scale):

1. Does Inf-DDS beat static sampling (tau = 1 and tau = ∞) on the target test sets?
2. Is it more stable than MultiDDS across initialisations/seeds?
3. Does it cost well under 2x static training?

Setup: all-MiniLM-L6-v2 fine-tuned on six collections built from ../shared/data (SciFact train minus a
carved dev split, NFCorpus train, AltLex, MSRP, SICK, XQuAD; builders from ``build_collections.py``),
optimising for one dev set (NFCorpus dev) and for two (NFCorpus dev + SciFact dev carved from the SciFact
train queries, seeded). Every model is scored with nDCG@10 on the NFCorpus and SciFact test splits over
seeded sub-corpora (``--eval-queries`` judged queries, corpus = up to 3 judged documents per query + random
others up to ``--eval-docs``). Cost is the look-ahead time over the regular-step time measured inside each
run (``weights.json``: ``lookahead_s`` / ``regular_s``), plus the wall-clock ratio against the static run.

    python benchmarks/bench_infdds.py --work /tmp/drmix-infdds 2>&1 | tee /tmp/drmix-infdds.log
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np

from _common import (DEFAULT_DATA, dataset_key, keyed_read, keyed_write,  # noqa: E402  (and the offline environment)
                     reusable)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drmix.io.atomic import atomic_write_json  # noqa: E402
from drmix.outputs import run_finished  # noqa: E402

log = logging.getLogger("bench_infdds")


# --------------------------------------------------------------------------------------------- data
def carve_scifact(data: Path, out: Path, *, dev_queries: int, seed: int) -> Path:
    """A BEIR copy of SciFact whose train qrels lose ``dev_queries`` seeded queries to a new dev split."""
    from drmix.data.beir import load_beir, write_beir

    if (out / "qrels" / "dev.tsv").exists():
        return out
    train = load_beir(data / "scifact", "train")
    test = load_beir(data / "scifact", "test", load_corpus=False)
    qids = sorted(train.qrels)
    dev = set(random.Random(seed).sample(qids, dev_queries))
    queries = dict(train.queries)
    queries.update(test.queries)
    qrels = {"train": {q: train.qrels[q] for q in qids if q not in dev},
             "dev": {q: train.qrels[q] for q in qids if q in dev}, "test": test.qrels}
    return write_beir(out, train.corpus, queries, qrels)


def build_collections(data: Path, work: Path, scifact_split: Path, *, cap_size: int, seed: int,
                      max_words: int) -> list[str]:
    import build_collections as bc

    from drmix.io.atomic import write_jsonl_atomic

    out = work / "collections"
    out.mkdir(parents=True, exist_ok=True)
    builders = {
        "scifact": lambda: bc.beir_collection(scifact_split, max_words=max_words, seed=seed),
        "nfcorpus": lambda: bc.beir_collection(data / "nfcorpus", max_words=max_words, seed=seed),
        "altlex": lambda: bc.altlex(data, max_words=max_words, seed=seed, limit=2 * cap_size),
        "msrp": lambda: bc.msrp(data, max_words=max_words, seed=seed),
        "sick": lambda: bc.sick(data, max_words=max_words, seed=seed),
        "xquad": lambda: bc.xquad(data, max_words=max_words, seed=seed),
    }
    key = {"cap": cap_size, "seed": seed, "max_words": max_words, "scifact": str(scifact_split)}
    fresh = keyed_read(out / "build.json", key) is not None     # built with these settings: reused
    paths = []
    for name, build in builders.items():
        path = out / f"{name}.jsonl"
        if not (fresh and path.exists()):
            write_jsonl_atomic(path, bc.cap(build(), cap_size, seed))
        paths.append(str(path))
    keyed_write(out / "build.json", key, sorted(builders))
    return paths


# --------------------------------------------------------------------------------------------- runs
def train_run(name: str, work: Path, data_paths: list[str], args, *, strategy: str, init_tau: float | None,
              dev: list[str], seed: int, lookahead: str = "adam") -> dict:
    """Train one model (or reuse a finished run); return its summary."""
    from drmix.config import TrainConfig
    from drmix.api import train

    out = work / "runs" / name
    summary_path = out / "summary.json"
    mixture = "uniform" if init_tau is None else "temperature"
    cfg = TrainConfig(data=data_paths, output_dir=str(out), max_steps=args.steps, batch_size=args.batch_size,
                      learning_rate=args.lr, warmup_ratio=0.1, num_negatives=0, query_max_length=32,
                      doc_max_length=args.doc_max_length, dev=dev, seed=seed, save_every=10**6, log_every=10,
                      show_progress=False, device="cpu", mixture=mixture, mixture_temperature=init_tau or 1.0,
                      strategy="static" if strategy == "static" else strategy,
                      infdds={"update_every": args.update_every, "warmup_steps": args.warmup,
                              "lookahead_steps": args.lookahead, "init_temperature": init_tau,
                              "scorer_lr": args.scorer_lr, "dev_batch_size": args.dev_batch_size,
                              "lookahead_optimizer": lookahead})
    if reusable(out, cfg, finished=lambda d: (d / "summary.json").exists() and run_finished(d)):
        return json.loads(summary_path.read_text())     # trained with these settings (others stop the run)
    t0 = time.perf_counter()
    result = train(cfg)  # the registry builds the strategy (static: --mixture at mixture_temperature)
    wall = time.perf_counter() - t0
    weights = json.loads((result.output_dir / "weights.json").read_text())
    traj = []
    traj_path = result.output_dir / "weights.jsonl"
    if traj_path.exists():
        traj = [json.loads(line) for line in traj_path.read_text().splitlines() if line.strip()]
    summary = {"name": name, "strategy": strategy, "init_tau": init_tau, "seed": seed, "dev": dev, "wall_s": wall,
               "weights": weights, "trajectory": [[r["weights"][n] for n in weights["collections"]] for r in traj
                                                  if isinstance(r.get("weights"), dict)]}
    summary_path.write_text(json.dumps(summary))
    log.info("%s: %.0f s, final weights %s", name, wall,
             dict(zip(weights["collections"], np.round(weights["weights"], 3).tolist())))
    return summary


def small_test_set(data, *, queries: int, docs: int, judged_per_query: int, seed: int):
    """A cheap, seeded test set: ``queries`` judged queries, up to ``judged_per_query`` of each query's
    most relevant documents, and random other documents up to ``docs`` in all. Qrels are restricted to
    the kept corpus (the remaining judged documents are simply absent), the same for every model."""
    from drmix.data.beir import BeirDataset

    rng = random.Random(seed)
    qids = sorted(rng.sample(sorted(data.qrels), min(queries, len(data.qrels))))
    keep: set[str] = set()
    qrels = {}
    for q in qids:
        best = sorted(data.qrels[q].items(), key=lambda kv: (-kv[1], kv[0]))[:judged_per_query]
        qrels[q] = {d: s for d, s in best if s > 0}
        keep.update(qrels[q])
    others = sorted(set(data.corpus) - keep)
    keep.update(rng.sample(others, max(0, min(len(others), docs - len(keep)))))
    corpus = {d: data.corpus[d] for d in sorted(keep)}
    return BeirDataset(root=data.root, corpus=corpus, queries={q: data.queries[q] for q in qids},
                       qrels={q: r for q, r in qrels.items() if r}, split=data.split)


def evaluation_key(model_dir: str | None, tests: dict, args) -> dict:
    """Everything a cached score depends on: the model (its path and a fingerprint of its files), each test set
    (the ids its caps and seed kept) and the length documents are encoded at."""
    from drmix.evaluation.suite import model_stamp

    return {"model": str(model_dir), "model_files": model_stamp(model_dir),
            "tests": {name: dataset_key(data) for name, data in tests.items()}, "max_length": args.doc_max_length,
            "metric": "ndcg@10"}


def evaluate(model_dir: str | None, tests: dict, args) -> dict[str, float]:
    from drmix.evaluation.evaluate import evaluate_dataset
    from drmix.model.encoder import load_encoder

    model = load_encoder(model_dir, device="cpu")
    return {name: evaluate_dataset(model, data, k=10, batch_size=32, metrics=("ndcg@10",),
                                   max_length=args.doc_max_length)["ndcg@10"] for name, data in tests.items()}


def stability(traj: list[list[float]]) -> tuple[float, float]:
    """(path length, net displacement) of the weight trajectory in L1; their ratio is 1 for a straight path."""
    t = np.asarray(traj)
    if len(t) < 2:
        return 0.0, 0.0
    return float(np.abs(np.diff(t, axis=0)).sum()), float(np.abs(t[-1] - t[0]).sum())


# --------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data directory (read-only)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/drmix-infdds"), help="working directory (runs, data)")
    ap.add_argument("--steps", type=int, default=30, help="training steps per run")
    ap.add_argument("--batch-size", type=int, default=16, help="training batch size")
    ap.add_argument("--lr", type=float, default=2e-5, help="peak learning rate")
    ap.add_argument("--doc-max-length", type=int, default=96, help="document token limit (training and eval)")
    ap.add_argument("--update-every", type=int, default=5, help="Inf-DDS/MultiDDS update interval")
    ap.add_argument("--warmup", type=int, default=5, help="steps before the first policy update")
    ap.add_argument("--lookahead", type=int, default=1, help="look-ahead steps l")
    ap.add_argument("--scorer-lr", type=float, default=0.2, help="Adam learning rate of the scorer psi")
    ap.add_argument("--dev-batch-size", type=int, default=16, help="dev batch per dev set and update")
    ap.add_argument("--cap", type=int, default=3000, help="cap on examples per collection")
    ap.add_argument("--eval-queries", type=int, default=100, help="test queries per test set")
    ap.add_argument("--eval-docs", type=int, default=600, help="corpus size per test set (judged docs always kept)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 avoids oversubscription on a shared machine)")
    ap.add_argument("--report-only", action="store_true", help="print the tables from finished runs, train nothing")
    ap.add_argument("--lookahead-optimizers", default="adam",
                    help="comma-separated Inf-DDS look-ahead optimisers to run (adam, rmsprop, sgd)")
    ap.add_argument("--no-stability", action="store_true", help="skip the tau=1 runs of the dynamic strategies")
    ap.add_argument("--no-multi", action="store_true", help="skip the two-dev-set setting")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "sentence_transformers", "datasets", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    data, work = args.data.resolve(), args.work
    import torch

    torch.set_num_threads(args.threads)
    work.mkdir(parents=True, exist_ok=True)

    from drmix.data.beir import load_beir

    scifact_split = carve_scifact(data, work / "scifact-split", dev_queries=200, seed=0)
    paths = build_collections(data, work, scifact_split, cap_size=args.cap, seed=0, max_words=80)
    nf_dev, sf_dev = str(data / "nfcorpus"), str(scifact_split)
    tests = {name: small_test_set(load_beir(data / name, "test"), queries=args.eval_queries, docs=args.eval_docs,
                                  judged_per_query=3, seed=0) for name in ("nfcorpus", "scifact")}
    log.info("test sub-corpora: %s", {n: (len(d.queries), len(d.corpus)) for n, d in tests.items()})

    las = args.lookahead_optimizers.split(",")
    plan = [("static-tauinf", "static", None, [], 1)]
    plan += [(f"infdds-nf-tauinf-{la}", "infdds", None, [nf_dev], 1) for la in las]
    plan += [("multidds-nf-tauinf", "multidds", None, [nf_dev], 1), ("static-tau1", "static", 1.0, [], 1)]
    if not args.no_multi:
        plan += [(f"infdds-nfsf-tauinf-{la}", "infdds", None, [nf_dev, sf_dev], 1) for la in las]
        plan += [("multidds-nfsf-tauinf", "multidds", None, [nf_dev, sf_dev], 1)]
    if not args.no_stability:  # second initialisation (tau = 1) and second seed
        plan += [(f"infdds-nf-tau1-{la}", "infdds", 1.0, [nf_dev], 2) for la in las]
        plan += [("multidds-nf-tau1", "multidds", 1.0, [nf_dev], 2)]
    rows = []
    scores_path = work / "scores.json"
    cached = json.loads(scores_path.read_text()) if scores_path.exists() else {}
    scores: dict[str, dict[str, float]] = {}

    def score(name: str, model_dir: str | None) -> dict[str, float] | None:
        """The model's test scores: cached in scores.json under :func:`evaluation_key` (a score made with
        another model, test set or length is computed again; with --report-only, left out)."""
        key = evaluation_key(model_dir, tests, args)
        entry = cached.get(name)
        if isinstance(entry, dict) and entry.get("key") == json.loads(json.dumps(key)):
            return entry["value"]
        if args.report_only:
            return None
        cached[name] = {"key": key, "value": evaluate(model_dir, tests, args)}
        atomic_write_json(scores_path, cached)
        return cached[name]["value"]

    if (base := score("base", None)) is not None:
        scores["base"] = base
    for name, strategy, tau, dev, seed in plan:
        if args.report_only and not (work / "runs" / name / "summary.json").exists():
            continue
        summary = train_run(name, work, paths, args, strategy=strategy, init_tau=tau, dev=dev, seed=seed,
                            lookahead=name.rsplit("-", 1)[-1] if strategy == "infdds" else "adam")
        if (s := score(name, str(work / "runs" / name / "model"))) is None:
            continue
        scores[name] = s
        rows.append(summary)

    static_wall = {r["init_tau"]: r["wall_s"] for r in rows if r["strategy"] == "static"}
    print(f"\n## bench_infdds ({args.steps} steps, batch {args.batch_size}, update every {args.update_every} after "
          f"{args.warmup}, l={args.lookahead}, scorer lr {args.scorer_lr})\n")
    print(f"| run | nDCG@10 NFCorpus | nDCG@10 SciFact | mean | look-ahead / regular time | wall vs static |")
    print("|---|---|---|---|---|---|")
    if "base" in scores:
        b = scores["base"]
        print(f"| all-MiniLM-L6-v2 (no training) | {b['nfcorpus']:.4f} | {b['scifact']:.4f} | "
              f"{(b['nfcorpus'] + b['scifact']) / 2:.4f} | - | - |")
    for r in rows:
        s = scores[r["name"]]
        w = r["weights"]
        la = w.get("lookahead_s")
        ratio = f"{la / max(w['regular_s'], 1e-9):.2f}" if la is not None else "-"
        wall = r["wall_s"] / static_wall.get(r["init_tau"], static_wall.get(None, r["wall_s"]))
        print(f"| {r['name']} | {s['nfcorpus']:.4f} | {s['scifact']:.4f} | {(s['nfcorpus'] + s['scifact']) / 2:.4f} "
              f"| {ratio} | {wall:.2f}x |")
    print("\n| run | final weights | P(nfcorpus) start -> end | trajectory path / net displacement (L1) |")
    print("|---|---|---|---|")
    for r in rows:
        if r["strategy"] == "static":
            continue
        w = r["weights"]
        final = ", ".join(f"{n} {p:.3f}" for n, p in zip(w["collections"], w["weights"]))
        traj = r["trajectory"]
        i = w["collections"].index("nfcorpus")
        path, net = stability(traj)
        print(f"| {r['name']} | {final} | {traj[0][i]:.3f} -> {traj[-1][i]:.3f} | {path:.3f} / {net:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
