"""Learned mixtures under stress: does any of them -- or the audit -- protect against a harmful collection?

The six source collections of bench_adapt.py (AltLex, MSRP, SICK, XQuAD, Walmart-Amazon, Amazon-Google; built by
build_collections.py, 1,000 examples at most) plus, one scenario at a time, one harmful collection, all settings
stated here before any run:

* ``noisy`` -- ``noisy_xquad``: a copy of XQuAD (question -> paragraph, the source closest to query-passage
  relevance) whose positives are shuffled among :data:`NOISE_FRACTION` (half) of its rows (a seeded derangement:
  every chosen row gets another chosen row's paragraph), as a join gone wrong in a scraped set;
* ``offtask`` -- ``xquad_answers``: XQuAD's English questions paired with their *answer strings* ("Denver
  Broncos"), a reading-comprehension label, not a passage that is relevant to the query;
* ``flood`` -- ``flood_walmart_amazon``: Walmart-Amazon's rows repeated to :data:`FLOOD_FACTOR` (10) times the
  largest other collection: redundant data that dominates any size-proportional mixture;
* ``clean`` -- the six sources alone (the control).

Arms (per scenario and seed, all fine-tuning the same starting model with the same steps and settings,
task-homogeneous batches): ``uniform``, ``size``, ``temperature`` (tau 2), ``tdro:top:0.7``, ``tdro:reweight``,
``doremi:reweight``, ``groupdro:reweight`` (tDRO, DoReMi and GroupDRO stage-1 weights transferred), ``infdds``
(Inf-DDS rewarded on the dev sets), ``audit`` (the weights ``drmix mixture audit`` recommends), ``oracle`` (the
harmful collection dropped; not in ``clean``) and ``dev-selected`` (the arm, oracle excluded, with the best dev
nDCG@10: a learned choice made without test labels).

One ``drmix mixture audit`` run per scenario and seed (:func:`drmix.recipes.audit.run_audit`, budget = the arms'
steps, one seed) supplies what its runs already are: its whole-mixture run *is* the ``uniform`` arm (the probe
restores every parameter and the random state, so it trains exactly as the uniform mixture), its run without the
harmful collection *is* the ``oracle`` arm, its stage-1 runs (reference: its whole-mixture model) give the tDRO,
DoReMi and GroupDRO weights the arms transfer, and a recommendation that drops one collection and keeps the
others uniform *is* its run without that collection. Once every seed of a scenario is in, the cells' one-seed
audits are pooled into the audit of all those seeds at once -- what ``drmix mixture audit --seeds N`` answers,
from the same runs, nothing trained again (:func:`pool_audits`) -- and its recommendation is one more arm,
``audit:pooled``.

Dev (the audit, Inf-DDS's rewards, the dev-selected arm): labelled queries that are not from the test split --
SciFact's train queries and NFCorpus's dev split (as bench_dev_labels.py does), written as ``OUT/dev/<target>``
folders whose ``dev`` qrels are those splits (corpus and queries linked). Targets: SciFact and NFCorpus test,
never trained on; the test qrels are read only by the final evaluation. Reported per scenario: each arm's nDCG@10
(per target and pooled over both targets' queries, mean over seeds), its difference to uniform with the 95%
interval and the paired t-test over the queries (each query's score averaged over the seeds), the per-seed
differences, and the share of the oracle's gain it recovers (a paired bootstrap over seeds and queries,
bench_adapt.py's :func:`gain_bootstrap`); the audit's verdict on the harmful set in every seed, Kendall's tau of
its cheap signals against leave-one-out, the weight each learned method put on the harmful set, and the issue's
goals met or missed.

    python benchmarks/bench_mixture_stress.py --preset cpu --out /tmp/stress-cpu
    python benchmarks/bench_mixture_stress.py --preset medium --estimate
    nice -n 10 python benchmarks/bench_mixture_stress.py --preset medium --out /tmp/stress-medium > log 2>&1 &
    # or two processes sharing one --out, each with its own scenarios (their cells are merged in results.json)
    python benchmarks/bench_mixture_stress.py --preset medium --out /tmp/stress-medium --report-only
    python benchmarks/bench_mixture_stress.py --preset gpu --out /tmp/stress-gpu --scenarios noisy --seeds 0

Every model is a folder of ``--out`` (a killed run resumes: finished runs are reused when made with the same
settings, an interrupted one continues from its checkpoint; processes given other ``--scenarios`` or ``--seeds``
may share one ``--out``); ``OUT/results.json`` holds every finished cell's
scores (4 decimals) and the table is printed from it, so ``--report-only`` prints it byte for byte from the stored
results (``--store FILE`` copies them: the fixture tests/benchmarks hold).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402,F401  (offline environment)

log = logging.getLogger("bench_mixture_stress")

TARGETS = ("scifact", "nfcorpus")
DEV_SPLITS = {"scifact": "train", "nfcorpus": "dev"}       # labelled queries that are not the test split
SCENARIOS = ("clean", "noisy", "offtask", "flood")
BAD = {"noisy": "noisy_xquad", "offtask": "xquad_answers", "flood": "flood_walmart_amazon"}
NOISE_FRACTION = 0.5
FLOOD_FACTOR = 10
TRANSFER_ARMS = {"tdro:top:0.7": ("tdro", "top:0.7"), "tdro:reweight": ("tdro", "reweight"),
                 "doremi:reweight": ("doremi", "reweight"), "groupdro:reweight": ("groupdro", "reweight")}
ARMS = ("uniform", "size", "temperature", *TRANSFER_ARMS, "infdds", "audit", "oracle", "dev-selected")
#: the arm of the audit over all the preset's seeds at once (:func:`pooled_audit`), after every cell of a scenario
POOLED = "audit:pooled"
SELECTABLE = tuple(a for a in ARMS if a not in ("oracle", "dev-selected"))
SIGNALS = ("tdro", "doremi", "groupdro", "infdds", "gradalign")

#: per preset: the fine-tuning of every arm (and of the audit's runs: budget = steps), the stage-1 runs, the probe,
#: Inf-DDS, the evaluation caps and the seeds; nothing here was chosen by looking at a test score
PRESETS = {
    # a smoke run: every scenario, arm and stage runs once, nothing moves much
    "cpu": dict(steps=10, batch_size=16, lr=1e-4, query_len=16, doc_len=48, negatives=0, model_layers=2,
                max_per_collection=100, stage1_steps=6, stage1_batch_size=14, probe_points=1, probe_draws=1,
                infdds={"warmup_steps": 3, "update_every": 3, "subset_size": 4, "dev_batch_size": 16},
                dev_queries=30, dev_docs=300, test_queries=50, test_docs=300, seeds=[0]),
    # the scale of bench_adapt.py --preset medium (2-layer MiniLM, lengths 8/24, batch 32) at a third of its steps
    # and twice its learning rate, so that 12 cells of about 20 runs fit about six hours of one CPU core
    "medium": dict(steps=100, batch_size=32, lr=1e-4, query_len=8, doc_len=24, negatives=0, model_layers=2,
                   max_per_collection=1000, stage1_steps=40, stage1_batch_size=14, probe_points=3, probe_draws=2,
                   infdds={"warmup_steps": 20, "update_every": 20, "subset_size": 4, "dev_batch_size": 32},
                   dev_queries=200, dev_docs=1000, test_queries=None, test_docs=1000, seeds=[0, 1, 2]),
    # one scenario and seed a 10-minute command on one H200 (--scenarios S --seeds N)
    "gpu": dict(steps=300, batch_size=64, lr=2e-5, query_len=64, doc_len=256, negatives=1, model_layers=None,
                max_per_collection=1000, stage1_steps=100, stage1_batch_size=35, probe_points=4, probe_draws=2,
                infdds={"warmup_steps": 50, "update_every": 50, "subset_size": 4},
                dev_queries=300, dev_docs=None, test_queries=None, test_docs=None, seeds=[0, 1, 2]),
}
#: core-time rates of the cpu and medium estimates, measured on this project's shared CPU (one thread, process CPU
#: time, the 2-layer MiniLM at 8/24 tokens, batch 32: 0.41 s a step) -- examples/s, passages encoded/s, seconds a
#: run adds (loading, saving); other lengths scale them by the token count
CPU_RATES = (78.0, 450.0, 8.0)


# ------------------------------------------------------------------------------------------------ the data
def _write(path: Path, rows: list[dict]) -> str:
    from drmix.io.atomic import write_jsonl_atomic

    if not path.exists():
        write_jsonl_atomic(path, rows)
    return str(path)


def _read(path: str | Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]


def noisy_copy(rows: list[dict], fraction: float, seed: int = 0) -> list[dict]:
    """A copy of ``rows`` whose positives are deranged among a seeded ``fraction`` of them: the chosen rows are
    shuffled and each takes the positive of the next chosen row (so none keeps its own)."""
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(rows)), round(fraction * len(rows))))
    rng.shuffle(chosen)
    out = [dict(r) for r in rows]
    for a, b in zip(chosen, chosen[1:] + chosen[:1]):
        out[a]["positive"] = rows[b]["positive"]
    return out


def answer_pairs(data: Path, limit: int, seed: int = 0) -> list[dict]:
    """XQuAD's English questions with their first answer string as the positive and the TF-IDF-closest other
    answer as the negative (build_collections.py's miner), at most ``limit`` (seeded)."""
    import build_collections as bc

    doc = json.loads((data / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
    pairs = [(qa["question"], qa["answers"][0]["text"]) for art in doc["data"] for p in art["paragraphs"]
             for qa in p["qas"] if qa["answers"]]
    answers = [a for _, a in pairs]
    neg = bc.mine_negatives([q for q, _ in pairs], answers,
                            [{j for j, x in enumerate(answers) if x == a} for _, a in pairs], seed=seed)
    rows = [{"query": q, "positive": a, "negatives": [answers[j]] if j >= 0 else []} for (q, a), j in zip(pairs, neg)]
    return bc.cap(rows, limit, seed)


def flood(rows: list[dict], size: int) -> list[dict]:
    """``rows`` repeated in order to ``size`` rows."""
    return [dict(rows[i % len(rows)]) for i in range(size)]


def build_data(args) -> dict[str, str]:
    """``{name: path}`` of the six sources and the three harmful collections under ``OUT/collections``."""
    import bench_adapt as ba

    folder = args.out / "collections"
    paths = dict(zip(ba.SOURCES, ba.build_sources(args.data, folder, max_per_collection=args.max_per_collection)))
    largest = max(len(_read(p)) for p in paths.values())
    paths["noisy_xquad"] = _write(folder / "noisy_xquad.jsonl", noisy_copy(_read(paths["xquad"]), NOISE_FRACTION))
    paths["xquad_answers"] = _write(folder / "xquad_answers.jsonl", answer_pairs(args.data, args.max_per_collection))
    paths["flood_walmart_amazon"] = _write(folder / "flood_walmart_amazon.jsonl",
                                           flood(_read(paths["walmart_amazon"]), FLOOD_FACTOR * largest))
    return paths


def scenario_data(paths: dict[str, str], scenario: str) -> list[str]:
    import bench_adapt as ba

    return [paths[s] for s in ba.SOURCES] + ([paths[BAD[scenario]]] if scenario in BAD else [])


def dev_sets(args) -> list[str]:
    """``OUT/dev/<target>``: the target's corpus and queries (linked) with its non-test labelled split as the
    ``dev`` qrels (SciFact train, NFCorpus dev)."""
    out = []
    for t in TARGETS:
        d = args.out / "dev" / t
        (d / "qrels").mkdir(parents=True, exist_ok=True)
        for name in ("corpus.jsonl", "queries.jsonl"):
            if not (d / name).exists():
                os.symlink(args.data / t / name, d / name)
        if not (d / "qrels" / "dev.tsv").exists():
            from drmix.io.atomic import atomic_write_text

            atomic_write_text(d / "qrels" / "dev.tsv",
                              (args.data / t / "qrels" / f"{DEV_SPLITS[t]}.tsv").read_text(encoding="utf-8"))
        out.append(str(d))
    return out


# ------------------------------------------------------------------------------------------------ the runs
def train_fields(args, seed: int) -> dict:
    """The fine-tuning every arm and every audit run shares."""
    return dict(model=args.model, batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=0.1,
                query_max_length=args.query_len, doc_max_length=args.doc_len, num_negatives=args.negatives,
                seed=seed, log_every=10, save_every=50, save_final_checkpoint=False, show_progress=False,
                device=args.device, tokenize_num_proc=1)


def audit_config(args, scenario: str, seed: int, data: list[str], dev: list[str], *, seeds: int = 1,
                 output_dir: Path | None = None):
    from drmix.recipes.audit import AuditConfig

    return AuditConfig(**train_fields(args, seed), data=data, dev=dev, dev_split="dev",
                       output_dir=str(output_dir or cell_dir(args, scenario, seed) / "audit"), budget_steps=args.steps,
                       seeds=seeds,
                       signals=list(SIGNALS), stage1_steps=args.stage1_steps,
                       stage1_batch_size=args.stage1_batch_size, stage1_miner=args.model,
                       probe_points=args.probe_points, probe_draws=args.probe_draws, dev_max_queries=args.dev_queries,
                       dev_max_docs=args.dev_docs)


def cell_dir(args, scenario: str, seed: int) -> Path:
    return args.out / scenario / f"seed{seed}"


def arm_config(args, scenario: str, seed: int, arm: str, data: list[str], dev: list[str], audit_dir: Path,
               weights_file: Path | None = None):
    from drmix.config import TrainConfig

    v = dict(train_fields(args, seed), data=data, max_steps=args.steps, resume=True,
             output_dir=str(cell_dir(args, scenario, seed) / "arms" / arm.replace(":", "-")))
    if arm in ("size", "temperature"):
        v.update(mixture=arm, mixture_temperature=2.0)
    elif arm in TRANSFER_ARMS:
        strategy, transfer = TRANSFER_ARMS[arm]
        v.update(transfer=transfer, weights_file=str(audit_dir / "stage1" / f"{strategy}-seed{seed}" / "weights.json"))
    elif arm == "infdds":
        v.update(strategy="infdds", dev=dev, dev_split="dev", influence=dict(args.infdds))
    elif arm in ("audit", POOLED):
        v.update(mixture="file", weights_file=str(weights_file or audit_dir / "weights.json"))
    return TrainConfig.model_validate(v)


def shared_model(arm: str, scenario: str, seed: int, audit_dir: Path, names: list[str],
                 weights_file: Path | None = None) -> Path | None:
    """The audit's run an arm *is* (None: the arm trains its own): uniform = the whole-mixture run, oracle = the
    run without the harmful set, audit = the run its recommendation (``weights_file``, default the audit's
    ``weights.json``) names when it is a uniform mixture of all collections or of all but one."""
    from drmix.recipes.audit.plan import slug

    runs = audit_dir / "runs" / f"seed{seed}"
    if arm == "uniform":
        return runs / "all" / "model"
    if arm == "oracle":
        return runs / f"without-{slug(BAD[scenario])}" / "model"
    if arm in ("audit", POOLED):
        w = json.loads((weights_file or audit_dir / "weights.json").read_text(encoding="utf-8"))
        kept = [n for n, x in zip(w["collections"], w["weights"]) if x > 0]
        if len({round(x, 12) for x in w["weights"] if x > 0}) == 1:
            if len(kept) == len(names):
                return runs / "all" / "model"
            if len(kept) == len(names) - 1:
                return runs / f"without-{slug(next(n for n in names if n not in kept))}" / "model"
    return None


def train_arm(cfg) -> Path:
    """Train an arm (or reuse it when made with these settings; another set of settings stops the benchmark); a
    finished arm keeps its model, not its checkpoints, nor a card or report of its own."""
    from _common import reusable

    from drmix.api import train
    from drmix.recipes.audit.stages import drop_checkpoints

    out = Path(cfg.run.output_dir)
    if not reusable(out, cfg):
        t0 = time.perf_counter()
        train(cfg, report=False)
        log.info("%s trained in %.0f s", out, time.perf_counter() - t0)
    drop_checkpoints(out)
    return out / "model"


def evaluate(args, models: dict[str, Path], data: list[str], split: str, kind: str, caps: tuple) -> dict:
    """``{arm: {dataset: {query: nDCG@10}}}`` (cached next to each model, keyed by content)."""
    from drmix.evaluation.suite import evaluate_suite

    return evaluate_suite({a: str(m) for a, m in models.items()}, data, kind=kind, split=split,
                          max_queries=caps[0], max_docs=caps[1], seed=0 if kind != "audit" else args.dev_seed,
                          max_length=args.doc_len, metrics=("ndcg@10",), device=args.device).scores()


def run_cell(args, scenario: str, seed: int, paths: dict[str, str], dev: list[str]) -> dict:
    """One scenario and seed: the audit, every arm, the dev choice, the test scores; what results.json keeps."""
    from drmix.recipes.audit import run_audit

    data = scenario_data(paths, scenario)
    t0 = time.perf_counter()
    result = run_audit(audit_config(args, scenario, seed, data, dev))
    audit_dir, names = result.output_dir, result.analysis.names
    models: dict[str, Path] = {}
    for arm in (a for a in ARMS if a != "dev-selected" and not (a == "oracle" and scenario not in BAD)):
        shared = shared_model(arm, scenario, seed, audit_dir, names)
        models[arm] = shared if shared is not None else train_arm(
            arm_config(args, scenario, seed, arm, data, dev, audit_dir))
    args.dev_seed = seed
    dev_scores = evaluate(args, {a: models[a] for a in SELECTABLE}, dev, "dev", "audit",
                          (args.dev_queries, args.dev_docs))
    dev_avg = {a: float(np.mean([v for qs in by.values() for v in qs.values()])) for a, by in dev_scores.items()}
    chosen = max(SELECTABLE, key=lambda a: (dev_avg[a], -SELECTABLE.index(a)))
    test = evaluate(args, models, [str(args.data / t) for t in TARGETS], "test", "stress",
                    (args.test_queries, args.test_docs))
    test["dev-selected"] = test[chosen]
    return {"test": test, "dev": dev_avg, "chosen": chosen, "audit": audit_record(result, scenario),
            "weights": arm_weights(cell_dir(args, scenario, seed), names, data),
            "trajectories": trajectories(cell_dir(args, scenario, seed), seed),
            "seconds": round(time.perf_counter() - t0, 1)}


def pool_audits(config, audits: dict[int, Path]):
    """The answer of ``config`` (an audit of ``--seeds N``) from the runs that N one-seed audits already made,
    ``audits[seed]`` their folders: their ``runs/seed<s>`` and ``stage1/*-seed<s>`` linked under ``config``'s
    folder, every run evaluated on the first seed's dev sample as one audit evaluates all its seeds (cached in
    ``dev/`` there, not next to the runs), nothing trained. What ``drmix mixture audit --seeds N`` would answer
    (tests/benchmarks hold that it is)."""
    from drmix.recipes.audit.plan import plan_audit
    from drmix.recipes.audit.runner import answer_audit, evaluate_dev

    root = Path(config.run.output_dir)
    seeds = [config.optim.seed + j for j in range(config.audit.seeds)]
    if sorted(audits) != seeds:
        raise SystemExit(f"pooling one-seed audits needs one for each of the seeds {seeds}: got {sorted(audits)}")
    for seed, folder in audits.items():
        links = [(root / "runs" / f"seed{seed}", folder / "runs" / f"seed{seed}")]
        links += [(root / "stage1" / p.name, p) for p in sorted((folder / "stage1").glob(f"*-seed{seed}"))]
        for link, target in links:
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                os.symlink(target.resolve(), link)
    plan = plan_audit(config)
    scores = evaluate_dev(config, plan, cache_in=root / "dev")
    return answer_audit(config, plan, scores)


def poolable(args, stored: dict, scenario: str) -> list[int]:
    """The preset's seeds when every one of them has a finished cell of ``scenario`` whose run folders are here
    and the scenario's pooled audit is missing or was made from other seeds; else ``[]``. (The gpu preset's cells
    are made on separate machines: only a run that has every seed's folders pools them.)"""
    seeds = sorted(PRESETS[args.preset]["seeds"])
    ready = len(seeds) > 1 and all(f"{scenario}/{s}" in stored["cells"] and
                                   (cell_dir(args, scenario, s) / "audit" / "runs" / f"seed{s}").is_dir()
                                   for s in seeds)
    return seeds if ready and stored.get("pooled", {}).get(scenario, {}).get("seeds") != seeds else []


def pooled_audit(args, scenario: str, seeds: list[int], paths: dict[str, str], dev: list[str]) -> dict:
    """The audit of ``scenario`` over ``seeds`` at once (:func:`pool_audits` of its cells' one-seed audits, in
    ``OUT/<scenario>/pooled``). Its recommendation then trains (or, when it is one of the audit's runs, reuses)
    one arm per seed, ``audit:pooled``, scored on the test sets."""
    data = scenario_data(paths, scenario)
    config = audit_config(args, scenario, seeds[0], data, dev, seeds=len(seeds),
                          output_dir=args.out / scenario / "pooled")
    result = pool_audits(config, {s: cell_dir(args, scenario, s) / "audit" for s in seeds})
    test = {}
    for seed in seeds:
        audit_dir = cell_dir(args, scenario, seed) / "audit"
        model = shared_model(POOLED, scenario, seed, audit_dir, result.analysis.names, result.weights_path)
        if model is None:
            model = train_arm(arm_config(args, scenario, seed, POOLED, data, dev, audit_dir, result.weights_path))
        test[seed] = evaluate(args, {POOLED: model}, [str(args.data / t) for t in TARGETS], "test", "stress",
                              (args.test_queries, args.test_docs))[POOLED]
    return {"seeds": seeds, "audit": audit_record(result, scenario), "test": test}


def audit_record(result, scenario: str) -> dict:
    a = result.analysis
    r4 = lambda x: round(float(x), 6)  # noqa: E731
    return {"verdicts": a.verdicts, "weights": {n: r4(w) for n, w in a.weights.items()},
            "loo": {n: {"mean": r4(v.mean), "low": r4(v.low), "high": r4(v.high), "p": r4(v.p)} for n, v in a.loo.items()},
            "agreement": {s: {"tau": r4(t["tau"]), "p": r4(t["p"])} for s, t in a.agreement.items()},
            "voters": a.votes.get("", []), "learned": {m: {n: r4(w) for n, w in ws.items()} for m, ws in a.learned.items()},
            "refused": a.refused, "harmful": BAD.get(scenario)}


def trajectories(cell: Path, seed: int) -> dict:
    """What each learned method saw of every collection over its run (from ``weights.jsonl``), to say why it
    weighted a collection as it did: for tDRO, DoReMi and GroupDRO's stage 1 the mean proxy loss, reference loss
    and measurement over the steps and the weight at the first and last step; for the Inf-DDS arm the mean reward
    over its updates and its policy at the first and last record."""
    from drmix.io.read import iter_jsonl

    def mean(xs: list) -> float | None:
        xs = [x for x in xs if isinstance(x, (int, float))]
        return round(float(np.mean(xs)), 6) if xs else None

    out: dict = {}
    for method, path, keys in [*((m, cell / "audit" / "stage1" / f"{m}-seed{seed}" / "weights.jsonl",
                                  ("proxy_loss", "reference_loss", "measurement")) for m in ("tdro", "doremi", "groupdro")),
                               ("infdds", cell / "arms" / "infdds" / "weights.jsonl", ("rewards",))]:
        if not path.is_file():
            continue
        recs = [r for _, r in iter_jsonl(path)]
        if not recs:
            continue
        names = list(recs[0]["weights"])
        out[method] = {n: {**{k: mean([(r.get(k) or {}).get(n) for r in recs]) for k in keys},
                           "first": round(float(recs[0]["weights"][n]), 6),
                           "last": round(float(recs[-1]["weights"][n]), 6)} for n in names}
    return out


def backfill(args, stored: dict) -> None:
    """Cells stored before a field of theirs existed get it from their run folders (when these are here)."""
    for key, cell in stored["cells"].items():
        scenario, seed = key.split("/")
        folder = cell_dir(args, scenario, int(seed))
        if "trajectories" not in cell and folder.is_dir():
            cell["trajectories"] = trajectories(folder, int(seed))


def arm_weights(cell: Path, names: list[str], data: list[str]) -> dict:
    """The sampling weights each arm that trained its own model used (Inf-DDS: its mean policy over the run), from
    its weights.json."""
    out = {}
    for arm in ARMS:
        path = cell / "arms" / arm.replace(":", "-") / "weights.json"
        if path.is_file():
            w = json.loads(path.read_text(encoding="utf-8"))
            values = w.get("mean_weights") or w.get("weights")
            out[arm] = {n: round(float(x), 6) for n, x in zip(w["collections"], values)}
    return out


# ------------------------------------------------------------------------------------------------ the results
def compact(test: dict) -> dict:
    """Per-query test scores as lists aligned with one sorted list of query ids per dataset (4 decimals)."""
    any_arm = next(iter(test.values()))
    queries = {d: sorted(qs) for d, qs in any_arm.items()}
    return {"queries": queries, "scores": {a: {d: [round(by[d][q], 4) for q in queries[d]] for d in queries}
                                           for a, by in test.items()}}


def load_results(path: Path) -> dict:
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return {"cells": {}}


def save_results(path: Path, stored: dict, *, poll_s: float = 1.0) -> None:
    """Write ``stored`` to ``path`` with the cells (and pooled audits) another process wrote there meanwhile
    (processes given other ``--scenarios`` or ``--seeds`` share one ``--out``: each adds its own), under
    ``path``'s lock."""
    from drmix.io.atomic import atomic_write_json
    from drmix.lock import LockHeld, holding

    while True:
        try:
            with holding(path.parent / f".{path.name}.lock"):
                others = load_results(path)
                stored["cells"] = {**others["cells"], **stored["cells"]}
                if others.get("pooled") or stored.get("pooled"):
                    stored["pooled"] = {**others.get("pooled", {}), **stored.get("pooled", {})}
                atomic_write_json(path, stored, indent=None)
                return
        except LockHeld:
            time.sleep(poll_s)


# ------------------------------------------------------------------------------------------------ the report
from stress_report import report  # noqa: E402


def eval_passages(data: Path, splits: dict[str, str], max_queries: int | None, max_docs: int | None) -> int:
    """Queries and documents one model encodes on the targets' ``splits`` at these caps (the evaluation's own
    seeded sample)."""
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample

    total = 0
    for t, split in splits.items():
        try:
            ds = subsample(load_beir(data / t, split), max_queries=max_queries, max_docs=max_docs, seed=0)
        except Exception:  # noqa: BLE001 - without the data the estimate counts a BEIR-sized set
            total += 1000 + (max_docs or 5000)
            continue
        total += len(ds.queries) + len(ds.corpus)
    return total


def estimate(args) -> tuple[float, list[str]]:
    """Seconds of one cell (GPU: device time by _lease.py's model; cpu / medium: core time at
    :data:`CPU_RATES`) for each scenario, and the lines to print."""
    from _lease import ENCODE_PASSAGES_PER_S, RUN_OVERHEAD_S, START_S, TRAIN_SAMPLES_PER_S

    gpu = args.preset == "gpu"
    scale = (args.query_len + 2 * args.doc_len) / (8 + 2 * 24)        # token count against the measured 8/24
    ex_s, enc_s, run_s = ((TRAIN_SAMPLES_PER_S, ENCODE_PASSAGES_PER_S, RUN_OVERHEAD_S) if gpu
                          else (CPU_RATES[0] / scale, CPU_RATES[1] / scale, CPU_RATES[2]))
    per = {}
    dev_p = eval_passages(args.data, DEV_SPLITS, args.dev_queries, args.dev_docs)
    test_p = eval_passages(args.data, {t: "test" for t in TARGETS}, args.test_queries, args.test_docs)
    b, s = args.batch_size, args.steps
    for scenario in args.scenarios:
        k = 6 + (scenario in BAD)
        examples = (1 + k) * s * b                                              # the audit's whole run and k LOO
        examples += args.probe_points * (k * args.probe_draws * b * 1.67 + 2 * b * 1.33)
        examples += 3 * args.stage1_steps * args.stage1_batch_size * 4.5 * 1.33     # 7 negatives + reference
        examples += 6 * s * b                                                   # size, temperature, 4 transfers
        updates = max(0, (s - args.infdds["warmup_steps"]) // args.infdds["update_every"] + 1)
        examples += s * b + updates * args.infdds["subset_size"] * b * 1.67      # Inf-DDS and its look-aheads
        runs = (1 + k) + 3 + 7
        passages = (1 + k + 8) * dev_p + 10 * test_p
        per[scenario] = (0 if not gpu else START_S) + examples / ex_s + passages / enc_s + runs * run_s
    total = sum(per.values()) * len(args.seeds)
    unit = "device time on one H200" if gpu else "core time (one CPU core)"
    lines = [f"estimated {unit} of one seed: " + ", ".join(f"{sc} {v / 60:.1f} min" for sc, v in per.items())
             + (" (each fits one 10-minute command)" if gpu and max(per.values()) <= 600 else "")]
    lines.append(f"{len(args.scenarios)} scenario(s) x {len(args.seeds)} seed(s): {total / 3600:.2f} h of {unit}"
                 + ("; run one scenario and seed a command (--scenarios S --seeds N), a 15-minute lease holds one"
                    if gpu else f" (rates of CPU_RATES; wall time on a shared machine is longer)"))
    return total, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="shared data (read-only)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/drmix-stress"))
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the preset's")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--estimate", action="store_true", help="print the estimated time and exit")
    ap.add_argument("--report-only", action="store_true", help="train nothing: print the table of OUT/results.json")
    ap.add_argument("--store", type=Path, default=None, help="also copy OUT/results.json here (a test fixture)")
    args = ap.parse_args(argv)
    for k, v in PRESETS[args.preset].items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "accelerate", "filelock",
                  "drmix.train.trainer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.data = args.data.resolve()
    if args.estimate or (args.preset == "gpu" and not args.report_only):
        for line in estimate(args)[1]:
            print(line, flush=True)
        if args.estimate:
            return 0
    results_path = args.out / "results.json"
    stored = load_results(results_path)
    if not args.report_only:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        import datasets

        datasets.disable_progress_bars()
        from _models import truncated_minilm

        args.out.mkdir(parents=True, exist_ok=True)
        args.model = truncated_minilm(args.model_layers, args.out)
        paths, dev = build_data(args), dev_sets(args)
        stored.update(preset=args.preset, settings={k: PRESETS[args.preset][k] for k in PRESETS[args.preset]
                                                    if k != "seeds"})
        backfill(args, stored)
        for seed in args.seeds:                     # seed-major: a run cut short still has every scenario
            for scenario in args.scenarios:
                key = f"{scenario}/{seed}"
                if key in stored["cells"]:
                    continue
                log.info("cell %s", key)
                cell = run_cell(args, scenario, seed, paths, dev)
                stored["cells"][key] = {**{k: v for k, v in cell.items() if k != "test"}, "test": compact(cell["test"])}
                save_results(results_path, stored)
        for scenario in args.scenarios:                 # every seed of a scenario in: its audit over all of them
            seeds = poolable(args, stored, scenario)
            if seeds:
                log.info("the audit of %s over seeds %s", scenario, seeds)
                pooled = pooled_audit(args, scenario, seeds, paths, dev)
                queries = {s: stored["cells"][f"{scenario}/{s}"]["test"]["queries"] for s in seeds}
                stored.setdefault("pooled", {})[scenario] = {**pooled, "test": {
                    str(s): {d: [round(pooled["test"][s][d][q], 4) for q in queries[s][d]] for d in queries[s]}
                    for s in seeds}}
                save_results(results_path, stored)
    if not stored["cells"]:
        print("no finished cell in", args.out)
        return 1
    text = report(stored)
    from drmix.io.atomic import atomic_write_text

    atomic_write_text(args.out / "report.md", text)
    if args.store:
        from drmix.io.atomic import atomic_write_json

        atomic_write_json(args.store, stored, indent=None)
    print(text, end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
