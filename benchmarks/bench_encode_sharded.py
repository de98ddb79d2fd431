"""Sharded encoding: ``drmix index`` in one process vs ``torchrun --nproc-per-node 2 -m drmix index``.

The same corpus (the first ``--n`` SciFact passages with their ids), model, batch size and max length; the two
commands run one after the other as subprocesses, each timed from start to exit (Python and model start-up,
reading the corpus, encoding, the merge, writing the index). The check: the two indexes' ``vectors.npy`` and
``ids.json`` are byte-identical (their SHA-256 printed). Each process runs ``--threads`` torch threads, so two
processes use twice the cores of one -- the comparison is one worker vs two, as one GPU vs two.

``encode_texts`` sorts and batches each chunk of 16,384 texts on its own; the ranks share out its batches
(about half the rows each, whatever the corpus size). ``--align`` sets that chunk for both commands (a launcher
sets ``drmix.retrieval.encode._SORT_CHUNK``): the stored cpu run used 256, from when ranks split at whole chunks
only. Both sides use it, and the outputs are still compared byte for byte.

    nice -n 5 python benchmarks/bench_encode_sharded.py --data ../shared/data --preset cpu --work /tmp/bench-shards
    python benchmarks/bench_encode_sharded.py --preset gpu --estimate
    python benchmarks/bench_encode_sharded.py --data ../shared/data --preset gpu --work /tmp/bench-shards  # 2 GPUs
    python benchmarks/bench_encode_sharded.py --report-only --work /tmp/bench-shards

Writes ``results.json`` in ``--work`` and prints the table docs/benchmarks.md holds.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import _common  # noqa: F401  (sets the offline environment)

PRESETS = {"cpu": {"n": 1000, "batch_size": 32, "max_length": 128, "align": 256, "threads": 1, "precision": "fp32"},
           "gpu": {"n": 100_000, "batch_size": 256, "max_length": 256, "align": 16384, "threads": 4,
                   "precision": "auto"}}
LAUNCHER = ("import sys\nimport drmix.retrieval.encode as e\ne._SORT_CHUNK = int(sys.argv.pop(1))\n"
            "from drmix.cli import main\nmain(sys.argv[1:])\n")


def write_corpus(data: Path, n: int, path: Path) -> int:
    rows = []
    with open(data / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            rows.append(line if line.endswith("\n") else line + "\n")
            if len(rows) == n:
                break
    path.write_text("".join(rows), encoding="utf-8")
    return len(rows)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_index(procs: int, args: argparse.Namespace, corpus: Path, out: Path, launcher: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    tail = ["index", "--corpus", str(corpus), "--output", str(out), "--batch-size", str(args.batch_size),
            "--max-length", str(args.max_length), "--precision", args.precision, "--overwrite"]
    if args.model:
        tail += ["--model", args.model]
    if procs == 1:  # one GPU (a plain process would spread a large corpus over every visible GPU)
        env.setdefault("CUDA_VISIBLE_DEVICES", "0")
        cmd = [sys.executable, str(launcher), str(args.align), *tail]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs),
               str(launcher), str(args.align), *tail]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return wall


def table(results: dict) -> str:
    s = results["settings"]
    lines = [f"{s['n']:,} SciFact passages, {s['model']}, batch {s['batch_size']}, max length {s['max_length']}, "
             f"{s['precision']}, {s['threads']} torch thread(s) per process, sort chunk {s['align']}; "
             f"{results['device']}",
             "",
             "| processes | wall time, whole command (s) | passages/s (whole command) | speed-up | vectors.npy SHA-256 "
             "| identical to 1 process |",
             "|---:|---:|---:|---:|---|---|"]
    base = results["runs"][0]
    for r in results["runs"]:
        same = "yes" if (r["vectors_sha256"], r["ids_sha256"]) == (base["vectors_sha256"], base["ids_sha256"]) \
            else "**no**"
        lines.append(f"| {r['processes']} | {r['wall_s']:.1f} | {s['n'] / r['wall_s']:.1f} | "
                     f"{base['wall_s'] / r['wall_s']:.2f}x | `{r['vectors_sha256'][:16]}` | {same} |")
    return "\n".join(lines)


def estimate(preset: str) -> str:
    from drmix.retrieval.plan import encode_seconds

    p = PRESETS[preset]
    one = encode_seconds(p["n"], devices=1)
    two = encode_seconds(p["n"], devices=2, dim=384)
    return (f"estimated device time of this command: {(one + two) / 60:.1f} min ({p['n']:,} passages at 900 "
            f"passages/s per GPU: {one:.0f} s on 1 GPU, {two:.0f} s on 2, drmix.retrieval.plan); needs 2 GPUs; "
            + ("fits one 10-minute command" if one + two < 600 else "does NOT fit one 10-minute command"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=_common.DEFAULT_DATA)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-encode-sharded"))
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--model", default=None, help="default: drmix's default model (all-MiniLM-L6-v2)")
    ap.add_argument("--procs", type=int, default=2, help="processes of the sharded run")
    ap.add_argument("--estimate", action="store_true", help="print the GPU preset's device time and stop")
    ap.add_argument("--report-only", action="store_true", help="print the table of --work/results.json")
    for name in ("n", "batch_size", "max_length", "align", "threads"):
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    ap.add_argument("--precision", default=None)
    args = ap.parse_args()
    if args.estimate:
        print(estimate(args.preset))
        return
    if args.report_only:
        print(table(json.loads((args.work / "results.json").read_text(encoding="utf-8"))))
        return
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.work.mkdir(parents=True, exist_ok=True)
    launcher = args.work / "launch.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    corpus = args.work / "corpus.jsonl"
    n = write_corpus(args.data, args.n, corpus)
    import torch

    device = (f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}" if torch.cuda.is_available()
              else f"CPU, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    runs = []
    for procs in (1, args.procs):
        out = args.work / f"index-{procs}"
        wall = run_index(procs, args, corpus, out, launcher)
        runs.append({"processes": procs, "wall_s": round(wall, 2), "vectors_sha256": sha256(out / "vectors.npy"),
                     "ids_sha256": sha256(out / "ids.json")})
        print(f"{procs} process(es): {wall:.1f} s", flush=True)
    results = {"settings": {"n": n, "model": args.model or "all-MiniLM-L6-v2", "batch_size": args.batch_size,
                            "max_length": args.max_length, "precision": args.precision, "threads": args.threads,
                            "align": args.align}, "device": device, "runs": runs}
    (args.work / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table(results))


if __name__ == "__main__":
    main()
