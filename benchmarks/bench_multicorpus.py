"""Multi-corpus retrieval benchmark: allocation policies on Walmart-Amazon and Amazon-Google (k = 10).

Reproduces the shape of Table 3 of *Multi Distribution Dense Information Retrieval*
(seed 003_1da1604bae7d74b5.txt): for each benchmark and each choice of known corpus, the rows are
naive merging, fixed fractions 0.0..1.0, confidence allocation, the calibrated label-free policies
(zscore, rrf), the fractions/thresholds chosen on the validation split, and the oracle; each cell is
per-corpus credit Recall@k (x100) / per-corpus MRR@k on the test split.

Models: all-MiniLM-L6-v2 as shipped (no fine-tuning; both directions share its encodings), and the same
model fine-tuned on the known side's unmatched records with ``drmix.train.trainer.train`` (in-batch
negatives; steps/batch/lengths from the flags, kept small for CPU).

    python benchmarks/bench_multicorpus.py --data ../shared/data --out /tmp/drmix-multicorpus

Writes ``table.md``, ``results.json`` and recall-vs-k plots under ``--out`` and prints the table. It
also times ranx's RRF fusion against drmix's ``rrf`` policy on the same candidates (ratio, same run).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from drmix.data.entity_matching import EntityMatchingConfig, build_entity_matching, read_manifest  # noqa: E402
from drmix.evaluation.multi_metrics import (  # noqa: E402
    format_table,
    load_multi_qrels,
    sweep_policies,
    write_sweep,
)
from drmix.io import atomic_write_json  # noqa: E402
from drmix.retrieval.multi import (  # noqa: E402
    CandidateSet,
    CorpusCandidates,
    MultiCorpusRetriever,
    allocate_all,
    expand_policy_specs,
)

log = logging.getLogger("bench_multicorpus")

SPECS = ["naive", "fixed:0.0..1.0", "confidence:0.1", "confidence:0.3", "confidence:0.5", "confidence:0.7", "confidence:0.9", "confidence:0.95",
         "confidence:0.99", "zscore", "zscore:source=candidates", "rrf", "oracle"]
KS = (1, 2, 5, 10, 20, 50, 100)


def parse_args(argv=None) -> argparse.Namespace:
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(here.parent / "shared" / "data"), help="shared data directory")
    ap.add_argument("--out", default="/tmp/drmix-multicorpus", help="where layouts, models and results go")
    ap.add_argument("--benchmarks", default="walmart-amazon,amazon-google", help="comma-separated")
    ap.add_argument("--models", default="base,finetuned", help="base and/or finetuned")
    ap.add_argument("--k", type=int, default=10, help="retrieval budget of the table")
    ap.add_argument("--depth", type=int, default=100, help="candidates fetched per corpus")
    ap.add_argument("--steps", type=int, default=60, help="fine-tuning steps per direction")
    ap.add_argument("--batch-size", type=int, default=32, help="fine-tuning batch size")
    ap.add_argument("--max-unmatched", type=int, default=1000, help="subsample unmatched records per side (seeded)")
    ap.add_argument("--passage-fields", action="append", default=[], metavar="BENCH=F1,F2",
                    help="passage columns for one benchmark (default: all but id), e.g. "
                         "walmart-amazon=category,brand,modelno,price; repeatable")
    ap.add_argument("--encode-batch-size", type=int, default=128, help="encoding batch size")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--skip-ranx", action="store_true", help="do not time ranx fusion")
    return ap.parse_args(argv)


def save_cset(cset: CandidateSet, path: Path) -> None:
    rows = {q: {c: [cc.ids, cc.scores.tolist(), cc.background] for c, cc in by_c.items()}
            for q, by_c in cset.by_query.items()}
    atomic_write_json(path, {"corpora": cset.corpora, "by_query": rows}, indent=None)


def load_cset(path: Path) -> CandidateSet:
    d = json.loads(path.read_text())
    return CandidateSet(d["corpora"], {q: {c: CorpusCandidates(v[0], np.array(v[1]), tuple(v[2]) if v[2] else None)
                                           for c, v in by_c.items()} for q, by_c in d["by_query"].items()})


def candidates(model_path, man: dict, split_queries: dict, args, cache: Path):
    """Candidates of every split's queries (cached as JSON so an interrupted run resumes cheaply)."""
    from drmix.model.encoder import load_encoder

    if cache.exists():
        cset, enc = load_cset(cache), None
    else:
        model = load_encoder(model_path)
        t = time.perf_counter()
        retr = MultiCorpusRetriever.from_dirs(model, man["corpus_dirs"], depth=args.depth,
                                              batch_size=args.encode_batch_size)
        all_q = {q: text for qs in split_queries.values() for q, text in qs.items()}
        cset = retr.candidates(all_q, k=max(args.k, max(KS)))
        enc = time.perf_counter() - t
        log.info("encoded %s passages and %d queries in %.0f s", {n: len(i.ids) for n, i in retr.indexes.items()},
                 len(all_q), enc)
        save_cset(cset, cache)
    return {s: cset.subset(qs) for s, qs in split_queries.items()}, enc


def finetune(train_file: Path, out_dir: Path, args) -> Path:
    from drmix.config import TrainConfig
    from drmix.train.trainer import train

    if (out_dir / "model" / "config.json").exists():
        log.info("reusing %s", out_dir)
        return out_dir / "model"
    cfg = TrainConfig(model=None, data=[str(train_file)], output_dir=str(out_dir), max_steps=args.steps,
                      batch_size=args.batch_size, learning_rate=5e-5, warmup_ratio=0.1, num_negatives=0,
                      query_max_length=32, doc_max_length=64, save_every=10_000, log_every=25, seed=42,
                      show_progress=False)
    t = time.perf_counter()
    res = train(cfg)
    log.info("fine-tuned on %s: %d steps in %.0f s", train_file.name, res.steps, time.perf_counter() - t)
    return res.model_dir


def time_ranx(cset, k: int) -> dict:
    """RRF through ranx.fuse vs drmix's rrf policy on the same candidates (one run, alternating)."""
    from ranx import Run, fuse

    runs = []
    for name in cset.corpora:
        runs.append(Run({q: {f"{name}/{d}": float(s) for d, s in zip(c[name].ids, c[name].scores)}
                         for q, c in cset.by_query.items()}, name=name))
    t = time.perf_counter()
    fuse(runs, method="rrf")
    first = time.perf_counter() - t
    ours, theirs = [], []
    for _ in range(3):
        t = time.perf_counter()
        allocate_all(cset, "rrf", k)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        fuse(runs, method="rrf")
        theirs.append(time.perf_counter() - t)
    return {"ranx_first_call_s": first, "ranx_warm_s": min(theirs), "drmix_rrf_s": min(ours),
            "queries": len(cset.by_query)}


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    pfields = {b: f.split(",") for b, _, f in (x.partition("=") for x in args.passage_fields)}
    benches = args.benchmarks.split(",")
    variants = {b: b + (f"[{'+'.join(pfields[b])}]" if b in pfields else "") for b in benches}
    res_dir = out / ("results-" + args.models.replace(",", "+") + "-" + "+".join(variants.values()))
    specs = expand_policy_specs(SPECS)
    results, timings = [], {}
    for bench in benches:
        variant = variants[bench]
        layout = out / "layouts" / variant
        if not (layout / "manifest.json").exists():
            build_entity_matching(Path(args.data) / bench, layout,
                                  EntityMatchingConfig(max_unmatched=args.max_unmatched,
                                                       passage_fields=pfields.get(bench)))
        man = read_manifest(layout)
        names = list(man["corpus_dirs"])
        split_q, split_qrels = {}, {}
        for split in ("dev", "test"):
            split_q[split], split_qrels[split] = load_multi_qrels(man["corpus_dirs"], split)
        jobs = []   # (label, model path, cache tag, known corpora)
        if "base" in args.models:
            jobs.append(("MiniLM", None, "base", names))
        if "finetuned" in args.models:
            jobs += [("MiniLM fine-tuned", known, f"ft-{known}", [known]) for known in names]
        for tag_label, ft_known, tag, knowns in jobs:
            model_path = None
            if ft_known is not None:
                model_path = str(finetune(man["train_files"][ft_known], out / "models" / f"{variant}-{ft_known}", args))
            csets, enc = candidates(model_path, man, split_q, args, out / "cache" / f"{variant}-{tag}.json")
            timings[f"{variant}/{tag}/encode_s"] = enc
            if tag == "base" and not args.skip_ranx and "ranx" not in timings:
                timings["ranx"] = time_ranx(csets["test"], args.k)
            for known in knowns:
                res = sweep_policies(csets["test"].reorder(known), split_qrels["test"], specs, args.k,
                                     setting=f"{variant} {known} known, {tag_label}", ks=KS,
                                     cset_dev=csets["dev"].reorder(known), qrels_dev=split_qrels["dev"])
                results.append(res)
                write_sweep(results, res_dir)
                print(format_table([res]), flush=True)
    paths = write_sweep(results, res_dir)
    (res_dir / "timings.json").write_text(json.dumps(timings, indent=2))
    print(format_table(results))
    print(json.dumps(timings, indent=2))
    print("wrote", {k: str(v) for k, v in paths.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
