"""``torch.compile`` vs eager for all-MiniLM-L6-v2 (the default model): a training step and corpus encoding.

Both sides run in one process on the same weights and the same inputs; the compiled model is a copy of the
eager one compiled the way ``drmix train --compile`` does it (:func:`drmix.train.compile.compile_model`:
the backbone compiled in place with dynamic shapes).

* **training step** -- forward of queries and positives, InfoNCE over in-batch negatives, backward, AdamW
  step, on ``--batches`` different pre-tokenised batches of SciFact train query/positive pairs taken in turn
  (padded to the longest member, so shapes change as in training; one graph with dynamic sizes serves them).
  The first pass over the batches is timed separately (for the compiled model it contains the compilation);
  then ``--rounds`` rounds of ``--steps`` steps, alternating which model goes first, give the steady-state
  steps/s (wall time and process CPU time, all threads);
* **encoding** -- :func:`drmix.retrieval.encode.encode_texts` (what ``drmix index`` / ``drmix eval`` run:
  length-sorted batches) over the first ``--encode-n`` SciFact passages; first call timed separately, then
  ``--rounds`` alternating rounds give passages/s;
* **agreement** -- with dropout off (eval mode) and equal weights, the loss and gradients of one training
  step, and the encoded embeddings: the max absolute difference compiled vs eager. (With dropout on, the
  compiled model draws different dropout masks -- inductor's own generator -- so training losses are not
  comparable step by step.)

Prints a table: first pass (s), steady-state steps/s or passages/s, the ratio compiled / eager, and the
differences. On a shared machine only the same-process ratios mean anything.

    nice -n 10 python benchmarks/bench_compile.py --data ../shared/data --preset cpu
    python benchmarks/bench_compile.py --data ../shared/data --preset gpu --estimate
    python benchmarks/bench_compile.py --data ../shared/data --preset gpu
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import _common  # noqa: E402  (sets the offline environment)

PRESETS = {"cpu": {"batch_size": 8, "query_max_length": 32, "doc_max_length": 128, "batches": 3, "steps": 6,
                   "rounds": 3, "encode_n": 128, "encode_batch_size": 32, "encode_max_length": 128,
                   "device": "cpu", "precision": "fp32"},
           "gpu": {"batch_size": 128, "query_max_length": 64, "doc_max_length": 256, "batches": 4, "steps": 30,
                   "rounds": 3, "encode_n": 8000, "encode_batch_size": 256, "encode_max_length": 256,
                   "device": "cuda", "precision": "bf16"}}
#: device seconds allowed for compiling (training: forward and backward with dynamic shapes, plus the
#: eval-mode agreement check; encoding: inference graphs) on one H100 -- an allowance, not a measurement
GPU_COMPILE_ALLOWANCE_S = 240.0


def pairs(data: Path, n: int) -> list[dict[str, str]]:
    from drmix.data.collections import load_beir_collection

    col = load_beir_collection(data / "scifact", split="train")
    rows = [{"query": q, "positive": p[0]} for q, p in zip(col.dataset["query"], col.dataset["positives"])]
    if len(rows) < n:
        raise SystemExit(f"SciFact train has {len(rows)} pairs; --batches x --batch-size needs {n}")
    return rows[:n]


def passages(data: Path, n: int) -> list[str]:
    return _common.scifact_passages(data, n)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class Side:
    """One model (eager or compiled), its optimiser and its training step."""

    def __init__(self, model, args) -> None:
        import torch

        from drmix.train.precision import Precision

        self.model, self.args = model, args
        self.precision = Precision({"fp32": "no"}.get(args.precision, args.precision), args.device)
        self.opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=args.device.startswith("cuda"))

    def loss(self, q, d):
        from drmix.model.losses import info_nce

        with self.precision.autocast():
            qe = self.model(dict(q))["sentence_embedding"]
            de = self.model(dict(d))["sentence_embedding"]
            return info_nce(qe.float(), de.float(), temperature=0.05).mean(), qe, de

    def step(self, q, d) -> None:
        loss, _, _ = self.loss(q, d)
        self.precision.backward(loss)
        self.precision.step(self.opt)
        self.opt.zero_grad(set_to_none=True)

    def run(self, batches, n: int) -> tuple[float, float]:
        """(wall, CPU) seconds of ``n`` steps cycling over ``batches``."""
        self.model.train()
        w0, c0 = _clock()
        for i in range(n):
            self.step(*batches[i % len(batches)])
        _sync(self.args.device)
        w1, c1 = _clock()
        return w1 - w0, c1 - c0


def agreement(eager: Side, comp: Side, batch) -> tuple[float, float, float]:
    """(|loss diff|, max |embedding diff|, max |gradient diff|) of one dropout-free step on equal weights."""
    import torch

    comp.model.load_state_dict(eager.model.state_dict())  # in-place compilation: the same keys
    out = []
    for side in (eager, comp):
        side.model.eval()
        loss, qe, de = side.loss(*batch)
        side.precision.backward(loss)
        out.append((loss.detach().float(), torch.cat([qe, de]).detach().float(),
                    {n: p.grad.detach().float().clone() for n, p in side.model.named_parameters()
                     if p.grad is not None}))
        side.opt.zero_grad(set_to_none=True)
    (le, ee, ge), (lc, ec, gc) = out
    if ge.keys() != gc.keys():
        raise SystemExit("compiled and eager models have different parameter names")
    grad = max(float((ge[k] - gc[k]).abs().max()) for k in ge)
    return float((le - lc).abs()), float((ee - ec).abs().max()), grad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=_common.DEFAULT_DATA)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--query-max-length", type=int, default=32)
    ap.add_argument("--doc-max-length", type=int, default=128)
    ap.add_argument("--batches", type=int, default=3, help="distinct training batches taken in turn")
    ap.add_argument("--steps", type=int, default=6, help="training steps per timed round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--encode-n", type=int, default=128, help="SciFact passages encoded per round (0 = skip)")
    ap.add_argument("--encode-batch-size", type=int, default=32)
    ap.add_argument("--encode-max-length", type=int, default=128)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="training autocast precision; encoding runs at the same precision")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="cpu or gpu settings (override the options above)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    args = ap.parse_args()
    _common.apply_preset(args, PRESETS)
    if args.estimate or args.preset == "gpu":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _lease import Estimate, estimate_line

        est = Estimate(fixed_s=GPU_COMPILE_ALLOWANCE_S)  # both models: first pass + timed rounds
        est.train("training", 2 * (args.batches + args.rounds * args.steps) * args.batch_size, runs=2)
        est.encode(2 * (1 + args.rounds) * args.encode_n)
        print(estimate_line(est, "this command") + f"; includes {GPU_COMPILE_ALLOWANCE_S:.0f} s for compiling",
              flush=True)
        if args.estimate:
            return
    import logging

    import torch

    from drmix.device import to_device
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.encode import encode_texts
    from drmix.train.compile import compile_model
    from drmix.train.inputs import Featurizer

    logging.disable(logging.WARNING)
    torch.manual_seed(0)
    model = load_encoder(None, device=args.device)
    eager = Side(model, args)
    comp = Side(compile_model(copy.deepcopy(model), args.backend), args)
    feats = Featurizer(model)
    rows = pairs(args.data, args.batches * args.batch_size)
    batches = []
    for b in range(args.batches):
        chunk = rows[b * args.batch_size:(b + 1) * args.batch_size]
        batches.append((to_device(feats([r["query"] for r in chunk], args.query_max_length), args.device),
                        to_device(feats([r["positive"] for r in chunk], args.doc_max_length), args.device)))
    shapes = [(tuple(q["input_ids"].shape), tuple(d["input_ids"].shape)) for q, d in batches]
    print(f"training batches (queries, documents): {shapes}; device {args.device}, precision {args.precision}, "
          f"backend {args.backend}, torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)

    first = {"eager": eager.run(batches, args.batches), "compiled": comp.run(batches, args.batches)}
    print(f"first pass over {args.batches} batches: eager {first['eager'][0]:.1f} s, "
          f"compiled {first['compiled'][0]:.1f} s (compilation included)", flush=True)
    rates: dict[str, list[tuple[float, float]]] = {"eager": [], "compiled": []}
    for r in range(args.rounds):
        order = [("eager", eager), ("compiled", comp)][::(1 if r % 2 == 0 else -1)]
        for name, side in order:
            w, c = side.run(batches, args.steps)
            rates[name].append((args.steps / w, args.steps / c))
        e, c = rates["eager"][-1], rates["compiled"][-1]
        print(f"round {r}: eager {e[0]:.3f} steps/s, compiled {c[0]:.3f} steps/s (ratio {c[0] / e[0]:.3f} wall, "
              f"{c[1] / e[1]:.3f} CPU-time)", flush=True)
    dloss, demb, dgrad = agreement(eager, comp, batches[0])
    keys_clean = not any("_orig_mod" in k for k in comp.model.state_dict())

    enc_rates: dict[str, list[tuple[float, float]]] = {"eager": [], "compiled": []}
    enc_first, enc_diff = {}, float("nan")
    if args.encode_n:
        texts = passages(args.data, args.encode_n)
        comp.model.load_state_dict(eager.model.state_dict())
        prec = args.precision

        def encode(side: Side):
            _sync(args.device)
            w0, c0 = _clock()
            emb = encode_texts(side.model, texts, batch_size=args.encode_batch_size,
                               max_length=args.encode_max_length, precision=prec)
            _sync(args.device)
            w1, c1 = _clock()
            return emb, w1 - w0, c1 - c0

        ee, *enc_first["eager"] = encode(eager)
        ec, *enc_first["compiled"] = encode(comp)
        enc_diff = float(abs(ee - ec).max())
        print(f"encoding, first call: eager {enc_first['eager'][0]:.1f} s, compiled {enc_first['compiled'][0]:.1f} s "
              f"(compilation included)", flush=True)
        for r in range(args.rounds):
            order = [("eager", eager), ("compiled", comp)][::(1 if r % 2 == 0 else -1)]
            for name, side in order:
                _, w, c = encode(side)
                enc_rates[name].append((len(texts) / w, len(texts) / c))
            e, c = enc_rates["eager"][-1], enc_rates["compiled"][-1]
            print(f"encoding round {r}: eager {e[0]:.1f} passages/s, compiled {c[0]:.1f} passages/s (ratio "
                  f"{c[0] / e[0]:.3f} wall, {c[1] / e[1]:.3f} CPU-time)", flush=True)

    def med(v, i):
        return statistics.median(x[i] for x in v)

    def ratio(c, e, i):  # the median of the per-round ratios (each round times both models back to back)
        return statistics.median(a[i] / b[i] for a, b in zip(c, e))

    print(f"\n| {args.device}, {args.precision}, backend {args.backend} | first pass s (eager / compiled) | "
          f"eager /s wall | compiled /s wall | ratio compiled/eager wall | ratio CPU-time | "
          f"max abs diff (dropout off) |")
    print("|---|---:|---:|---:|---:|---:|---|")
    e, c = rates["eager"], rates["compiled"]
    print(f"| training step, batch {args.batch_size}, q {args.query_max_length} / d {args.doc_max_length} tokens "
          f"(steps/s) | {first['eager'][0]:.1f} / {first['compiled'][0]:.1f} | {med(e, 0):.3f} | {med(c, 0):.3f} | "
          f"{ratio(c, e, 0):.3f} | {ratio(c, e, 1):.3f} | loss {dloss:.1e}, embeddings {demb:.1e}, "
          f"gradients {dgrad:.1e} |")
    if args.encode_n:
        e, c = enc_rates["eager"], enc_rates["compiled"]
        print(f"| encoding {args.encode_n} passages, batch {args.encode_batch_size}, {args.encode_max_length} tokens "
              f"(passages/s) | {enc_first['eager'][0]:.1f} / {enc_first['compiled'][0]:.1f} | {med(e, 0):.1f} | "
              f"{med(c, 0):.1f} | {ratio(c, e, 0):.3f} | {ratio(c, e, 1):.3f} | "
              f"embeddings {enc_diff:.1e} |")
    print(f"\nmedians of {args.rounds} rounds (ratios: median of the per-round ratios); compiled state-dict "
          f"keys plain (no _orig_mod.): {keys_clean}")


if __name__ == "__main__":
    main()
