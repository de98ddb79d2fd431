"""``drmix adapt`` benchmark: SciFact and NFCorpus as targets with their labels withheld from every choice; the
adapted model against uniform fine-tuning on the same collections and against COCO -> uniform, 3 seeds.

Per seed one ``drmix adapt`` run (:func:`drmix.recipes.adapt.run_adapt`) with ``--corpus`` SciFact and NFCorpus
(their corpora only), ``--data`` the six source collections of build_collections.py that bench_coco.py fine-tunes
on (AltLex, MSRP, SICK, XQuAD, Walmart-Amazon, Amazon-Google; 1,000 examples each at most; the SciFact and
NFCorpus training collections are never built, so no target label is read for training), and ``--eval-data``
SciFact / NFCorpus: their test qrels are opened only by the recipe's final evaluation, after the candidate was
chosen on the synthetic dev. Nothing in the presets was tuned on a test result.

Two more arms per seed (``--arms``), each one more ``run_adapt`` in its own folder of ``--out``:

* ``in-domain`` (``OUT/in-domain/seed<N>``): ``--data`` the six sources plus SciFact's and NFCorpus's own labelled
  **train** splits (:func:`build_target_train`, as build_collections.py builds BEIR training sets; the test
  splits are never read for training). Its uniform fine-tuning stage is the in-domain ceiling (the base model
  fine-tuned with the recipe's own baseline configuration, ``plan_adapt(...).baseline``, the extra collections
  added), its adapted model the same plus adapt's stages. Reported: the share of the in-domain gain over the
  base model that label-free adapt recovers, ``(adapted - base) / (in-domain - base)``, per target and pooled,
  with a paired bootstrap interval (:func:`gain_bootstrap`; n/a when the in-domain gain's own interval reaches 0);
* ``llm`` (``OUT/llm/seed<N>``): the same run as the label-free one with ``--llm smollm2`` (the packaged
  SmolLM2-135M GGUF, on the GPU when there is one): its adapted model against the cropped-sentences-only one
  (paired over the queries and per seed) and the LLM's cost (calls, seconds, failed and kept shares, from
  ``synthetic/stats.json``).

Reported: per model the mean over seeds of the average nDCG@10 (SciFact, NFCorpus) with a 95% t-interval over
seeds; paired tests over the test queries (each query's nDCG@10 averaged over the seeds) of the adapted model
against uniform fine-tuning and against COCO -> uniform, and of COCO -> uniform against uniform fine-tuning;
per seed the candidate chosen and Kendall's tau between the candidates' synthetic-dev and labelled rankings;
the synthetic set's counts.

    python benchmarks/bench_adapt.py --preset medium --data ../shared/data --out /tmp/drmix-adapt --seeds 0
    python benchmarks/bench_adapt.py --preset medium --data ../shared/data --out /tmp/drmix-adapt --report-only
    python benchmarks/bench_adapt.py --preset gpu --estimate
    python benchmarks/bench_adapt.py --preset gpu --out /tmp/drmix-adapt --arms in-domain --seeds 0   # one GPU command

``--report-only`` trains nothing and prints the table of the seeds already finished in ``--out``, byte for byte
as docs/adapt.md holds it.
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

log = logging.getLogger("bench_adapt")
TARGETS = ("scifact", "nfcorpus")
SOURCES = ("altlex", "msrp", "sick", "xquad", "walmart_amazon", "amazon_google")
BASE, UNIFORM, COCO_UNIFORM = "base model", "uniform fine-tuning", "COCO → uniform"

#: per preset: the recipe's preset, the starting model (layers of all-MiniLM-L6-v2 kept; None = all) and the
#: recipe fields the benchmark sets beyond the preset
PRESETS = {
    # llm_docs: documents per corpus the llm arm's SmolLM2 writes a query for (None: the recipe's
    # --generate-max-docs, 200); on a shared 2-core CPU one call took about 35 s, so 200 a corpus would take hours
    "cpu": dict(recipe="cpu", model_layers=2, fields=dict(save_every=1000, log_every=10), llm_docs=16),
    # bench_coco.py --preset medium's model and scale (COCO -> fine-tune +0.0262 nDCG@10 there)
    "medium": dict(recipe="medium", model_layers=2, fields=dict(save_every=100, log_every=10)),
    "gpu": dict(recipe="gpu", model_layers=None, fields=dict(save_every=1000, log_every=50)),
}


def build_sources(data: Path, out: Path, *, max_per_collection: int = 1000, seed: int = 0) -> list[str]:
    """The six source collections (bench_coco.py's, built the same way: build_collections.py, 1,000 examples at
    most, documents cut to 120 words); the targets' own training collections are not built."""
    import build_collections as bc

    from drmix.io.atomic import write_jsonl_atomic

    builders = {"altlex": lambda: bc.altlex(data, max_words=120, seed=seed, limit=2 * max_per_collection),
                "msrp": lambda: bc.msrp(data, max_words=120, seed=seed),
                "sick": lambda: bc.sick(data, max_words=120, seed=seed),
                "xquad": lambda: bc.xquad(data, max_words=120, seed=seed),
                "walmart_amazon": lambda: bc.entity_matching(data / "walmart-amazon", seed=seed),
                "amazon_google": lambda: bc.entity_matching(data / "amazon-google", seed=seed)}
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SOURCES:
        path = out / f"{name}.jsonl"
        if not path.exists():
            write_jsonl_atomic(path, bc.cap(builders[name](), max_per_collection, seed))
        paths.append(str(path))
    return paths


def build_target_train(data: Path, out: Path, *, max_per_collection: int = 1000, seed: int = 0) -> list[str]:
    """The in-domain arm's extra collections: SciFact's and NFCorpus's own labelled **train** splits, built as
    build_collections.py builds BEIR training sets (train qrels, a TF-IDF-mined negative, documents cut to 120
    words, 1,000 examples at most); the test split is never read here."""
    import build_collections as bc

    from drmix.io.atomic import write_jsonl_atomic

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in TARGETS:
        path = out / f"{name}-train.jsonl"
        if not path.exists():
            rows = bc.beir_collection(data / name, max_words=120, seed=seed)
            write_jsonl_atomic(path, bc.cap(rows, max_per_collection, seed))
        paths.append(str(path))
    return paths


def arm_dir(out: Path, arm: str, seed: int) -> Path:
    """A seed's run folder of an arm (the label-free arm where the first round's runs are: ``seed<N>``)."""
    return out / f"seed{seed}" if arm == "adapt" else out / arm / f"seed{seed}"


def config_for(args, p: dict, seed: int, model: str | None, collections: list[str], arm: str = "adapt"):
    """One arm's ``drmix adapt`` configuration: ``in-domain`` adds the targets' train collections to --data
    (``collections`` then holds them), ``llm`` adds ``--llm smollm2`` (on the GPU when there is one)."""
    from drmix.recipes.adapt import AdaptConfig

    extra: dict = {}
    if arm == "llm":
        import torch

        extra = dict(llm="smollm2", llm_options={"device": "cuda"} if torch.cuda.is_available() else {})
        if p.get("llm_docs"):
            extra["generate_max_docs"] = p["llm_docs"]
    return AdaptConfig(preset=p["recipe"], seed=seed, model=model, corpus=[str(args.data / t) for t in TARGETS],
                       data=collections, eval_data=[str(args.data / t) for t in TARGETS],
                       output_dir=str(arm_dir(args.out, arm, seed)), show_progress=False, **p["fields"], **extra)


#: LLM calls a second assumed for the ``llm`` arm's estimate on one GPU (SmolLM2-135M, batches of 16, a query of
#: at most 48 tokens each): an assumption, not a measurement; the CPU rate measured is in docs/adapt.md
LLM_CALLS_PER_S_GPU = 10.0


def collections_of(args, arm: str) -> list[str]:
    """The --data of an arm: the six sources, plus the targets' train collections for ``in-domain``."""
    folder = args.collections or args.out / "collections"
    sources = build_sources(args.data, folder)
    return sources + (build_target_train(args.data, folder) if arm == "in-domain" else [])


def estimate(args, p: dict, arm: str = "adapt"):
    """Device time (:mod:`_lease`) of one seed's run of ``arm``, from the recipe's own stage plan (the ``llm``
    arm's calls at :data:`LLM_CALLS_PER_S_GPU`)."""
    from _lease import Estimate

    from drmix.recipes.adapt import plan_work

    est = Estimate()
    cfg = config_for(args, p, 0, None, collections_of(args, arm), arm)
    for w in plan_work(cfg):
        if w.examples:
            est.train(w.name, w.examples)
        est.encode(w.passages)
        est.fixed_s += w.llm_calls / LLM_CALLS_PER_S_GPU
    return est


def t_interval(values: list[float]) -> tuple[float, float, float]:
    from drmix.evaluation.significance import t_interval as mean_half

    m, half = mean_half(values)
    return m, m - half, m + half


def seed_result(out: Path) -> dict | None:
    """A finished seed's summary.json and the per-query labelled nDCG@10 of its report models."""
    path = out / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    if not summary.get("labelled"):
        return None
    per_query = {}
    for label, model in summary["models"].items():
        cache = (out / "eval" / "base" if label == BASE else Path(model).parent) / "eval-test.json"
        per_query[label] = {d: {q: v["ndcg@10"] for q, v in qs.items()}
                            for d, qs in json.loads(cache.read_text(encoding="utf-8"))["per_query"].items()}
    summary["per_query"] = per_query
    return summary


def avg(run: dict) -> float:
    """A run's average nDCG@10: the mean over the targets of the mean over their queries."""
    return float(np.mean([np.mean(list(s.values())) for s in run.values()]))


def adapted(r: dict) -> str:
    """The adapted model's label in a seed's per-query scores (``adapted (<candidate>)``)."""
    return next(lb for lb in r["per_query"] if lb.startswith("adapted"))


def seed_mean(runs: list[dict]) -> dict:
    """Each query's score averaged over the seeds."""
    return {d: {q: float(np.mean([r[d][q] for r in runs])) for q in runs[0][d]} for d in runs[0]}


def comparison_row(name: str, a: list[dict], b: list[dict]) -> str:
    """``b`` against ``a`` (per seed, per-query scores): the paired t over the queries (each averaged over the
    seeds), the per-seed differences and the paired t over the seeds."""
    from drmix.evaluation.significance import t_test
    from drmix.recipes.coco import paired_test

    t = paired_test(seed_mean(a), seed_mean(b))
    diffs = [avg(y) - avg(x) for x, y in zip(a, b)]
    p_seeds = t_test(diffs)[0] if len(diffs) > 1 else float("nan")
    return (f"| {name} | {t['n']} | {t['mean']:+.4f} | [{t['low']:+.4f}, {t['high']:+.4f}] | {t['p']:.3g} | "
            + " / ".join(f"{d:+.4f}" for d in diffs) + f" | {p_seeds:.3g} |")


COMPARISON_HEAD = ["| comparison | queries | mean difference | 95% interval | p (paired t over queries) | per-seed "
                   "difference | p (paired t over seeds) |", "|---|---:|---:|---|---:|---|---:|"]


def report(args, seeds: list[int], results: dict[int, dict]) -> str:
    rows = {BASE: [], UNIFORM: [], COCO_UNIFORM: [], "adapted": []}
    for s in seeds:
        r = results[s]
        for label in (BASE, UNIFORM, COCO_UNIFORM):
            rows[label].append(r["per_query"][label])
        rows["adapted"].append(r["per_query"][adapted(r)])
    first = results[seeds[0]]
    lines = [f"Preset `{args.preset}`, seeds {seeds}; nDCG@10 on the SciFact and NFCorpus test splits (a seeded "
             "sample of the same queries and documents for every seed), read only by the recipe's final evaluation.",
             "", "| model | " + " | ".join(TARGETS)
             + " | average (mean over seeds) | per seed | 95% interval (seeds) |",
             "|---|" + "---:|" * len(TARGETS) + "---:|---|---|"]
    for label, runs in rows.items():
        per_seed = [avg(r) for r in runs]
        m, lo, hi = t_interval(per_seed)
        name = "adapted (chosen on synthetic dev)" if label == "adapted" else label
        lines.append(f"| {name} | " + " | ".join(f"{np.mean([np.mean(list(r[d].values())) for r in runs]):.4f}"
                                                 for d in TARGETS)
                     + f" | {m:.4f} | " + " / ".join(f"{v:.4f}" for v in per_seed) + " | "
                     + (f"[{lo:.4f}, {hi:.4f}]" if len(runs) > 1 else "– (one seed)") + " |")
    lines += ["", *COMPARISON_HEAD]
    for name, a, b in (("adapted vs uniform fine-tuning", UNIFORM, "adapted"),
                       ("adapted vs COCO → uniform", COCO_UNIFORM, "adapted"),
                       ("COCO → uniform vs uniform fine-tuning", UNIFORM, COCO_UNIFORM)):
        lines.append(comparison_row(name, rows[a], rows[b]))
    lines += ["", "| seed | chosen on synthetic dev | Kendall's tau (synthetic dev vs labelled, candidates) | "
                  "synthetic dev nDCG@10 of the chosen / of uniform |", "|---:|---|---:|---|"]
    for s in seeds:
        r = results[s]
        k = r.get("kendall") or {}
        dev = r["selection_average"]
        lines.append(f"| {s} | {r['selected']} | {k.get('tau', float('nan')):+.3f} (p {k.get('p', float('nan')):.2g}, "
                     f"{k.get('candidates', 0)}) | {dev[r['selected']]:.4f} / {dev['uniform']:.4f} |")
    cands = list(first["selection_average"])
    lines += ["", "Candidates (mean over seeds): synthetic dev nDCG@10 / labelled test nDCG@10.", "",
              "| candidate | synthetic dev | labelled test |", "|---|---:|---:|"]
    for c in cands:
        dev = np.mean([results[s]["selection_average"][c] for s in seeds])
        lab = np.mean([np.mean([v["ndcg@10"] for v in results[s]["labelled"][c].values()]) for s in seeds])
        lines.append(f"| {c} | {dev:.4f} | {lab:.4f} |")
    lines += ["", "Synthetic set (seed " + str(seeds[0]) + "): pseudo-queries generated / failed the round trip / "
              "kept; train / dev / test queries.", "", "| corpus | generated | failed | kept | train / dev / test |",
              "|---|---:|---:|---:|---|"]
    for name, st in first["synthetic"].items():
        q = st["queries"]
        lines.append(f"| {name} | {sum(st['generated'].values()):,} | {sum(st['filtered'].values()):,} | "
                     f"{sum(st['kept'].values()):,} | {q['train']:,} / {q['dev']:,} / {q['test']:,} |")
    return "\n".join(lines) + "\n"


ARMS = ("adapt", "in-domain", "llm")
ADAPTED, IN_DOMAIN, IN_DOMAIN_ADAPT, LLM = ("adapted, label-free", "in-domain fine-tuning",
                                            "in-domain + adapt's stages", "adapted with SmolLM2 queries")
N_RESAMPLES = 10_000
LEASE_S = 15 * 60          # device time one GPU lease gives (every command within 10 minutes)


def gain_bootstrap(base: dict, model: dict, ceiling: dict, *, n_resamples: int = N_RESAMPLES,
                   seed: int = 0) -> dict:
    """The share ``(model - base) / (ceiling - base)`` of the mean nDCG@10 and its 95% percentile interval.

    Each argument: per seed, the per-query scores of one target (``[{qid: score}]``, the same queries and seeds
    in the three). A resample draws the seeds (when there are several) and the queries with replacement, the
    same draws for the three models (paired); numerator and denominator are the means over the drawn
    (seed, query) cells. Two-level resampling is not in ``scipy.stats.bootstrap`` (one level of paired samples),
    so it is written out. Returns the point values, the intervals of the numerator, denominator and share, and
    ``share: None`` with ``why`` when the denominator's interval reaches 0 (no gain to recover: a ratio would be
    noise over noise)."""
    qids = list(base[0])
    b, m, c = (np.array([[run[q] for q in qids] for run in x], dtype=np.float64) for x in (base, model, ceiling))
    n_seeds, n_q = b.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, n_seeds, (n_resamples, n_seeds)) if n_seeds > 1 else np.zeros((n_resamples, 1), int)
    cs = np.stack([np.bincount(r, minlength=n_seeds) for r in seeds]).astype(np.float64)
    cq = np.stack([np.bincount(r, minlength=n_q) for r in rng.integers(0, n_q, (n_resamples, n_q))]).astype(
        np.float64)
    cells = cs.sum(1) * cq.sum(1)
    num_r = np.einsum("ns,sq,nq->n", cs, m - b, cq) / cells
    den_r = np.einsum("ns,sq,nq->n", cs, c - b, cq) / cells
    num, den = float((m - b).mean()), float((c - b).mean())
    out = {"queries": n_q, "seeds": n_seeds, "gain": num, "ceiling_gain": den,
           "gain_interval": tuple(np.percentile(num_r, [2.5, 97.5])),
           "ceiling_interval": tuple(np.percentile(den_r, [2.5, 97.5]))}
    if den <= 0 or out["ceiling_interval"][0] <= 0:
        return {**out, "share": None, "interval": None,
                "why": "the ceiling's gain has an interval reaching 0: no gain to recover" if den > 0
                else "the ceiling is not above the base model"}
    return {**out, "share": num / den, "interval": tuple(np.percentile(num_r / den_r, [2.5, 97.5])), "why": ""}


def _share_cell(g: dict) -> str:
    if g["share"] is None:
        return f"n/a ({g['why']})"
    return f"{g['share']:.0%} [{g['interval'][0]:.0%}, {g['interval'][1]:.0%}]"


def _pooled(runs: list[dict]) -> list[dict]:
    """Per seed, the queries of every target as one set (``target/qid``)."""
    return [{f"{d}/{q}": v for d, qs in r.items() for q, v in qs.items()} for r in runs]


def ceiling_report(seeds: list[int], runs: dict[str, list[dict]]) -> list[str]:
    """The in-domain arm: the four models' scores, the share of the in-domain gain the label-free adapted model
    recovers per target and pooled, and the paired comparisons."""
    lines = ["", f"In-domain ceiling, seeds {seeds}: the base model fine-tuned on the six sources plus the targets' "
             "own labelled train splits (SciFact train, NFCorpus train; the recipe's uniform fine-tuning, same steps "
             "and settings), and the same with adapt's stages (COCO, synthetic set, candidates chosen on the "
             "synthetic dev).", "", "| model | " + " | ".join(TARGETS) + " | average (mean over seeds) | per seed |",
             "|---|" + "---:|" * len(TARGETS) + "---:|---|"]
    for label in (BASE, ADAPTED, IN_DOMAIN, IN_DOMAIN_ADAPT):
        rs = runs[label]
        lines.append(f"| {label} | " + " | ".join(f"{np.mean([np.mean(list(r[d].values())) for r in rs]):.4f}"
                                                  for d in TARGETS)
                     + f" | {np.mean([avg(r) for r in rs]):.4f} | " + " / ".join(f"{avg(r):.4f}" for r in rs) + " |")
    lines += ["", "Share of the in-domain gain over the base model that label-free adapt recovers: (adapted − base) "
              f"/ (in-domain − base), mean nDCG@10; 95% paired bootstrap interval ({N_RESAMPLES:,} resamples, "
              "seeded: queries" + (" and seeds" if len(seeds) > 1 else "") + " drawn jointly for the three models; "
              "pooled: the queries of both targets). n/a when the ceiling's own gain has an interval reaching 0. "
              "The second ceiling, in-domain + adapt's stages, is the best a user with those labels gets here.", "",
              "| ceiling | target | queries | adapted − base | ceiling − base [95% interval] | share recovered "
              "[95% interval] | per seed |", "|---|---|---:|---:|---|---|---|"]
    for ceiling in (IN_DOMAIN, IN_DOMAIN_ADAPT):
        for name, pick in [(d, lambda rs, d=d: [r[d] for r in rs]) for d in TARGETS] + [("pooled", _pooled)]:
            b, m, c = pick(runs[BASE]), pick(runs[ADAPTED]), pick(runs[ceiling])
            g = gain_bootstrap(b, m, c)
            per_seed = [gain_bootstrap([x], [y], [z]) for x, y, z in zip(b, m, c)]
            lo, hi = g["ceiling_interval"]
            lines.append(f"| {ceiling} | {name} | {g['queries']} | {g['gain']:+.4f} | {g['ceiling_gain']:+.4f} "
                         f"[{lo:+.4f}, {hi:+.4f}] | {_share_cell(g)} | "
                         + " / ".join("n/a" if x["share"] is None else f"{x['share']:.0%}" for x in per_seed) + " |")
    lines += ["", *COMPARISON_HEAD]
    for name, a, b in ((f"{IN_DOMAIN} vs {ADAPTED}", ADAPTED, IN_DOMAIN),
                       (f"{IN_DOMAIN_ADAPT} vs {IN_DOMAIN}", IN_DOMAIN, IN_DOMAIN_ADAPT),
                       (f"{ADAPTED} vs {BASE}", BASE, ADAPTED)):
        lines.append(comparison_row(name, runs[a], runs[b]))
    return lines


def llm_report(seeds: list[int], plain: dict[int, dict], llm: dict[int, dict]) -> list[str]:
    """The LLM arm: the adapted model with SmolLM2-written queries beside the cropped ones against cropped
    sentences only (paired over queries and per seed), the candidates chosen, and the LLM's cost."""
    a = [plain[s]["per_query"][adapted(plain[s])] for s in seeds]
    b = [llm[s]["per_query"][adapted(llm[s])] for s in seeds]
    lines = ["", f"LLM queries, seeds {seeds}: the same `drmix adapt` run with `--llm smollm2` (SmolLM2-135M-Instruct, "
             "the packaged GGUF) writing a query for sampled documents beside the cropped sentences.", "",
             *COMPARISON_HEAD, comparison_row(f"{LLM} vs cropped sentences only", a, b), "",
             "| seed | chosen (cropped only) | chosen (with SmolLM2) | average nDCG@10 (cropped only / with SmolLM2) |",
             "|---:|---|---|---|"]
    for s, x, y in zip(seeds, a, b):
        lines.append(f"| {s} | {plain[s]['selected']} | {llm[s]['selected']} | {avg(x):.4f} / {avg(y):.4f} |")
    lines += ["", "LLM cost per seed and corpus: calls (documents asked), wall seconds of the calls, failed calls, "
              "answers parsed to a query, and the round-trip filter's kept share of the generated and of the "
              "cropped queries.", "",
              "| seed | corpus | LLM calls | LLM seconds | s per call | failed | parsed | generated kept (round trip) "
              "| cropped kept (round trip) |", "|---:|---|---:|---:|---:|---:|---|---|---|"]
    for s in seeds:
        for name, st in llm[s]["synthetic"].items():
            c = st.get("llm") or {}
            calls, secs = int(c.get("answered", 0)), float(c.get("llm_seconds", 0.0))
            failed, docs, parsed = sum((c.get("failures") or {}).values()), int(c.get("documents", 0)), int(
                c.get("kept", 0))
            gen, kept = st["generated"], st["kept"]

            def share(k: str) -> str:
                return f"{kept.get(k, 0):,} of {gen[k]:,} ({kept.get(k, 0) / gen[k]:.0%})" if gen.get(k) else "–"

            lines.append(f"| {s} | {name} | {calls:,} | {secs:,.1f} | {secs / calls if calls else float('nan'):.2f} | "
                         f"{failed:,} | {parsed:,} of {docs:,} ({parsed / docs if docs else 0:.0%}) | "
                         f"{share('generate')} | {share('crop')} |")
    return lines


def arms_report(seeds: list[int], arms: dict[str, dict[int, dict]]) -> str:
    """The new arms' tables, for the seeds each finished together with the label-free arm (empty when none)."""
    plain = arms.get("adapt", {})
    lines: list[str] = []
    dom = arms.get("in-domain", {})
    both = [s for s in seeds if s in plain and s in dom]
    if both:
        runs = {BASE: [plain[s]["per_query"][BASE] for s in both],
                ADAPTED: [plain[s]["per_query"][adapted(plain[s])] for s in both],
                IN_DOMAIN: [dom[s]["per_query"][UNIFORM] for s in both],
                IN_DOMAIN_ADAPT: [dom[s]["per_query"][adapted(dom[s])] for s in both]}
        lines += ceiling_report(both, runs)
    llm = arms.get("llm", {})
    both = [s for s in seeds if s in plain and s in llm]
    if both:
        lines += llm_report(both, plain, llm)
    return "\n".join(lines) + "\n" if lines else ""


def store_results(out: Path, seeds: list[int], preset: str, path: Path) -> None:
    """Write the finished seeds' stored results (per arm and seed: the summary fields the report reads and the
    per-query labelled nDCG@10 of the report's models) to ``path``: the fixture a test feeds to --report-only."""
    from drmix.io.atomic import atomic_write_json

    def stored(folder: Path) -> dict | None:
        r = seed_result(folder)
        if r is None:
            return None
        keep = ("selected", "kendall", "selection_average", "labelled", "synthetic")
        return {"summary": {**{k: r[k] for k in keep}, "models": list(r["models"])},
                "eval_test": {lb: {d: {q: {"ndcg@10": v} for q, v in qs.items()} for d, qs in by.items()}
                              for lb, by in r["per_query"].items()}}

    data: dict = {"preset": preset, "seeds": {}, "arms": {}}
    for arm in ARMS:
        for s in seeds:
            if (r := stored(arm_dir(out, arm, s))) is not None:
                (data["seeds"] if arm == "adapt" else data["arms"].setdefault(arm, {}))[str(s)] = r
    atomic_write_json(path, data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="shared data (read-only)")
    ap.add_argument("--collections", type=Path, default=None, help="built collections (default: OUT/collections)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/drmix-adapt"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS),
                    help="the arms to run, each seed's arms in this order (default: all): adapt (label-free), "
                         "in-domain (the targets' train splits added to --data), llm (--llm smollm2); one arm and "
                         "one seed a command splits a GPU lease")
    ap.add_argument("--estimate", action="store_true",
                    help="print the estimated device time of one seed of each arm and exit")
    ap.add_argument("--report-only", action="store_true",
                    help="train nothing: print the table of the seeds already finished in --out")
    ap.add_argument("--store", type=Path, default=None,
                    help="also write the finished seeds' results (the test fixture's form) to this JSON file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    p = PRESETS[args.preset]
    args.data = args.data.resolve()
    if args.estimate or (args.preset == "gpu" and not args.report_only):
        from _lease import estimate_line

        one_seed = 0.0
        for arm in args.arms:
            est = estimate(args, p, arm)
            one_seed += est.seconds()
            print(estimate_line(est, f"one seed of the {arm} arm"), flush=True)
        total = one_seed * len(args.seeds)
        print(f"{len(args.seeds)} seed(s) x {len(args.arms)} arm(s): {total / 60:.1f} min of device time in all, "
              f"{'within' if total <= LEASE_S else 'MORE than'} one {LEASE_S / 60:.0f}-minute lease; run one arm "
              "and one seed a command (--arms ARM --seeds N) to keep each under 10 minutes", flush=True)
        if args.estimate:
            return 0
    if not args.report_only:
        import datasets

        datasets.disable_progress_bars()
        from _models import truncated_minilm

        from drmix.recipes.adapt import run_adapt

        model = truncated_minilm(p["model_layers"], args.out)
        for seed in args.seeds:
            for arm in args.arms:
                t0 = time.perf_counter()
                run_adapt(config_for(args, p, seed, model, collections_of(args, arm), arm))
                (arm_dir(args.out, arm, seed) / "bench-seconds.json").write_text(
                    json.dumps({"seconds": time.perf_counter() - t0}))
    arms = {arm: {s: r for s in args.seeds if (r := seed_result(arm_dir(args.out, arm, s))) is not None}
            for arm in ARMS}
    done = [s for s in args.seeds if s in arms["adapt"]]
    if not done:
        print("no finished seed in", args.out)
        return 1
    text = report(args, done, arms["adapt"]) + arms_report(args.seeds, arms)
    from drmix.io.atomic import atomic_write_text

    atomic_write_text(args.out / "report.md", text)
    if args.store:
        store_results(args.out, args.seeds, args.preset, args.store)
    print(text, end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
