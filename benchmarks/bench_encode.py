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

``--tokenize-num-proc 1,all`` times drmix with each number of tokenising worker processes (``all``: every core
the process may use) in the same rounds; the worker path is forced even below its 2,048-text threshold so a
small run measures it. ``--tokenize-n N`` first measures tokenisation alone on N passages, in texts/s: the
model's transformers tokenizer in this process (the previous path) and drmix's worker pool with each of
``--workers`` (default 1,2,all) processes (pool start-up timed apart). ``--json FILE`` saves the figures, and
:func:`render` prints both tables from them (tests/benchmarks/test_bench_encode.py holds the table in
docs/benchmarks.md to the stored figures). Presets: ``--preset cpu`` (fp32, tokenisation on 2,000 passages,
160 passages end to end with 1 and all workers, 2 rounds: about 9 minutes on the 2 shared cores at a load
average of 10) and ``--preset gpu``
(auto = fp16/bf16, the whole SciFact corpus for both parts, batch 256, 3 rounds, with --ndcg; its estimate is
printed first).

    python benchmarks/bench_encode.py --data ../shared/data --n 500 --rounds 2
    python benchmarks/bench_encode.py --data ../shared/data --preset cpu --json encode-cpu.json
    python benchmarks/bench_encode.py --data ../shared/data --preset gpu --device cuda --json encode-gpu.json
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


PRESETS = {"cpu": {"precision": "fp32", "n": 160, "batch_size": 64, "rounds": 2, "tokenize_num_proc": "1,all",
                   "tokenize_n": 2000, "workers": "1,2,all"},
           "gpu": {"precision": "auto", "n": 8000, "batch_size": 256, "rounds": 3, "ndcg": True,
                   "tokenize_num_proc": "1,all", "tokenize_n": 8000, "workers": "1,2,all"}}
TOKENIZE_TEXTS_PER_S = 1400.0  # in-process tokenisation assumed by the estimate (5,183 SciFact passages in 3.8 s)


def worker_counts(spec: str) -> list[int]:
    """``"1,2,all"`` -> [1, 2, every core], duplicates dropped in order."""
    from drmix.retrieval.tokenize_pool import available_cpus

    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        if part:
            k = available_cpus() if part == "all" else int(part)
            if k not in out:
                out.append(k)
    return out


def tokenize_throughput(model, texts: list[str], workers: list[int], max_length: int, rounds: int) -> dict:
    """Texts/s of one tokenisation pass: the transformers tokenizer in process, then the pool per worker count."""
    from drmix.model.features import TextBatcher
    from drmix.retrieval.tokenize_pool import TokenizePool

    batcher = TextBatcher(model, "", max_length)
    rows = []
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        batcher.tokenize(texts)
        times.append(time.perf_counter() - t)
    rows.append({"method": "transformers tokenizer, in process", "workers": 0, "start_s": 0.0,
                 "texts_per_s": [len(texts) / x for x in times], "cut": 0})
    for k in workers:
        t = time.perf_counter()
        pool = TokenizePool(model.tokenizer, prompt="", max_length=max_length, num_proc=k)
        start = time.perf_counter() - t
        times = []
        try:
            for _ in range(rounds):
                pool.cut_texts = 0
                t = time.perf_counter()
                ids = pool.result(pool.submit(texts))
                times.append(time.perf_counter() - t)
            assert ids is not None, "the worker ids failed the check against the model's tokenizer"
        finally:
            pool.close()
        rows.append({"method": f"drmix worker pool, {k} process{'es' if k > 1 else ''}", "workers": k,
                     "start_s": start, "texts_per_s": [len(texts) / x for x in times], "cut": pool.cut_texts})
    return {"texts": len(texts), "max_length": max_length, "rows": rows}


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def render(results: dict) -> str:
    """The tokenisation and end-to-end tables (Markdown) from the figures ``--json`` saves."""
    out = []
    tok = results.get("tokenize")
    if tok:
        base = _med(tok["rows"][0]["texts_per_s"])
        out += [f"Tokenisation alone, {tok['texts']:,} SciFact passages at max length {tok['max_length']}:", "",
                "| tokeniser | texts/s (median; rounds) | vs in process | pool start-up s | texts cut |",
                "|---|---:|---:|---:|---:|"]
        for r in tok["rows"]:
            v = r["texts_per_s"]
            out.append(f"| {r['method']} | {_med(v):,.0f} ({', '.join(f'{x:,.0f}' for x in v)}) | "
                       f"{_med(v) / base:.2f}x | {r['start_s']:.2f} | {r['cut']:,} |")
        out.append("")
    e2e = results["end_to_end"]
    out += [f"End to end, {e2e['n']:,} passages, batch {e2e['batch_size']}, max length {e2e['max_length']}, "
            f"device {e2e['device']}, {e2e['rounds']} rounds in rotated order:", "",
            "| method | passages/s wall (median; rounds) | passages per CPU-s (median; rounds) | ratio to ST, wall (median; rounds) |",
            "|---|---:|---:|---:|"]
    st, n = e2e["wall"]["st"], e2e["n"]
    for name in e2e["names"]:
        w, c = e2e["wall"][name], e2e["cpu"][name]
        label = "SentenceTransformer.encode" if name == "st" else f"drmix encode_texts, {name[6:]}"
        ratios = [b / a for a, b in zip(w, st)]
        pw, pc = [n / x for x in w], [n / x for x in c]
        out.append(f"| {label} | {_med(pw):.1f} ({', '.join(f'{x:.1f}' for x in pw)}) | "
                   f"{_med(pc):.1f} ({', '.join(f'{x:.1f}' for x in pc)}) | "
                   f"{_med(ratios):.3f} ({', '.join(f'{x:.3f}' for x in ratios)}) |")
    if e2e.get("max_diff"):
        out += ["", "Largest |embedding difference| to drmix with one process: " + ", ".join(
            f"{k[6:]} {v:.1e}" for k, v in e2e["max_diff"].items())]
    return "\n".join(out)


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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with ``--preset``'s settings applied."""
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
    ap.add_argument("--tokenize-num-proc", default="1", help="drmix tokenising worker processes, comma-separated "
                    "(1 = in process; all = every core)")
    ap.add_argument("--tokenize-n", type=int, default=0, help="also time tokenisation alone on this many passages")
    ap.add_argument("--workers", default="1,2,all", help="worker counts for --tokenize-n")
    ap.add_argument("--json", type=Path, default=None, help="save the figures here")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="cpu or gpu settings (override the options above)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    return _common.apply_preset(ap.parse_args(argv), PRESETS)


def estimate(args: argparse.Namespace):
    """The device time of ``run(args)`` (:class:`_lease.Estimate`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _lease import Estimate

    est = Estimate()  # each round: ST and drmix per precision and worker count; SciFact twice; tokenising
    n_prec = len([p for p in str(args.precision).split(",") if p.strip()])
    n_proc = len([p for p in str(args.tokenize_num_proc).split(",") if p.strip()])
    est.encode(2 * args.rounds * args.n * (1 + n_prec * n_proc) + (2 * 5483 if args.ndcg else 0))
    n_workers = len([p for p in str(args.workers).split(",") if p.strip()])
    est.fixed_s += args.rounds * (1 + n_workers) * min(args.tokenize_n, 5183) / TOKENIZE_TEXTS_PER_S
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
    """Measure as the options say, print the figures and tables; the figures (what ``--json`` saves, and with
    ``--ndcg`` the nDCG@10 change per precision under ``"ndcg"``)."""
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
    procs = worker_counts(args.tokenize_num_proc)
    import drmix.retrieval.encode as enc

    enc._PROC_MIN_TEXTS = 0  # the worker path even on a small run (the library starts it at 2,048 texts)
    results: dict = {}
    if args.tokenize_n:
        tok = tokenize_throughput(model, load_passages(args.data, args.tokenize_n), worker_counts(args.workers),
                                  args.max_length, args.rounds)
        results["tokenize"] = tok
        for r in tok["rows"]:
            print(f"tokenise {r['method']}: {_med(r['texts_per_s']):,.0f} texts/s (start-up {r['start_s']:.2f} s)",
                  flush=True)

    def run_drmix(precision: str, batch: list[str] = texts, num_proc: int = 1) -> np.ndarray:
        return encode_texts(model, batch, batch_size=args.batch_size, max_length=args.max_length,
                            precision=precision, tokenize_num_proc=num_proc)

    def run_st(batch: list[str] = texts) -> np.ndarray:
        return model.encode(batch, batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)

    run_st(texts[:16])  # warm-up (thread pools, allocator, int8 copy, ONNX export) on a few texts
    for p in precisions:
        for k in procs:
            run_drmix(p, texts[:16], k)
    # Wall time and process CPU time (all threads). On a shared, oversubscribed machine the wall time
    # mostly measures the scheduler; CPU time measures the work each method does.
    variants = {(f"drmix {p}" if len(procs) == 1 else
                 f"drmix {p}, " + (f"{k} tokenising processes" if k > 1 else "tokenised in process")):
                (p, k) for p in precisions for k in procs}
    names = list(variants) + ["st"]
    fns = {name: (lambda p=p, k=k: run_drmix(p, num_proc=k)) for name, (p, k) in variants.items()}
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
    first = names[0]
    results["end_to_end"] = {"n": len(texts), "batch_size": args.batch_size, "max_length": args.max_length,
                             "device": args.device, "rounds": args.rounds, "names": names, "wall": wall, "cpu": cpu,
                             "torch_threads": torch.get_num_threads(),
                             "max_diff": {n: float(np.abs(outputs[n] - outputs[first]).max()) for n in names[1:-1]}}
    print()
    print(render(results))
    if args.json is not None:
        import json

        args.json.write_text(json.dumps(results, indent=1))
    for name, p in pads.items():
        print(f"pad tokens, {name}: {p} ({100 * p / real:.2f}% of {real} real tokens)")
    if args.ndcg:
        results["ndcg"] = ndcg_change(model, args, precisions)
    return results


def ndcg_change(model, args: argparse.Namespace, precisions: list[str]) -> dict:
    """SciFact test nDCG@10 at fp32 and at each precision, the change with its paired tests (printed)."""
    from drmix.evaluation.significance import randomization_test, t_test

    corpus = "full corpus" if args.ndcg_docs is None else f"judged documents + {args.ndcg_docs} others"
    base, t_base = scifact_ndcg(model, args.data, "fp32", args.batch_size, args.max_length, args.ndcg_docs)
    print(f"SciFact test nDCG@10 ({corpus}, {len(base)} queries): fp32 {np.mean(list(base.values())):.4f} "
          f"({t_base:.0f} s)")
    out = {"fp32": float(np.mean(list(base.values())))}
    for p in precisions:
        other, t_other = scifact_ndcg(model, args.data, p, args.batch_size, args.max_length, args.ndcg_docs)
        d = np.array([other[q] - base[q] for q in sorted(base)])
        t_p, low, high = t_test(d)
        rand_p = randomization_test(d)
        print(f"  {p}: {np.mean(list(other.values())):.4f} ({t_other:.0f} s): change {d.mean():+.4f} "
              f"[95% {low:+.4f}, {high:+.4f}], paired t p = {t_p:.3g}, randomisation p = "
              f"{rand_p:.3g}, queries changed {int((d != 0).sum())}")
        out[p] = {"ndcg@10": float(np.mean(list(other.values()))), "change": float(d.mean()), "low": float(low),
                  "high": float(high), "p_t": float(t_p), "p_rand": float(rand_p)}
    return out


if __name__ == "__main__":
    main()
