"""The stages of ``drmix adapt``, declared (:class:`drmix.recipes.stages.Stage`): each with the part of the
config it reads, what it needs, how it is made and its work; :func:`drmix.recipes.stages.run_stages` runs them.

Adding a stage is one more :func:`_declare` in :func:`adapt_stages` (its record, when it has one, composed in
:func:`drmix.recipes.adapt.plan.plan_adapt`; its work in :func:`drmix.recipes.adapt.estimate.plan_work`)."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.recipes.adapt.candidates import Candidate
from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.estimate import plan_work, select_max_docs
from drmix.recipes.adapt.launch import EVERY, SHARDED, announced
from drmix.recipes.adapt.plan import AdaptPlan
from drmix.recipes.adapt.selection import BASE, COCO_UNIFORM, UNIFORM, AdaptResult, _average, select_candidate
from drmix.recipes.adapt.synthetic import build_synthetic
from drmix.recipes.stages import Stage

log = logging.getLogger(__name__)

SELECTION, FINAL = "selection", "final evaluation"
#: the labelled dev (``--dev-labels``): its folder's stage and the candidates' evaluation on it
DEV_LABELS, LABELLED_SELECTION = "dev labels", "selection on labelled dev"


@dataclasses.dataclass
class LabelsStage(Stage):
    """``dev-labels/``: the stage's inputs are the files read of each ``--dev-labels`` source (its qrels split and
    queries.jsonl), fingerprinted by :mod:`drmix.provenance`; a file changed at the same path is refused, or with
    ``--resume-with-changes`` the folder is made again."""

    split: str = "dev"

    def inputs(self, products: Any = ()) -> dict[str, dict[str, Any]]:
        from drmix.provenance import fingerprint
        from drmix.recipes.adapt.labels import label_files

        files = [f for src in self.settings().get("dev_labels", []) for f in label_files(src, self.split)]
        return {"dev_labels": {str(f): fingerprint(f) for f in dict.fromkeys(files)}}


def _caps(config: AdaptConfig) -> dict[str, Any]:
    """The caps of every evaluation (``--eval-max-docs``, the document length, the query instructions)."""
    return dict(max_docs=config.eval.eval_max_docs, max_length=config.data.doc_max_length,
                query_instructions=config.eval.query_instructions or None)


def _train(cfg: TrainConfig, c: Candidate | None = None) -> Callable[[dict[str, Any]], Any]:
    """A fine-tuning's ``run``: ``drmix train`` (tDRO's transfer strategy built from stage 1's weights)."""
    def run(results: dict[str, Any]) -> Any:
        from drmix import api

        if c is not None and c.scheme == "tdro":
            return api.train(cfg, strategy=_transfer_strategy(cfg, c))
        return api.train(cfg)
    return run


def _transfer_strategy(cfg: TrainConfig, c: Candidate) -> Any:
    from drmix.data.collections import collections_for
    from drmix.mixture.transfer import build_transfer_strategy

    names = [x.name for x in collections_for(cfg)]
    return build_transfer_strategy(cfg.mixture.weights_file, c.transfer, names)


def stage1_name(synthetic: bool) -> str:
    return f"tDRO stage 1{' (+synthetic)' if synthetic else ''}"


def adapt_stages(config: AdaptConfig, plan: AdaptPlan, labelled: Callable[..., Any]) -> list[Stage]:
    """Every stage of the run, in order: the synthetic set, COCO, the baseline, the candidates (tDRO's stage 1
    before its first transfer), the selection on the synthetic dev and the final evaluation."""
    from drmix.outputs import run_finished
    from drmix.pretrain.runner import pretrain_coco
    from drmix.recipes.optimize import optimize_weights

    works = {w.name: w for w in plan_work(config, plan)}
    records = {s.name: s for s in plan.stages}

    def _declare(name: str, title: str, run: Callable[[dict[str, Any]], Any], how: str | None = None,
                 **kw: Any) -> Stage:
        """``how``: which ranks of a torchrun launch run it (:mod:`drmix.recipes.adapt.launch`; None: rank 0)."""
        base = records.get(name) or Stage(name)
        return dataclasses.replace(base, title=title, run=announced(name, run, how), work=works.get(title), **kw)

    stages = [
        _declare("synthetic", "synthetic set", lambda r: build_synthetic(config, plan), SHARDED, part="synthetic",
                 what=f"pseudo-queries of {', '.join(plan.corpora)}, round-trip filter, splits",
                 done=lambda out: (out / "stats.json").is_file()),
        _declare("COCO", "COCO", lambda r: pretrain_coco(plan.coco), EVERY, part="stages.coco",
                 what=f"{plan.coco.optim.max_steps} steps on the target corpora"),
        _declare("uniform fine-tuning", "uniform fine-tuning", _train(plan.baseline), EVERY, part="optim",
                 what="the base model, uniform over --data (the baseline)")]
    for label, (c, cfg) in plan.candidates.items():
        needs = ["COCO"] + (["synthetic"] if c.synthetic or c.scheme == "infdds" else [])
        if c.scheme == "tdro":
            s1 = stage1_name(c.synthetic)
            if s1 not in {s.name for s in stages}:
                s1_cfg = plan.stage1[c.synthetic]
                stages.append(_declare(
                    s1, s1, lambda r, s1_cfg=s1_cfg: optimize_weights(s1_cfg, fill_negatives="mine",
                                                                      miner=config.synthetic.teacher),
                    SHARDED, part="stages.stage1", needs=(f"candidate {c.reference.label}",),
                    what=f"learned weights, reference {c.reference.label}",
                    done=lambda out: run_finished(out) and (out / "weights.json").exists()))
            needs.append(s1)
        what = "COCO model, tDRO weights transferred" if c.scheme == "tdro" else f"COCO model, {c.scheme} mixture"
        stages.append(_declare(f"candidate {label}", f"candidate {label}", _train(cfg, c), EVERY, part="optim",
                               needs=tuple(needs), what=what))
    candidates = tuple(f"candidate {label}" for label in plan.candidates)
    if plan.labels:
        stages += [dataclasses.replace(s, work=works.get(s.label)) for s in _label_stages(config, plan, candidates)]
    stages += [
        _declare(SELECTION, "selection on synthetic dev", lambda r: _selection(config, plan, _models(plan, r), r),
                 SHARDED, part="stages", needs=candidates + ((LABELLED_SELECTION,) if plan.labels else ()),
                 what=f"{len(plan.candidates)} candidates"),
        _declare(FINAL, "final evaluation", lambda r: _final_evaluation(config, plan, r, labelled), SHARDED,
                 part="eval",
                 needs=(SELECTION, "uniform fine-tuning"),
                 what="synthetic test" + (" and the labelled --eval-data" if config.eval.eval_data else ""))]
    if config.search.index:
        stages = _with_index(config, plan, stages, candidates, works)
    return stages


#: the index stage (``--index``)
INDEX = "index"
#: the candidate that separates the synthetic train set's part of the gain from the mixture's (also scored on the
#: synthetic test, :func:`_final_evaluation`)
PARTED = "uniform+synthetic"


def _with_index(config: AdaptConfig, plan: AdaptPlan, stages: list[Stage], candidates: tuple[str, ...],
                works: dict[str, Any]) -> list[Stage]:
    """``stages`` and the index stage after them: finished when ``index/index.json`` names the candidate the
    selection chose in this run (the selection's ``run`` remembers it), so another choice re-indexes."""
    from drmix.recipes.adapt.index import INDEX_TITLE, build_indexes, index_finished

    chosen: dict[str, str] = {}
    at = next(i for i, s in enumerate(stages) if s.name == SELECTION)
    select = stages[at].run

    def remembered(r: dict[str, Any]) -> Any:
        made = select(r)
        chosen["selected"] = made[2]
        return made

    stages = [*stages[:at], dataclasses.replace(stages[at], run=remembered), *stages[at + 1:]]
    base = next((s for s in plan.stages if s.name == INDEX), None) or Stage(INDEX)

    def index(r: dict[str, Any]) -> Any:
        selected = r[SELECTION][2]
        return build_indexes(config, plan, selected, _models(plan, r)[selected])

    return [*stages, dataclasses.replace(
        base, title=INDEX_TITLE, run=index, part="search", needs=(SELECTION, *candidates), work=works.get(INDEX_TITLE),
        what=f"{', '.join(plan.corpora)} by the adapted model ({config.search.index_backend})",
        done=lambda out: index_finished(plan.root, chosen.get("selected")))]


def _models(plan: AdaptPlan, results: dict[str, Any]) -> dict[str, Path]:
    """Every candidate's model, by label."""
    return {label: results[f"candidate {label}"].model_dir for label in plan.candidates}


def _selection(config: AdaptConfig, plan: AdaptPlan, models: dict[str, Path],
               results: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, float], str]:
    """Every candidate on the synthetic dev (the choice is made before any --eval-data label is read: on the
    synthetic dev, or with --dev-labels on the labelled dev or both, ``--select-on``); returns the synthetic-dev
    results, their averages and the selected candidate."""
    from drmix.evaluation.suite import evaluate_suite
    from drmix.recipes.adapt.labels import choice_scores

    dev = evaluate_suite(models, plan.synthetic_dirs, kind="select", split="dev", seed=config.optim.seed,
                         metrics=("ndcg@10",), **{**_caps(config), "max_docs": select_max_docs(config)}).results
    dev_avg = {lb: _average(r) for lb, r in dev.items()}
    labelled = (results or {}).get(LABELLED_SELECTION)
    scores = choice_scores({lb: dev_avg[lb] for lb in models}, labelled.average if labelled else None,
                           config.labels.choice)
    selected = select_candidate(scores)
    log.info("adapted model: %s (chosen on %s: %.4f; uniform %.4f)", selected, config.labels.choice,
             scores[selected], scores[next(iter(models))])
    return dev, dev_avg, selected


def _label_stages(config: AdaptConfig, plan: AdaptPlan, candidates: tuple[str, ...]) -> list[Stage]:
    """``--dev-labels``: the labelled dev folders (a stage with a record: its settings in ``adapt.yaml``, its
    files fingerprinted in ``provenance.json``) and the candidates' evaluation on them."""
    from drmix.recipes.adapt.labels import DONE_FILE, write_label_dirs

    values = config.flat()
    out = plan.root / "dev-labels"
    n = sum(len(s.qrels) for s in plan.labels.values())
    return [LabelsStage(DEV_LABELS, {k: values[k] for k in ("dev_labels", "dev_labels_split")}, output_dir=out,
                        record=plan.root / "adapt.yaml", kind=AdaptConfig, part="labels", title="labelled dev",
                        run=lambda r: write_label_dirs(plan.labels, plan.corpora, out),
                        done=lambda o: (o / DONE_FILE).is_file(), split=config.labels.dev_labels_split,
                        what=f"{n} labelled queries of {', '.join(plan.labels)}"),
            Stage(LABELLED_SELECTION, title=LABELLED_SELECTION, part="labels", needs=candidates + (DEV_LABELS,),
                  run=lambda r: _labelled_selection(config, plan, _models(plan, r)),
                  what=f"{len(plan.candidates)} candidates on {n} labelled queries")]


def _labelled_selection(config: AdaptConfig, plan: AdaptPlan, models: dict[str, Path]) -> Any:
    """Every candidate on the labelled dev folders (cached as ``select-labels-dev.json`` in its folder)."""
    from drmix.evaluation.suite import evaluate_suite
    from drmix.recipes.adapt.labels import SPLIT, LabelledSelection

    dirs = [str(plan.root / "dev-labels" / n) for n in plan.labels]
    res = evaluate_suite(models, dirs, kind="select-labels", split=SPLIT, seed=config.optim.seed,
                         metrics=("ndcg@10",), **{**_caps(config), "max_docs": select_max_docs(config)}).results
    avg = {lb: _average(r) for lb, r in res.items()}
    selected = select_candidate({lb: avg[lb] for lb in models})
    log.info("labelled dev: %s best (nDCG@10 %.4f; uniform %.4f)", selected, avg[selected], avg[next(iter(models))])
    return LabelledSelection(res, avg, selected, {n: len(s.qrels) for n, s in plan.labels.items()})


def _final_evaluation(config: AdaptConfig, plan: AdaptPlan, results: dict[str, Any],
                      labelled: Callable[..., Any]) -> AdaptResult:
    """The report's models on the synthetic test, then (first read of any label) on the labelled directories."""
    from drmix.evaluation.suite import evaluate_suite

    models = _models(plan, results)
    selected = results[SELECTION][2]
    report_models: dict[str, Any] = {BASE: config.model.name_or_path or "default",
                                     UNIFORM: results["uniform fine-tuning"].model_dir,
                                     COCO_UNIFORM: models["uniform"], f"adapted ({selected})": models[selected]}
    cache_dirs = {BASE: plan.root / "eval" / "base"}
    result = AdaptResult(plan.root, selected, {k: str(v) for k, v in report_models.items()}, models)
    result.select_on, result.dev_labels = config.labels.choice, results.get(LABELLED_SELECTION)
    result.synthetic_choice = select_candidate({lb: results[SELECTION][1][lb] for lb in models})
    result.synthetic_test = evaluate_suite(report_models, plan.synthetic_dirs, kind="synthetic", split="test",
                                           cache_dirs=cache_dirs, seed=config.optim.seed, **_caps(config))
    if config.eval.eval_data:
        result.labelled = labelled(config, report_models, models, cache_dirs, _caps(config))

    if PARTED in models:   # scored on the synthetic test too: the report's first sentence parts the gain by it
        parted = evaluate_suite({PARTED: models[PARTED]}, plan.synthetic_dirs, kind="synthetic", split="test",
                                seed=config.optim.seed, **_caps(config))
        result.synthetic_test.results.update(parted.results)
        result.synthetic_test.per_query.update(parted.per_query)
    return result
