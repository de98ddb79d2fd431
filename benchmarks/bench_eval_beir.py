"""``drmix eval`` (``evaluate_model``) with the default model on BEIR datasets, next to public figures.

A sanity check that encoding, prompts and metrics are right: the scores should match what
all-MiniLM-L6-v2 is publicly reported to score (MTEB retrieval results) within about 0.01.

    python benchmarks/bench_eval_beir.py --data ../shared/data --datasets scifact
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import _common  # noqa: E402,F401  (offline environment)
REPO = Path(__file__).resolve().parents[1]

# nDCG@10 of sentence-transformers/all-MiniLM-L6-v2 on the BEIR test splits (MTEB retrieval results).
PUBLIC_NDCG10 = {"scifact": 0.645, "nfcorpus": 0.316}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="shared data folder")
    ap.add_argument("--datasets", nargs="+", default=["scifact"], help="BEIR folders under --data")
    ap.add_argument("--split", default="test")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--progress", action="store_true", help="show encoding progress bars")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from drmix.evaluation.evaluate import evaluate_model

    t0 = time.perf_counter()
    report = evaluate_model(None, [args.data / d for d in args.datasets], split=args.split,
                            batch_size=args.batch_size, show_progress=args.progress, model_name="default")
    wall = time.perf_counter() - t0
    metrics = report.metrics
    print("| dataset | docs | queries | " + " | ".join(metrics) + " | public nDCG@10 | diff | seconds |")
    print("|---|---:|---:|" + "---:|" * (len(metrics) + 3))
    for name, row in report.results.items():
        info = report.info[name]
        public = PUBLIC_NDCG10.get(name)
        diff = f"{row['ndcg@10'] - public:+.4f}" if public is not None and "ndcg@10" in row else ""
        print(f"| {name} | {info['documents']} | {info['queries']} | "
              + " | ".join(f"{row[m]:.4f}" for m in metrics)
              + f" | {public if public is not None else ''} | {diff} | {info['seconds']:.0f} |")
    print(f"\ntotal wall time {wall:.0f} s (model load, corpus encoding, search, metrics)")


if __name__ == "__main__":
    main()
