"""Training throughput: `drmix train` vs the sentence-transformers trainer with MultipleNegativesRankingLoss.

Same model (all-MiniLM-L6-v2), same data (SciFact train query/positive pairs from ../shared/data), same
batch size, sequence length, learning rate and number of steps; in-batch negatives only (what MNRL does),
so both optimise the same loss. Runs alternate (drmix, ST, drmix, ST, ...) and the wall time of each
``train()`` call is measured, model loading excluded. Prints samples/s and the ratio drmix / ST.

    python benchmarks/bench_train.py --data ../shared/data --steps 20 --batch-size 16 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def scifact_pairs(data: Path, out: Path) -> Path:
    from drmix.data.collections import load_beir_collection

    col = load_beir_collection(data / "scifact", split="train")
    rows = [{"query": q, "positive": p[0]} for q, p in zip(col.dataset["query"], col.dataset["positives"])]
    path = out / "scifact.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_drmix(pairs: Path, out: Path, args) -> float:
    from drmix.config import TrainConfig
    from drmix.model.encoder import load_encoder
    from drmix.train.trainer import Trainer

    cfg = TrainConfig(data=[str(pairs)], output_dir=str(out), max_steps=args.steps, batch_size=args.batch_size,
                      learning_rate=2e-5, warmup_ratio=0.1, num_negatives=0, query_max_length=args.max_length,
                      doc_max_length=args.max_length, save_every=10**6, log_every=10**6, show_progress=False,
                      temperature=0.05, device="cpu", seed=0)
    trainer = Trainer(cfg, model=load_encoder(None, device="cpu"))
    t = time.perf_counter()
    trainer.train()
    return args.steps * args.batch_size / (time.perf_counter() - t)


def run_st(pairs: Path, out: Path, args) -> float:
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformerTrainer, SentenceTransformerTrainingArguments,
                                       losses)

    from drmix.model.encoder import load_encoder

    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    ds = Dataset.from_dict({"anchor": [r["query"] for r in rows], "positive": [r["positive"] for r in rows]})
    model = load_encoder(None, device="cpu")
    model.max_seq_length = args.max_length
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(out), per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=2e-5,
        warmup_ratio=0.1, save_strategy="no", report_to=[], logging_steps=10**6, seed=0, use_cpu=True,
        disable_tqdm=True, dataloader_drop_last=True)
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=ds,
                                         loss=losses.MultipleNegativesRankingLoss(model, scale=20.0))
    t = time.perf_counter()
    trainer.train()
    return args.steps * args.batch_size / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import logging

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pairs = scifact_pairs(args.data, tmp)
        drmix_sps, st_sps = [], []
        for r in range(args.rounds):
            drmix_sps.append(run_drmix(pairs, tmp / f"drmix{r}", args))
            st_sps.append(run_st(pairs, tmp / f"st{r}", args))
            print(f"round {r}: drmix {drmix_sps[-1]:.2f} samples/s, sentence-transformers {st_sps[-1]:.2f} samples/s")
    d, s = statistics.median(drmix_sps), statistics.median(st_sps)
    print("\n| trainer | samples/s (median of %d) |\n|---|---|" % args.rounds)
    print(f"| drmix train | {d:.2f} |\n| sentence-transformers + MNRL | {s:.2f} |")
    print(f"\nratio drmix / sentence-transformers: {d / s:.2f}")


if __name__ == "__main__":
    main()
