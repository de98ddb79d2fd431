"""Training throughput: `drmix train` vs the sentence-transformers trainer with MultipleNegativesRankingLoss.

Same model (all-MiniLM-L6-v2), same data (the first steps x batch-size SciFact train query/positive pairs
from ../shared/data, so each trainer makes exactly one pass over the same examples), same batch size,
sequence length, learning rate and number of steps; in-batch negatives only (what MNRL does), so both
optimise the same loss. Runs alternate (drmix, ST, drmix, ST, ...). Throughput is measured in the
steady state, from the end of the first optimiser step to the end of the last one (a per-step callback in
both trainers), so model loading, the first step's warm-up and the final save are left out; it is taken
both as wall time and as CPU time of the process (all threads; robust when other jobs share the machine).
Prints samples/s and the ratios drmix / ST.

``--device`` and ``--precision`` (fp32 | bf16 | fp16 | auto) apply to both trainers. ``--floor`` also
times drmix's bare training step (forward of queries and documents, InfoNCE, backward, fused AdamW)
repeated on one pre-tokenised batch: the compute floor the full trainer is compared with.
Presets: ``--preset cpu`` (batch 16, 128 tokens) and ``--preset gpu`` (batch 128, 256 tokens, 60 steps,
bf16, floor), the issue's H100 setting.

    python benchmarks/bench_train.py --data ../shared/data --steps 16 --batch-size 16 --rounds 3
    python benchmarks/bench_train.py --data ../shared/data --preset gpu --device cuda
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: E402  (sets the offline environment)


def scifact_pairs(data: Path, out: Path, n: int | None = None) -> Path:
    """SciFact train query/positive pairs; the first ``n`` only, so both trainers see the same examples."""
    from drmix.data.collections import load_beir_collection

    col = load_beir_collection(data / "scifact", split="train")
    rows = [{"query": q, "positive": p[0]} for q, p in zip(col.dataset["query"], col.dataset["positives"])][:n]
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
                      temperature=0.05, device=args.device, seed=0, mixed_precision=_drmix_precision(args))
    marks: list[tuple[float, float]] = []
    trainer = Trainer(cfg, model=load_encoder(args.model, device=args.device),
                      callbacks=[lambda ctx: (_sync(args), marks.append((time.perf_counter(), time.process_time())))])
    trainer.train()
    return _throughput(marks, args)


def _drmix_precision(args) -> str:
    return {"fp32": "no"}.get(args.precision, args.precision)


def _sync(args) -> None:
    if args.device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _throughput(marks: list[tuple[float, float]], args) -> tuple[float, float]:
    """(samples per wall second, samples per CPU second) between the first and the last step end."""
    n = (len(marks) - 1) * args.batch_size
    return n / (marks[-1][0] - marks[0][0]), n / (marks[-1][1] - marks[0][1])


def run_st(pairs: Path, out: Path, args) -> float:
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformerTrainer, SentenceTransformerTrainingArguments,
                                       losses)

    from drmix.model.encoder import load_encoder

    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    ds = Dataset.from_dict({"anchor": [r["query"] for r in rows], "positive": [r["positive"] for r in rows]})
    model = load_encoder(args.model, device=args.device)
    model.max_seq_length = args.max_length
    prec = args.precision
    if prec == "auto":
        from drmix.device import resolve_precision

        prec = {"no": "fp32"}.get(resolve_precision("auto", args.device), resolve_precision("auto", args.device))
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(out), per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=2e-5,
        warmup_ratio=0.1, save_strategy="no", report_to=[], logging_steps=10**6, seed=0,
        use_cpu=args.device == "cpu", bf16=prec == "bf16", fp16=prec == "fp16", tf32=None,
        disable_tqdm=True, dataloader_drop_last=True)
    from transformers import TrainerCallback

    marks: list[tuple[float, float]] = []

    class Marks(TrainerCallback):
        def on_step_end(self, *a, **k):
            _sync(args)
            marks.append((time.perf_counter(), time.process_time()))

    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=ds, callbacks=[Marks()],
                                         loss=losses.MultipleNegativesRankingLoss(model, scale=20.0))
    trainer.train()
    return _throughput(marks, args)


def run_floor(pairs: Path, args) -> float:
    """Samples/s of drmix's bare step on one pre-tokenised batch (no data, no logging): the compute floor."""
    import torch

    from drmix.device import to_device
    from drmix.model.encoder import load_encoder
    from drmix.model.losses import info_nce
    from drmix.train.inputs import Featurizer
    from drmix.train.precision import Precision

    rows = [json.loads(line) for line in pairs.read_text().splitlines()][:args.batch_size]
    model = load_encoder(args.model, device=args.device)
    model.train()
    feats = Featurizer(model)
    q = to_device(feats([r["query"] for r in rows], args.max_length), args.device)
    d = to_device(feats([r["positive"] for r in rows], args.max_length), args.device)
    precision = Precision(_drmix_precision(args), args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
    times = []
    for _ in range(args.steps):
        with precision.autocast():
            loss = info_nce(model(dict(q))["sentence_embedding"].float(), model(dict(d))["sentence_embedding"].float(),
                            temperature=0.05).mean()
        precision.backward(loss)
        precision.step(opt)
        opt.zero_grad(set_to_none=True)
        _sync(args)
        times.append(time.perf_counter())
    return (len(times) - 1) * args.batch_size / (times[-1] - times[0])


PRESETS = {"cpu": {"batch_size": 16, "max_length": 128, "steps": 20, "precision": "fp32"},
           "gpu": {"batch_size": 128, "max_length": 256, "steps": 60, "precision": "bf16", "floor": True}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with ``--preset``'s settings applied."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--model", default=None, help="model both trainers start from (default all-MiniLM-L6-v2)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both trainers)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "auto"],
                    help="training precision of both trainers")
    ap.add_argument("--floor", action="store_true", help="also time the bare step on one pre-tokenised batch")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="cpu or gpu settings (override the options above)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    return _common.apply_preset(ap.parse_args(argv), PRESETS)


def estimate(args: argparse.Namespace):
    """The device time of ``run(args)`` (:class:`_lease.Estimate`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _lease import Estimate

    est = Estimate()  # both trainers, every round, plus the floor's steps; sentence-transformers' own speed
    est.train("trainers", 2 * args.rounds * args.steps * args.batch_size, runs=2 * args.rounds)
    if args.floor:
        est.train("floor", 20 * args.batch_size)
    return est


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.estimate or args.preset == "gpu":
        from _lease import estimate_line

        print(estimate_line(estimate(args), "this command"), flush=True)
        if args.estimate:
            return
    run(args)


def run(args: argparse.Namespace) -> dict:
    """Both trainers ``--rounds`` times (and the floor with ``--floor``), printed; the figures: per round
    ``[samples/s wall, samples per CPU-s]`` of each trainer, the floor's samples/s (or None)."""
    import logging

    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # exactly steps x batch rows: each trainer makes one pass over the same examples (in its own order)
        pairs = scifact_pairs(args.data, tmp, args.steps * args.batch_size)
        drmix_sps, st_sps = [], []
        for r in range(args.rounds):
            drmix_sps.append(run_drmix(pairs, tmp / f"drmix{r}", args))
            st_sps.append(run_st(pairs, tmp / f"st{r}", args))
            print(f"round {r}: drmix {drmix_sps[-1][0]:.2f} samples/s ({drmix_sps[-1][1]:.2f} per CPU-s), "
                  f"sentence-transformers {st_sps[-1][0]:.2f} samples/s ({st_sps[-1][1]:.2f} per CPU-s)", flush=True)
    dw, sw = (statistics.median(x[0] for x in v) for v in (drmix_sps, st_sps))
    dc, sc = (statistics.median(x[1] for x in v) for v in (drmix_sps, st_sps))
    print(f"\n| trainer | samples/s wall (median of {args.rounds}) | samples per CPU-second |\n|---|---|---|")
    print(f"| drmix train | {dw:.2f} | {dc:.2f} |\n| sentence-transformers + MNRL | {sw:.2f} | {sc:.2f} |")
    print(f"\nratio drmix / sentence-transformers: wall {dw / sw:.2f}, CPU {dc / sc:.2f} "
          f"(device {args.device}, precision {args.precision}, batch {args.batch_size}, {args.max_length} tokens)")
    if args.floor:
        with tempfile.TemporaryDirectory() as tmp:
            floor = run_floor(scifact_pairs(args.data, Path(tmp), args.batch_size), args)
        print(f"compute floor (bare step, one pre-tokenised batch): {floor:.2f} samples/s; "
              f"drmix reaches {100 * dw / floor:.0f}% of it")
    logging.disable(logging.NOTSET)
    return {"drmix": [list(x) for x in drmix_sps], "st": [list(x) for x in st_sps],
            "floor": floor if args.floor else None, "device": args.device, "precision": args.precision,
            "batch_size": args.batch_size, "max_length": args.max_length, "steps": args.steps}


if __name__ == "__main__":
    main()
