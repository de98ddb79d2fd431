"""Memory while training on a large collection: resident set size (RSS) at 10k, 1M and 10M rows.

A synthetic collection (query, one positive, one hard negative; short texts) is written in a temporary
directory, cheaply (pyarrow, no JSON parsing), as a saved Hugging Face dataset in drmix's columns (``saved``:
used as it is) and/or as a sentence-transformers parquet file (``parquet``: ``anchor``, ``positive``,
``negative`` strings, read through ``datasets`` and converted once into drmix's columns, cached by content).
The parquet file is trained on twice in fresh processes with an empty drmix cache: the first run converts
(its peak includes the conversion), the second reads the cached conversion. Each size is written and trained
in fresh processes (a tiny random BERT, so the model's memory is small and constant;
batch 32, texts tokenised per batch unless ``--pretokenize``) and RSS is read with psutil after the trainer is built and
after the steps, with the peak (``ru_maxrss``), and split into file-backed pages (the memory-mapped
Arrow files) and anonymous memory. Collections are memory-mapped, so anonymous memory should stay
nearly flat in the number of rows (what grows is the sampler's per-epoch permutation, 4 bytes/row),
and the mapped pages reads bring in are released after opening and every 16 batches
(:mod:`drmix.data.pages`), so file-backed memory stays flat too.

    python benchmarks/bench_rss.py --sizes 10000 1000000 10000000 --steps 30 --sources saved parquet
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: E402,F401  (offline environment)


def write_collection(path: Path, rows: int, chunk: int = 1_000_000) -> None:
    """A saved dataset of ``rows`` synthetic examples: 1M-row Arrow parts saved one at a time, then joined
    (memory-mapped) and saved once, so writing 10M rows needs about one part's memory."""
    import shutil

    import datasets
    import numpy as np
    import pyarrow as pa

    def texts(prefix: str, ids: np.ndarray) -> pa.Array:
        return pa.array([f"{prefix} {i} alpha beta gamma {i % 97} delta" for i in ids.tolist()], pa.string())

    def one_list(values: pa.Array) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(np.arange(len(values) + 1, dtype=np.int32)), values)

    parts = []
    for k, start in enumerate(range(0, rows, chunk)):
        ids = np.arange(start, min(rows, start + chunk))
        part = path.parent / f"{path.name}.part{k}"
        datasets.Dataset(pa.table({"query": texts("query", ids), "positives": one_list(texts("passage", ids)),
                                   "negatives": one_list(texts("other", ids[::-1]))})).save_to_disk(str(part))
        parts.append(part)
    joined = datasets.concatenate_datasets([datasets.load_from_disk(str(p)) for p in parts])
    joined.save_to_disk(str(path), num_shards=max(1, rows // 2_000_000))
    for p in parts:
        shutil.rmtree(p)


def write_parquet(path: Path, rows: int, chunk: int = 1_000_000) -> None:
    """The same synthetic rows as :func:`write_collection` in sentence-transformers' columns, as one parquet
    file written a chunk at a time (100k-row row groups)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    def texts(prefix: str, ids: np.ndarray) -> pa.Array:
        return pa.array([f"{prefix} {i} alpha beta gamma {i % 97} delta" for i in ids.tolist()], pa.string())

    schema = pa.schema([("anchor", pa.string()), ("positive", pa.string()), ("negative", pa.string())])
    with pq.ParquetWriter(str(path), schema) as w:
        for start in range(0, rows, chunk):
            ids = np.arange(start, min(rows, start + chunk))
            w.write_table(pa.table({"anchor": texts("query", ids), "positive": texts("passage", ids),
                                    "negative": texts("other", ids[::-1])}, schema=schema),
                          row_group_size=100_000)


def build_tiny_model(folder: Path) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    from drmix.model.encoder import default_model_path

    hf = folder / "hf"
    tok = AutoTokenizer.from_pretrained(default_model_path())
    tok.save_pretrained(hf)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(hf)
    model = SentenceTransformer(modules=[Transformer(str(hf), max_seq_length=64), Pooling(32, "mean"), Normalize()],
                                device="cpu")
    model.save(str(folder / "st"))
    return folder / "st"


def measure(data: Path, model: Path, out: Path, steps: int, pretokenize: bool = False) -> dict:
    """Runs in a child process: build a trainer, train, report RSS."""
    import psutil

    from drmix.config import TrainConfig
    from drmix.train.trainer import Trainer

    proc = psutil.Process()
    base = proc.memory_info().rss
    cfg = TrainConfig(model=str(model), data=[str(data)], output_dir=str(out), max_steps=steps, batch_size=32,
                      num_negatives=1, query_max_length=32, doc_max_length=32, save_every=10**6, log_every=10,
                      show_progress=False, device="cpu", seed=0, pretokenize=pretokenize)
    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    built = proc.memory_info().rss
    built_seconds = time.perf_counter() - t0
    trainer.train()
    mem = proc.memory_info()
    done = mem.rss
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # file-backed resident pages (the memory-mapped Arrow files, reclaimable page cache) vs anonymous memory
    return {"rows": len(trainer.collections[0]), "rss_imports_mb": base / 2**20, "rss_built_mb": built / 2**20,
            "rss_trained_mb": done / 2**20, "peak_mb": peak / 2**20, "file_backed_mb": mem.shared / 2**20,
            "anon_trained_mb": (mem.rss - mem.shared) / 2**20, "seconds": time.perf_counter() - t0,
            "built_seconds": built_seconds, "layout": trainer.collections[0].layout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000, 10_000_000])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--sources", nargs="+", choices=["saved", "parquet"], default=["saved", "parquet"],
                    help="saved: a saved dataset in drmix's columns; parquet: sentence-transformers parquet "
                         "(trained twice: converting, then from the cached conversion)")
    ap.add_argument("--pretokenize", action="store_true",
                    help="train from stored token ids (the trainer's default; tokenising 10M rows takes about an "
                         "hour on one core): off by default here, so the table measures the data path alone")
    ap.add_argument("--child", nargs=3, metavar=("DATA", "MODEL", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--write", nargs=3, metavar=("KIND", "ROWS", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    import logging
    import os
    import shutil

    logging.disable(logging.WARNING)
    if args.write:
        (write_collection if args.write[0] == "saved" else write_parquet)(Path(args.write[2]), int(args.write[1]))
        return
    if args.child:
        print(json.dumps(measure(Path(args.child[0]), Path(args.child[1]), Path(args.child[2]), args.steps,
                                 args.pretokenize)))
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # the model and the data are made in their own processes: a child's peak RSS (ru_maxrss) starts
        # from its parent's at fork, so this orchestrating process must stay small
        subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import bench_rss; "
                        "bench_rss.build_tiny_model(__import__('pathlib').Path(sys.argv[2]))",
                        str(Path(__file__).parent), str(tmp / "model")], check=True, capture_output=True)
        model = tmp / "model" / "st"
        for source in args.sources:
            for n in args.sizes:
                data = tmp / (f"c{n}" if source == "saved" else f"c{n}.parquet")
                t0 = time.perf_counter()
                subprocess.run([sys.executable, __file__, "--write", source, str(n), str(data)], check=True,
                               capture_output=True)
                made = time.perf_counter() - t0
                # a fresh drmix cache per size: the parquet's first run converts it, the second reads the cache
                env = dict(os.environ, DRMIX_CACHE=str(tmp / f"cache{n}"))
                runs = ["as it is"] if source == "saved" else ["first run (converts)", "cached"]
                for i, run in enumerate(runs):
                    child = subprocess.run([sys.executable, __file__, "--steps", str(args.steps),
                                            *(["--pretokenize"] if args.pretokenize else []), "--child", str(data),
                                            str(model), str(tmp / f"run-{source}-{n}-{i}")],
                                           capture_output=True, text=True, check=True, env=env)
                    r = json.loads(child.stdout.strip().splitlines()[-1])
                    r.update(write_seconds=made, source=source, run=run)
                    results.append(r)
                    print(json.dumps(r), flush=True)
                shutil.rmtree(data, ignore_errors=True) if data.is_dir() else data.unlink(missing_ok=True)
                shutil.rmtree(tmp / f"cache{n}", ignore_errors=True)
    print("\n| source | run | rows | RSS after imports (MB) | RSS, trainer built (MB) | RSS after training (MB) | "
          "of which file-backed (MB) | anonymous (MB) | peak (MB) | trainer built in (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['source']} | {r['run']} | {r['rows']:,} | {r['rss_imports_mb']:.0f} | {r['rss_built_mb']:.0f} "
              f"| {r['rss_trained_mb']:.0f} | {r.get('file_backed_mb', float('nan')):.0f} "
              f"| {r.get('anon_trained_mb', float('nan')):.0f} | {r['peak_mb']:.0f} | {r['built_seconds']:.1f} |")
    for source, run in dict.fromkeys((r["source"], r["run"]) for r in results):
        rs = [r for r in results if (r["source"], r["run"]) == (source, run)]
        if len(rs) > 1:
            print(f"\n{source}, {run}: growth from {rs[0]['rows']:,} to {rs[-1]['rows']:,} rows: "
                  f"{rs[-1]['rss_trained_mb'] - rs[0]['rss_trained_mb']:+.0f} MB after training, "
                  f"{rs[-1]['peak_mb'] - rs[0]['peak_mb']:+.0f} MB peak")


if __name__ == "__main__":
    main()
