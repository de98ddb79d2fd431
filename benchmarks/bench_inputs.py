"""The input side alone, no model: can drmix feed an accelerator?

Training: the trainer's input pipeline for one global batch (draw rows with the mixture sampler, fetch the
examples, tokenise or look up their ids, pad, and pin when a CUDA device is present) at batch 128, queries
64 / documents 256 tokens, one hard negative, on the real collections of ``build_collections.py``, through
the exact functions the trainer calls (:func:`drmix.train.inputs.host_inputs`):

* ``on-the-fly`` -- texts fetched from Arrow and tokenised each step (the path before pre-tokenisation);
* ``pre-tokenised`` -- ids stored once per (tokenizer, lengths, prompts, content) by
  :func:`drmix.data.tokenized.tokenize_collection`, looked up and padded each step.

Evaluation: the evaluation encoder's input path (:func:`drmix.retrieval.encode.encode_texts` without the
forward pass): tokenise (or look up) a corpus, sort by length and pad every batch of 128, on SciFact's
corpus at 256 tokens; passages/s.

One torch thread and ``TOKENIZERS_PARALLELISM=false`` (one core, the trainer's default). The one-off
tokenisation of the cache is timed separately. Each path prints one line ending in ``N batches/s`` (or
``N passages/s``); timings on a shared machine are only comparable as ratios within one run.

    python benchmarks/bench_inputs.py --data ../shared/data
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_collections import DEFAULT_DATA, build_all  # noqa: E402


def _cpu() -> float:
    return time.process_time()  # this process's CPU seconds, all threads


def time_batches(pipeline_step, n: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``n`` calls after one warm-up call."""
    pipeline_step()
    w0, c0 = time.perf_counter(), _cpu()
    for _ in range(n):
        pipeline_step()
    return time.perf_counter() - w0, _cpu() - c0


def training_paths(args, model, collections) -> list[dict]:
    import torch

    from drmix.data.sampling import BatchBuilder, MixtureSampler
    from drmix.data.tokenized import tokenize_collection
    from drmix.device import pin_memory_available
    from drmix.train.inputs import Featurizer, host_inputs

    sizes = [len(c) for c in collections]
    pin = pin_memory_available("cuda")
    kw = dict(query_max_length=args.query_len, doc_max_length=args.doc_len)
    rows = []
    t0 = _cpu()
    tokens = [tokenize_collection(c, model, num_proc=args.num_proc, **kw) for c in collections]
    build_s = _cpu() - t0
    for label, toks, n in (("on-the-fly", None, args.text_batches), ("pre-tokenised", tokens, args.id_batches)):
        sampler = MixtureSampler(sizes, args.batch_size, seed=0)
        builder = BatchBuilder(collections, args.negatives, seed=0, tokens=toks)
        featurize = Featurizer(model, pin=pin, pad_multiple=8 if pin else 1)
        weights = [1.0] * len(sizes)

        def step():
            batch = builder.build(sampler.next_indices(weights))
            q, d, mask = host_inputs(featurize, batch, args.negatives, **kw)
            assert q["input_ids"].shape[0] == args.batch_size and d["input_ids"].shape[0] >= args.batch_size
            return q, d, mask

        q, d, _ = step()  # warm-up (also verifies the shortcut and the stored ids)
        wall, cpu = time_batches(step, n)
        rows.append({"path": label, "batches": n, "wall": wall, "cpu": cpu, "rate": n / wall,
                     "shapes": (tuple(q["input_ids"].shape), tuple(d["input_ids"].shape))})
    rows.append({"path": "tokenising the cache once", "build_s": build_s,
                 "examples": sum(sizes)})
    del torch
    return rows


def encoding_paths(args, model) -> list[dict]:
    import numpy as np

    from drmix.data.beir import doc_text, load_beir
    from drmix.data.tokenized import corpus_ids
    from drmix.model.features import TextBatcher
    from drmix.retrieval.encode import length_order

    corpus = load_beir(args.data / "scifact", "test").corpus
    texts = [doc_text(corpus[i]) for i in corpus]
    rows = []
    t0 = _cpu()
    stored = corpus_ids(model, texts, max_length=args.doc_len)
    build_s = _cpu() - t0

    def run(get_ids):
        b = TextBatcher(model, "", args.doc_len)
        ids = get_ids(b)
        order = length_order(np.asarray([len(x) for x in ids]))
        first = True
        for start in range(0, len(texts), args.encode_batch):
            idx = order[start:start + args.encode_batch]
            b.features([texts[i] for i in idx], [ids[i] for i in idx], verify=first)
            first = False
        return b

    for label, get in (("on-the-fly", lambda b: b.tokenize(texts)),
                       ("pre-tokenised", lambda b: stored.rows(0, len(stored)))):
        run(get)
        w0, c0 = time.perf_counter(), _cpu()
        for _ in range(args.encode_rounds):
            b = run(get)
        wall, cpu = time.perf_counter() - w0, _cpu() - c0
        assert b.fast, "the padded ids differ from model.preprocess"
        n = len(texts) * args.encode_rounds
        rows.append({"path": label, "passages": n, "wall": wall, "cpu": cpu, "rate": n / wall})
    rows.append({"path": "tokenising the corpus once", "build_s": build_s, "passages": len(texts)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data directory (read-only)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "drmix-bench-inputs",
                    help="where the collections are built (default: TMP/drmix-bench-inputs)")
    ap.add_argument("--max-per-collection", type=int, default=20000,
                    help="examples per built collection (build_collections.py; default 20000)")
    ap.add_argument("--batch-size", type=int, default=128, help="global batch (default 128)")
    ap.add_argument("--query-len", type=int, default=64, help="query max tokens (default 64)")
    ap.add_argument("--doc-len", type=int, default=256, help="document max tokens (default 256)")
    ap.add_argument("--negatives", type=int, default=1, help="hard negatives per query (default 1)")
    ap.add_argument("--text-batches", type=int, default=10, help="timed batches, on-the-fly path (default 10)")
    ap.add_argument("--id-batches", type=int, default=200, help="timed batches, pre-tokenised path (default 200)")
    ap.add_argument("--encode-batch", type=int, default=128, help="evaluation encoder batch (default 128)")
    ap.add_argument("--encode-rounds", type=int, default=2, help="passes over the corpus per path (default 2)")
    ap.add_argument("--num-proc", type=int, default=None, help="processes for tokenising the cache (default 1)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="token-id cache folder (default: a fresh one under --work, so the one-off cost is timed)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ["DRMIX_CACHE"] = str(args.cache or Path(tempfile.mkdtemp(prefix="cache-", dir=args.work)))
    import logging

    logging.basicConfig(level=logging.WARNING)
    from drmix.data.collections import load_collections
    from drmix.model.encoder import load_encoder

    args.data = args.data.resolve()
    coll_dir = args.work / "collections"
    build_all(args.data, coll_dir, seed=0, max_per_collection=args.max_per_collection)
    collections = load_collections([str(p) for p in sorted(coll_dir.glob("*.jsonl"))])
    model = load_encoder(None, device="cpu")
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"batch {args.batch_size}, q {args.query_len} / d {args.doc_len} tokens, {args.negatives} hard negative; "
          f"{len(collections)} collections, {sum(len(c) for c in collections)} examples", flush=True)
    train = training_paths(args, model, collections)
    for r in train:
        if "build_s" in r:
            print(f"training  {r['path']}: {r['examples']} examples in {r['build_s']:.1f} s CPU", flush=True)
        else:
            print(f"training  {r['path']}: {r['batches']} batches, shapes q {r['shapes'][0]} d {r['shapes'][1]}, "
                  f"{r['wall']:.2f} s wall ({r['rate']:.1f}/s under this load) / {r['cpu']:.2f} s CPU; one core: "
                  f"{r['batches'] / r['cpu']:.1f} batches/s", flush=True)
    enc = encoding_paths(args, model)
    for r in enc:
        if "build_s" in r:
            print(f"encoding  {r['path']}: {r['passages']} passages in {r['build_s']:.1f} s CPU", flush=True)
        else:
            print(f"encoding  {r['path']}: {r['passages']} passages, {r['wall']:.2f} s wall ({r['rate']:.0f}/s under "
                  f"this load) / {r['cpu']:.2f} s CPU; one core: {r['passages'] / r['cpu']:.0f} passages/s", flush=True)
    t = {r["path"]: r for r in train}
    e = {r["path"]: r for r in enc}
    def per_cpu(r: dict, n: str) -> float:
        return r[n] / r["cpu"]

    print(f"ratio pre-tokenised / on-the-fly (per CPU-second): training "
          f"{per_cpu(t['pre-tokenised'], 'batches') / per_cpu(t['on-the-fly'], 'batches'):.1f}x, encoding "
          f"{per_cpu(e['pre-tokenised'], 'passages') / per_cpu(e['on-the-fly'], 'passages'):.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
