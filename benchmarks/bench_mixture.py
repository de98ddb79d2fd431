"""Learned mixtures on real collections, with seeds and significance: do they beat uniform sampling?

Question: on leave-one-out targets (train on every collection of ``build_collections.py`` except the
target, evaluate zero-shot on the target's BEIR test split), does any learned mixture beat plain uniform
sampling by more than seed noise?

Arms (all fine-tune all-MiniLM-L6-v2 with task-homogeneous batches and in-batch negatives):

* ``uniform`` -- stage 0 of the tDRO pipeline; the seed-42 model is also the frozen reference of stage 1;
* ``size``, ``temperature`` (tau = 2) -- static mixtures;
* ``tdro:top:0.7``, ``tdro:reweight``, ``tdro:loss`` -- tDRO stage-1 weights transferred three ways;
* ``doremi:reweight``, ``groupdro:reweight`` -- the DRO baselines' weights;
* ``infdds``, ``multidds`` -- online policies rewarded on the target's *dev* split (NFCorpus dev; for
  SciFact, which has no dev split, its train queries, which no training collection of that target uses);
* ``tdro:dev`` -- tDRO with the transfer chosen on that dev split: top-70% and reweight are trained with
  ``--stage1-seed``, scored on the dev split, and the better one is trained with the other seeds;
* stage-1 settings (only when named): ``<strategy>@<setting>`` in an arm runs that strategy's stage 1 in another
  setting (:data:`STAGE1_SETTINGS`): ``tdro@prev:top:0.7`` etc. is drmix's earlier stage 1 (one hard negative at
  temperature 0.05, examples without negatives given random same-collection positives), ``tdro@t05`` the authors'
  seven mined negatives at temperature 0.05; a bare ``tdro`` is drmix's default, the authors' setting (seven
  mined hard negatives, temperature 0.002). ``tdro@prev:dev`` is the dev-selected transfer of the earlier
  setting, ``tdro:dev-temperature`` chooses among both temperatures and both transfers on the dev split.
  ``--pair A=B`` adds arm A against arm B, paired over queries, to the report;
* ``coco`` (only when named) -- COCO pretraining on the target's corpus (no labels), then the ``uniform``
  fine-tuning: COCO -> fine-tune vs fine-tune; ``idro`` (only when named) -- iDRO fine-tuning vs uniform.

Seeds: every arm is trained with each seed of ``--seeds`` (stage 0 and stage 2 and the online policies).
Stage 1 (learning the tDRO / DoReMi / GroupDRO weights) runs once per target with the first seed and its
weights are transferred with every seed (the preset's budget; the seed-to-seed spread therefore does not
include stage 1's).

Reported per target and on the average over targets: the mean nDCG@10 over seeds, a 95% interval over
seeds (Student's t, n-1 degrees of freedom), and paired tests over test queries against uniform (each
query's score averaged over the seeds first): Student's paired t-test and Fisher's randomisation test
(:mod:`drmix.evaluation.compare`). ``*`` marks p < 0.05 in both.

Presets (``--preset``; explicit options override them):

* ``cpu`` -- fits 2 CPU cores shared with other work in about an hour (one process per target):
  8 steps at batch 4 and learning rate 1e-4 (query/doc 24/48 tokens), stage 1 4 steps at batch 11 (one
  example of each of the 11 training collections), Inf-DDS / MultiDDS policy updates at steps 3 and 6
  over a random subset of 3 collections (dev batch 8), test sets subsampled to 50 queries (SciFact) /
  20 queries (NFCorpus) with every judged document plus random others up to 150. At this scale the
  models move little from the pretrained one: it checks the
  machinery and bounds effects, it cannot show the paper's.
* ``medium`` -- the first CPU read where models move: all-MiniLM-L6-v2 cut to its first layer
  (benchmarks/_models.py), 300 steps at batch 32, query/document 8/16 tokens, in-batch negatives, LOO
  NFCorpus only (it has a dev split), arms uniform, tDRO top-70% / reweight / dev-selected, Inf-DDS, COCO ->
  fine-tune; stage 1 100 steps at batch 33; test 150 queries with every judged document plus random others up to
  1,000. Sized for 60 minutes on two idle cores with several processes sharing one ``loo-<target>``.
* ``gpu`` -- one 10-minute command per slice of arms (docs/benchmarks.md, "effect suite"): 500 steps at batch 64
  (64/256 tokens), stage 1 300 steps at batch 96, the Inf-DDS paper's schedule (warm-up 50, update every 50),
  full test sets. It prints its estimated device time first; ``--estimate`` prints only that.

Several processes may share one target's models: give each its own ``--work`` whose ``loo-<target>`` is a link
to the first's; a model another live process is training (``<model dir>.lock``) is skipped and picked up when
it is done, so N processes split the arms and seeds between them; ``--report-only --merge`` joins their results.

    for t in scifact nfcorpus; do OMP_NUM_THREADS=1 PYTHONPATH=src nohup nice -n 5 python \\
        benchmarks/bench_mixture.py --preset cpu --data ../shared/data --targets $t --work /tmp/mix-$t \\
        > /tmp/mix-$t.log 2>&1 & done; wait
    python benchmarks/bench_mixture.py --report-only --work /tmp/mix-scifact --merge /tmp/mix-nfcorpus

``--negatives mined`` replaces every training collection's TF-IDF hard negative with one mined by
``drmix mine``'s library function and defaults (the reference model all-MiniLM-L6-v2 over the collection's
own documents, positives skipped, ranks 1:30, the positive-aware filter at 0.95), cached under
``--mined-dir`` (default ``WORK/collections-mined``; processes may share it) so every seed and arm trains on
the same file. Give it its own ``--work`` and compare each arm with the same arm of a TF-IDF run:

    for t in scifact nfcorpus; do OMP_NUM_THREADS=1 PYTHONPATH=src nohup nice -n 5 python \\
        benchmarks/bench_mixture.py --preset cpu --data ../shared/data --targets $t --work /tmp/mixm-$t \\
        --negatives mined --mined-dir /tmp/mixm-mined > /tmp/mixm-$t.log 2>&1 & done; wait
    python benchmarks/bench_mixture.py --report-only --negatives mined --work /tmp/mixm-scifact \\
        --merge /tmp/mixm-nfcorpus --versus /tmp/mix-scifact /tmp/mix-nfcorpus

(``--seeds`` splits one target's seeds over processes: give each its own ``--work`` whose
``loo-<target>`` links ``uniform-s<first seed>`` and ``stage1-*`` of the first, then ``--merge`` them all;
with ``--seeds 44`` alone the process trains ``uniform-s44`` as its stage 0.)
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import _common  # noqa: E402,F401  (offline environment)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_collections import DEFAULT_DATA, build_all  # noqa: E402

from _common import dataset_key, keyed_read, keyed_write, reusable  # noqa: E402
from drmix.outputs import run_finished  # noqa: E402
from drmix.evaluation.significance import t_interval  # noqa: E402
from drmix.lock import LockHeld as Busy, holding  # noqa: E402

log = logging.getLogger("bench_mixture")
TARGETS = ("scifact", "nfcorpus")
STAGE1 = ("tdro", "doremi", "groupdro")
TRANSFER_ARMS = [("tdro", "top:0.7"), ("tdro", "reweight"), ("tdro", "loss"), ("doremi", "reweight"),
                 ("groupdro", "reweight")]
ARMS = (["uniform", "size", "temperature"] + [f"{s}:{t}" for s, t in TRANSFER_ARMS] + ["tdro:dev", "infdds",
                                                                                       "multidds"])
EXTRA_ARMS = ["coco", "idro"]  # run only when named (--arms or the preset)
DOCS = {"scifact": 5183, "nfcorpus": 3633}  # full test corpora (device-time estimates)
INFLUENCE_FACTOR = 1.5  # Inf-DDS/MultiDDS: the look-ahead gradients of each update, over the run (estimate)

PRESETS = {
    "cpu": dict(steps=8, batch_size=4, stage1_steps=4, stage1_batch_size=11, lr=1e-4, query_len=24, doc_len=48,
                test_queries={"scifact": 50, "nfcorpus": 20}, test_docs=150, max_per_collection=1500,
                infdds={"warmup_steps": 2, "update_every": 3, "subset_size": 3, "dev_batch_size": 8},
                seeds=[42, 43, 44]),
    # the first read where models move on CPU: 300 steps at batch 32 of a 1-layer MiniLM, short lengths,
    # in-batch negatives, one target with a dev split (NFCorpus), tDRO's transfer chosen on that dev split
    "medium": dict(steps=300, batch_size=32, stage1_steps=100, stage1_batch_size=33, lr=5e-5, query_len=8,
                   doc_len=16, test_queries={"nfcorpus": 150}, test_docs=1000, max_per_collection=1500,
                   infdds={"warmup_steps": 50, "update_every": 50, "subset_size": 4, "dev_batch_size": 16},
                   seeds=[42, 43, 44], negatives_per_query=0, model_layers=1, targets=["nfcorpus"],
                   arms=["uniform", "tdro:top:0.7", "tdro:reweight", "infdds", "coco", "tdro:dev"],
                   dev_queries=100, dev_docs=800,
                   coco=dict(max_steps=100, batch_size=32, learning_rate=5e-5, max_documents=300,
                             span_max_length=16)),
    "gpu": dict(steps=500, batch_size=64, stage1_steps=300, stage1_batch_size=96, lr=2e-5, query_len=64,
                doc_len=256, test_queries={}, test_docs=None, max_per_collection=20000,
                infdds={"warmup_steps": 50, "update_every": 50}, seeds=[42, 43, 44],
                coco=dict(max_steps=500, batch_size=64, learning_rate=1e-4, span_max_length=128,
                          mixed_precision="bf16"),
                idro=dict(clusters=50, refresh_every=100)),
}
# options a preset may leave out (their defaults)
OPTIONAL = dict(negatives_per_query=1, model_layers=None, targets=list(TARGETS), arms=None, dev_queries=200,
                dev_docs=1500, coco=dict(max_steps=2000, batch_size=256, learning_rate=1e-4, span_max_length=128),
                idro=dict(clusters=8, refresh_every=3))
TDRO_TRANSFERS = ("top:0.7", "reweight")     # the candidates of the dev-selected arm ``tdro:dev``
#: stage-1 settings of a strategy written ``<strategy>@<setting>`` in an arm (``tdro@prev:top:0.7``): the
#: training-field overrides of stage 1 and the rule for examples with too few hard negatives. Without ``@`` a
#: strategy runs drmix's default stage 1, the authors' setting (7 mined hard negatives, temperature 0.002).
STAGE1_SETTINGS = {
    "": ({}, "mine"),
    "prev": ({"num_negatives": 1, "temperature": 0.05}, "random"),   # drmix's earlier stage 1
    "t05": ({"temperature": 0.05}, "mine"),                         # the authors' negatives, fine-tuning temperature
}
#: dev-selected arms: candidates (stage-1 strategy x transfer) chosen among on the target's dev split
DEV_ARMS = {"tdro:dev": ("tdro",), "tdro@prev:dev": ("tdro@prev",), "tdro:dev-temperature": ("tdro", "tdro@t05")}
#: the settings every arm's models and scores are made with, and those only some arms use: the results of one
#: ``--work`` (``results.json``) are reused, and merged with others, only where these are the same
SETTINGS = ("steps", "batch_size", "lr", "query_len", "doc_len", "negatives_per_query", "model_layers",
            "max_per_collection", "test_queries", "test_docs", "negatives")
ARM_SETTINGS = {"stage1": ("stage1_steps", "stage1_batch_size", "stage1_seed"), "infdds": ("infdds",),
                "multidds": ("infdds",), "coco": ("coco",), "idro": ("idro",), "dev": ("dev_queries", "dev_docs")}


def stage1_setting(strategy: str) -> tuple[str, dict, str]:
    """``tdro@prev`` -> ("tdro", overrides, negatives rule); unknown settings are an error."""
    base, _, setting = strategy.partition("@")
    if setting not in STAGE1_SETTINGS:
        raise SystemExit(f"unknown stage-1 setting {setting!r} in {strategy!r}: use one of "
                         f"{', '.join(k for k in STAGE1_SETTINGS if k)}")
    overrides, fill = STAGE1_SETTINGS[setting]
    return base, overrides, fill


def dev_dir(args, target: str) -> tuple[Path, str]:
    """The target's dev split: NFCorpus dev; SciFact train queries (no training collection uses them here)."""
    src = args.data / target
    if (src / "qrels" / "dev.tsv").exists():
        return src, "dev"
    return src, "train"


def mined_collections(collections: Path, names: list[str], cache: Path, load_model=None, *,
                      poll_s: float = 5.0) -> dict[str, dict]:
    """``cache/<name>.jsonl``: each collection with its hard negatives replaced by retriever-mined ones.

    Mining is :func:`drmix.augment.mine.mine_collection` with the defaults of ``drmix mine`` (the reference
    model all-MiniLM-L6-v2, ranks 1:30 of the collection's own documents with its positives removed, the
    positive-aware filter at 0.95 of the lowest positive score, one negative per query, the top one).
    ``cache/<name>.mined.json`` records the BLAKE2b digest of the source file and the miner's counts; a
    cached file is reused only while that digest matches. Processes sharing ``cache`` (one per target)
    split the work: a collection another live process is mining (``<name>.lock`` with its pid) is skipped
    and waited for at the end. ``load_model`` (tests) returns the encoder; default: the reference model.
    """
    from dataclasses import asdict

    from drmix.augment.mine import mine_collection
    from drmix.fingerprint import file_digest
    from drmix.io.atomic import atomic_write_json

    cache.mkdir(parents=True, exist_ok=True)
    model = None
    done: dict[str, dict] = {}

    def fresh(name: str) -> dict | None:
        meta = cache / f"{name}.mined.json"
        if not (meta.exists() and (cache / f"{name}.jsonl").exists()):
            return None
        m = json.loads(meta.read_text())
        return m if m.get("source_digest") == file_digest(collections / f"{name}.jsonl") else None

    pending = list(names)
    while pending:
        waiting = []
        for name in pending:
            if (m := fresh(name)) is not None:
                done[name] = m
                continue
            try:
                with holding(cache / f"{name}.lock"):
                    if model is None:
                        from drmix.model.encoder import load_encoder

                        model = load_model() if load_model is not None else load_encoder(None)
                    t0 = time.perf_counter()
                    stats = mine_collection(collections / f"{name}.jsonl", cache / f"{name}.jsonl", model,
                                            model_name="all-MiniLM-L6-v2")
                    m = {"source_digest": file_digest(collections / f"{name}.jsonl"), **asdict(stats),
                         "seconds": round(time.perf_counter() - t0, 1)}
                    atomic_write_json(cache / f"{name}.mined.json", m)
                    log.info("mined %s: %s", name, m)
                    done[name] = m
            except Busy:  # another live process is mining it: wait for it at the end
                waiting.append(name)
        if waiting:
            time.sleep(poll_s)
        pending = waiting
    return done


def base_values(args, data: list[str], out: Path, seed: int) -> dict:
    return dict(model=args.model, data=data, output_dir=str(out), max_steps=args.steps, batch_size=args.batch_size,
                learning_rate=args.lr, warmup_ratio=0.1, query_max_length=args.query_len,
                doc_max_length=args.doc_len, num_negatives=args.negatives_per_query, seed=seed, log_every=5, save_every=100000,
                show_progress=False, device=args.device, resume=True,
                tokenize_num_proc=min(8, os.cpu_count() or 1))


def _locked(out: Path):
    """``with _locked(out):`` holds ``<out>.lock`` (:func:`drmix.lock.holding`) or raises :class:`Busy`
    (:class:`drmix.lock.LockHeld`: another live process is training this model; come back to it later)."""
    return holding(out.parent / f"{out.name}.lock")


def _stage1_finished(out: Path) -> bool:
    return (out / "weights.json").exists() and run_finished(out)


def train_arm(args, arm: str, prep: "Prep", seed: int, target: str) -> Path:
    """Train (or reuse) ``arm`` with ``seed``; :class:`Busy` while another process trains the same model."""
    from drmix.config import TrainConfig
    from drmix.api import train

    if arm == "uniform" and seed == args.stage1_seed:
        return prep.reference()
    out = prep.root / f"{arm.replace(':', '-')}-s{seed}"
    v = base_values(args, prep.data, out, seed)
    v.update(batching="homogeneous", mixture="uniform", strategy="static")
    if arm in ("size", "temperature"):
        v.update(mixture=arm, mixture_temperature=2.0)
    elif arm in ("infdds", "multidds"):
        d, split = dev_dir(args, target)
        v.update(strategy=arm, dev=[str(d)], dev_split=split, infdds=dict(args.infdds))
    elif arm == "coco":
        v.update(model=str(coco_model(args, prep, seed, target)))
    elif arm == "idro":
        v.update(strategy="idro", idro=dict(args.idro))
    elif ":" in arm:
        strat, transfer = arm.split(":", 1)
        v.update(transfer=transfer, weights_file=str(prep.weights(strat)))
    cfg = TrainConfig.model_validate(v)
    if reusable(out, cfg):               # made with these settings (another set of settings stops the run)
        return out / "model"
    with _locked(out):
        if not reusable(out, cfg):
            t0 = time.perf_counter()
            train(cfg)
            log.info("%s %s seed %d trained in %.0f s", target, arm, seed, time.perf_counter() - t0)
    return out / "model"


def coco_model(args, prep: "Prep", seed: int, target: str) -> Path:
    """COCO (continuous contrastive pretraining on the target's corpus, no labels; Yu et al., EMNLP 2022,
    arXiv:2210.15212) from the starting model with ``seed``: the start of the ``coco`` arm, which is then
    fine-tuned exactly like ``uniform`` (so ``coco`` vs ``uniform`` is COCO -> fine-tune vs fine-tune)."""
    from drmix.pretrain.runner import CocoConfig, pretrain_coco

    out = prep.root / f"coco-pretrain-s{seed}"
    cfg = CocoConfig(corpus=[str(args.data / target)], output_dir=str(out), seed=seed, model=args.model,
                     show_progress=False, resume=True, save_every=100000, log_every=5, device=args.device,
                     num_proc=min(8, os.cpu_count() or 1), **args.coco)
    if not reusable(out, cfg, record="coco.yaml"):
        with _locked(out):
            if not reusable(out, cfg, record="coco.yaml"):
                t0 = time.perf_counter()
                pretrain_coco(cfg)
                log.info("%s COCO seed %d in %.0f s", target, seed, time.perf_counter() - t0)
    return out / "model"


def estimate(args):
    """Device time of this command (:mod:`_lease`), assuming nothing is trained yet in ``--work``."""
    from _lease import Estimate

    est = Estimate()
    sample = args.steps * args.batch_size
    for target in args.targets:
        docs = args.test_docs or DOCS.get(target, 5000)
        needs_ref = (any(":" in a and not a.startswith("groupdro") for a in args.arms)
                     or ("uniform" in args.arms and args.stage1_seed in args.seeds))
        if needs_ref:
            est.train(f"{target} stage 0", sample)
        strategies = {a.split(":", 1)[0] for a in args.arms if ":" in a} | ({"tdro"} if "tdro:dev" in args.arms else set())
        for strat in sorted(s for s in strategies if s in STAGE1):
            est.train(f"{target} stage 1 {strat}", args.stage1_steps * args.stage1_batch_size * 4 / 3)  # + reference forward
        trained: set[tuple[str, int]] = set()
        encoded: set[tuple[str, int]] = set()
        for seed in args.seeds:
            for arm in args.arms:
                if arm == "uniform" and seed == args.stage1_seed:
                    est.encode(docs)
                    continue
                if arm == "tdro:dev":
                    wanted = [f"tdro:{t}" for t in TDRO_TRANSFERS] if seed == args.stage1_seed else ["tdro:top:0.7"]
                    if seed == args.stage1_seed:
                        est.encode(2 * DOCS.get(target, 5000))  # the dev evaluations
                else:
                    wanted = [arm]
                for w in wanted:
                    if (w, seed) in trained:
                        continue
                    trained.add((w, seed))
                    factor = INFLUENCE_FACTOR if w in ("infdds", "multidds") else 1.0
                    if w == "coco":
                        est.train(f"{target} coco pretraining", args.coco["max_steps"] * args.coco["batch_size"] / 2)
                    est.train(f"{target} {w}", sample * factor)
                scored = wanted[0] if arm == "tdro:dev" else arm  # test scores are cached per model
                if (scored, seed) not in encoded:
                    encoded.add((scored, seed))
                    est.encode(docs)
    return est


def evaluation_key(args, model_dir: Path | str | None, dataset) -> dict:
    """Everything a cached score depends on: the model (its path and a fingerprint of its files), the evaluation
    set (folder, split and the ids its caps and seed kept) and the length it was encoded at (as
    :mod:`drmix.evaluation.suite` keys its caches)."""
    from drmix.evaluation.suite import model_stamp

    return {"model": str(model_dir), "model_files": model_stamp(model_dir), **dataset_key(dataset),
            "max_length": args.doc_len, "metric": "ndcg@10"}


def evaluate(args, model_dir: Path | str | None, dataset, cache: Path) -> dict[str, float]:
    """Per-query nDCG@10 of a model on ``dataset`` (the subsampled test or dev set), cached next to the model
    under :func:`evaluation_key`: a score made with another model, set or length is computed again."""
    from drmix.evaluation.evaluate import evaluate_dataset
    from drmix.model.encoder import load_encoder

    key = evaluation_key(args, model_dir, dataset)
    if (scores := keyed_read(cache, key)) is not None:
        return scores
    with _locked(cache):
        if (scores := keyed_read(cache, key)) is not None:
            return scores
        model = load_encoder(None if model_dir is None else str(model_dir))
        per_query: dict = {}
        evaluate_dataset(model, dataset, metrics=("ndcg@10",), max_length=args.doc_len, per_query=per_query)
        scores = {q: v["ndcg@10"] for q, v in per_query.items()}
        keyed_write(cache, key, scores)
    return scores


class Prep:
    """One target's shared inputs: training collections, test set, and -- built on first use, once, by
    whichever process gets there first -- stage 0 (the uniform model of ``--stage1-seed``, the frozen
    reference) and stage 1's learned weights."""

    def __init__(self, args, collections: Path, target: str, results: dict) -> None:
        from drmix.data.beir import load_beir
        from drmix.evaluation.evaluate import subsample

        self.args, self.target = args, target
        self.root = args.work / f"loo-{target}"
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = sorted(str(p) for p in collections.glob("*.jsonl") if p.stem != target)
        self.test = subsample(load_beir(args.data / target, "test"), max_queries=args.test_queries.get(target),
                              max_docs=args.test_docs, seed=0)
        log.info("%s: %d training collections; test %d queries, %d documents", target, len(self.data),
                 len(self.test.queries), len(self.test.corpus))
        self.tr = results.setdefault(target, {"arms": {}, "weights": {}, "seconds": {}})

    def reference(self) -> Path:
        from drmix.config import TrainConfig
        from drmix.api import train

        out = self.root / f"uniform-s{self.args.stage1_seed}"
        v = base_values(self.args, self.data, out, self.args.stage1_seed)
        v.update(batching="homogeneous", mixture="uniform", strategy="static")
        cfg = TrainConfig.model_validate(v)
        if not reusable(out, cfg):
            with _locked(out):
                if not reusable(out, cfg):
                    t0 = time.perf_counter()
                    train(cfg)
                    self.tr["seconds"]["stage0"] = round(time.perf_counter() - t0, 1)
        return out / "model"

    def stage1_data(self, num_negatives: int) -> list[str]:
        """The training collections topped up to ``num_negatives`` hard negatives by drmix's miner (what stage 1
        does with ``negatives: mine``), mined once per target and shared by every stage-1 setting that mines:
        ``loo-<target>/stage1-collections/`` with ``negatives.json`` (the counts)."""
        from drmix.data.collections import load_collections
        from drmix.io.atomic import atomic_write_json, write_jsonl_atomic
        from drmix.recipes.optimize import mine_missing_negatives

        out = self.root / f"stage1-collections-{num_negatives}"
        done = out / "negatives.json"
        if not done.exists():
            with _locked(out):
                if not done.exists():
                    t0 = time.perf_counter()
                    cols = load_collections(self.data, seed=self.args.stage1_seed)
                    report = mine_missing_negatives(cols, num_negatives, model=self.args.miner)
                    out.mkdir(parents=True, exist_ok=True)
                    for c in cols:
                        write_jsonl_atomic(out / f"{c.name}.jsonl",
                                           [{"query": q, "positives": pos, "negatives": neg} for q, pos, neg in
                                            zip(c.dataset["query"], c.dataset["positives"], c.dataset["negatives"])])
                    atomic_write_json(done, {"num_negatives": num_negatives, "rule": "mine", "collections": report,
                                             "seconds": round(time.perf_counter() - t0, 1)})
                    log.info("stage-1 collections mined in %.0f s: %s", time.perf_counter() - t0, report)
        return sorted(str(out / f"{Path(d).stem}.jsonl") for d in self.data)

    def weights(self, strategy: str) -> Path:
        from drmix.config import TrainConfig
        from drmix.recipes.optimize import optimize_weights, stage1_config

        args = self.args
        name, overrides, fill = stage1_setting(strategy)
        out = self.root / f"stage1-{strategy.replace('@', '-')}"
        reference = None if name == "groupdro" else str(self.reference())
        base = TrainConfig.model_validate(base_values(args, self.data, out, args.stage1_seed))
        cfg = stage1_config(base, strategy=name, reference=reference, output_dir=out,
                            overrides={"max_steps": args.stage1_steps, "batch_size": args.stage1_batch_size,
                                       **overrides})
        if fill == "mine":      # mined once for every setting that mines (the same negatives), then used as given
            cfg = cfg.replace(data=self.stage1_data(cfg.contrastive.num_negatives))
            fill = "off"
        if not reusable(out, cfg, finished=_stage1_finished):
            with _locked(out):
                if not reusable(out, cfg, finished=_stage1_finished):
                    t0 = time.perf_counter()
                    optimize_weights(cfg, fill_negatives=fill)
                    self.tr["seconds"][f"stage1-{strategy}"] = round(time.perf_counter() - t0, 1)
                    log.info("stage 1 %s in %.0f s", strategy, time.perf_counter() - t0)
        learned = json.loads((out / "weights.json").read_text())
        self.tr["weights"][strategy] = {"weights": dict(zip(learned["collections"], learned["weights"])),
                                        "top70": learned.get("top", {}).get("70", [])}
        if stage1_setting(strategy)[2] == "mine":    # how many hard negatives stage 1's collections got mined
            k = cfg.contrastive.num_negatives
            mined = json.loads((self.root / f"stage1-collections-{k}" / "negatives.json").read_text())["collections"]
            self.tr["weights"][strategy]["mined"] = {n: c["mined"] for n, c in mined.items()}
        return out / "weights.json"


def prepare_target(args, collections: Path, target: str, results: dict) -> Prep:
    return Prep(args, collections, target, results)


def select_tdro(args, target: str, prep: Prep, results: dict, arm: str = "tdro:dev") -> str:
    """The dev-selected tDRO model of ``arm`` (:data:`DEV_ARMS`): each candidate -- a stage-1 setting of
    ``DEV_ARMS[arm]`` with each of ``TDRO_TRANSFERS`` -- trained with ``--stage1-seed`` and scored on the target's
    dev split (:func:`dev_dir`, subsampled to ``dev_queries``/``dev_docs``); the better mean nDCG@10 wins (ties:
    the first). Test scores are never looked at. Returns the chosen arm (``tdro:reweight``, ...); recorded in
    ``results[target]["selections"][arm]`` and in ``loo-<target>/<arm>-selection.json`` (a record: the choice is
    made again from the candidates, which are reused when trained with these settings, and their dev scores,
    cached under :func:`evaluation_key`)."""
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample
    from drmix.io.atomic import atomic_write_json

    tr = results[target]
    chosen_of = tr.setdefault("selections", {})
    if arm == "tdro:dev" and "selection" in tr and arm not in chosen_of:      # results of earlier versions
        chosen_of[arm] = {**tr["selection"], "chosen": f"tdro:{tr['selection']['chosen']}"}
    shared = prep.root / ("tdro-selection.json" if arm == "tdro:dev" else f"{arm.replace(':', '-')}-selection.json")
    if arm in chosen_of:            # this run's results.json (its settings were checked when it was read)
        return chosen_of[arm]["chosen"]
    src, split = dev_dir(args, target)
    dev = subsample(load_beir(src, split), max_queries=args.dev_queries, max_docs=args.dev_docs, seed=0)
    dev_means = {}
    for strategy in DEV_ARMS[arm]:
        for transfer in TDRO_TRANSFERS:
            candidate = f"{strategy}:{transfer}"
            model_dir = train_arm(args, candidate, prep, args.stage1_seed, target)
            scores = evaluate(args, model_dir, dev, model_dir.parent / f"{split}-{target}.json")
            dev_means[candidate] = sum(scores.values()) / len(scores)
    chosen = max(dev_means, key=lambda c: dev_means[c])
    chosen_of[arm] = {"chosen": chosen, "split": split, "dev_ndcg@10": dev_means, "queries": len(dev.queries),
                      "seed": args.stage1_seed}
    atomic_write_json(shared, chosen_of[arm])
    log.info("%s: %s chose %s on %s (%s)", target, arm, chosen, split, dev_means)
    return chosen


def run_arm(args, target: str, prep: Prep, seed: int, arm: str, results: dict) -> None:
    """Train and score one (arm, seed); :class:`Busy` when another process holds a model it needs."""
    tr = results[target]
    t0 = time.perf_counter()
    trained = select_tdro(args, target, prep, results, arm) if arm in DEV_ARMS else arm
    model_dir = train_arm(args, trained, prep, seed, target)
    scores = evaluate(args, model_dir, prep.test, model_dir.parent / f"test-{target}.json")
    tr["arms"].setdefault(arm, {})[str(seed)] = scores
    tr["seconds"].setdefault(f"{arm}-s{seed}", round(time.perf_counter() - t0, 1))
    log.info("%s %s seed %d: nDCG@10 %.4f", target, arm, seed, sum(scores.values()) / len(scores))


def run_all(args, preps: dict, results: dict, save, *, poll_s: float = 10.0) -> None:
    """Every (seed, target, arm), seed-major (a cut-short run still has every target). Processes sharing a
    ``loo-<target>`` folder (``--work`` folders whose ``loo-<target>`` links to one) split the models: one
    that another live process is training is skipped and taken up again once it is done."""
    todo = [(seed, t, arm) for seed in args.seeds for t in args.targets for arm in args.arms]
    if args.order == "reverse":
        todo = todo[::-1]
    failed: list = []
    while todo:
        waiting = []
        for seed, target, arm in todo:
            if arm in results[target]["arms"] and str(seed) in results[target]["arms"][arm]:
                continue
            try:
                run_arm(args, target, preps[target], seed, arm, results)
            except Busy as e:
                log.info("%s %s seed %d: waiting for another process (%s)", target, arm, seed, e)
                waiting.append((seed, target, arm))
                continue
            except Exception:  # noqa: BLE001 - one failed arm must not stop the others; reported at the end
                log.exception("%s %s seed %d failed", target, arm, seed)
                failed.append((seed, target, arm))
                continue
            save()
        if waiting and len(waiting) == len(todo):
            time.sleep(poll_s)
        todo = waiting
    if failed:
        raise SystemExit(f"failed: {failed} (see the log); the other runs are in results.json")


# ------------------------------------------------------------------------------------------------ report

def seed_averaged(results: dict, arm: str, seeds: dict[str, list[str]]) -> dict:
    """``{target: {query: {"ndcg@10": score averaged over seeds[target]}}}`` (queries every seed scored)."""
    pq = {}
    for t, ss in seeds.items():
        runs = [results[t]["arms"][arm][s] for s in ss]
        qids = set.intersection(*(set(r) for r in runs))
        pq[t] = {q: {"ndcg@10": sum(r[q] for r in runs) / len(runs)} for q in sorted(qids)}
    return pq


def versus(results: dict, other: dict, arms: list[str] = ARMS, label: str = "mined",
           other_label: str = "tfidf") -> dict:
    """Each arm of ``results`` against the *same* arm of ``other`` (e.g. mined vs TF-IDF negatives).

    Per arm, targets both runs have, seeds both ran: mean nDCG@10 of each over those seeds, and the paired
    tests over queries (each query's score averaged over the seeds first) of :func:`summarise`, with
    ``other`` as the baseline. ``delta`` > 0: ``results`` is better.
    """
    from drmix.evaluation.compare import Scored, compare

    out: dict = {"label": label, "other": other_label, "arms": {}}
    for arm in arms:
        targets = [t for t in results if t in other and arm in results[t]["arms"] and arm in other[t]["arms"]]
        seeds = {t: sorted(set(results[t]["arms"][arm]) & set(other[t]["arms"][arm])) for t in targets}
        seeds = {t: s for t, s in seeds.items() if s}
        if not seeds:
            continue
        comp = compare([Scored(other_label, seed_averaged(other, arm, seeds)),
                        Scored(label, seed_averaged(results, arm, seeds))],
                       metric="ndcg@10", permutations=10000, seed=0)
        row = {}
        for d in comp.rows[label]:
            key = d.dataset if d.dataset in seeds else "average"
            row[key] = dict(mean=d.value, other_mean=d.baseline, delta=d.delta, low=d.low, high=d.high,
                            t_p=d.t_p, fisher_p=d.fisher_p, significant=comp.significant(d), queries=d.queries,
                            seeds=len(seeds[d.dataset]) if d.dataset in seeds else min(map(len, seeds.values())))
        out["arms"][arm] = row
    out["weights"] = {t: {side: results_of[t]["weights"] for side, results_of in ((label, results), (other_label, other))
                          if results_of[t].get("weights")}
                      for t in results if t in other}
    return out


def versus_report(vs: dict) -> str:
    """Markdown table of :func:`versus`: per target and average, both means, delta with its 95% interval
    over queries and the two p-values."""
    cols: list[str] = []
    for row in vs["arms"].values():
        cols += [c for c in row if c not in cols and c != "average"]
    cols += ["average"] if len(cols) > 1 else []
    a, b = vs["label"], vs["other"]
    lines = ["| arm | " + " | ".join(f"{c}: {a} / {b} | Δ [95% CI over queries] (p t / p rand.)" for c in cols)
             + " |", "|---|" + "---:|---:|" * len(cols)]
    for arm, row in vs["arms"].items():
        cells = []
        for c in cols:
            if c not in row:
                cells += ["—", "—"]
                continue
            r = row[c]
            star = "*" if r["significant"] else ""
            cells += [f"{r['mean']:.4f} / {r['other_mean']:.4f} (n={r['seeds']})",
                      f"{r['delta']:+.4f}{star} [{r['low']:+.4f}, {r['high']:+.4f}] ({r['t_p']:.3f} / "
                      f"{r['fisher_p']:.3f})"]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    sides = [a, b]
    for t, by_side in vs.get("weights", {}).items():
        if not all(s in by_side and "tdro" in by_side[s] for s in sides):
            continue
        strategies = [g for g in STAGE1 if all(g in by_side[s] for s in sides)]
        w = {(g, s): by_side[s][g]["weights"] for g in strategies for s in sides}
        names = sorted(w[("tdro", a)], key=lambda n: -w[("tdro", a)][n])
        lines += ["", f"Learned weights, LOO {t} ({a} / {b}; * = in tDRO's top-70%):", "",
                  "| collection | " + " | ".join(f"{g} {s}" for g in strategies for s in sides) + " |",
                  "|---|" + "---:|" * (len(strategies) * len(sides))]
        for n in names:
            cells = []
            for g in strategies:
                for s in sides:
                    star = "*" if g == "tdro" and n in by_side[s]["tdro"].get("top70", []) else ""
                    cells.append(f"{w[(g, s)].get(n, float('nan')):.4f}{star}")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summarise(results: dict, arms: list[str] = ARMS) -> dict:
    """Per target and average: mean over seeds, 95% interval over seeds, paired tests vs uniform.

    Each arm is paired with uniform over the seeds both have run (a cut-short run may lack some): each
    query's score is averaged over those seeds for both, then compared query by query.
    """
    from drmix.evaluation.compare import Scored, compare

    # the table's columns: the targets with a uniform run; a run without one (an effect-suite slice such as
    # `--arms size temperature doremi:reweight`) reports its arms without a Δ: merge it with the uniform slice
    has_uniform = [t for t in results if "uniform" in results[t]["arms"]]
    targets = has_uniform or list(results)
    out: dict = {"targets": targets, "arms": {}}

    def averaged(arm: str, seeds: dict[str, list[str]]) -> dict:
        return seed_averaged(results, arm, seeds)

    for arm in arms:
        if not all(arm in results[t]["arms"] for t in targets):
            continue
        seeds = {t: sorted(s for s in results[t]["arms"][arm]
                           if not has_uniform or s in results[t]["arms"]["uniform"]) for t in targets}
        if not targets or not all(seeds.values()):
            continue
        means = {t: [sum(r.values()) / len(r) for r in (results[t]["arms"][arm][s] for s in seeds[t])]
                 for t in targets}
        row = {}
        for t in targets:
            m, h = t_interval(means[t])
            row[t] = {"mean": m, "ci": h, "seeds": len(means[t])}
        n_seeds = min(len(v) for v in means.values())
        avg_per_seed = [sum(means[t][i] for t in targets) / len(targets) for i in range(n_seeds)]
        m, h = t_interval(avg_per_seed)
        row["average"] = {"mean": m, "ci": h, "seeds": n_seeds}
        if arm != "uniform" and has_uniform:
            comp = compare([Scored("uniform", averaged("uniform", seeds)), Scored(arm, averaged(arm, seeds))],
                           metric="ndcg@10", permutations=10000, seed=0)
            for d in comp.rows[arm]:
                key = d.dataset if d.dataset in row else "average"
                row[key].update(delta=d.delta, t_p=d.t_p, fisher_p=d.fisher_p, significant=comp.significant(d),
                                queries=d.queries, low=d.low, high=d.high)
        out["arms"][arm] = row
    return out


TARGET_NAMES = {"nfcorpus": "NFCorpus", "scifact": "SciFact"}
TRANSFER_NAMES = {"top:0.7": "top-70%", "reweight": "reweight", "loss": "loss"}
STRATEGY_NAMES = {"tdro": "tDRO", "doremi": "DoReMi", "groupdro": "GroupDRO"}
ARM_NAMES = {"uniform": "uniform", "size": "size-proportional", "temperature": "temperature (τ = 2)", "idro": "iDRO"}


def _signed(x: float) -> str:
    """``+0.0010`` / ``−0.0052`` (a typographic minus, as the docs' tables write it)."""
    return f"{x:+.4f}".replace("-", "−")


def _p2(p: float) -> str:
    """A p-value to two significant digits (``0.011``, ``0.40``, ``3.5e-05``)."""
    return f"{p:#.2g}"


STAGE1_NAMES = {"prev": "earlier stage 1", "t05": "stage-1 temperature 0.05"}


def strategy_name(strategy: str) -> str:
    """``tdro`` -> ``tDRO``; ``tdro@prev`` -> ``tDRO (earlier stage 1)``."""
    base, _, setting = strategy.partition("@")
    name = STRATEGY_NAMES.get(base, base)
    return f"{name} ({STAGE1_NAMES.get(setting, setting)})" if setting else name


def candidate_name(candidate: str) -> str:
    """A dev-selection candidate: ``tdro:top:0.7`` (or, in results of earlier versions, ``top:0.7``) -> ``top-70%``;
    another stage-1 setting keeps its name (``tDRO (stage-1 temperature 0.05) reweight``)."""
    if candidate in TRANSFER_NAMES:
        return TRANSFER_NAMES[candidate]
    strategy, _, transfer = candidate.partition(":")
    name = TRANSFER_NAMES.get(transfer, transfer)
    return name if strategy == "tdro" else f"{strategy_name(strategy)} {name}"


def selection_of(results: dict, target: str, arm: str) -> dict | None:
    """The dev selection of ``arm`` (``selections``; results of earlier versions: ``selection`` of tdro:dev)."""
    tr = results[target]
    sel = tr.get("selections", {}).get(arm)
    return sel if sel is not None or arm != "tdro:dev" else tr.get("selection")


def arm_name(arm: str, target: str, results: dict) -> str:
    """How the seed table names an arm (a dev-selected arm with its choice and the dev scores)."""
    name = TARGET_NAMES.get(target, target)
    if arm in ARM_NAMES:
        return ARM_NAMES[arm]
    if arm in DEV_ARMS:
        strategies = DEV_ARMS[arm]
        head = (f"{strategy_name(strategies[0])}, dev-selected" if len(strategies) == 1 else
                "tDRO, dev-selected over " + " and ".join(strategy_name(x) for x in strategies))
        sel = selection_of(results, target, arm)
        if not sel:
            return head
        chosen, means = sel["chosen"], sel["dev_ndcg@10"]
        if chosen not in means:                   # earlier versions: chosen "reweight", keys "top:0.7"
            chosen = chosen.partition(":")[2] if chosen.partition(":")[2] in means else chosen
        others = ", ".join(f"{means[c]:.4f} for {candidate_name(c)}" for c in means if c != chosen)
        return (f"{head} (chose {candidate_name(chosen)}: {sel['split']} nDCG@10 {means[chosen]:.4f} vs "
                f"{others})")
    if arm in ("infdds", "multidds"):
        dev = "dev" if target != "scifact" else "train queries"
        return f"{'Inf-DDS' if arm == 'infdds' else 'MultiDDS'} (rewarded on {name} {dev})"
    if arm == "coco":
        return f"COCO ({name} corpus, no labels) → fine-tune"
    if ":" not in arm:
        return arm
    strategy, transfer = arm.split(":", 1)
    return f"{strategy_name(strategy)} {TRANSFER_NAMES.get(transfer, transfer)}"


def short_name(arm: str) -> str:
    """An arm's name in running text (the per-seed line)."""
    short = {"tdro:dev": "tDRO dev-selected", "infdds": "Inf-DDS", "multidds": "MultiDDS", "coco": "COCO"}
    if arm in short or arm in ARM_NAMES:
        return short.get(arm) or ARM_NAMES[arm]
    if ":" not in arm or arm in DEV_ARMS:
        return arm
    strategy, transfer = arm.split(":", 1)
    return (TRANSFER_NAMES.get(transfer, transfer) if strategy == "tdro"
            else f"{strategy_name(strategy)} {TRANSFER_NAMES.get(transfer, transfer)}")


def seed_table(summary: dict, results: dict, target: str,
               start_label: str = "the starting model, not fine-tuned") -> str:
    """One target's table as docs/benchmarks.md gives it: per arm the mean nDCG@10 over seeds with its 95%
    interval over seeds; against uniform, Δ with its 95% interval over queries (each query's score averaged
    over the seeds first; bold: p < 0.05 in both tests), the paired t / randomisation p over queries, and the
    seed-paired p (paired t-test over the seeds' means); the starting model's row first; then each arm's
    per-seed means and tDRO's stage-1 weights."""
    from drmix.evaluation.significance import t_test

    tr = results[target]
    lines = ["| model | nDCG@10 (95% CI over seeds) | Δ vs uniform [95% CI over queries] | "
             "p (paired t / randomisation) | seed-paired p |", "|---|---:|---:|---:|---:|"]
    if "start" in tr:
        start = tr["start"]
        lines.append(f"| {start_label} | {sum(start.values()) / len(start):.4f} | | | |")

    def seed_means(arm: str) -> dict[str, float]:
        return {s: sum(r.values()) / len(r) for s, r in tr["arms"][arm].items()}

    per_seed = []
    for arm, row in summary["arms"].items():
        if target not in row:
            continue
        r = row[target]
        cells = [f"{r['mean']:.4f} [{r['mean'] - r['ci']:.4f}, {r['mean'] + r['ci']:.4f}]"]
        if "delta" in r:
            mine, base = seed_means(arm), seed_means("uniform")
            shared = sorted(set(mine) & set(base), key=int)
            seed_p = t_test([mine[s] - base[s] for s in shared])[0]
            delta = f"**{_signed(r['delta'])}**" if r["significant"] else _signed(r["delta"])
            cells += [f"{delta} [{_signed(r['low'])}, {_signed(r['high'])}]",
                      f"{_p2(r['t_p'])} / {_p2(r['fisher_p'])}", _p2(seed_p)]
        else:
            cells += ["—" if arm == "uniform" else "", "", ""]
        line = f"| {arm_name(arm, target, results)} | " + " | ".join(cells) + " |"
        while "|  |" in line:              # an empty cell is "| |"
            line = line.replace("|  |", "| |")
        lines.append(line)
        means = seed_means(arm)
        order = sorted(means, key=int)
        per_seed.append((arm, [means[x] for x in order], order))
    seeds = max((x[2] for x in per_seed), key=len, default=[])
    lines += ["", f"Per-seed nDCG@10 ({' / '.join(seeds)}): "
              + "; ".join(f"{short_name(a)} " + " / ".join(f"{m:.4f}" for m in ms)
                          + ("" if ss == seeds else f" (seeds {' / '.join(ss)})") for a, ms, ss in per_seed) + "."]
    w = tr.get("weights", {}).get("tdro")
    if w:
        lo = min(w["weights"], key=w["weights"].get)
        hi = max(w["weights"], key=w["weights"].get)
        kept = sorted(w["top70"], key=lambda n: -w["weights"][n])
        tail = f"; the top-70% kept {', '.join(kept[:-1])} and {kept[-1]}." if len(kept) > 1 else "."
        lines.append(f"tDRO's stage-1 weights range from {w['weights'][lo]:.4f} ({lo}) to "
                     f"{w['weights'][hi]:.4f} ({hi}){tail}")
    return "\n".join(lines)


def report(summary: dict, results: dict, start_label: str = "the starting model, not fine-tuned") -> str:
    targets = summary["targets"]
    cols = targets + (["average"] if len(targets) > 1 else [])
    lines = ["| arm | " + " | ".join(f"{c} nDCG@10 (95% CI over seeds) | Δ vs uniform (p t / p rand.)" for c in cols)
             + " |", "|---|" + "---:|---:|" * len(cols)]
    for arm, row in summary["arms"].items():
        cells = []
        for c in cols:
            r = row[c]
            cells.append(f"{r['mean']:.4f} ± {r['ci']:.4f} (n={r['seeds']})")
            if "delta" in r:
                star = "*" if r["significant"] else ""
                cells.append(f"{r['delta']:+.4f}{star} ({r['t_p']:.3f} / {r['fisher_p']:.3f})")
            else:
                cells.append("—")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += ["", "Learned weights (stage 1, first seed), collections by tDRO weight; * = in tDRO's top-70%:", ""]
    for t in targets:
        w = results[t]["weights"]
        if "tdro" not in w:
            continue
        names = sorted(w["tdro"]["weights"], key=lambda n: -w["tdro"]["weights"][n])
        learned = [(label, key) for label, key in (("tDRO", "tdro"), ("tDRO@prev", "tdro@prev"),
                                                   ("tDRO@t05", "tdro@t05"), ("DoReMi", "doremi"),
                                                   ("GroupDRO", "groupdro"))
                   if key in w]  # a strategy whose stage 1 did not run gets no column (not a column of nan)
        lines += [f"LOO {t}:", "", "| collection | " + " | ".join(label for label, _ in learned) + " |",
                  "|---|" + "---:|" * len(learned)]
        for n in names:
            star = "*" if n in w["tdro"]["top70"] else ""
            cells = [w[key]["weights"].get(n) for _, key in learned]
            lines.append(f"| {n}{star} | " + " | ".join("–" if c is None else f"{c:.4f}" for c in cells) + " |")
        lines.append("")
        for label, key in learned:
            if "mined" in w[key]:
                lines += [f"{label} stage 1 mined {sum(w[key]['mined'].values())} hard negatives "
                          f"({', '.join(f'{n} {c}' for n, c in sorted(w[key]['mined'].items()))}).", ""]
        for arm, sel in sorted(results[t].get("selections", {}).items()):
            lines += [f"{arm} chose {sel['chosen']} on {sel['split']} ({sel['queries']} queries, seed {sel['seed']}; "
                      + ", ".join(f"{c} {v:.4f}" for c, v in sel["dev_ndcg@10"].items()) + ").", ""]
    for t in targets:
        lines += [f"LOO {t}, every arm against uniform:", "", seed_table(summary, results, t, start_label), ""]
    return "\n".join(lines)


def pair_report(results: dict, pairs: list[str]) -> str:
    """``A=B`` pairs: arm ``A`` against arm ``B`` per target and on average, over the seeds both ran, each query's
    nDCG@10 averaged over those seeds first: means, Δ with its 95% interval over queries, paired t-test and
    Fisher's randomisation test (:mod:`drmix.evaluation.compare`)."""
    from drmix.evaluation.compare import Scored, compare

    lines = ["| arm | versus | target | queries | seeds | nDCG@10 | versus nDCG@10 | Δ [95% CI over queries] "
             "| p (t) | p (rand.) |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for pair in pairs:
        a, _, b = pair.partition("=")
        targets = [t for t in results if a in results[t]["arms"] and b in results[t]["arms"]]
        seeds = {t: sorted(set(results[t]["arms"][a]) & set(results[t]["arms"][b])) for t in targets}
        seeds = {t: s for t, s in seeds.items() if s}
        if not seeds:
            continue
        comp = compare([Scored(b, seed_averaged(results, b, seeds)), Scored(a, seed_averaged(results, a, seeds))],
                       metric="ndcg@10", permutations=10000, seed=0)
        for d in comp.rows[a]:
            star = "*" if comp.significant(d) else ""
            n = len(seeds[d.dataset]) if d.dataset in seeds else min(map(len, seeds.values()))
            lines.append(f"| {a} | {b} | {d.dataset} | {d.queries} | {n} | {d.value:.4f} | {d.baseline:.4f} | "
                         f"{d.delta:+.4f}{star} [{d.low:+.4f}, {d.high:+.4f}] | {d.t_p:.3g} | {d.fisher_p:.3g} |")
    return "\n".join(lines)


def settings_of(arms) -> list[str]:
    """The option names the scores of ``arms`` depend on (:data:`SETTINGS` and each arm's own)."""
    keys = list(SETTINGS)
    for arm in arms:
        extra = ARM_SETTINGS.get(arm, ()) + (ARM_SETTINGS["dev"] if arm in DEV_ARMS else ()) \
            + (ARM_SETTINGS["stage1"] if ":" in arm else ())
        keys += [k for k in extra if k not in keys]
    return keys


def stored_arms(results: dict) -> set[str]:
    return {arm for tr in results.values() for arm in tr.get("arms", {})}


def settings_differ(a: dict, b: dict, arms) -> dict[str, tuple[str, str]]:
    """``{option: (a's, b's)}`` for the options ``arms`` depend on that both recorded and that differ
    (``a``, ``b``: the ``args`` of two ``results.json``, every value as text)."""
    return {k: (a[k], b[k]) for k in settings_of(arms) if k in a and k in b and a[k] != b[k]}


def load_results(work: Path, negatives: str | None) -> dict:
    """``work/results.json``; refuses one whose negatives differ from ``negatives`` (None: any).

    Runs from before ``--negatives`` existed have no such field and used TF-IDF negatives.
    """
    path = work / "results.json"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: {work} holds no finished run of bench_mixture (run it with "
                         f"--work {work} first, or leave that folder out of --merge).")
    stored = json.loads(path.read_text())
    stored.setdefault("negatives", "tfidf")
    if negatives is not None and stored["negatives"] != negatives:
        raise SystemExit(f"{work / 'results.json'} holds a run with {stored['negatives']} negatives, not "
                         f"{negatives}: use another --work (or --versus to compare the two).")
    return stored


def merge_results(into: dict, results: dict) -> dict:
    """Add ``results`` (per target, per arm, per seed) to ``into``; seeds ``into`` has are kept."""
    for target, tr in results.items():
        mine = into.setdefault(target, {"arms": {}, "weights": {}, "seconds": {}})
        for arm, seeds in tr["arms"].items():
            for seed, scores in seeds.items():
                mine["arms"].setdefault(arm, {}).setdefault(seed, scores)
        for key in ("weights", "seconds"):
            for k, v in tr.get(key, {}).items():
                mine[key].setdefault(k, v)
        for key in ("start", "selection"):
            if key in tr:
                mine.setdefault(key, tr[key])
        for arm, sel in tr.get("selections", {}).items():
            mine.setdefault("selections", {}).setdefault(arm, sel)
    return into


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="learned mixtures vs uniform, leave-one-out nDCG@10, seeds and tests")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="scale (see the module docstring)")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data directory (read-only)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/drmix-bench-mix"), help="work directory")
    ap.add_argument("--targets", nargs="+", default=None, help="leave-one-out targets (preset: scifact nfcorpus; "
                                                                "medium: nfcorpus)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds of every arm (preset: 42 43 44)")
    ap.add_argument("--steps", type=int, default=None, help="stage 0/2 optimiser steps")
    ap.add_argument("--test-queries", type=int, default=None,
                    help="test queries per target (seeded subsample; default: the preset's)")
    ap.add_argument("--test-docs", type=int, default=None,
                    help="test corpus size per target: judged documents plus random others (default: the preset's)")
    ap.add_argument("--dev-queries", type=int, default=None,
                    help="dev queries for the tdro:dev selection (seeded subsample; default: the preset's)")
    ap.add_argument("--dev-docs", type=int, default=None, help="dev corpus size for the tdro:dev selection")
    ap.add_argument("--coco-documents", type=int, default=None,
                    help="coco arm: at most this many target documents for COCO's spans (default: all)")
    ap.add_argument("--coco-steps", type=int, default=None,
                    help="coco arm: COCO optimiser steps (default: the preset's; --steps sets the fine-tuning's)")
    ap.add_argument("--coco-batch-size", type=int, default=None,
                    help="coco arm: COCO span pairs per step (default: the preset's)")
    ap.add_argument("--stage1-seed", type=int, default=None,
                    help="seed of stage 0 (the reference) and stage 1 (default: the first of --seeds)")
    ap.add_argument("--order", choices=("seeds", "reverse"), default="seeds",
                    help="order of the (seed, target, arm) runs: seed-major, or its reverse (a second process "
                         "sharing loo-<target> with the first)")
    ap.add_argument("--batch-size", type=int, default=None, help="stage 0/2 batch (default: the preset's)")
    ap.add_argument("--stage1-batch-size", type=int, default=None, help="stage 1 batch (default: the preset's)")
    ap.add_argument("--stage1-steps", type=int, default=None, help="stage 1 optimiser steps (default: the preset's)")
    ap.add_argument("--arms", nargs="+", default=None, help=f"subset of {' '.join(ARMS)}")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--model", default=None,
                    help="starting model folder (default: the bundled all-MiniLM-L6-v2; on a GPU machine without "
                         "it, /tmp/drmix-model from ../shared/tools/gpu-pack.sh)")
    ap.add_argument("--miner", default=None,
                    help="model that mines stage 1's missing hard negatives (default: drmix mine's, the bundled "
                         "all-MiniLM-L6-v2; on a GPU machine without it, /tmp/drmix-model)")
    ap.add_argument("--model-layers", type=int, default=None,
                    help="fine-tune all-MiniLM-L6-v2 cut to its first N layers (preset medium: 1; others: all 6)")
    ap.add_argument("--negatives", choices=("tfidf", "mined"), default="tfidf",
                    help="training collections' hard negatives: the TF-IDF ones of build_collections.py, or "
                         "mined by `drmix mine`'s defaults (reference model over each collection's documents)")
    ap.add_argument("--mined-dir", type=Path, default=None,
                    help="cache of mined collections, shareable between processes (default: WORK/collections-mined)")
    ap.add_argument("--report-only", action="store_true", help="rebuild the report from results.json")
    ap.add_argument("--estimate", action="store_true",
                    help="print the estimated device time of this command (arms, seeds, targets) and exit")
    ap.add_argument("--versus", type=Path, nargs="+", default=[],
                    help="with --report-only: also compare each arm with the same arm of these work directories "
                         "(merged; e.g. mined vs TF-IDF negatives), written to versus.md / versus.json")
    ap.add_argument("--pair", nargs="+", default=[], metavar="A=B",
                    help="also compare arm A with arm B, paired over queries (e.g. tdro:dev=tdro@prev:dev)")
    ap.add_argument("--merge", type=Path, nargs="+", default=[],
                    help="with --report-only: also read the results.json of these work directories "
                         "(one process per target)")
    args = ap.parse_args(argv)
    for k, v in {**OPTIONAL, **PRESETS[args.preset]}.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    args.data = args.data.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "filelock", "drmix.train.trainer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.arms = list(args.arms or ARMS)
    for key, value in (("max_documents", args.coco_documents), ("max_steps", args.coco_steps),
                       ("batch_size", args.coco_batch_size)):
        if value is not None:
            args.coco = {**args.coco, key: value}
    if isinstance(args.test_queries, int):
        args.test_queries = {t: args.test_queries for t in args.targets}
    if args.stage1_seed is None:
        args.stage1_seed = args.seeds[0]
    if args.estimate or (args.preset == "gpu" and not args.report_only):
        from _lease import estimate_line

        print(estimate_line(estimate(args), "this command"), flush=True)
        if args.estimate:
            return 0
    res_path = args.work / "results.json"
    stored = load_results(args.work, args.negatives) if res_path.exists() else {}
    results = stored.get("results", {})
    mined_meta = stored.get("mined", {})
    now = {k: str(v) for k, v in vars(args).items()}
    if results and not args.report_only:           # scores of this --work are reused only under the same settings
        differ = settings_differ(stored.get("args", {}), now, stored_arms(results))
        if differ:
            raise SystemExit(f"{res_path} holds scores made with other settings ("
                             + ", ".join(f"--{k.replace('_', '-')} {a} -> {b}" for k, (a, b) in differ.items())
                             + "): give another --work, or the same options.")
    for other in args.merge:                     # per target, per arm, per seed
        o = load_results(other, args.negatives)
        differ = settings_differ(stored.get("args", {}), o.get("args", {}),
                                 stored_arms(results) & stored_arms(o["results"]))
        if differ:
            raise SystemExit(f"{other / 'results.json'} was made with other settings than {res_path} ("
                             + ", ".join(f"--{k.replace('_', '-')} {a} / {b}" for k, (a, b) in differ.items())
                             + "): its scores cannot be merged.")
        merge_results(results, o["results"])


    def save() -> None:
        res_path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                        "negatives": args.negatives, "mined": mined_meta, "results": results}))

    if not args.report_only:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
        from _models import truncated_minilm

        args.model = args.model or truncated_minilm(args.model_layers, args.work)
        collections = args.work / "collections"
        sizes = build_all(args.data, collections, seed=0, max_per_collection=args.max_per_collection)
        log.info("collections: %s", sizes)
        if args.negatives == "mined":
            names = sorted(n for n in sizes if any(n != t for t in args.targets))
            t0 = time.perf_counter()
            mined_meta = mined_collections(collections, names, args.mined_dir or args.work / "collections-mined")
            log.info("mined negatives ready in %.0f s", time.perf_counter() - t0)
            collections = args.mined_dir or args.work / "collections-mined"
        preps = {t: prepare_target(args, collections, t, results) for t in args.targets}
        for t, prep in preps.items():            # the starting model, not fine-tuned: the row the others moved from
            results[t]["start"] = evaluate(args, args.model, prep.test, args.work / f"start-test-{t}.json")
        save()
        run_all(args, preps, results, save)
    summary = summarise(results, args.arms)
    layers = getattr(args, "model_layers", None)
    text = report(summary, results, f"the {layers}-layer starting model, not fine-tuned" if layers
                  else "all-MiniLM-L6-v2, not fine-tuned")
    if args.versus:
        other: dict = {}
        other_neg = None
        for d in args.versus:
            o = load_results(d, None)
            other_neg = o.get("negatives", "tfidf")
            merge_results(other, o["results"])
        vs = versus(results, other, args.arms, label=args.negatives, other_label=other_neg or "other")
        (args.work / "versus.json").write_text(json.dumps(vs, indent=1))
        vtext = versus_report(vs)
        (args.work / "versus.md").write_text(vtext + "\n")
        text += f"\n\nEach arm, {args.negatives} vs {other_neg} negatives (same arm, same seeds):\n\n" + vtext
    if args.pair:
        text += "\n\nPaired comparisons between arms (each query's nDCG@10 averaged over the seeds both ran):\n\n"
        text += pair_report(results, args.pair)
    (args.work / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.work / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
