"""COCO-DR benchmark: COCO on the SciFact + NFCorpus corpora (no labels), fine-tuning on the other collections
of build_collections.py, nDCG@10 on SciFact / NFCorpus test against the same fine-tuning without COCO, and
iDRO against uniform fine-tuning; plus the distribution-shift table.

Per seed: ``coco`` (COCO on both target corpora), ``base-uniform`` (fine-tuning from the original model),
``coco-uniform`` (the same fine-tuning from the COCO model) and ``coco-idro`` (iDRO fine-tuning from the COCO
model); with ``--control`` (on in the medium preset) also ``coco-source`` (the same COCO on as many passages of a
*source* corpus, XQuAD's Wikipedia paragraphs from the fine-tuning data, instead of the targets) and
``coco-source-uniform`` (the same fine-tuning from it): COCO-DR's question whether the gain comes from the target
corpora or from contrastive pretraining as such. Reported: per model the mean over seeds of the average nDCG@10 with a 95% t-interval over seeds, and
paired t-tests over queries (per-query nDCG@10 averaged over seeds) for COCO vs no COCO and iDRO vs uniform.

    python benchmarks/bench_coco.py --preset cpu --data ../shared/data --out /tmp/drmix-coco
    python benchmarks/bench_coco.py --preset gpu --data ../shared/data --out /data/drmix-coco   # the issue's scale

The cpu preset is small (subsampled corpora and test sets, tens of steps) so it finishes in about half an hour
on two cores; the gpu preset runs COCO for 2,000 steps of 256 pairs on the full corpora and fine-tunes 2,000
steps of 64 examples, evaluated on the full test sets. Settings were fixed before looking at test results.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

log = logging.getLogger("bench_coco")
from _common import reusable  # noqa: E402
from _lease import estimate_line  # noqa: E402
TARGETS = ("scifact", "nfcorpus")
SOURCES = ("altlex", "msrp", "sick", "xquad", "walmart_amazon", "amazon_google")

PRESETS = {
    # sized for two shared CPU cores: minutes per model, so a signal is not expected (see docs/benchmarks.md)
    "cpu": dict(coco=dict(max_steps=8, batch_size=32, learning_rate=5e-5, max_documents=400, span_max_length=48),
                finetune=dict(max_steps=6, batch_size=16, learning_rate=2e-5, doc_max_length=96,
                              max_collection_size=300),
                idro=dict(clusters=8, refresh_every=3, max_queries=600),
                test=dict(max_queries=100, max_docs=200, max_length=96),
                shift=dict(max_docs=1000, max_pairs=100, max_uniformity_docs=100)),
    # the first CPU read where models move: a 2-layer MiniLM (benchmarks/_models.py), COCO 100 steps of 32 span
    # pairs per seed, fine-tuning 300 steps at batch 32 with short lengths and in-batch negatives; no iDRO arm
    "medium": dict(coco=dict(max_steps=100, batch_size=32, learning_rate=5e-5, max_documents=300, span_max_length=24),
                   finetune=dict(max_steps=300, batch_size=32, learning_rate=5e-5, query_max_length=8,
                                 doc_max_length=24, max_collection_size=1500, num_negatives=0),
                   idro=None, model_layers=2, control=True,
                   test=dict(max_queries=100, max_docs=800, max_length=24),
                   shift=dict(max_docs=300, max_pairs=50, max_uniformity_docs=50)),
    # sized to one 10-minute GPU command per seed (--seeds 0, then 1, then 2; --report-only merges them)
    "gpu": dict(coco=dict(max_steps=1000, batch_size=128, learning_rate=1e-4, max_documents=None, span_max_length=128,
                          mixed_precision="bf16"),
                finetune=dict(max_steps=1000, batch_size=64, learning_rate=2e-5, doc_max_length=256,
                              max_collection_size=None, mixed_precision="bf16"),
                idro=dict(clusters=50, refresh_every=500, max_queries=None),
                test=dict(max_queries=None, max_docs=None, max_length=256),
                shift=dict(max_docs=None, max_pairs=1000, max_uniformity_docs=1000)),
}


def estimate(p: dict, seeds: list[int]):
    """Device time (:mod:`_lease`): per seed COCO (a span pair counted as half an example) and the
    fine-tunings; every fine-tuned model and the zero-shot one scored on both test sets."""
    from _lease import Estimate

    est = Estimate()
    docs = (p["test"]["max_docs"] or 5183) + (p["test"]["max_docs"] or 3633)
    runs = 2 + (p["idro"] is not None) + bool(p.get("control"))
    est.encode(docs)
    for _ in seeds:
        for _ in range(1 + bool(p.get("control"))):
            est.train("coco", p["coco"]["max_steps"] * p["coco"]["batch_size"] / 2)
        est.train("fine-tuning", p["finetune"]["max_steps"] * p["finetune"]["batch_size"] * runs, runs=runs)
        est.encode(docs * runs)
    return est


def scores_of(model, test: list[str], p: dict, cache_dir: Path) -> dict:
    """``{dataset: {query: nDCG@10}}`` of one model, cached in ``cache_dir/eval-test.json``."""
    from drmix.evaluation.suite import evaluate_suite

    return evaluate_suite({"model": model}, test, cache_dirs={"model": cache_dir}, max_queries=p["test"]["max_queries"],
                          max_docs=p["test"]["max_docs"], seed=0, max_length=p["test"]["max_length"]).scores()["model"]


def run_seed(args, p: dict, collections: Path, seed: int) -> dict[str, Path]:
    from drmix.config import TrainConfig
    from drmix.pretrain.runner import CocoConfig, pretrain_coco
    from drmix.api import train

    out = args.out / f"seed{seed}"
    corpora = [str(args.data / t) for t in TARGETS]
    times = {}
    model = getattr(args, "model", None)
    t0 = time.perf_counter()
    coco_dir = out / "coco"
    coco_cfg = CocoConfig(corpus=corpora, output_dir=str(coco_dir), seed=seed, show_progress=False, model=model,
                          resume=True, save_every=10_000, log_every=5, **p["coco"])
    if not reusable(coco_dir, coco_cfg, record="coco.yaml"):      # made with other settings: stops the run
        pretrain_coco(coco_cfg)
    times["coco"] = time.perf_counter() - t0
    data = [str(collections / f"{s}.jsonl") for s in SOURCES]
    runs = {"base-uniform": (model, "static"), "coco-uniform": (str(coco_dir / "model"), "static"),
            "coco-idro": (str(coco_dir / "model"), "idro")}
    if p["idro"] is None:
        del runs["coco-idro"]
    models = {"coco": coco_dir / "model"}
    for label, (start, strategy) in runs.items():
        t0 = time.perf_counter()
        d = out / label
        cfg = TrainConfig(model=start, data=data, output_dir=str(d), seed=seed, strategy=strategy,
                          idro=p["idro"] if strategy == "idro" else {}, show_progress=False, resume=True,
                          save_every=10_000, log_every=5, **{"num_negatives": 1, **p["finetune"]})
        if not reusable(d, cfg):
            train(cfg)
        times[label] = time.perf_counter() - t0
        models[label] = d / "model"
    if p.get("control"):
        source = source_corpus(collections, out.parent)
        t0 = time.perf_counter()
        ctrl_dir = out / "coco-source"
        ctrl_cfg = CocoConfig(corpus=[str(source)], output_dir=str(ctrl_dir), seed=seed, show_progress=False,
                              model=model, resume=True, save_every=10_000, log_every=5,
                              **{**p["coco"], "max_documents": p["coco"]["max_documents"] * len(TARGETS)})
        if not reusable(ctrl_dir, ctrl_cfg, record="coco.yaml"):
            pretrain_coco(ctrl_cfg)
        times["coco-source"] = time.perf_counter() - t0
        models["coco-source"] = ctrl_dir / "model"
        t0 = time.perf_counter()
        d = out / "coco-source-uniform"
        cfg = TrainConfig(model=str(ctrl_dir / "model"), data=data, output_dir=str(d), seed=seed, strategy="static",
                          show_progress=False, resume=True, save_every=10_000, log_every=5,
                          **{"num_negatives": 1, **p["finetune"]})
        if not reusable(d, cfg):
            train(cfg)
        times["coco-source-uniform"] = time.perf_counter() - t0
        models["coco-source-uniform"] = d / "model"
    log.info("seed %d training seconds: %s", seed, {k: round(v) for k, v in times.items()})
    (out / "times.json").write_text(json.dumps(times))
    return models


def source_corpus(collections: Path, out: Path) -> Path:
    """``out/source-corpus.jsonl``: the distinct positive passages of XQuAD's collection (Wikipedia paragraphs,
    part of the fine-tuning data, far from both targets: Jaccard 0.30 with their corpora), one ``text`` each."""
    from drmix.io.atomic import atomic_write_text

    path = out / "source-corpus.jsonl"
    if not path.exists():
        seen: dict[str, None] = {}
        with open(collections / "xquad.jsonl", encoding="utf-8") as f:
            for line in f:
                seen.setdefault(json.loads(line)["positive"], None)
        atomic_write_text(path, "".join(json.dumps({"text": t}) + "\n" for t in seen))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="shared data (read-only)")
    ap.add_argument("--collections", type=Path, default=None, help="built collections (default: OUT/collections)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None,
                    help="optimiser steps of COCO and of each fine-tuning (default: the preset's)")
    ap.add_argument("--model-layers", type=int, default=None,
                    help="fine-tune all-MiniLM-L6-v2 cut to its first N layers (preset medium: 2; others: all 6)")
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                    help="also COCO on a source corpus (XQuAD paragraphs) then the same fine-tuning: does the gain "
                         "need the target corpora? (default: on in the medium preset, off in the others)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    ap.add_argument("--report-only", action="store_true",
                    help="train nothing: report the seeds whose evaluations are already in --out")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import datasets

    datasets.disable_progress_bars()
    import copy

    p = copy.deepcopy(PRESETS[args.preset])
    if args.steps is not None:
        p["coco"]["max_steps"] = p["finetune"]["max_steps"] = args.steps
    if args.control is not None:
        p["control"] = args.control
    if args.estimate or (args.preset == "gpu" and not args.report_only):
        print(estimate_line(estimate(p, args.seeds), "this command"), flush=True)
        if args.estimate:
            return 0
    args.data = args.data.resolve()
    collections = args.collections or args.out / "collections"
    if not all((collections / f"{s}.jsonl").exists() for s in SOURCES):
        from build_collections import build_all

        build_all(args.data, collections, seed=0, max_per_collection=1000, max_words=120, localdocs=False)

    from _models import truncated_minilm

    args.model = truncated_minilm(args.model_layers or p.get("model_layers"), args.out)
    labels = (("base-uniform", "coco-uniform") + (("coco-idro",) if p["idro"] is not None else ())
              + (("coco-source-uniform",) if p.get("control") else ()))

    t_start = time.perf_counter()
    test = [str(args.data / t) for t in TARGETS]
    zero = scores_of(args.model, test, p, args.out / "zero-shot")
    scores: dict[str, list[dict]] = {}
    coco_models = []
    done = []
    for seed in args.seeds:
        if args.report_only:
            d = args.out / f"seed{seed}"
            if not all((d / lb / "eval-test.json").exists() for lb in labels):
                log.info("seed %d: not finished, left out of the report", seed)
                continue
            models = {lb: d / lb / "model" for lb in ("coco",) + labels}
        else:
            models = run_seed(args, p, collections, seed)
        coco_models.append(models["coco"])
        for label in labels:
            scores.setdefault(label, []).append(scores_of(models[label], test, p, models[label].parent))
        log.info("seed %d: %s", seed, {k: round(float(np.mean([np.mean(list(s.values())) for s in v[-1].values()])), 4)
                                       for k, v in scores.items()})
        done.append(seed)
        if len(done) == 1:
            shift = shift_tables(args, p, collections, test, coco_models[0], args.model)
        report(args, p, done, scores, zero, shift, t_start)
    return 0


def shift_tables(args, p, collections, test, coco_model, model=None) -> dict:
    """The shift report (training collections vs targets) and alignment/uniformity before and after COCO."""
    from drmix.analysis.shift import load_report, shift_report, write_shift_report

    cached = args.out / "shift" / "alignment_uniformity.json"
    if cached.exists() and (args.out / "shift" / "shift.json").exists():
        return {"report": load_report(args.out / "shift" / "shift.json"), "au": json.loads(cached.read_text())}
    src = [str(collections / f"{s}.jsonl") for s in SOURCES]
    rep = shift_report(src, test, model=None, max_docs=p["shift"]["max_docs"], seed=0)
    write_shift_report(rep, args.out / "shift")
    au = {}
    for label, m in (("MiniLM", model or _default_model()), ("MiniLM + COCO (first seed)", str(coco_model))):
        r = shift_report([test[0]], [test[1]], model=m, max_docs=p["shift"]["max_docs"],
                         max_pairs=p["shift"]["max_pairs"], max_uniformity_docs=p["shift"]["max_uniformity_docs"])
        au[label] = {"alignment": r.alignment, "uniformity": r.uniformity}
    cached.write_text(json.dumps(au))
    return {"report": rep, "au": au}


#: the models of the table, in its order, with what each is
MODEL_NAMES = {"base-uniform": "base-uniform (fine-tuning only)",
               "coco-source-uniform": "coco-source-uniform (COCO on XQuAD paragraphs → fine-tuning)",
               "coco-uniform": "coco-uniform (COCO on the targets → fine-tuning)",
               "coco-idro": "coco-idro (COCO on the targets → iDRO fine-tuning)"}
COMPARISONS = (("COCO on the targets vs no COCO", "base-uniform", "coco-uniform"),
               ("iDRO vs uniform (both after COCO)", "coco-uniform", "coco-idro"),
               ("COCO + iDRO vs no COCO, uniform", "base-uniform", "coco-idro"),
               ("COCO on a source corpus vs no COCO", "base-uniform", "coco-source-uniform"),
               ("COCO on the targets vs COCO on a source corpus", "coco-source-uniform", "coco-uniform"))
DATASET_NAMES = {"scifact": "SciFact", "nfcorpus": "NFCorpus"}


def _signed(x: float) -> str:
    return f"{x:+.4f}".replace("-", "−")


def _p2(p: float) -> str:
    return f"{p:#.2g}"


def result_tables(scores: dict[str, list[dict]], zero: dict, seeds: list[int],
                  start_label: str = "MiniLM, not fine-tuned") -> tuple[str, dict, dict]:
    """The two tables of docs/benchmarks.md from per-query nDCG@10 (``scores[label][i][dataset][query]`` for the
    i-th of ``seeds``; ``zero``: the starting model's): per model the mean over seeds per dataset and on average,
    each seed's average and the 95% t-interval over seeds; per comparison the difference with its 95% interval
    and paired t-test over queries (each query's score averaged over the seeds first; bold: p < 0.05), each
    seed's difference, and the paired t-test over the seeds' averages. Returns (markdown, summary, tests)."""
    from drmix.evaluation.compare import paired_test
    from drmix.evaluation.significance import t_interval, t_test

    def avg(run: dict) -> float:
        return float(np.mean([np.mean(list(s.values())) for s in run.values()]))

    def per_dataset(run: dict, d: str) -> float:
        return float(np.mean(list(run[d].values())))

    def seed_mean(runs: list[dict]) -> dict:
        return {d: {q: float(np.mean([r[d][q] for r in runs])) for q in runs[0][d]} for d in runs[0]}

    names = " / ".join(str(s) for s in seeds)
    lines = ["| model | " + " | ".join(DATASET_NAMES.get(t, t) for t in TARGETS)
             + f" | average | per seed ({names}) | 95% interval (seeds) |",
             "|---|" + "---:|" * len(TARGETS) + "---:|---|---|",
             f"| {start_label} | " + " | ".join(f"{per_dataset(zero, d):.4f}" for d in TARGETS)
             + f" | {avg(zero):.4f} | | |"]
    summary = {}
    for label in [lb for lb in MODEL_NAMES if lb in scores] + [lb for lb in scores if lb not in MODEL_NAMES]:
        runs = scores[label]
        m, half = t_interval([avg(r) for r in runs])
        lo, hi = m - half, m + half
        summary[label] = {"per_seed": [avg(r) for r in runs], "mean": m, "low": lo, "high": hi,
                          "per_dataset": {d: float(np.mean([per_dataset(r, d) for r in runs])) for d in TARGETS}}
        lines.append(f"| {MODEL_NAMES.get(label, label)} | "
                     + " | ".join(f"{summary[label]['per_dataset'][d]:.4f}" for d in TARGETS)
                     + f" | {m:.4f} | " + " / ".join(f"{v:.4f}" for v in summary[label]["per_seed"]) + " | "
                     + (f"[{lo:.4f}, {hi:.4f}]" if len(runs) > 1 else "– (one seed)") + " |")
    tests = {}
    rows = []
    for name, a, b in COMPARISONS:
        if a not in scores or b not in scores:
            continue
        t = paired_test(seed_mean(scores[a]), seed_mean(scores[b]))
        per_seed = [avg(rb) - avg(ra) for ra, rb in zip(scores[a], scores[b])]
        seed_p = t_test(per_seed)[0]
        tests[name] = {**t, "per_seed": per_seed, "seed_p": seed_p}
        delta = f"**{_signed(t['mean'])}**" if t["p"] < 0.05 else _signed(t["mean"])
        rows.append(f"| {name} | {delta} [{_signed(t['low'])}, {_signed(t['high'])}] | {_p2(t['p'])} | "
                    + " / ".join(_signed(x) for x in per_seed) + f" | {_p2(seed_p) if len(per_seed) > 1 else '–'} |")
    if rows:
        n = next(iter(tests.values()))["n"]
        lines += ["", f"| comparison | Δ nDCG@10 [95% CI over the {n} queries] | p (paired t over queries) | "
                      "per-seed Δ | p (paired t over seeds) |", "|---|---:|---:|---|---:|", *rows]
    return "\n".join(lines) + "\n", summary, tests


def report(args, p, seeds, scores, zero, shift, t_start) -> None:
    rep, au = shift["report"], shift["au"]

    def avg(run: dict) -> float:
        return float(np.mean([np.mean(list(s.values())) for s in run.values()]))

    layers = getattr(args, "model_layers", None) or p.get("model_layers")
    tables, summary, tests = result_tables(scores, zero, seeds, f"the {layers}-layer model, not fine-tuned"
                                           if layers else "MiniLM, not fine-tuned")
    lines = [f"Preset `{args.preset}`, seeds {seeds}; nDCG@10 on "
             f"{p['test']['max_queries'] or 'all'} test queries and a {p['test']['max_docs'] or 'full'}-document "
             f"corpus per dataset (seeded subsample, the same for every model).", "", tables.rstrip("\n")]

    tr = rep.names.index
    lines += ["", "Distribution shift (weighted Jaccard of unigram distributions; query types: App. C.1):", "",
              "| source | " + " | ".join(f"{t} corpus | {t} queries | {t} query types" for t in TARGETS) + " |",
              "|---|" + "---:|" * (3 * len(TARGETS))]
    for i, nm in enumerate(rep.names):
        cells = []
        for t in TARGETS:
            j = tr(t)
            cells += [f"{rep.corpus_jaccard[i][j]:.3f}", f"{rep.query_jaccard[i][j]:.3f}", f"{rep.intent_jaccard[i][j]:.3f}"]
        lines.append(f"| {nm} | " + " | ".join(cells) + " |")
    lines += ["", "| model | " + " | ".join(f"{t} alignment | {t} uniformity" for t in TARGETS) + " |",
              "|---|" + "---:|" * (2 * len(TARGETS))]
    for label, v in au.items():
        lines.append(f"| {label} | " + " | ".join(f"{v['alignment'].get(t, float('nan')):.4f} | "
                                                  f"{v['uniformity'].get(t, float('nan')):.4f}" for t in TARGETS) + " |")
    times = {s: json.loads((args.out / f"seed{s}" / "times.json").read_text()) for s in seeds}
    lines += ["", f"Wall time {time.perf_counter() - t_start:.0f} s for this invocation; training seconds per seed: "
              + "; ".join(f"seed {s}: " + ", ".join(f"{k} {v:.0f}" for k, v in t.items()) for s, t in times.items())]
    text = "\n".join(lines) + "\n"
    (args.out / "report.md").write_text(text, encoding="utf-8")
    (args.out / "report.json").write_text(json.dumps({"summary": summary, "tests": tests, "zero_shot": avg(zero),
                                                      "alignment_uniformity": au, "preset": p}, indent=2))
    print(text, flush=True)


def _default_model() -> str:
    from drmix.model.encoder import default_model_path

    return default_model_path()


if __name__ == "__main__":
    sys.exit(main())
