"""Every owed GPU figure in one command, within 10 minutes of one GPU's time.

The parts, in this order (the estimate of each and of the whole is printed first; a part whose estimate is longer
than what is left of ``--budget-s`` is skipped with a line saying so, and a part that fails is recorded with its
error while the others still run):

1. ``encode``: ``bench_encode.py --preset gpu`` (:func:`bench_encode.run`): drmix's ``encode_texts`` at ``auto``
   precision (bf16/fp16 on a GPU) against ``SentenceTransformer.encode`` at its defaults on the whole SciFact
   corpus, 3 rounds in rotated order, tokenisation in process and with every core, and the SciFact nDCG@10 change.
   Goal: drmix >= 5x the passages/s of ``SentenceTransformer.encode``.
2. ``train``: ``bench_train.py --preset gpu --rounds 2`` (:func:`bench_train.run`): ``drmix train`` against the
   sentence-transformers trainer with MultipleNegativesRankingLoss (bf16, batch 128, 256 tokens, 60 steps) and the
   compute floor of drmix's bare step. Goal: >= 1.0x the sentence-transformers trainer.
3. ``adapt``: ``torchrun --nproc-per-node 1 -m drmix adapt`` on a small corpus (the first ``--adapt-docs`` SciFact
   passages as the target, SciFact's first ``--adapt-pairs`` training pairs as the one training collection, two
   candidates): under the launcher accelerate joins the process group with NCCL on a GPU (gloo on CPU), so every
   training stage runs DDP through it. Goal: the run finishes under the launcher with that backend.
4. ``sharded``: with two GPUs or more, ``bench_encode_sharded.py``'s comparison (its :func:`run_index`): ``drmix
   index`` of ``--sharded-docs`` passages (SciFact's, repeated under new ids) in one process on one GPU, then under
   ``torchrun --nproc-per-node 2``. Goal: the two indexes byte-identical (the speed-up is reported). Skipped with a
   line on fewer than two GPUs.

Writes ``OUT/results.json`` after every part (a run stopped midway keeps what it measured) and ``OUT/summary.md``:
the table, also printed last. ``--report-only`` prints the table of ``OUT/results.json`` again.

``--device cpu --tiny`` runs every part at toy sizes on CPU (all-MiniLM-L6-v2 cut to one layer unless ``--model``):
the proof ``tests/benchmarks/test_gpu_evidence.py`` runs so that the script cannot rot; its figures say nothing
about speed.

On a lent GPU (docs/benchmarks.md, "Every owed GPU figure in one command"): ``../shared/tools/gpu-pack.sh
../shared/data/scifact`` here, then one ``run`` carrying ``.gpu-env``, ``.gpu-model`` and ``.gpu-data``::

    . .gpu-env/env.sh && python3 benchmarks/gpu_evidence.py --data /tmp/drmix-data/shared/data --out $OUT/evidence

    python benchmarks/gpu_evidence.py --estimate
    python benchmarks/gpu_evidence.py --data ../shared/data --out /tmp/evidence-cpu --device cpu --tiny
    python benchmarks/gpu_evidence.py --report-only --out /tmp/evidence-cpu
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (sets the offline environment)

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
PARTS = ("encode", "train", "adapt", "sharded")
ENCODE_GOAL, TRAIN_GOAL = 5.0, 1.0
#: the adapt part's launcher: the command, then the process group's backend (printed even when the command fails)
ADAPT_LAUNCHER = ("import sys\nfrom drmix.cli import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
                  "    import torch.distributed as dist\n"
                  "    print('PROCESS_GROUP', dist.get_backend() if dist.is_initialized() else 'none', flush=True)\n")


# ------------------------------------------------------------------------------------------------ settings
def encode_args(args: argparse.Namespace) -> argparse.Namespace:
    import bench_encode

    if not args.tiny:
        return bench_encode.parse_args(["--preset", "gpu", "--device", args.device, "--data", str(args.data),
                                        *(["--model", args.model] if args.model else [])])
    return bench_encode.parse_args(["--device", args.device, "--data", str(args.data),
                                    *(["--model", args.model] if args.model else []), "--n", "48", "--batch-size", "16", "--max-length", "64", "--rounds", "1",
                                    "--precision", "fp32", "--tokenize-num-proc", "1"])


def train_args(args: argparse.Namespace) -> argparse.Namespace:
    import bench_train

    if not args.tiny:
        return bench_train.parse_args(["--preset", "gpu", "--rounds", "2", "--device", args.device, "--data",
                                       str(args.data), *(["--model", args.model] if args.model else [])])
    return bench_train.parse_args(["--device", args.device, "--data", str(args.data),
                                   *(["--model", args.model] if args.model else []), "--steps", "3", "--batch-size", "8", "--max-length", "32", "--rounds", "1",
                                   "--precision", "fp32", "--floor"])


def adapt_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe's fields (a YAML config of ``drmix adapt``) beyond its inputs."""
    if args.tiny:
        return dict(preset="cpu", candidates=["uniform"], max_steps=2, batch_size=4,
                    learning_rate=1e-3, query_max_length=16, doc_max_length=32, dev_queries=4, test_queries=2,
                    filter_k=8, max_per_doc=2, negative_ranks="2:4", device=args.device, show_progress=False,
                    coco=dict(max_steps=2, batch_size=4, span_max_tokens=8, span_max_length=16))
    return dict(preset="cpu", candidates=["uniform", "uniform+synthetic"], max_steps=100, batch_size=64,
                learning_rate=5e-5, query_max_length=64, doc_max_length=256, max_docs=args.adapt_docs,
                max_collection_size=args.adapt_pairs,
                dev_queries=100, test_queries=100, show_progress=False,
                coco=dict(max_steps=100, batch_size=64, learning_rate=5e-5, span_max_length=128))


def estimates(args: argparse.Namespace) -> dict[str, float]:
    """Seconds of each part on the device, beyond this command's one start (``_lease``'s assumptions)."""
    import bench_encode
    import bench_train
    from _lease import START_S, Estimate

    from drmix.retrieval.plan import encode_seconds

    out = {"encode": bench_encode.estimate(encode_args(args)).seconds() - START_S,
           "train": bench_train.estimate(train_args(args)).seconds() - START_S}
    s = adapt_settings(args)
    est = Estimate()  # COCO, uniform, and each candidate trained; every corpus pass; a process of its own
    est.train("COCO", s["coco"]["max_steps"] * s["coco"]["batch_size"])
    runs = 1 + len(s["candidates"])
    est.train("fine-tunings", runs * s["max_steps"] * s["batch_size"], runs=runs)
    est.encode((4 + len(s["candidates"])) * args.adapt_docs)
    out["adapt"] = est.seconds()
    n = args.sharded_docs
    out["sharded"] = encode_seconds(n, devices=1) + encode_seconds(n, devices=2, dim=384)
    return out


# ------------------------------------------------------------------------------------------------ the parts
def run_encode(args: argparse.Namespace) -> dict[str, Any]:
    import bench_encode

    results = bench_encode.run(encode_args(args))
    return {"end_to_end": results["end_to_end"], "ndcg": results.get("ndcg")}


def run_train(args: argparse.Namespace) -> dict[str, Any]:
    import bench_train

    return bench_train.run(train_args(args))


def scifact_corpus(data: Path, n: int, path: Path, *, repeat: bool = False) -> int:
    """The first ``n`` SciFact passages as a corpus ``.jsonl`` (``repeat``: SciFact again under new ids until ``n``)."""
    rows = (data / "scifact" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [r for r in rows if r.strip()]
    out = []
    for i in range(n if repeat else min(n, len(rows))):
        doc = json.loads(rows[i % len(rows)])
        if i >= len(rows):
            doc["_id"] = f"{doc['_id']}-{i // len(rows)}"
        out.append(json.dumps(doc) + "\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(out), encoding="utf-8")
    return len(out)


def launch(cmd: list[str], timeout: float | None) -> subprocess.CompletedProcess:
    """``cmd`` (a torchrun launcher) to its end, or stopped when ``timeout`` runs out: SIGTERM first, so that torchrun
    stops its workers (each in a session of its own), then SIGKILL."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        err += f"\nstopped: the budget ran out after {timeout:.0f} s"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_adapt(args: argparse.Namespace) -> dict[str, Any]:
    import bench_train
    import yaml

    work = args.out / "adapt-inputs"
    docs = scifact_corpus(args.data, args.adapt_docs, work / "scifact-corpus.jsonl")
    pairs = bench_train.scifact_pairs(args.data, work, args.adapt_pairs)
    config = {"corpus": [str(work / "scifact-corpus.jsonl")], "data": [str(pairs)],
              "output_dir": str(args.out / "adapt"), **adapt_settings(args)}
    if args.model:
        config.update(model=args.model, teacher=args.model)
    (work / "adapt.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    (work / "launch.py").write_text(ADAPT_LAUNCHER, encoding="utf-8")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
           str(work / "launch.py"), "adapt", str(work / "adapt.yaml"), "--overwrite"]
    t0 = time.perf_counter()
    done = launch(cmd, timeout=max(60.0, args.budget.left()) if getattr(args, "budget", None) else None)
    wall = time.perf_counter() - t0
    (args.out / "adapt.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    backend = next((line.split()[1] for line in done.stdout.splitlines() if line.startswith("PROCESS_GROUP ")), None)
    summary = args.out / "adapt" / "summary.json"
    selected = json.loads(summary.read_text(encoding="utf-8")).get("selected") if summary.is_file() else None
    if done.returncode != 0:
        raise RuntimeError(f"drmix adapt under torchrun exited {done.returncode}: "
                           + " ".join(done.stderr.strip().splitlines()[-1:]))
    return {"seconds": round(wall, 1), "returncode": done.returncode, "backend": backend, "selected": selected,
            "passages": docs, "pairs": args.adapt_pairs, "candidates": config["candidates"],
            "command": "torchrun --nproc-per-node 1 -m drmix adapt ADAPT.yaml"}


def run_sharded(args: argparse.Namespace) -> dict[str, Any]:
    import bench_encode_sharded as bes

    preset = bes.PRESETS["gpu"]
    work = args.out / "sharded"
    work.mkdir(parents=True, exist_ok=True)
    launcher = work / "launch.py"
    launcher.write_text(bes.LAUNCHER, encoding="utf-8")
    corpus = work / "corpus.jsonl"
    n = scifact_corpus(args.data, args.sharded_docs, corpus, repeat=True)
    opts = argparse.Namespace(threads=preset["threads"], batch_size=preset["batch_size"],
                              max_length=preset["max_length"], precision=preset["precision"], model=args.model,
                              align=preset["align"])
    runs = []
    for procs in (1, 2):
        out = work / f"index-{procs}"
        wall = bes.run_index(procs, opts, corpus, out, launcher)
        runs.append({"processes": procs, "wall_s": round(wall, 2), "vectors_sha256": bes.sha256(out / "vectors.npy"),
                     "ids_sha256": bes.sha256(out / "ids.json")})
    return {"passages": n, "runs": runs}


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "encode": run_encode, "train": run_train, "adapt": run_adapt, "sharded": run_sharded}


def unavailable(part: str, args: argparse.Namespace, gpus: int) -> str | None:
    """Why ``part`` cannot run on this machine at all (None: it can)."""
    if part == "sharded" and gpus < 2:
        return f"skipped: {gpus} GPU{'s' if gpus != 1 else ''} here, the two-GPU sharded encode needs 2"
    return None


# ------------------------------------------------------------------------------------------------ the table
def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def encode_figure(fig: dict[str, Any]) -> tuple[str, bool]:
    """drmix's best variant against ``SentenceTransformer.encode``, passages/s wall, median over rounds."""
    e2e = fig["end_to_end"]
    st = e2e["wall"]["st"]
    ratios = {name: [s / d for d, s in zip(e2e["wall"][name], st)] for name in e2e["names"] if name != "st"}
    best = max(ratios, key=lambda name: _median(ratios[name]))
    ratio, n = _median(ratios[best]), e2e["n"]
    text = (f"{best}: {_median([n / w for w in e2e['wall'][best]]):,.0f} passages/s, SentenceTransformer.encode "
            f"{_median([n / w for w in st]):,.0f}: **{ratio:.2f}x** (rounds "
            f"{', '.join(f'{x:.2f}' for x in ratios[best])}); {n:,} passages, batch {e2e['batch_size']}")
    ndcg = fig.get("ndcg")
    if ndcg:
        text += "; SciFact nDCG@10 fp32 {:.4f}".format(ndcg["fp32"]) + "".join(
            f", {p} {v['ndcg@10']:.4f} (change {v['change']:+.4f} [{v['low']:+.4f}, {v['high']:+.4f}])"
            for p, v in ndcg.items() if p != "fp32")
    return text, ratio >= ENCODE_GOAL


def train_figure(fig: dict[str, Any]) -> tuple[str, bool]:
    drmix, st = _median([r[0] for r in fig["drmix"]]), _median([r[0] for r in fig["st"]])
    ratio = drmix / st
    text = (f"drmix train {drmix:,.1f} samples/s, sentence-transformers {st:,.1f}: **{ratio:.2f}x** (rounds "
            f"{', '.join(f'{d[0] / s[0]:.2f}' for d, s in zip(fig['drmix'], fig['st']))}); {fig['precision']}, "
            f"batch {fig['batch_size']}, {fig['max_length']} tokens")
    if fig.get("floor"):
        text += f"; compute floor {fig['floor']:,.1f} samples/s ({100 * drmix / fig['floor']:.0f}% of it)"
    return text, ratio >= TRAIN_GOAL


def adapt_figure(fig: dict[str, Any], device: str) -> tuple[str, bool]:
    want = "nccl" if device.startswith("cuda") else "gloo"
    text = (f"exit {fig['returncode']} in {fig['seconds']:.0f} s, process group {fig['backend']}; chose "
            f"{fig['selected']} of {', '.join(fig['candidates'])}; {fig['passages']:,} passages, "
            f"{fig['pairs']:,} training pairs")
    return text, fig["returncode"] == 0 and fig["backend"] == want


def sharded_figure(fig: dict[str, Any]) -> tuple[str, bool]:
    one, two = fig["runs"]
    same = (one["vectors_sha256"], one["ids_sha256"]) == (two["vectors_sha256"], two["ids_sha256"])
    text = (f"{fig['passages']:,} passages: 1 GPU {one['wall_s']:.1f} s, 2 GPUs {two['wall_s']:.1f} s "
            f"({one['wall_s'] / two['wall_s']:.2f}x, whole commands); identical to 1 process: "
            f"{'yes' if same else '**no**'}")
    return text, same


WHAT = {"encode": "`bench_encode.py --preset gpu`", "train": "`bench_train.py --preset gpu --rounds 2`",
        "adapt": "`torchrun --nproc-per-node 1 -m drmix adapt`", "sharded": "`torchrun --nproc-per-node 2 -m drmix index`"}


#: what --tiny runs instead (encode_args, train_args, adapt_settings)
TINY = {"encode": "`bench_encode.py`, 48 passages, 1 round", "train": "`bench_train.py`, 3 steps, 1 round",
        "adapt": "`torchrun --nproc-per-node 1 -m drmix adapt`, 2 steps a stage",
        "sharded": "`torchrun --nproc-per-node 2 -m drmix index`"}


def goal(part: str, device: str) -> str:
    return {"encode": f">= {ENCODE_GOAL:.1f}x `SentenceTransformer.encode`",
            "train": f">= {TRAIN_GOAL:.1f}x the sentence-transformers trainer",
            "adapt": f"finishes under the launcher, process group {'nccl' if device.startswith('cuda') else 'gloo'}",
            "sharded": "byte-identical to 1 process"}[part]


def render(results: dict[str, Any]) -> str:
    """The summary table (Markdown) of ``results.json``."""
    device = results["device"]
    lines = [f"{results['machine']}; device {device}{', toy sizes (--tiny)' if results.get('tiny') else ''}; "
             f"budget {results['budget_s']:.0f} s, estimated {results['estimated_s']:.0f} s, took "
             f"{results.get('took_s', 0):.0f} s", "",
             "| part | command | measured | goal | met |", "|---|---|---|---|---|"]
    for part in results["order"]:
        r = results["parts"].get(part, {"status": "not run"})
        if r["status"] == "ran":
            fig = r["figures"]
            text, met = (adapt_figure(fig, device) if part == "adapt" else
                         {"encode": encode_figure, "train": train_figure, "sharded": sharded_figure}[part](fig))
            verdict = "yes" if met else "**no**"
        else:
            text, verdict = r.get("why", r["status"]), "—"
        what = (TINY if results.get("tiny") else WHAT)[part]
        lines.append(f"| {part} | {what} | {text} | {goal(part, device)} | {verdict} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ the command
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/drmix-gpu-evidence"), help="where results go")
    ap.add_argument("--data", type=Path, default=_common.DEFAULT_DATA, help="the shared data (SciFact is read)")
    ap.add_argument("--model", default=None, help="model of every part (default all-MiniLM-L6-v2)")
    ap.add_argument("--device", default=None, help="cuda (default when there is a GPU) or cpu")
    ap.add_argument("--tiny", action="store_true", help="toy sizes (the CPU proof; a 1-layer model unless --model)")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run, in order")
    ap.add_argument("--budget-s", type=float, default=600.0, help="device seconds the parts must fit in")
    ap.add_argument("--adapt-docs", type=int, default=None, help="adapt: target passages (default 2,000; tiny 16)")
    ap.add_argument("--adapt-pairs", type=int, default=None, help="adapt: training pairs (default 800; tiny 32)")
    ap.add_argument("--sharded-docs", type=int, default=50_000, help="sharded: passages indexed")
    ap.add_argument("--estimate", action="store_true", help="print the estimates and stop")
    ap.add_argument("--report-only", action="store_true", help="print the table of OUT/results.json")
    args = ap.parse_args(argv)
    args.adapt_docs = args.adapt_docs or (16 if args.tiny else 2000)
    args.adapt_pairs = args.adapt_pairs or (32 if args.tiny else 800)
    return args


def _device(args: argparse.Namespace) -> tuple[str, int, str]:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = args.device or ("cuda" if gpus else "cpu")
    machine = (f"{torch.cuda.get_device_name(0)} x {gpus}" if gpus else f"CPU, {os.cpu_count()} cores, load "
               f"average {os.getloadavg()[0]:.1f} at the start")
    return device, gpus, machine


def _save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    from drmix.io.atomic import atomic_write_json

    atomic_write_json(args.out / "results.json", results)


def run_parts(args: argparse.Namespace, budget: Any, need: dict[str, float], gpus: int,
              results: dict[str, Any]) -> None:
    """Each part that fits what is left of the budget, its figures (or why not) saved as it ends."""
    for part in args.parts:
        why = unavailable(part, args, gpus)
        if why is None and not budget.fits(need[part]):
            why = budget.skip_line(part, need[part]).split(": ", 1)[1]
        if why is not None:
            print(f"{part}: {why}", flush=True)
            results["parts"][part] = {"status": "skipped", "why": why}
            _save(args, results)
            continue
        print(f"--- {part} (estimated {need[part]:.0f} s, {budget.left():.0f} s left)", flush=True)
        if args.tiny and not args.model:  # made once, for the first part that runs
            from _models import truncated_minilm

            args.model = truncated_minilm(1, args.out / "models")
        t0 = time.perf_counter()
        try:
            results["parts"][part] = {"status": "ran", "figures": RUNNERS[part](args)}
        except Exception as e:  # noqa: BLE001 - one failed part must not lose the others' figures
            traceback.print_exc()
            line = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            results["parts"][part] = {"status": "failed", "why": f"failed: {line}"}
        results["parts"][part]["seconds"] = round(time.perf_counter() - t0, 1)
        _save(args, results)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        print(render(json.loads((args.out / "results.json").read_text(encoding="utf-8"))))
        return 0
    from _lease import START_S, Budget

    budget = args.budget = Budget(args.budget_s)
    device, gpus, machine = _device(args)
    args.device = device
    need = estimates(args)
    total = START_S + sum(need[p] for p in args.parts if unavailable(p, args, gpus) is None)
    print(f"estimated device time: {total / 60:.1f} min in all ({START_S:.0f} s to start, then "
          + ", ".join(f"{p} {need[p]:.0f} s" + (" (not here)" if unavailable(p, args, gpus) else "")
                      for p in args.parts)
          + f"; _lease.py's assumptions); budget {args.budget_s:.0f} s: "
          + ("fits" if total <= args.budget_s else "does NOT fit: the parts that do not fit are skipped"), flush=True)
    if args.estimate:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"device": device, "machine": machine, "tiny": args.tiny, "budget_s": args.budget_s,
                               "estimated_s": round(total, 1), "order": list(args.parts), "parts": {},
                               "estimates_s": {p: round(need[p], 1) for p in args.parts}}
    run_parts(args, budget, need, gpus, results)
    results["took_s"] = round(budget.total_s - budget.left(), 1)
    _save(args, results)
    table = render(results)
    (args.out / "summary.md").write_text(table + "\n", encoding="utf-8")
    print("\n" + table)
    print(f"\nwrote {args.out / 'results.json'} and {args.out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
