"""Corpus encoding speed: drmix's ``encode_texts`` (what ``drmix index`` runs) vs ``SentenceTransformer.encode``.

Both encode the same SciFact passages (``title + " " + text``) with the same model, batch size and
max length, in one process, alternating which goes first each round. The passages/s ratio is
reported per round and as the median, from wall time and from process CPU time (on a shared,
oversubscribed machine CPU time is the steadier measure of the work done). Also printed: the pad
tokens each batching computes (character-length sorting, as ST does, vs token-length sorting, as
drmix does) and the time of one tokenizer pass over the texts (drmix tokenises each text once and
pads batches from those ids; ST tokenises per batch).

``--device`` (cpu | cuda) and ``--precision`` (drmix's encoding precision: auto | fp32 | fp16 | bf16 |
int8 | onnx | onnx-int8; several, comma-separated, are each timed against the same baseline in the same
rounds) set what drmix runs; ``SentenceTransformer.encode`` always runs at its defaults (fp32), the
baseline the targets name. ``--ndcg`` also evaluates SciFact (full corpus, test queries) with drmix at
fp32 and at each ``--precision`` and prints the nDCG@10 change with a paired t-test over the queries
(95% interval) and Fisher's randomisation test. Presets: ``--preset cpu`` (int8 and onnx-int8, 500
passages, batch 64) and ``--preset gpu`` (auto = fp16/bf16, 8,000 passages, batch 256, with --ndcg).

    python benchmarks/bench_encode.py --data ../shared/data --n 500 --rounds 2
    python benchmarks/bench_encode.py --data ../shared/data --preset cpu --ndcg
    python benchmarks/bench_encode.py --data ../shared/data --preset gpu --device cuda
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import _common  # noqa: E402  (sets the offline environment)
REPO = Path(__file__).resolve().parents[1]


def load_passages(data: Path, n: int) -> list[str]:
    return _common.scifact_passages(data, n)


def pad_tokens(lengths: np.ndarray, order: np.ndarray, batch_size: int) -> int:
    """Pad tokens computed when batches follow ``order`` and each batch pads to its longest member."""
    total = 0
    for s in range(0, len(order), batch_size):
        batch = lengths[order[s:s + batch_size]]
        total += int(batch.max() * len(batch) - batch.sum())
    return total


PRESETS = {"cpu": {"precision": "int8,onnx-int8", "n": 500, "batch_size": 64},
           "gpu": {"precision": "auto", "n": 8000, "batch_size": 256, "ndcg": True}}


def scifact_ndcg(model, data: Path, precision: str, batch_size: int, max_length: int,
                 docs: int | None = None) -> tuple[dict[str, float], float]:
    """Per-query nDCG@10 on SciFact test and the seconds it took, drmix encoding at ``precision``.

    ``docs``: rank against a reduced corpus, every judged document plus the first ``docs`` others (the
    same corpus for every precision, so the change is paired; the level is not the full-corpus figure).
    """
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import evaluate_dataset

    beir = load_beir(data / "scifact", "test")
    if docs is not None:
        judged = {d for rel in beir.qrels.values() for d in rel}
        keep = judged | {d for d in beir.corpus if d not in judged}.intersection(
            [d for d in beir.corpus if d not in judged][:docs])
        beir.corpus = {d: beir.corpus[d] for d in beir.corpus if d in keep}
    t = time.perf_counter()
    per_query: dict = {}
    evaluate_dataset(model, beir, k=100, batch_size=batch_size, metrics=("ndcg@10",), max_length=max_length,
                     precision=precision, per_query=per_query)
    return {q: v["ndcg@10"] for q, v in per_query.items()}, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="shared data folder")
    ap.add_argument("--model", default=None, help="model (default all-MiniLM-L6-v2)")
    ap.add_argument("--n", type=int, default=1000, help="passages to encode")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=256, help="token cap (MiniLM's max_seq_length is 256)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds (each encodes the passages twice)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", default="fp32", help="drmix precision(s), comma-separated: auto, fp32, fp16, bf16, int8, onnx, onnx-int8")
    ap.add_argument("--ndcg", action="store_true", help="also measure SciFact nDCG@10 at fp32 and --precision")
    ap.add_argument("--ndcg-docs", type=int, default=None,
                    help="rank against the judged documents plus this many others (default: the full corpus)")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="cpu or gpu settings (override the options above)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    args = ap.parse_args()
    _common.apply_preset(args, PRESETS)
    if args.estimate or args.preset == "gpu":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _lease import Estimate, estimate_line

        est = Estimate()  # drmix and sentence-transformers, each round twice, per precision; SciFact twice
        n_prec = len([p for p in str(args.precision).split(",") if p.strip()])
        est.encode(2 * 2 * args.rounds * args.n * (1 + n_prec) + (2 * 5483 if args.ndcg else 0))
        print(estimate_line(est, "this command"), flush=True)
        if args.estimate:
            return

    import torch

    from drmix.model.encoder import load_encoder
    from drmix.retrieval.encode import encode_texts, length_order, token_lengths

    model = load_encoder(args.model, device=args.device, max_seq_length=args.max_length)
    texts = load_passages(args.data, args.n)

    t0 = time.perf_counter()
    tok_lengths = token_lengths(model, texts, "", args.max_length)
    t_len = time.perf_counter() - t0
    char_order = np.argsort([-len(t) for t in texts], kind="stable")
    real = int(tok_lengths.sum())
    pads = {"char-sorted (ST)": pad_tokens(tok_lengths, char_order, args.batch_size),
            "token-sorted (drmix)": pad_tokens(tok_lengths, length_order(tok_lengths), args.batch_size)}

    precisions = [p.strip() for p in str(args.precision).split(",") if p.strip()]

    def run_drmix(precision: str, batch: list[str] = texts) -> np.ndarray:
        return encode_texts(model, batch, batch_size=args.batch_size, max_length=args.max_length,
                            precision=precision)

    def run_st(batch: list[str] = texts) -> np.ndarray:
        return model.encode(batch, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)

    run_st(texts[:16])  # warm-up (thread pools, allocator, int8 copy, ONNX export) on a few texts
    for p in precisions:
        run_drmix(p, texts[:16])
    # Wall time and process CPU time (all threads). On a shared, oversubscribed machine the wall time
    # mostly measures the scheduler; CPU time measures the work each method does.
    names = [f"drmix {p}" for p in precisions] + ["st"]
    fns = {f"drmix {p}": (lambda p=p: run_drmix(p)) for p in precisions}
    fns["st"] = run_st
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, np.ndarray] = {}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        for name in order:
            t, c = time.perf_counter(), time.process_time()
            outputs[name] = fns[name]()
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
            print(f"round {r + 1} {name:16s} {len(texts) / wall[name][-1]:7.1f} passages/s wall, "
                  f"{len(texts) / cpu[name][-1]:7.1f} passages per CPU-second", flush=True)

    print()
    print(f"model {model[0].auto_model.config._name_or_path}; {len(texts)} SciFact passages; batch {args.batch_size}; "
          f"max_length {args.max_length}; torch threads {torch.get_num_threads()}; device {args.device}; "
          f"drmix precision {', '.join(precisions)}, ST at its defaults")
    print("| method | passages/s wall (median; rounds) | passages per CPU-s (median; rounds) |")
    print("|---|---:|---:|")
    for name in names:
        label = "SentenceTransformer.encode" if name == "st" else f"drmix encode_texts, {name[6:]}"
        per_w = [len(texts) / t for t in wall[name]]
        per_c = [len(texts) / t for t in cpu[name]]
        print(f"| {label} | {statistics.median(per_w):.1f} ({', '.join(f'{p:.1f}' for p in per_w)}) | "
              f"{statistics.median(per_c):.1f} ({', '.join(f'{p:.1f}' for p in per_c)}) |")
    for name in names[:-1]:
        for label, times in (("wall", wall), ("CPU", cpu)):
            ratios = [s / d for d, s in zip(times[name], times["st"])]
            print(f"ratio {name}/ST ({label} time): median {statistics.median(ratios):.3f} "
                  f"(per round {', '.join(f'{x:.3f}' for x in ratios)})")
        ref = outputs["st"]
        out = outputs[name]
        cos = (out * ref).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(ref, axis=1)
        print(f"{name} vs ST: max |embedding difference| {float(np.abs(out - ref).max()):.2e}, "
              f"lowest cosine {float(cos.min()):.4f}")
    print(f"one tokenizer pass over all texts (drmix tokenises once, ST per batch): {t_len:.2f} s wall")
    for name, p in pads.items():
        print(f"pad tokens, {name}: {p} ({100 * p / real:.2f}% of {real} real tokens)")
    if args.ndcg:
        from drmix.evaluation.significance import randomization_test, t_test

        corpus = "full corpus" if args.ndcg_docs is None else f"judged documents + {args.ndcg_docs} others"
        base, t_base = scifact_ndcg(model, args.data, "fp32", args.batch_size, args.max_length, args.ndcg_docs)
        print(f"SciFact test nDCG@10 ({corpus}, {len(base)} queries): fp32 {np.mean(list(base.values())):.4f} "
              f"({t_base:.0f} s)")
        for p in precisions:
            other, t_other = scifact_ndcg(model, args.data, p, args.batch_size, args.max_length, args.ndcg_docs)
            d = np.array([other[q] - base[q] for q in sorted(base)])
            t_p, low, high = t_test(d)
            print(f"  {p}: {np.mean(list(other.values())):.4f} ({t_other:.0f} s): change {d.mean():+.4f} "
                  f"[95% {low:+.4f}, {high:+.4f}], paired t p = {t_p:.3g}, randomisation p = "
                  f"{randomization_test(d):.3g}, queries changed {int((d != 0).sum())}")


if __name__ == "__main__":
    main()
