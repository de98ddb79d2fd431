"""The audit's stages, declared once for :func:`drmix.recipes.stages.run_stages`: the mined negatives, every
short run, the stage-1 runs and the dev evaluation. Reuse, resume, refusal of changed runs and provenance
(``provenance.json``) are the stage runner's, the same as every recipe's. Under torchrun each stage is announced
to the other ranks (:mod:`drmix.recipes.launch`): the short runs and stage 1 train over every rank (DDP), the
mining and the dev evaluation encode their corpora in shards over them, and rank 0 alone writes."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drmix.outputs import run_finished
from drmix.recipes.audit.config import AuditConfig
from drmix.recipes.audit.plan import AuditPlan, mined_paths
from drmix.recipes.launch import EVERY, SHARDED, announced, main_rank
from drmix.recipes.progress import StageWork, training_work
from drmix.recipes.stages import Stage

log = logging.getLogger(__name__)

START = "start"        # the starting model's label in the dev evaluation (the add-one-in baseline)


class Loaded:
    """Each seed's collections, loaded once and shared by every run of the seed (one start-up, one tokenised
    cache: the pre-tokenised ids are keyed by content, so every run of a seed reads the same)."""

    def __init__(self, config: AuditConfig, plan: AuditPlan) -> None:
        self.config, self.plan, self.by_seed = config, plan, {}

    def get(self, seed: int, names: list[str]) -> list:
        from drmix.data.collections import load_collections

        if seed not in self.by_seed:
            d = self.config.data
            self.by_seed[seed] = load_collections([s.spec for s in self.plan.sources], max_size=d.max_collection_size,
                                                  seed=seed, format=d.format, columns=d.columns)
        return [c for c in self.by_seed[seed] if c.name in names]


def _train(cfg: Any, collections: list, strategy: Any = None) -> Any:
    """One short run: no model card or report.html of its own (the audit's page is the report); once finished,
    its checkpoints are removed (a finished short run is reused, never continued: it keeps its model)."""
    from drmix import api

    result = api.train(cfg, strategy=strategy, collections=collections, report=False)
    if main_rank():  # under torchrun rank 0 wrote the run: it tidies it
        drop_checkpoints(Path(cfg.run.output_dir))
    return result


def drop_checkpoints(run: Path) -> None:
    """Remove ``run/checkpoints`` of a finished run (renamed aside first, as the stage runner clears a folder)."""
    if run_finished(run) and (run / "checkpoints").is_dir():
        from drmix.recipes.stages import clear_stages

        clear_stages([Stage("checkpoints", outputs=[run / "checkpoints"])])


def _probe(config: AuditConfig, plan: AuditPlan):
    from drmix.recipes.audit.probe import SignalProbe

    return SignalProbe(plan.probe_points, config.audit.probe_draws)


def probed(folder: Path, results: dict[str, Any] | None = None) -> bool:
    """Whether the whole-mixture run in ``folder`` finished with its probe's measurements (``results``: what the
    stages before it returned, unused)."""
    if not run_finished(folder):
        return False
    try:
        return "signals" in json.loads((folder / "weights.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def probe_work(config: AuditConfig, plan: AuditPlan) -> float:
    """Examples the probe adds to the whole-mixture run: at each point, a forward and backward pass of every
    collection's batches and of the dev batches, and a forward pass of the dev batches per look-ahead."""
    b, n_dev, k = config.contrastive.batch_size, len(config.mixture.dev), len(plan.sources)
    per_point = k * config.audit.probe_draws * b * (1 + n_dev / 3) + n_dev * b * (1 + 1 / 3)
    return len(plan.probe_points) * per_point


def mined_key(spec: Any, miner: str | None, fmt: str, columns: Any) -> str | None:
    """The cache key of a collection's mined copy: the collection file's content, the miner's (a local folder's
    content; its name otherwise), the number of negatives and the mining rule; None when the collection is not one
    local file (nothing to fingerprint)."""
    from drmix.config import CollectionSpec
    from drmix.evaluation.suite import model_stamp
    from drmix.fingerprint import config_digest, file_digest
    from drmix.recipes.optimize import STAGE1_NEGATIVES

    path = Path(spec.path if isinstance(spec, CollectionSpec) else str(spec)).expanduser()
    if not path.is_file():
        return None
    record = {"data": file_digest(path), "spec": spec.model_dump() if isinstance(spec, CollectionSpec)
              else None, "format": fmt, "columns": columns, "miner": model_stamp(miner) or miner,
              "negatives": STAGE1_NEGATIVES, "window": "1:30", "max_score_ratio": 0.95, "version": 1}
    return config_digest(record)


def mine_negatives(config: AuditConfig, plan: AuditPlan) -> dict[str, Any]:
    """Top every collection that has fewer than seven hard negatives up to seven (drmix's miner, as stage 1 does
    it) and write it to ``negatives/<slug>.jsonl`` (same name, same rows); ``negatives.json`` records the counts.
    A collection mined before from the same file by the same miner is taken from drmix's cache
    (``DRMIX_CACHE/mined/``, keyed by :func:`mined_key`), so audits of the same collections mine them once."""
    import shutil

    from drmix.data.collections import load_collections
    from drmix.io.atomic import atomic_write_json, write_jsonl_atomic
    from drmix.io.checks import cache_root, cache_writes
    from drmix.recipes.optimize import STAGE1_NEGATIVES, mine_missing_negatives
    from drmix.retrieval.shards import writes_here

    d, paths, report = config.data, mined_paths(plan), {}
    writes = writes_here()     # under torchrun the ranks encode in shards, rank 0 writes
    if writes:
        plan.negatives_dir.mkdir(parents=True, exist_ok=True)
    cache = cache_root() / "mined"
    for s in (x for x in plan.sources if x.short):
        key = mined_key(s.spec, config.audit.stage1_miner, d.format, d.columns)
        hit = cache / f"{key}.jsonl" if key else None
        if hit is not None and hit.is_file() and (cache / f"{key}.json").is_file():
            if writes:
                shutil.copyfile(hit, paths[s.name])
            report[s.name] = json.loads((cache / f"{key}.json").read_text(encoding="utf-8"))
            continue
        (c,) = load_collections([s.spec], format=d.format, columns=d.columns)
        report.update(mine_missing_negatives([c], STAGE1_NEGATIVES, model=config.audit.stage1_miner))
        if not writes:
            continue
        rows = [{"query": q, "positives": p, "negatives": n} for q, p, n in
                zip(c.dataset["query"], c.dataset["positives"], c.dataset["negatives"])]
        write_jsonl_atomic(paths[s.name], rows)
        if key is not None:
            with cache_writes(also="or pass --stage1-fill-negatives random"):
                cache.mkdir(parents=True, exist_ok=True)
                write_jsonl_atomic(hit, rows)
                atomic_write_json(cache / f"{key}.json", report[s.name])
    if writes:
        atomic_write_json(plan.negatives_dir / "negatives.json", {"num_negatives": STAGE1_NEGATIVES, "rule": "mine",
                                                                  "collections": report})
    return report


def declare(config: AuditConfig, plan: AuditPlan, evaluate: Callable[[dict], Any]) -> list[Stage]:
    """The stages, in their order: ``negatives`` (when a stage-1 signal mines), per seed the whole-mixture run,
    the leave-one-out (and add-one-in) runs and the stage-1 runs, then the dev evaluation (``evaluate(results)``,
    never reused: its evaluations are cached by content next to each model)."""
    from drmix.recipes.optimize import optimize_weights

    a = config.audit
    loaded = Loaded(config, plan)
    flat = config.flat()
    stages: list[Stage] = []
    mining = a.stage1_fill_negatives == "mine" and any(plan.stage1.values()) and any(s.short for s in plan.sources)
    if mining:
        record = {k: flat[k] for k in ("data", "format", "columns", "stage1_miner")}
        stages.append(Stage("negatives", record, output_dir=plan.negatives_dir, record=plan.root / "audit.yaml",
                            kind=type(config), run=announced("negatives", lambda r: mine_negatives(config, plan),
                                                             SHARDED),
                            done=lambda out, results: (out / "negatives.json").is_file(), title="mined negatives",
                            what="stage 1's missing hard negatives",
                            work=StageWork("mined negatives", passages=sum(3 * s.rows for s in plan.sources if s.short))))
    trained: list[str] = []
    for seed, runs in plan.runs.items():
        names = plan.names
        for label, cfg in runs.items():
            kind, _, name = label.partition(":")
            keep = names if kind == "all" else [n for n in names if n != name] if kind == "without" else [name]
            stage_name = f"seed {seed}: {label}"
            probe = kind == "all"
            work = training_work(stage_name, cfg)
            if probe:
                work.examples += probe_work(config, plan)
            stages.append(Stage(
                stage_name, cfg, part="audit",
                run=announced(stage_name, lambda r, cfg=cfg, seed=seed, keep=keep, probe=probe: _train(
                    cfg, loaded.get(seed, keep), _probe(config, plan) if probe else None), EVERY),
                done=probed if probe else None, work=work,
                what={"all": "every collection, uniform, with the probe", "without": f"leave out {name}",
                      "only": f"{name} alone"}[kind]))
            trained.append(stage_name)
            if probe:   # the probe's settings are the audit's, not a training field: recorded in audit.yaml
                stages.append(Stage(f"seed {seed}: probe", {k: flat[k] for k in ("probe_points", "probe_draws")},
                                    output_dir=Path(cfg.run.output_dir), record=plan.root / "audit.yaml",
                                    kind=type(config)))
        fill = "off" if mining else a.stage1_fill_negatives
        for strategy, cfg in plan.stage1.get(seed, {}).items():
            name = f"seed {seed}: stage 1 {strategy}"
            needs = ((f"seed {seed}: all",) if strategy != "groupdro" else ()) + (("negatives",) if mining else ())
            stages.append(Stage(name, cfg, part="audit", needs=needs,
                                run=announced(name, lambda r, cfg=cfg, fill=fill: optimize_weights(
                                    cfg, fill_negatives=fill, miner=a.stage1_miner), SHARDED),
                                done=lambda out, results: run_finished(out) and (out / "weights.json").exists(),
                                work=training_work(name, cfg), what=f"{strategy} weights, the authors' stage 1"))
            trained.append(name)
    stages.append(Stage("dev evaluation", needs=tuple(trained), run=announced("dev evaluation", evaluate, SHARDED),
                        work=StageWork("dev evaluation", passages=dev_passages(config, plan)),
                        what="every run's nDCG@10 on the dev sets"))
    return stages


def models(plan: AuditPlan) -> dict[str, Any]:
    """``{label: model folder}`` of every run to evaluate on the dev sets (``seed<s>/all``, ...) and the starting
    model (``start``) when add-one-in needs it."""
    out: dict[str, Any] = {}
    for seed, runs in plan.runs.items():
        for label, cfg in runs.items():
            out[f"seed{seed}/{label}"] = Path(cfg.run.output_dir) / "model"
    if any(label.startswith("only:") for runs in plan.runs.values() for label in runs):
        first = next(iter(next(iter(plan.runs.values())).values()))
        out[START] = first.model.name_or_path
    return out


def dev_passages(config: AuditConfig, plan: AuditPlan) -> float:
    """Passages the dev evaluation encodes: every model over each dev set's (capped) queries and corpus."""
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample

    a = config.audit
    per_model = 0
    for d in config.mixture.dev:
        try:
            ds = subsample(load_beir(d, config.mixture.dev_split), max_queries=a.dev_max_queries,
                           max_docs=a.dev_max_docs, seed=config.optim.seed)
        except Exception:  # noqa: BLE001 - an estimate of a set that does not load counts nothing
            continue
        per_model += len(ds.queries) + len(ds.corpus)
    return float(per_model * len(models(plan)))
