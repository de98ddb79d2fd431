"""The stages of ``drmix adapt``, each declared once (:class:`drmix.recipes.stages.Stage`: its record, the part
of the config it reads, what it needs, how it is made, when it is done, its work for the estimate), and run by
:func:`drmix.recipes.stages.run_stages`.

Adding a stage is one more :class:`~drmix.recipes.stages.Stage` in the list :func:`adapt_stages` returns (or in
the ``extra`` stages :func:`drmix.recipes.adapt.run_adapt` takes): its ``run`` reads what the stages before it
returned by their names below, its ``work`` enters the estimate and the progress lines.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drmix.config import TrainConfig
from drmix.recipes.adapt import estimate as work
from drmix.recipes.adapt.audit import audit_done, audit_stage_name, audit_work, audited_collections, run_audit_stage
from drmix.recipes.adapt.candidates import UNIFORM_SYNTHETIC, Candidate
from drmix.recipes.adapt.config import AdaptConfig, index_fields, synthetic_fields
from drmix.recipes.launch import EVERY, SHARDED, announced
from drmix.recipes.adapt.plan import AdaptPlan
from drmix.recipes.adapt.selection import final_evaluation, final_labelled_evaluation
from drmix.recipes.progress import StageWork, training_work
from drmix.recipes.stages import Stage

# The stages' names: the keys of the runner's results, of provenance.json and of a changed stage's message.
SYNTHETIC = "synthetic"
COCO = "COCO"
BASELINE = "uniform fine-tuning"
DEV_LABELS = "dev labels"
LABELLED_SELECTION = "selection on labelled dev"
SELECTION = "selection"
FINAL = "final evaluation"
INDEX = "index"


def candidate_stage(label: str) -> str:
    """The name of candidate ``label``'s fine-tuning."""
    return f"candidate {label}"


def stage1_stage(synthetic: bool) -> str:
    """The name of tDRO's stage 1 (on the data with the synthetic train set or without)."""
    return f"tDRO stage 1{' (+synthetic)' if synthetic else ''}"


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


def candidate_models(plan: AdaptPlan, results: dict[str, Any]) -> dict[str, Path]:
    """Every candidate's model, by label, from the runner's results."""
    return {label: results[candidate_stage(label)].model_dir for label in plan.candidates}


def _train(cfg: TrainConfig, c: Candidate | None = None) -> Callable[[dict[str, Any]], Any]:
    """A fine-tuning's ``run``: ``drmix train`` (tDRO's transfer strategy built from stage 1's weights)."""
    def run(results: dict[str, Any]) -> Any:
        from drmix import api

        if c is not None and c.scheme == "tdro":
            from drmix.data.collections import collections_for
            from drmix.mixture.transfer import build_transfer_strategy

            names = [x.name for x in collections_for(cfg)]
            return api.train(cfg, strategy=build_transfer_strategy(cfg.mixture.weights_file, c.transfer, names))
        return api.train(cfg)
    return run


def _stage1(config: AdaptConfig, cfg: TrainConfig) -> Callable[[dict[str, Any]], Any]:
    def run(results: dict[str, Any]) -> Any:
        from drmix.recipes.optimize import optimize_weights

        return optimize_weights(cfg, fill_negatives="mine", miner=config.synthetic.teacher)
    return run


def _weights_stage(config: AdaptConfig, plan: AdaptPlan, c: Candidate, declared: set[str]) -> Stage | None:
    """The stage that learns candidate ``c``'s weights, when it has one not ``declared`` yet: tDRO's stage 1 (after
    its reference candidate) or the mixture audit (:mod:`drmix.recipes.adapt.audit`: after COCO and the synthetic
    set, its short runs scored on the synthetic dev)."""
    from drmix.outputs import run_finished

    if c.scheme == "tdro" and (s1 := stage1_stage(c.synthetic)) not in declared:
        s1_cfg = plan.stage1[c.synthetic]
        return Stage(s1, s1_cfg, part="stages.stage1", needs=(candidate_stage(c.reference.label),),
                     run=announced(s1, _stage1(config, s1_cfg), SHARDED),
                     done=lambda out, r: run_finished(out) and (out / "weights.json").exists(),
                     what=f"learned weights, reference {c.reference.label}", work=work.stage1_work(s1, config, s1_cfg))
    if c.scheme == "audit" and (name := audit_stage_name(c.synthetic)) not in declared:
        acfg = plan.audits[c.synthetic]
        out = Path(acfg.run.output_dir)
        return Stage(name, acfg, output_dir=out, record=out / "audit.yaml", part="stages.audit",
                     needs=(COCO, SYNTHETIC), run=announced(name, lambda r: run_audit_stage(acfg), EVERY),
                     done=audit_done, title=name,
                     what=f"leave-one-out of {audited_collections(acfg.data.collections)} collections on the "
                          "synthetic dev, recommended weights",
                     work=audit_work(name, acfg, plan.sizes, config.synthetic.dev_queries))
    return None


def adapt_stages(config: AdaptConfig, plan: AdaptPlan,
                 labelled: Callable[..., Any] = final_labelled_evaluation) -> list[Stage]:
    """Every stage of the run, in order: the synthetic set, COCO, the baseline, the candidates (tDRO's stage 1
    before its first transfer, the mixture audit before the audit candidate), with ``--dev-labels`` the labelled
    dev and the candidates on it, the selection on the synthetic dev, the final evaluation (``labelled``: its
    labelled part, the only reader of --eval-data) and with ``--index`` the index of the adapted model."""
    from drmix.pretrain.runner import pretrain_coco
    from drmix.recipes.adapt.synthetic import SYNTHETIC_DIR, STATS, build_synthetic

    root, sizes, values = plan.root, plan.sizes, config.flat()
    stages = [
        Stage(SYNTHETIC, {k: values[k] for k in synthetic_fields()}, output_dir=root / SYNTHETIC_DIR,
              record=root / "adapt.yaml", kind=AdaptConfig, part="synthetic", title="synthetic set",
              run=announced(SYNTHETIC, lambda r: build_synthetic(config, root, plan.corpora), SHARDED),
              done=lambda out, r: (out / STATS).is_file(),
              what=f"pseudo-queries of {', '.join(plan.corpora)}, round-trip filter, splits",
              work=work.synthetic_work("synthetic set", config, sizes)),
        Stage(COCO, plan.coco, record=Path(plan.coco.run.output_dir) / "coco.yaml", part="stages.coco",
              run=announced(COCO, lambda r: pretrain_coco(plan.coco), EVERY),
              what=f"{plan.coco.optim.max_steps} steps on the target corpora", work=work.coco_work(COCO, plan.coco)),
        Stage(BASELINE, plan.baseline, part="optim", run=announced(BASELINE, _train(plan.baseline), EVERY),
              what="the base model, uniform over --data (the baseline)", work=training_work(BASELINE, plan.baseline))]
    for label, (c, cfg) in plan.candidates.items():
        needs = [COCO] + ([SYNTHETIC] if c.synthetic or c.scheme == "infdds" else [])
        weights = _weights_stage(config, plan, c, {s.name for s in stages})
        if weights is not None:
            stages.append(weights)
        if c.scheme in ("tdro", "audit"):
            needs.append(stage1_stage(c.synthetic) if c.scheme == "tdro" else audit_stage_name(c.synthetic))
        name = candidate_stage(label)
        stages.append(Stage(
            name, cfg, part="optim", needs=tuple(needs), run=announced(name, _train(cfg, c), EVERY),
            what={"tdro": "COCO model, tDRO weights transferred", "audit": "COCO model, the audit's weights"}.get(
                c.scheme, f"COCO model, {c.scheme} mixture"),
            work=work.candidate_work(name, config, c.scheme, cfg, len(plan.synthetic_dirs))))
    candidates = tuple(candidate_stage(label) for label in plan.candidates)
    if plan.labels:
        stages += _label_stages(config, plan, candidates)
    stages += [
        Stage(SELECTION, part="stages", title="selection on synthetic dev",
              needs=candidates + ((LABELLED_SELECTION,) if plan.labels else ()),
              run=announced(SELECTION, lambda r: _select(config, plan, r), SHARDED),
              what=f"{len(plan.candidates)} candidates",
              work=work.selection_work("selection on synthetic dev", config, sizes, len(plan.candidates))),
        Stage(FINAL, part="eval", needs=(SELECTION, BASELINE),
              run=announced(FINAL, lambda r: final_evaluation(
                  config, root, plan.synthetic_dirs, candidate_models(plan, r), r[BASELINE].model_dir, r[SELECTION],
                  r.get(LABELLED_SELECTION), labelled), SHARDED),
              what="synthetic test" + (" and the labelled --eval-data" if config.eval.eval_data else ""),
              work=work.final_work(FINAL, config, sizes, len(plan.candidates), UNIFORM_SYNTHETIC in plan.candidates))]
    if config.search.index:
        stages.append(_index_stage(config, plan, candidates))
    return stages


def _select(config: AdaptConfig, plan: AdaptPlan, results: dict[str, Any]) -> Any:
    from drmix.recipes.adapt.selection import select_on_dev

    return select_on_dev(config, plan.synthetic_dirs, candidate_models(plan, results), results.get(LABELLED_SELECTION))


def _label_stages(config: AdaptConfig, plan: AdaptPlan, candidates: tuple[str, ...]) -> list[Stage]:
    """``--dev-labels``: the labelled dev folders (a stage with a record: its settings in ``adapt.yaml``, its
    files fingerprinted in ``provenance.json``) and the candidates' evaluation on them."""
    from drmix.recipes.adapt.labels import DONE_FILE, LABELS_DIR, write_label_dirs
    from drmix.recipes.adapt.selection import select_on_labels

    values = config.flat()
    out = plan.root / LABELS_DIR
    queries = {n: len(s.qrels) for n, s in plan.labels.items()}
    n = sum(queries.values())
    title = "labelled dev"
    return [LabelsStage(DEV_LABELS, {k: values[k] for k in ("dev_labels", "dev_labels_split")}, output_dir=out,
                        record=plan.root / "adapt.yaml", kind=AdaptConfig, part="labels", title=title,
                        run=lambda r: write_label_dirs(plan.labels, plan.corpora, out),
                        done=lambda o, r: (o / DONE_FILE).is_file(), split=config.labels.dev_labels_split,
                        what=f"{n} labelled queries of {', '.join(plan.labels)}", work=StageWork(title)),
            Stage(LABELLED_SELECTION, part="labels", needs=candidates + (DEV_LABELS,),
                  run=lambda r: select_on_labels(config, {c: str(out / c) for c in plan.labels},
                                                 candidate_models(plan, r), queries),
                  what=f"{len(plan.candidates)} candidates on {n} labelled queries",
                  work=work.labelled_selection_work(LABELLED_SELECTION, config, sizes=plan.sizes,
                                                    candidates=len(plan.candidates), labelled=plan.labels))]


def _index_stage(config: AdaptConfig, plan: AdaptPlan, candidates: tuple[str, ...]) -> Stage:
    """``--index``: every target corpus indexed by the model the selection chose; its record ``index/index.yaml``
    holds the settings it was made with, and it is finished when ``index/index.json`` names the candidate the
    selection chose in this run (another choice re-indexes)."""
    from drmix.recipes.adapt.index import INDEX_DIR, INDEX_TITLE, SETTINGS, build_indexes, index_finished

    values = config.flat()

    def index(results: dict[str, Any]) -> Any:
        selected = results[SELECTION].selected
        return build_indexes(config, plan.root, plan.corpora, selected, candidate_models(plan, results)[selected])

    return Stage(INDEX, {k: values[k] for k in index_fields()}, output_dir=plan.root / INDEX_DIR,
                 record=plan.root / INDEX_DIR / SETTINGS, kind=AdaptConfig, part="search", title=INDEX_TITLE,
                 needs=(SELECTION, *candidates), run=announced(INDEX, index, None),
                 done=lambda out, r: index_finished(plan.root, r[SELECTION].selected if SELECTION in r else None),
                 what=f"{', '.join(plan.corpora)} by the adapted model ({config.search.index_backend})",
                 work=work.index_work(INDEX_TITLE, plan.sizes))
