"""Multi-corpus retrieval benchmark: allocation policies on full-size, title-free Walmart-Amazon and Amazon-Google.

Reproduces the shape of Table 3 of *Multi Distribution Dense Information Retrieval*
(seed 003_1da1604bae7d74b5.txt) on the layouts of ``drmix multicorpus build`` with its defaults: every
record of both tables (no subsampling, so the corpus-size imbalance is the real one) and passages that do
not contain the query field (the title). For each benchmark and each known side, the columns are

* ``MiniLM``: all-MiniLM-L6-v2 as shipped (both directions share its encodings), and
* ``MiniLM fine-tuned``: the same model with every weight fine-tuned on the known side's training pairs by
  ``drmix train`` (run as a subprocess: exactly the user's command, printed by ``train_command``), once per
  fine-tuning seed; each fine-tuned model re-encodes both corpora. Cells are means over the seeds, with
  95% t-intervals over seeds in ``summary.md``.

Rows: naive merging, fixed fractions 0.0..1.0, confidence thresholds, the label-free policies (``zscore``,
``calibrated``, ``calibrated:method=gauss``), the rows chosen on the dev split by the rule in
docs/multicorpus.md (``fixed (dev-tuned)``, ``confidence (dev-tuned)``, ``label-free (dev-chosen)``), and
the oracle. Cells are per-corpus credit Recall@k (x100) / per-corpus MRR@k on the test split.

    python benchmarks/bench_multicorpus.py --data ../shared/data --out /tmp/drmix-multicorpus --preset cpu

Presets: ``cpu`` (50 steps of batch 32 per fine-tuning run, three seeds, one CPU thread)
and ``gpu`` (2,000 steps of batch 128, five seeds). Any preset value can be overridden by its flag. Writes
``table.md``, ``results.json``, ``summary.md``/``summary.json`` (the paper's comparisons and the bar, with
intervals and paired Wilcoxon tests over queries) and recall-vs-k plots under ``--out/results``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import _common  # noqa: E402,F401  (offline environment)

from drmix.data.entity_matching import build_entity_matching, read_manifest  # noqa: E402
from drmix.evaluation.multi import (  # noqa: E402
    LABEL_FREE_ROW,
    SweepResult,
    format_table,
    load_multi_qrels,
    sweep_policies,
    write_sweep,
)
from drmix.evaluation.significance import t_interval, wilcoxon_test  # noqa: E402
from drmix.io.atomic import atomic_write_json, atomic_write_text  # noqa: E402
from drmix.retrieval.multi import (  # noqa: E402
    CandidateSet,
    CorpusCandidates,
    MultiCorpusRetriever,
    expand_policy_specs,
)

log = logging.getLogger("bench_multicorpus")

SPECS = ["naive", "fixed:0.0..1.0", "confidence:0.1..0.9/0.2", "confidence:0.95", "confidence:0.99",
         # the label-free family (the dev rule picks one; the order is its tie order): the equal split, the
         # calibrated scores, resource selection on the centralised sample index, expected coverage; each
         # with the merged list ordered by raw score, by rank, or by its own key
         "equal", "equal:merge=rank", "zscore", "calibrated", "calibrated:method=gauss", "calibrated:merge=score",
         "redde", "redde:merge=rank", "crcs", "crcs:merge=rank", "coverage", "coverage:merge=score",
         "coverage:merge=rank", "oracle"]
THREE = "three"   # the 3-corpus benchmark: walmart (Walmart-Amazon) + amazon and google (Amazon-Google)
KS = (1, 2, 5, 10, 20, 50, 100)
CURVES = ("naive", "oracle", "equal", "fixed:0.5", "fixed (dev-tuned)", "confidence (dev-tuned)", LABEL_FREE_ROW)
PRESETS = {
    # One CPU thread: drmix train on the full encoder, 50 steps of batch 32 (in-batch negatives), seeds 0-2.
    # Product records are short (titles <= 32 tokens, title-free records <= 48), so the lengths cut almost
    # nothing; re-encoding the 24,628 Walmart-Amazon passages per fine-tuned model is the main cost. On the
    # shared 2-core machine a step took about 6 s under load, so 50 steps (1,600 pairs) is what fitted.
    "cpu": {"steps": 50, "batch_size": 32, "learning_rate": 5e-5, "query_max_length": 32,
            "doc_max_length": 48, "seeds": "0,1,2", "encode_batch_size": 128, "threads": 1},
    # One GPU: ten times the steps, larger in-batch negatives, five seeds.
    "gpu": {"steps": 2000, "batch_size": 128, "learning_rate": 5e-5, "query_max_length": 32,
            "doc_max_length": 64, "seeds": "0,1,2,3,4", "encode_batch_size": 512, "threads": 8},
}


def parse_args(argv=None) -> argparse.Namespace:
    here = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(here.parent / "shared" / "data"), help="shared data directory")
    ap.add_argument("--out", default="/tmp/drmix-multicorpus", help="where layouts, models and results go")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="fine-tuning and encoding scale")
    ap.add_argument("--model", default=None, help="base model folder (default: the bundled all-MiniLM-L6-v2)")
    ap.add_argument("--benchmarks", default="walmart-amazon,amazon-google", help="comma-separated")
    ap.add_argument("--models", default="base,finetuned", help="base and/or finetuned")
    ap.add_argument("--known", default=None, help="only these known sides, comma-separated (default: both)")
    ap.add_argument("--k", type=int, default=10, help="retrieval budget of the table")
    ap.add_argument("--depth", type=int, default=100, help="candidates fetched per corpus")
    ap.add_argument("--estimate", action="store_true", help="print the estimated device time and exit")
    ap.add_argument("--page-table", action="store_true", help="print docs/multicorpus.md's table from the "
                    "results.json of an earlier run in --out and exit")
    for key, val in PRESETS["cpu"].items():
        ap.add_argument("--" + key.replace("_", "-"), type=type(val), default=None,
                        help=f"override the preset (cpu: {val}, gpu: {PRESETS['gpu'][key]})")
    args = ap.parse_args(argv)
    for key, val in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    args.seed_list = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    return args


# --------------------------------------------------------------------------------------------------
# Candidates (cached) and fine-tuning
# --------------------------------------------------------------------------------------------------


def save_cset(cset: CandidateSet, path: Path, key: dict | None = None) -> None:
    def row(cc: CorpusCandidates) -> list:
        sample = None if cc.sample_scores is None else [round(x, 6) for x in cc.sample_scores.tolist()]
        return [cc.ids, [round(x, 6) for x in cc.scores.tolist()], cc.background, sample, cc.size, cc.sample_size]

    rows = {q: {c: row(cc) for c, cc in by_c.items()} for q, by_c in cset.by_query.items()}
    atomic_write_json(path, {"key": key, "corpora": cset.corpora, "by_query": rows}, indent=None)


def load_cset(path: Path) -> CandidateSet:
    return _cset_from(json.loads(path.read_text()))


def _cset_from(d: dict) -> CandidateSet:

    def cands(v: list) -> CorpusCandidates:
        v = v + [None] * (6 - len(v))
        return CorpusCandidates(v[0], np.array(v[1]), tuple(v[2]) if v[2] else None,
                                None if v[3] is None else np.array(v[3]), v[4], v[5])

    return CandidateSet(d["corpora"], {q: {c: cands(v) for c, v in by_c.items()} for q, by_c in d["by_query"].items()})


def three_corpus_layout(out: Path, data: Path) -> dict:
    """The 3-corpus benchmark (protocol in docs/multicorpus.md): walmart (Walmart-Amazon's side A), amazon
    and google (Amazon-Google's sides). Queries ``wa:<id>`` keep only their walmart judgements (their amazon
    counterpart is not in the pool), ``ag:<id>`` both of theirs; splits as in each layout."""
    from drmix.data.beir import load_beir, write_beir

    layout = out / "layouts" / THREE
    mans = {}
    for bench in ("walmart-amazon", "amazon-google"):
        lay = out / "layouts" / bench
        if not (lay / "manifest.json").exists():
            build_entity_matching(data / bench, lay)
        mans[bench] = read_manifest(lay)
    sources = {"walmart": ("wa", mans["walmart-amazon"]["corpus_dirs"]["walmart"]),
               "amazon": ("ag", mans["amazon-google"]["corpus_dirs"]["amazon"]),
               "google": ("ag", mans["amazon-google"]["corpus_dirs"]["google"])}
    dirs = {}
    for name, (prefix, src) in sources.items():
        d = layout / name
        dirs[name] = d
        if (d / "corpus.jsonl").exists():
            continue
        full = load_beir(src, split=None)
        queries, qrels = {}, {}
        for bench, p in (("walmart-amazon", "wa"), ("amazon-google", "ag")):   # every side dir holds all queries
            side = next(iter(mans[bench]["corpus_dirs"].values()))
            queries.update({f"{p}:{q}": t for q, t in load_beir(side, split=None, load_corpus=False).queries.items()})
        for split in ("dev", "test"):
            ds = load_beir(src, split=split, load_corpus=False)
            qrels[split] = {f"{prefix}:{q}": docs for q, docs in ds.qrels.items()}
        write_beir(d, full.corpus, queries, qrels)
    return {"corpus_dirs": dirs, "train_files": {}, "passage_contains_query": False}


def candidates_key(model_path, man: dict, split_queries: dict, args) -> dict:
    """What the candidates are made from: the model (its files' content digest), each corpus file's content,
    the queries, the depth, the budget and the passage length."""
    import hashlib

    from drmix.evaluation.suite import model_stamp
    from drmix.provenance import corpus_fingerprint

    h = hashlib.blake2b(digest_size=12)
    h.update(json.dumps(sorted((q, t) for qs in split_queries.values() for q, t in qs.items())).encode("utf-8"))
    return {"model": None if model_path is None else str(model_path), "model_files": model_stamp(model_path),
            "corpora": {n: (corpus_fingerprint(d) or {}).get("digest") for n, d in man["corpus_dirs"].items()},
            "queries": h.hexdigest(), "depth": args.depth, "k": max(args.k, max(KS)),
            "doc_max_length": args.doc_max_length}


def candidates(model_path, man: dict, split_queries: dict, args, cache: Path):
    """Candidates of every split's queries, cached as JSON under :func:`candidates_key` (an interrupted run
    resumes cheaply; a cache made with another model, corpus, query set or setting is made again)."""
    from drmix.model.encoder import load_encoder

    enc = None
    key = json.loads(json.dumps(candidates_key(model_path, man, split_queries, args)))
    stored = {}
    if cache.exists():
        try:
            stored = json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = {}
    if isinstance(stored, dict) and stored.get("key") == key:
        cset = _cset_from(stored)
    else:
        model = load_encoder(model_path)
        t = time.perf_counter()
        retr = MultiCorpusRetriever.from_dirs(model, man["corpus_dirs"], depth=args.depth,
                                              batch_size=args.encode_batch_size, max_length=args.doc_max_length)
        all_q = {q: text for qs in split_queries.values() for q, text in qs.items()}
        cset = retr.candidates(all_q, k=max(args.k, max(KS)))
        enc = time.perf_counter() - t
        log.info("encoded %s passages and %d queries in %.0f s", {n: len(i.ids) for n, i in retr.indexes.items()},
                 len(all_q), enc)
        save_cset(cset, cache, key)
    return {s: cset.subset(qs) for s, qs in split_queries.items()}, enc


def train_command(train_file: Path, out_dir: Path, seed: int, args) -> list[str]:
    """The ``drmix train`` command line of one fine-tuning run (printed in the docs as run)."""
    model = ["--model", str(args.model)] if getattr(args, "model", None) else []
    return ["drmix", "train", *model, "--data", str(train_file), "--output-dir", str(out_dir),
            "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
            "--learning-rate", str(args.learning_rate), "--num-negatives", "0",
            "--query-max-length", str(args.query_max_length), "--doc-max-length", str(args.doc_max_length),
            "--seed", str(seed), "--save-every", str(args.steps), "--keep-checkpoints", "1", "--no-show-progress"]


def finetune(train_file: Path, out_dir: Path, seed: int, args) -> tuple[Path, float | None]:
    model = out_dir / "model"
    if (model / "config.json").exists():
        log.info("reusing %s", out_dir)
        return model, None
    cmd = train_command(train_file, out_dir, seed, args)
    t = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    subprocess.run([sys.executable, "-m", "drmix", *cmd[1:]], check=True, env=env)
    took = time.perf_counter() - t
    log.info("fine-tuned on %s (seed %d): %d steps in %.0f s", train_file.name, seed, args.steps, took)
    return model, took


# --------------------------------------------------------------------------------------------------
# Statistics over seeds and queries
# --------------------------------------------------------------------------------------------------


def simplex_specs(specs: list[str], n: int, step: float = 0.1) -> list[str]:
    """For ``n`` corpora the fixed rows are every split on the simplex with this step (one fraction per
    corpus; 66 rows for three corpora at 0.1), in place of the first corpus's share and the confidence rows."""
    fixed = expand_policy_specs([f"fixed:simplex/{step:g}"], n_corpora=n)
    out = [s for s in specs if not s.startswith("fixed:") and not s.startswith("confidence:")]
    return out[:1] + fixed + out[1:]


def aggregate(setting: str, k: int, runs: list[SweepResult]) -> SweepResult:
    """Mean over seeds of every row's metrics and curves (the chosen specs joined with '/')."""
    agg = SweepResult(setting, k)
    for lab in runs[0].rows:
        ms = [r.rows[lab] for r in runs]
        agg.rows[lab] = {key: float(np.mean([m[key] for m in ms])) for key in (f"pc_recall@{k}", f"pc_mrr@{k}")}
        agg.rows[lab]["spec"] = "/".join(dict.fromkeys(m["spec"] for m in ms))
        agg.rows[lab]["per_seed"] = [m[f"pc_recall@{k}"] for m in ms]
        agg.curves[lab] = {kk: float(np.mean([r.curves[lab][kk] for r in runs])) for kk in runs[0].curves[lab]}
    for fam in runs[0].chosen:
        agg.chosen[fam] = "/".join(r.chosen[fam] for r in runs)
    return agg


def compare(runs: list[SweepResult], pq: list[dict[str, dict[str, float]]], k: int) -> dict:
    """The paper's comparisons and the bar for one column (means over seeds, intervals, paired tests)."""
    key = f"pc_recall@{k}"
    fixed = [lab for lab in runs[0].rows if lab.startswith("fixed:")]
    best_fixed = max(fixed, key=lambda lab: (np.mean([r.rows[lab][key] for r in runs]), -fixed.index(lab)))

    def diff(a: str, b: str) -> dict:
        per_seed = [100 * (r.rows[a][key] - r.rows[b][key]) for r in runs]
        mean, half = t_interval(per_seed, undefined=0.0)
        qs = sorted(pq[0][a])
        d = [np.mean([p[a][q] - p[b][q] for p in pq]) for q in qs]
        return {"a": a, "b": b, "mean": mean, "ci95": half, "per_seed": per_seed, "wilcoxon_p": wilcoxon_test(d)}

    mkey = f"pc_mrr@{k}"
    out = {"best_fixed_on_test": best_fixed,
           "rows": {lab: dict(zip(("mean", "ci95"), t_interval([100 * r.rows[lab][key] for r in runs],
                                                                 undefined=0.0)))
                    for lab in ("naive", "equal", best_fixed, "fixed (dev-tuned)", LABEL_FREE_ROW, "oracle")},
           "mrr": {lab: float(np.mean([r.rows[lab][mkey] for r in runs]))
                   for lab in ("naive", "equal", best_fixed, LABEL_FREE_ROW, "oracle")},
           "labelfree_minus_equal_mrr": dict(zip(("mean", "ci95"), t_interval(
               [r.rows[LABEL_FREE_ROW][mkey] - r.rows["equal"][mkey] for r in runs], undefined=0.0))),
           "equal_minus_naive": diff("equal", "naive"),
           "labelfree_minus_equal": diff(LABEL_FREE_ROW, "equal"),
           "oracle_minus_best_fixed": diff("oracle", best_fixed),
           "labelfree_minus_best_fixed_on_test": diff(LABEL_FREE_ROW, best_fixed),
           "labelfree_minus_fixed_dev_tuned": diff(LABEL_FREE_ROW, "fixed (dev-tuned)"),
           "labelfree_minus_naive": diff(LABEL_FREE_ROW, "naive"),
           "chosen": [r.chosen for r in runs]}
    out["bar_met"] = out["labelfree_minus_best_fixed_on_test"]["mean"] >= 0
    gap = out["oracle_minus_best_fixed"]["mean"]
    out["oracle_gap_closed"] = out["labelfree_minus_best_fixed_on_test"]["mean"] / gap if gap > 0 else None
    out["mrr_not_below_equal"] = out["labelfree_minus_equal_mrr"]["mean"] >= 0
    return out


def format_summary(summary: dict[str, dict]) -> str:
    def cell(d):
        p = d["wilcoxon_p"]
        return f"{d['mean']:+.2f} ± {d['ci95']:.2f}" + (f" (p={p:.2g})" if p is not None else " (p=–)")

    lines = ["| column | naive | equal | best fixed on test | fixed dev-tuned | label-free dev-chosen | oracle | "
             "equal − naive | oracle − best fixed | label-free − best fixed on test | label-free − equal | "
             "bar met | oracle gap closed | MRR label-free − equal |",
             "|---|" + "---|" * 13]
    for col, s in summary.items():
        r = s["rows"]
        v = [f"{r[lab]['mean']:.2f} ± {r[lab]['ci95']:.2f}" for lab in
             ("naive", "equal", s["best_fixed_on_test"], "fixed (dev-tuned)", LABEL_FREE_ROW, "oracle")]
        v[2] += f" ({s['best_fixed_on_test']})"
        closed = s.get("oracle_gap_closed")
        m = s["labelfree_minus_equal_mrr"]
        lines.append(f"| {col} | " + " | ".join(v) + f" | {cell(s['equal_minus_naive'])} | "
                     f"{cell(s['oracle_minus_best_fixed'])} | {cell(s['labelfree_minus_best_fixed_on_test'])} | "
                     f"{cell(s['labelfree_minus_equal'])} | {'yes' if s['bar_met'] else 'no'} | "
                     f"{'–' if closed is None else f'{100 * closed:.0f}%'} | {m['mean']:+.3f} ± {m['ci95']:.3f} |")
    return "\n".join(lines) + "\n"


#: the rows of docs/multicorpus.md's federated-search tables: (row name, the sweep's row label); a label the
#: results do not hold (zscore in the untrained run) is left out
PAGE_ROWS = (("naive", "naive"), ("equal (= fixed 0.5 for two)", "equal"), ("equal:merge=rank", "equal:merge=rank"),
             ("zscore", "zscore"), ("calibrated", "calibrated"), ("redde", "redde"), ("crcs", "crcs"),
             ("coverage", "coverage"), ("coverage:merge=score", "coverage:merge=score"))


def _choices(specs: list[str], strip: str = "") -> str:
    """``(0.4, 0.5, 0.4)`` for one choice per seed, ``(0.8 ×3)`` when every seed chose the same."""
    vals = [sp.removeprefix(strip) for sp in specs]
    if len(vals) > 1 and len(set(vals)) == 1:
        return f"({vals[0]} ×{len(vals)})"
    return "(" + ", ".join(vals) + ")"


def page_table(results: list[SweepResult]) -> str:
    """docs/multicorpus.md's federated-search table: a row per policy, a column per setting, cells ``recall@k
    ×100 / MRR@k``; the best fixed fraction chosen on test (its fraction), the dev-tuned fixed fraction and the
    label-free dev-chosen policy (the choice of each seed); the best recall of a column bold (ties all bold; the
    oracle and the fraction chosen with test labels are never bold)."""
    def cell(m: dict, k: int, best: float | None) -> str:
        rec = f"{100 * m[f'pc_recall@{k}']:.2f}"
        if best is not None and rec == f"{best:.2f}":
            rec = f"**{rec}**"
        return f"{rec} / {m[f'pc_mrr@{k}']:.3f}"

    cols = []
    for r in results:
        fixed = [lab for lab in r.rows if lab.startswith("fixed:")]
        best_fixed = max(fixed, key=lambda lab: (r.rows[lab][f"pc_recall@{r.k}"], -fixed.index(lab))) if fixed else None
        ranked = [lab for lab in r.rows if lab != "oracle"]
        best = max(100 * r.rows[lab][f"pc_recall@{r.k}"] for lab in ranked) if ranked else None
        cols.append((r, best_fixed, best))
    lines = ["| policy | " + " | ".join(r.setting for r in results) + " |", "| --- |" + " --- |" * len(results)]
    for name, label in PAGE_ROWS:
        if any(label in r.rows for r in results):
            lines.append(f"| {name} | " + " | ".join(cell(r.rows[label], r.k, best) if label in r.rows else "–"
                                                    for r, _, best in cols) + " |")
    rows = [("best fixed on test (chosen with test labels)",
             lambda r, bf, best: f"{cell(r.rows[bf], r.k, None)} ({bf.removeprefix('fixed:')})" if bf else "–"),
            ("fixed, dev-tuned", lambda r, bf, best: f"{cell(r.rows['fixed (dev-tuned)'], r.k, best)} "
                                               f"{_choices(r.chosen['fixed'].split('/'), 'fixed:')}"
             if "fixed (dev-tuned)" in r.rows else "–"),
            ("label-free, dev-chosen", lambda r, bf, best: f"{cell(r.rows[LABEL_FREE_ROW], r.k, best)} "
                                                     f"{_choices(r.chosen['label-free'].split('/'))}"
             if LABEL_FREE_ROW in r.rows else "–"),
            ("oracle", lambda r, bf, best: cell(r.rows["oracle"], r.k, None) if "oracle" in r.rows else "–")]
    for name, fmt in rows:
        lines.append(f"| {name} | " + " | ".join(fmt(r, bf, best) for r, bf, best in cols) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


PASSAGES = {"walmart-amazon": 24628, "amazon-google": 4589, "three": 29217}  # corpora encoded per model


def estimate(args):
    """Device time (benchmarks/_lease.py): every fine-tuning (steps x batch examples, counted by their tokens
    against the 64/256/256-token reference example) and every model encoding the benchmark's corpora."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _lease import Estimate

    est = Estimate()
    per = args.steps * args.batch_size * (args.query_max_length + 2 * args.doc_max_length) / 576
    for bench in args.benchmarks.split(","):
        knowns = 3 if bench == THREE else 2
        if args.known:
            knowns = len(args.known.split(","))
        if "base" in args.models:
            est.encode(PASSAGES.get(bench, 30000))
        if "finetuned" in args.models:
            n = knowns * len(args.seed_list)
            est.train(bench, per * n, runs=n)
            est.encode(PASSAGES.get(bench, 30000) * n)
    return est


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.estimate or args.preset == "gpu":
        from _lease import estimate_line

        print(estimate_line(estimate(args), "this command"), flush=True)
        if args.estimate:
            return 0
    if args.page_table:
        from drmix.evaluation.multi import load_sweep_json

        print(page_table(load_sweep_json(Path(args.out) / "results" / "results.json")), end="")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    res_dir = out / "results"
    specs = expand_policy_specs(SPECS)
    results: list[SweepResult] = []
    summary: dict[str, dict] = {}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    for bench in args.benchmarks.split(","):
        layout = out / "layouts" / bench
        if bench == THREE:
            man = three_corpus_layout(out, Path(args.data))
        else:
            if not (layout / "manifest.json").exists():
                build_entity_matching(Path(args.data) / bench, layout)   # defaults: full size, title-free
            man = read_manifest(layout)
        assert not man["passage_contains_query"]
        names = list(man["corpus_dirs"])
        knowns_run = [n for n in names if args.known is None or n in args.known.split(",")]
        split_q, split_qrels = {}, {}
        for split in ("dev", "test"):
            split_q[split], split_qrels[split] = load_multi_qrels(man["corpus_dirs"], split)
        ft_label = "MiniLM fine-tuned"
        jobs = []   # (label, known corpora, [(seed, fine-tuned on)])
        if "base" in args.models:
            jobs.append(("MiniLM", knowns_run, [(None, None)]))
        if "finetuned" in args.models and man["train_files"]:
            jobs += [(ft_label, [known], [(s, known) for s in args.seed_list]) for known in knowns_run]
        for label, knowns, seeds in jobs:
            per_known: dict[str, tuple[list[SweepResult], list[dict]]] = {kn: ([], []) for kn in knowns}
            for seed, ft_known in seeds:
                model_path, tag = args.model, "base"
                if ft_known is not None:
                    tag = f"ft-{ft_known}-s{seed}"
                    mp, took = finetune(man["train_files"][ft_known], out / "models" / f"{bench}-{tag}", seed, args)
                    model_path = str(mp)
                    if took is not None:
                        timings[f"{bench}/{tag}/train_s"] = took
                csets, enc = candidates(model_path, man, split_q, args, out / "cache" / f"{bench}-{tag}.json")
                if enc is not None:
                    timings[f"{bench}/{tag}/encode_s"] = enc
                for known in knowns:
                    test, dev = csets["test"].reorder(known), csets["dev"].reorder(known)
                    t = time.perf_counter()
                    bench_specs = specs if len(names) == 2 else simplex_specs(specs, len(names))
                    res = sweep_policies(test, split_qrels["test"], bench_specs, args.k, ks=KS, cset_dev=dev,
                                         qrels_dev=split_qrels["dev"], standard=(), curves_for=CURVES,
                                         per_query=True, setting=f"{bench} {known} known, {label}")
                    pq = {lab: {q: v["pc_recall"] for q, v in m.pop("per_query").items()}
                          for lab, m in res.rows.items()}
                    timings[f"{bench}/{tag}/{known}/sweep_s"] = time.perf_counter() - t
                    per_known[known][0].append(res)
                    per_known[known][1].append(pq)
                    log.info("%s seed %s: %s", res.setting, seed, {lab: round(100 * m[f"pc_recall@{args.k}"], 2)
                                                                  for lab, m in res.rows.items()
                                                                  if "dev" in lab or lab in ("naive", "fixed:0.5", "oracle")})
            for known, (runs, pqs) in per_known.items():
                setting = f"{bench} {known} known, {label}" + (f" ({len(runs)} seeds)" if len(runs) > 1 else "")
                agg = aggregate(setting, args.k, runs)
                results.append(agg)
                summary[setting] = compare(runs, pqs, args.k)
                write_sweep(results, res_dir)
                atomic_write_json(res_dir / "summary.json", summary)
                atomic_write_text(res_dir / "summary.md", format_summary(summary))
                print(format_table([agg]), flush=True)
    timings["total_s"] = time.perf_counter() - t0
    paths = write_sweep(results, res_dir)
    atomic_write_json(res_dir / "timings.json", timings)
    atomic_write_json(res_dir / "config.json", {k: v for k, v in vars(args).items()})
    print(format_table(results))
    print(page_table(results))
    print(format_summary(summary))
    print(json.dumps(timings, indent=2))
    print("wrote", {k: str(v) for k, v in paths.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
