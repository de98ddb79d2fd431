"""DRAMA on unlabelled target corpora: does training on teacher-mined cropped-sentence data help a student?

Teacher: all-MiniLM-L6-v2 (bundled). For each corpus (SciFact, NFCorpus from ../shared/data) the test corpus is
subsampled (every document judged for a kept test query, plus random others; seeded) and the augmentation sees
*only its documents* -- never a query or a label: every sentence of a sampled document is a candidate query,
the teacher ranks the subsampled corpus, ranks 1-10 are positives and 30-50 hard negatives.

(a) a student pruned from SmolLM2-135M-Instruct (``--keep-layers`` layers, bidirectional attention, mean pooling,
    "Query: " prompt) trained on crop+mine data of both corpora vs the same pruned student untuned;
(b) MiniLM trained on its own crop+mine data vs MiniLM (the teacher itself);
(c) LLM-generated queries with SmolLM2-135M-Instruct on a small subset (throughput in documents/s, the share of
    outputs kept), and its listwise rerank of their teacher top-k (shares complete / repaired / dropped);
    with ``--arms generated``, MiniLM trained on one generated query for each of ``gen_train_docs`` documents per
    corpus (teacher windows as above) vs MiniLM;
(d) ``--arms drama``: DRAMA's recipe as ``drmix pipeline drama`` now runs it with an LLM: MiniLM trained on the
    cropped queries, the generated queries (as (c)) *and* SmolLM2's listwise rerank of every generated query's
    teacher top-``rerank_k`` (reranked top-1 positive, reranked ranks 10-20 negatives), with seven hard negatives
    per query (``drama_negatives``), vs MiniLM and, paired over queries, vs (b) -- drmix's earlier recipe (cropped
    queries only, one hard negative).

nDCG@10 at full size and at each --dims size (truncated, re-normalised). Trained arms run ``--seeds`` seeds; the
table reports the mean over seeds with the seeds' standard deviation, the paired difference against the arm's
untuned model over test queries (per-query nDCG averaged over seeds) with a 95% t interval and the paired
t-test and Wilcoxon p-values. Training settings are fixed beforehand (no tuning on test); all runs resume
from their files when the script is rerun with the same --out.

    nice -n 5 python benchmarks/bench_drama.py --data ../shared/data --preset cpu --out runs/bench-drama

The cpu preset keeps the whole run near 35 minutes on two shared cores; the gpu preset is the same protocol at
a scale a single GPU handles in a similar time (full corpora, longer training, 256-token documents).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import _common  # noqa: E402,F401  (offline environment)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _lease import estimate_line  # noqa: E402

PRESETS = {
    "cpu": dict(datasets=["scifact", "nfcorpus"], test_max_docs=250, test_max_queries=35, max_per_doc=1,
                max_queries=200, steps=20, batch_size=8, num_negatives=1, query_max_length=24, doc_max_length=96,
                keep_layers=4, lr_minilm=3e-5, lr_pruned=1e-4, dims=[64, 128, 256], gen_docs=8,
                gen_train_docs=40, gen_new_tokens=80, rerank_queries=4, rerank_k=20, rerank_words=32, device="cpu",
                drama_negatives=7),
    "smoke": dict(datasets=["scifact"], test_max_docs=80, test_max_queries=20, max_per_doc=1, max_queries=40,
                  steps=3, batch_size=4, num_negatives=1, query_max_length=16, doc_max_length=64, keep_layers=2,
                  lr_minilm=3e-5, lr_pruned=1e-4, dims=[64], gen_docs=2, gen_train_docs=4, gen_new_tokens=32, rerank_queries=1,
                  rerank_k=5, rerank_words=16, device="cpu", drama_negatives=7),
    "gpu": dict(datasets=["scifact", "nfcorpus"], test_max_docs=None, test_max_queries=None, max_per_doc=None,
                max_queries=20000, steps=500, batch_size=64, num_negatives=7, query_max_length=64,
                doc_max_length=256, keep_layers=10, lr_minilm=3e-5, lr_pruned=1e-4, dims=[64, 128, 256],
                gen_docs=500, gen_train_docs=2000, gen_new_tokens=256, rerank_queries=200, rerank_k=20, rerank_words=192, device="cuda",
                drama_negatives=7),
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_sets(root: Path, p: dict, seed: int = 0) -> dict:
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample

    return {n: subsample(load_beir(root / n, "test"), max_queries=p["test_max_queries"], max_docs=p["test_max_docs"],
                         seed=seed) for n in p["datasets"]}


def augment(sets: dict, teacher, p: dict, out: Path) -> tuple[list[str], dict]:
    from drmix.augment.crop import crop_queries
    from drmix.augment.examples import mine_examples, write_collection
    from drmix.data.beir import doc_text
    from drmix.augment.steps import sample_ids

    files, info = [], {}
    for name, ds in sets.items():
        f = out / f"{name}-crop-mine.jsonl"
        files.append(str(f))
        if f.exists():
            continue
        t0 = time.perf_counter()
        qs = crop_queries(ds.corpus, max_per_doc=p["max_per_doc"], seed=0)
        keep = [int(i) for i in sample_ids([str(i) for i in range(len(qs))], p["max_queries"], 0)]
        rows = [{"query": qs[i].query, "augment": "crop", "source_doc": qs[i].doc_id, "sentence": qs[i].sentence}
                for i in keep]
        mined, counts = mine_examples(rows, {d: doc_text(x) for d, x in ds.corpus.items()}, teacher,
                                      teacher_name="all-MiniLM-L6-v2")
        write_collection(f, mined)
        info[name] = {"documents": len(ds.corpus), "sentences": len(qs), "queries": len(rows), **counts,
                      "seconds": round(time.perf_counter() - t0, 1)}
        log(f"augmented {name}: {info[name]}")
    return files, info


def generated(sets: dict, teacher, p: dict, out: Path) -> tuple[list[str], dict]:
    """(c) training data: one SmolLM2-generated query for each of ``gen_train_docs`` documents per corpus (the
    first ids in order), with teacher positives (ranks 1-10) and hard negatives (30-50) as for cropped queries."""
    from drmix.augment.examples import mine_examples, write_collection
    from drmix.augment.generate import document_texts, generate_queries
    from drmix.data.beir import doc_text
    from drmix.llm.base import GenerationParams
    from drmix.llm.cache import CachedBackend
    from drmix.llm.local import TransformersBackend

    files, info, backend = [], {}, None
    for name, ds in sets.items():
        f = out / f"{name}-generate-mine.jsonl"
        files.append(str(f))
        if f.exists():
            continue
        backend = backend or CachedBackend(TransformersBackend(None, batch_size=8), out / "llm-cache.jsonl")
        ids = sorted(ds.corpus)[:p["gen_train_docs"]]
        c0, t0 = time.process_time(), time.perf_counter()
        rows, gstats = generate_queries(document_texts(ds.corpus, ids), backend,
                                        params=GenerationParams(0.8, 0.9, p["gen_new_tokens"], 0))
        mined, counts = mine_examples([{"query": r["query"], "augment": "generate", "source_doc": r["doc_id"]}
                                       for r in rows], {d: doc_text(x) for d, x in ds.corpus.items()}, teacher,
                                      teacher_name="all-MiniLM-L6-v2")
        write_collection(f, mined)
        info[name] = {"documents": len(ids), **gstats.as_dict(), **counts,
                      "cpu_seconds": round(time.process_time() - c0, 1), "seconds": round(time.perf_counter() - t0, 1)}
        log(f"generated {name}: {info[name]}")
    return files, info


def reranked(sets: dict, p: dict, out: Path, gen_files: list[str]) -> tuple[list[str], dict]:
    """(d) training data: SmolLM2's listwise rerank (DRAMA Sec. 3.1.3) of every generated query's teacher top
    ``rerank_k`` (passages cut to ``rerank_words`` words): reranked top-1 positive, reranked ranks 10-20 hard
    negatives; queries whose output has no identifier are dropped (counted)."""
    from drmix.augment.examples import write_collection
    from drmix.augment.rerank import rerank_examples
    from drmix.data.beir import doc_text
    from drmix.io.read import iter_jsonl
    from drmix.llm.cache import CachedBackend
    from drmix.llm.local import TransformersBackend

    files, info, backend = [], {}, None
    for (name, ds), gen in zip(sets.items(), gen_files):
        f = out / f"{name}-rerank.jsonl"
        files.append(str(f))
        if f.exists():
            continue
        backend = backend or CachedBackend(TransformersBackend(None, batch_size=8), out / "llm-cache.jsonl")
        rows = [obj for _, obj in iter_jsonl(gen)]
        c0, t0 = time.process_time(), time.perf_counter()
        lines, stats = rerank_examples(rows, {d: doc_text(x) for d, x in ds.corpus.items()}, backend,
                                       k=p["rerank_k"], max_words=p["rerank_words"])
        write_collection(f, lines)
        info[name] = {"queries": len(rows), **stats.as_dict(), "cpu_seconds": round(time.process_time() - c0, 1),
                      "seconds": round(time.perf_counter() - t0, 1)}
        log(f"reranked {name}: {info[name]}")
    return files, info


def seed_mean(runs: list[dict]) -> dict:
    """{dataset: {qid: {metric: mean over the runs}}}: an arm's seeds averaged, as the base of a paired test."""
    return {ds: {q: {m: statistics.fmean(r[ds][q][m] for r in runs) for m in rows[q]} for q in rows}
            for ds, rows in runs[0].items()}


def train_student(init: str, files: list[str], out: Path, seed: int, lr: float, p: dict,
                  num_negatives: int | None = None) -> str:
    from drmix.config import TrainConfig
    from drmix.outputs import run_finished
    from drmix.api import train

    if run_finished(out):
        return str(out / "model")
    cfg = TrainConfig(model=init, data=files, output_dir=str(out), max_steps=p["steps"], batch_size=p["batch_size"],
                      learning_rate=lr, num_negatives=p["num_negatives"] if num_negatives is None else num_negatives, query_max_length=p["query_max_length"],
                      doc_max_length=p["doc_max_length"], matryoshka_dims=p["dims"], seed=seed, show_progress=False,
                      save_every=10**6, log_every=10, device=p["device"], resume=True)
    t0 = time.perf_counter()
    train(cfg)
    log(f"trained {out.name} in {time.perf_counter() - t0:.0f}s")
    return str(out / "model")


def per_query(model_path: str | None, root: Path, p: dict, cache_dir: Path) -> dict:
    """{dataset: {query_id: {metric: value}}} with nDCG@10 at full size and each dim; cached in
    ``cache_dir/eval-test.json`` (:func:`drmix.evaluation.suite.evaluate_suite`)."""
    from drmix.evaluation.suite import evaluate_suite

    t0 = time.perf_counter()
    suite = evaluate_suite({"model": model_path}, [root / n for n in p["datasets"]], cache_dirs={"model": cache_dir},
                           max_queries=p["test_max_queries"], max_docs=p["test_max_docs"], seed=0,
                           max_length=p["doc_max_length"], metrics=("ndcg@10",), dims=p["dims"], device=p["device"])
    log(f"evaluated {cache_dir.name} in {time.perf_counter() - t0:.0f}s")
    return suite.per_query["model"]


def paired(base: dict, runs: list[dict], metric: str) -> dict:
    """Seed means, and the paired test of the seed-averaged per-query values against ``base``."""
    import numpy as np

    from drmix.evaluation.significance import t_interval, t_test, wilcoxon_test

    qids = sorted(base)
    b = np.array([base[q][metric] for q in qids])
    per_seed = np.array([[r[q][metric] for q in qids] for r in runs])
    avg = per_seed.mean(axis=0)
    d = avg - b
    n = len(d)
    half = t_interval(d)[1]
    p_wilcoxon = wilcoxon_test(d)
    return {"base": float(b.mean()), "mean": float(avg.mean()), "seed_means": [float(x) for x in per_seed.mean(axis=1)],
            "seed_sd": float(per_seed.mean(axis=1).std(ddof=1)) if len(runs) > 1 else 0.0,
            "diff": float(d.mean()), "ci95": [float(d.mean() - half), float(d.mean() + half)],
            "p_t": t_test(d)[0], "p_wilcoxon": 1.0 if p_wilcoxon is None else p_wilcoxon, "queries": n}


def llm_part(sets: dict, teacher, p: dict, out: Path) -> dict:
    """(c): generated queries and listwise rerank with the packaged SmolLM2 on a small subset."""
    from drmix.augment.examples import mine_examples
    from drmix.augment.rerank import rerank_examples
    from drmix.augment.generate import document_texts, generate_queries
    from drmix.data.beir import doc_text
    from drmix.llm.base import GenerationParams
    from drmix.llm.cache import CachedBackend
    from drmix.llm.local import TransformersBackend

    t0 = time.perf_counter()
    backend = CachedBackend(TransformersBackend(None, batch_size=8), out / "llm-cache.jsonl")
    load_s = time.perf_counter() - t0
    name = p["datasets"][0]
    ds = sets[name]
    ids = sorted(ds.corpus)[:p["gen_docs"]]
    c0 = time.process_time()
    rows, gstats = generate_queries(document_texts(ds.corpus, ids), backend,
                                    params=GenerationParams(0.8, 0.9, p["gen_new_tokens"], 0))
    gen_cpu = time.process_time() - c0
    texts = {d: doc_text(x) for d, x in ds.corpus.items()}
    mined, _ = mine_examples([{"query": r["query"], "augment": "generate", "source_doc": r["doc_id"]} for r in rows],
                             texts, teacher, teacher_name="all-MiniLM-L6-v2")
    src_top = sum(m["teacher"]["positive_ids"][0] == m["source_doc"] for m in mined)
    rr_rows = mined[:p["rerank_queries"]]
    c0 = time.process_time()
    _, rstats = rerank_examples(rr_rows, texts, backend, k=p["rerank_k"], max_words=p["rerank_words"]) if rr_rows \
        else ([], None)
    rr_cpu = time.process_time() - c0
    g = gstats.as_dict()
    g["cpu_seconds"] = round(gen_cpu, 1)   # all threads of this process: robust to other jobs on the machine
    return {"dataset": name, "model_load_seconds": round(load_s, 1), "generate": g,
            "generated_source_doc_is_teacher_top1": f"{src_top}/{len(mined)}",
            "examples": [r["query"] for r in rows[:5]], "rerank": rstats.as_dict() if rstats else None,
            "rerank_cpu_seconds": round(rr_cpu, 1)}


def fmt_table(results: dict, dims: list[int]) -> str:
    metrics = ["ndcg@10"] + [f"ndcg@10@{d}d" for d in dims]
    lines = ["| arm | dataset | metric | untuned | trained (mean ± sd over seeds) | diff [95% CI] | p (t) | p (Wilcoxon) "
             "| trained / teacher |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for arm, per_ds in results["arms"].items():
        for ds, per_m in per_ds.items():
            for m in metrics:
                r = per_m.get(m)
                if r is None:
                    continue
                t = results["teacher"][ds].get(m)
                share = f"{r['mean'] / t:.1%}" if t else ""
                lines.append(f"| {arm} | {ds} | {m} | {r['base']:.4f} | {r['mean']:.4f} ± {r['seed_sd']:.4f} | "
                             f"{r['diff']:+.4f} [{r['ci95'][0]:+.4f}, {r['ci95'][1]:+.4f}] | {r['p_t']:.3g} | "
                             f"{r['p_wilcoxon']:.3g} | {share} |")
    return "\n".join(lines) + "\n"


def fmt_versus(results: dict, dims: list[int]) -> str:
    """(d) against (b), paired over queries: both arms' seed means, the difference of the per-query values
    (each averaged over the seeds), its 95% t interval, the paired t-test and Wilcoxon."""
    metrics = ["ndcg@10"] + [f"ndcg@10@{d}d" for d in dims]
    lines = ["| dataset | metric | (b) crop only, 1 negative | (d) DRAMA's recipe, 7 negatives (mean ± sd over seeds) "
             "| diff [95% CI] | p (t) | p (Wilcoxon) |", "|---|---|---:|---:|---:|---:|---:|"]
    for ds, per_m in results.get("drama_vs_minilm", {}).items():
        for m in metrics:
            r = per_m.get(m)
            if r is None:
                continue
            lines.append(f"| {ds} | {m} | {r['base']:.4f} | {r['mean']:.4f} ± {r['seed_sd']:.4f} | "
                         f"{r['diff']:+.4f} [{r['ci95'][0]:+.4f}, {r['ci95'][1]:+.4f}] | {r['p_t']:.3g} | "
                         f"{r['p_wilcoxon']:.3g} |")
    return "\n".join(lines) + "\n"


def pool(per_ds: dict) -> dict:
    """{dataset: {qid: row}} -> {dataset/qid: row}: every test query of every dataset, each counted once."""
    return {f"{ds}/{q}": row for ds, rows in per_ds.items() for q, row in rows.items()}


def mean_of(pq: dict, metric: str) -> float:
    return statistics.fmean(v[metric] for v in pq.values())


PRUNED_COST = 4.0  # a pruned SmolLM2-135M student (10 layers, 576 wide) vs MiniLM-L6 per example (estimate)
LLM_SECONDS = 120.0  # part (c): SmolLM2-135M generation and rerank on gen_docs documents (estimate)


def estimate(p: dict, args):
    """Device time (benchmarks/_lease.py): per seed and trained arm, steps x batch examples of one query and
    1 + num_negatives documents (counted against the 1 + 2 documents of the reference example), the pruned
    student at ``PRUNED_COST``; the teacher's mining and every model's evaluation as passages."""
    from _lease import Estimate

    est = Estimate()
    per = p["steps"] * p["batch_size"] * (p["query_max_length"] + (1 + p["num_negatives"]) * p["doc_max_length"]) / 576
    seeds = [s for s in args.seeds.split(",") if s.strip()]
    docs = 2 * ((p["test_max_docs"] or 4400) + p["max_queries"])
    est.encode(docs)
    for arm in args.arms.split(","):
        for _ in seeds:
            est.train(arm, per * (PRUNED_COST if arm == "pruned" else 1.0))
            est.encode(docs)
    if not args.skip_llm:
        est.train("llm", LLM_SECONDS * 1000.0, runs=0)  # expressed in examples at the assumed rate
    return est


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="folder holding scifact/ and nfcorpus/")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--out", type=Path, default=Path("runs/bench-drama"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--skip-llm", action="store_true", help="leave out part (c)")
    ap.add_argument("--collect-only", action="store_true", help="train and evaluate nothing new: tabulate the "
                                                                  "seeds whose evaluations are on disk")
    ap.add_argument("--arms", default="pruned,minilm", help="trained arms to run: pruned, minilm, generated "
                                                            "(MiniLM on SmolLM2-generated queries), drama (MiniLM on "
                                                            "crop + generated + reranked data, 7 negatives; "
                                                            "several processes may share "
                                                            "--out, one arm each; a last run with all arms "
                                                            "collects the cached results)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    args = ap.parse_args()
    if args.estimate or args.preset == "gpu":
        print(estimate_line(estimate(PRESETS[args.preset], args), "this command"), flush=True)
        if args.estimate:
            return
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    p = PRESETS[args.preset]
    seeds = [int(s) for s in args.seeds.split(",")]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    from drmix.model.encoder import default_model_path, load_encoder
    from drmix.evaluation.suite import cache_file
    from drmix.recipes.prune import prune_to_sentence_transformer
    from drmix.outputs import model_saved

    sets = load_sets(args.data, p)
    log("test sets: " + ", ".join(f"{n}: {len(d.corpus)} docs, {len(d.queries)} queries" for n, d in sets.items()))
    teacher = load_encoder(None, device=p["device"])
    teacher.max_seq_length = p["doc_max_length"]
    files, aug_info = augment(sets, teacher, p, out / "augment")
    pruned = out / "pruned-smollm2"
    if not model_saved(pruned):
        prune_to_sentence_transformer(None, pruned, keep_layers=p["keep_layers"], max_seq_length=p["doc_max_length"])
    prune_info = json.loads((pruned / "drmix_prune.json").read_text())
    teacher_pq = per_query(None, args.data, p, out / "eval" / "teacher")
    wanted = args.arms.split(",")
    arms = {"(a) pruned SmolLM2": (str(pruned), p["lr_pruned"], "pruned-untuned", "pruned", files, None),
            "(b) MiniLM": (default_model_path(), p["lr_minilm"], "teacher", "minilm", files, None)}
    arms = {k: v for k, v in arms.items() if v[3] in wanted}
    if "generated" in wanted or "drama" in wanted:
        gen_files, gen_info = generated(sets, teacher, p, out / "augment")
        aug_info["generated"] = gen_info
        if "generated" in wanted:
            arms["(c) MiniLM, generated queries"] = (default_model_path(), p["lr_minilm"], "teacher", "generated",
                                                     gen_files, None)
    if "drama" in wanted:
        rr_files, rr_info = reranked(sets, p, out / "augment", gen_files)
        aug_info["reranked"] = rr_info
        arms["(d) MiniLM, DRAMA's recipe (crop + generated + reranked, 7 negatives)"] = (
            default_model_path(), p["lr_minilm"], "teacher", "drama", files + gen_files + rr_files,
            p["drama_negatives"])
    results = {"preset": args.preset, "seeds": seeds, "augment": aug_info, "prune": prune_info, "llm": None,
               "teacher": {}, "arms": {}}
    metrics = ["ndcg@10"] + [f"ndcg@10@{d}d" for d in p["dims"]]
    for ds, pq in [*teacher_pq.items(), ("both (pooled queries)", pool(teacher_pq))]:
        results["teacher"][ds] = {m: mean_of(pq, m) for m in metrics if m in next(iter(pq.values()))}
    arm_runs: dict = {}
    for arm, (init, lr, base_name, tag, arm_files, negatives) in arms.items():
        base_pq = per_query(None if base_name == "teacher" else init, args.data, p, out / "eval" / base_name)
        runs = []
        for s in seeds:
            cache = out / "eval" / f"{tag}-s{s}"
            if args.collect_only and not cache_file(cache, "test").exists():
                continue
            model = train_student(init, arm_files, out / f"train-{tag}-s{s}", s, lr, p, negatives)
            runs.append(per_query(model, args.data, p, cache))
        if not runs:
            continue
        arm_runs[tag] = runs
        results.setdefault("seeds_done", {})[arm] = len(runs)
        results["arms"][arm] = {ds: {m: paired(base_pq[ds], [r[ds] for r in runs], m) for m in metrics
                                     if m in next(iter(base_pq[ds].values()))} for ds in sets}
        pooled_base, pooled_runs = pool(base_pq), [pool(r) for r in runs]
        results["arms"][arm]["both (pooled queries)"] = {
            m: paired(pooled_base, pooled_runs, m) for m in metrics if m in next(iter(pooled_base.values()))}
    if "drama" in arm_runs and "minilm" in arm_runs:     # (d) vs (b), paired over queries (seed means of both)
        b_avg = seed_mean(arm_runs["minilm"])
        results["drama_vs_minilm"] = {ds: {m: paired(b_avg[ds], [r[ds] for r in arm_runs["drama"]], m)
                                           for m in metrics if m in next(iter(b_avg[ds].values()))} for ds in sets}
        results["drama_vs_minilm"]["both (pooled queries)"] = {
            m: paired(pool(b_avg), [pool(r) for r in arm_runs["drama"]], m)
            for m in metrics if m in next(iter(pool(b_avg).values()))}
    results["table"] = fmt_table(results, p["dims"])
    results["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(results["table"], flush=True)
    if not args.skip_llm and not (args.collect_only and not (out / "llm.json").exists()):  # last: the slowest part per item, and the least needed for the table
        llm_file = out / "llm.json"
        if llm_file.exists():
            results["llm"] = json.loads(llm_file.read_text())
        else:
            results["llm"] = llm_part(sets, teacher, p, out)
            llm_file.write_text(json.dumps(results["llm"], indent=1))
        results["wall_seconds"] = round(time.perf_counter() - t_start, 1)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    print(results["table"])
    if results.get("drama_vs_minilm"):
        results["versus_table"] = fmt_versus(results, p["dims"])
        (out / "results.json").write_text(json.dumps(results, indent=1))
        print(results["versus_table"])
    print(json.dumps({k: results[k] for k in ("augment", "prune", "llm", "teacher", "wall_seconds")}, indent=1))


if __name__ == "__main__":
    main()
