"""The choice of ``drmix adapt`` and its evaluation: every candidate on the synthetic dev (and on the labelled dev
of ``--dev-labels``), the candidate chosen, the final evaluation of the report's models (the labelled one, the
only place ``--eval-data`` is read, by :func:`final_labelled_evaluation`), paired tests and Kendall's tau."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.recipes.adapt.candidates import COCO_UNIFORM_CANDIDATE, UNIFORM_SYNTHETIC
from drmix.recipes.adapt.config import AdaptConfig, select_max_docs

log = logging.getLogger(__name__)

#: the labelled evaluation subsamples with this seed whatever the training seed, so that runs with different
#: seeds are scored on the same queries and can be paired
LABELLED_SEED = 0
#: the labels of the report's four models
BASE, UNIFORM, COCO_UNIFORM = "base model", "uniform fine-tuning", "COCO → uniform"


@dataclass
class DevChoice:
    """What the selection returns: every candidate on the synthetic dev (candidate -> corpus -> metric), their
    nDCG@10 averages, and the candidate chosen (on the synthetic dev, or on the labelled dev, ``--select-on``)."""

    results: dict[str, dict[str, dict[str, float]]]
    average: dict[str, float]
    selected: str


@dataclass
class AdaptResult:
    output_dir: Path
    selected: str                                            # the candidate chosen on the synthetic dev
    models: dict[str, str]                                   # report label -> model
    candidates: dict[str, Path]                              # candidate label -> model folder
    synthetic: dict[str, Any] = field(default_factory=dict)  # corpus -> counts
    selection: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)   # candidate -> dev set -> metric
    synthetic_test: Any = None                               # SuiteResult of the report's models
    labelled: Any = None                                     # SuiteResult of the report's models and the candidates
    comparisons: dict[str, Any] = field(default_factory=dict)   # name -> drmix.evaluation.compare.Comparison
    kendall: dict[str, float] | None = None
    weights: dict[str, dict[str, float]] = field(default_factory=dict)  # candidate -> collection -> weight
    index: dict[str, Any] | None = None                      # index/index.json: where the indexes are (--index)
    table: str = ""
    select_on: str = "synthetic"                             # what the choice was made on (--select-on)
    synthetic_choice: str | None = None                      # the candidate best on the synthetic dev
    dev_labels: Any = None                                   # labels.LabelledSelection (--dev-labels)
    choice_test: Any = None                                  # Comparison: labelled-dev vs synthetic-dev choice
    selection_average: dict[str, float] = field(default_factory=dict)  # candidate -> synthetic-dev nDCG@10

    @property
    def adapted(self) -> str:
        """The adapted model's label among the report's models (``adapted (<candidate>)``)."""
        return next(lb for lb in self.models if lb.startswith("adapted"))


def average(results: Mapping[str, Mapping[str, float]]) -> float:
    """nDCG@10 averaged over the datasets of one model's results (dataset -> metric -> value)."""
    return float(np.mean([r["ndcg@10"] for r in results.values()]))


def kendall_tau(dev: Mapping[str, float], labelled: Mapping[str, float]) -> dict[str, float]:
    """Kendall's tau-b (:func:`drmix.evaluation.significance.kendall_tau`: ``scipy.stats.kendalltau``) between two
    scorings of the same candidates, with its p and the number of candidates."""
    from drmix.evaluation.significance import kendall_tau as tau_b

    names = [n for n in dev if n in labelled]
    tau, p = tau_b([dev[n] for n in names], [labelled[n] for n in names])
    return {"tau": tau, "p": p, "candidates": len(names)}



def select_candidate(dev_avg: Mapping[str, float]) -> str:
    """The candidate with the best synthetic-dev average; ties go to the earlier one (``uniform`` first)."""
    selected = next(iter(dev_avg))
    for lb, v in dev_avg.items():
        if v > dev_avg[selected] + 1e-12:
            selected = lb
    return selected


def final_labelled_evaluation(config: AdaptConfig, report_models: dict[str, Any], candidates: dict[str, Path],
                              cache_dirs: dict[str, Path], caps: dict[str, Any]) -> Any:
    """The only place the labelled directories are opened: the report's models and every candidate on
    ``eval_split`` (a seeded sample of :data:`LABELLED_SEED`, the same for every training seed)."""
    from drmix.evaluation.suite import evaluate_suite

    models = {**report_models, **{lb: m for lb, m in candidates.items()}}
    return evaluate_suite(models, config.eval.eval_data, kind="eval", split=config.eval.eval_split,
                          cache_dirs=cache_dirs, max_queries=config.eval.eval_max_queries, seed=LABELLED_SEED, **caps)


def evaluation_caps(config: AdaptConfig) -> dict[str, Any]:
    """The caps of every evaluation (``--eval-max-docs``, the document length, the query instructions)."""
    return dict(max_docs=config.eval.eval_max_docs, max_length=config.data.doc_max_length,
                query_instructions=config.eval.query_instructions or None)


def _on_dev(config: AdaptConfig, models: Mapping[str, Path], dirs: list[str], kind: str,
            split: str) -> tuple[dict[str, Any], dict[str, float]]:
    """Every candidate on the dev folders ``dirs`` (cached as ``<kind>-<split>.json`` in its folder), on the
    selection's capped sub-corpus: their results and nDCG@10 averages."""
    from drmix.evaluation.suite import evaluate_suite

    res = evaluate_suite(dict(models), dirs, kind=kind, split=split, seed=config.optim.seed, metrics=("ndcg@10",),
                         **{**evaluation_caps(config), "max_docs": select_max_docs(config)}).results
    return res, {lb: average(r) for lb, r in res.items()}


def select_on_dev(config: AdaptConfig, synthetic_dirs: list[str], models: Mapping[str, Path],
                  labelled: Any = None) -> DevChoice:
    """Every candidate on the synthetic dev, and the choice (made before any --eval-data label is read: on the
    synthetic dev, or with ``labelled`` -- :class:`~drmix.recipes.adapt.labels.LabelledSelection` of
    --dev-labels -- on the labelled dev or both, ``--select-on``)."""
    from drmix.recipes.adapt.labels import choice_scores

    dev, dev_avg = _on_dev(config, models, synthetic_dirs, "select", "dev")
    scores = choice_scores({lb: dev_avg[lb] for lb in models}, labelled.average if labelled else None,
                           config.labels.choice)
    selected = select_candidate(scores)
    log.info("adapted model: %s (chosen on %s: %.4f; uniform %.4f)", selected, config.labels.choice,
             scores[selected], scores[next(iter(models))])
    return DevChoice(dev, dev_avg, selected)


def select_on_labels(config: AdaptConfig, label_dirs: Mapping[str, str], models: Mapping[str, Path],
                     queries: dict[str, int]) -> Any:
    """Every candidate on the labelled dev folders (``label_dirs``: corpus -> folder; cached as
    ``select-labels-dev.json`` in its folder); ``queries``: labelled queries per corpus."""
    from drmix.recipes.adapt.labels import SPLIT, LabelledSelection

    res, avg = _on_dev(config, models, list(label_dirs.values()), "select-labels", SPLIT)
    selected = select_candidate({lb: avg[lb] for lb in models})
    log.info("labelled dev: %s best (nDCG@10 %.4f; uniform %.4f)", selected, avg[selected], avg[next(iter(models))])
    return LabelledSelection(res, avg, selected, queries)


def final_evaluation(config: AdaptConfig, root: Path, synthetic_dirs: list[str], models: dict[str, Path],
                     baseline: Path, choice: DevChoice, labelled_dev: Any,
                     labelled: Callable[..., Any]) -> AdaptResult:
    """The report's models (the base model, uniform fine-tuning ``baseline``, COCO -> uniform and the adapted
    model) on the synthetic test, then (first read of any label) on the labelled directories by ``labelled``
    (:func:`final_labelled_evaluation`)."""
    from drmix.evaluation.suite import evaluate_suite

    selected = choice.selected
    report_models: dict[str, Any] = {BASE: config.model.name_or_path or "default", UNIFORM: baseline,
                                     COCO_UNIFORM: models[COCO_UNIFORM_CANDIDATE],
                                     f"adapted ({selected})": models[selected]}
    cache_dirs = {BASE: root / "eval" / "base"}
    result = AdaptResult(root, selected, {k: str(v) for k, v in report_models.items()}, models)
    result.select_on, result.dev_labels = config.labels.choice, labelled_dev
    result.selection, result.selection_average = choice.results, choice.average
    result.synthetic_choice = select_candidate({lb: choice.average[lb] for lb in models})
    caps = evaluation_caps(config)
    result.synthetic_test = evaluate_suite(report_models, synthetic_dirs, kind="synthetic", split="test",
                                           cache_dirs=cache_dirs, seed=config.optim.seed, **caps)
    if config.eval.eval_data:
        result.labelled = labelled(config, report_models, models, cache_dirs, caps)
    if UNIFORM_SYNTHETIC in models:   # scored on the synthetic test too: the report's first sentence parts by it
        parted = evaluate_suite({UNIFORM_SYNTHETIC: models[UNIFORM_SYNTHETIC]}, synthetic_dirs, kind="synthetic",
                                split="test", seed=config.optim.seed, **caps)
        result.synthetic_test.results.update(parted.results)
        result.synthetic_test.per_query.update(parted.per_query)
    return result


def complete(result: AdaptResult, config: AdaptConfig) -> AdaptResult:
    """What the report reads beside the evaluations: Kendall's tau of the candidates' synthetic-dev and labelled
    rankings, the paired tests, the test of the two choices and each candidate's learned weights."""
    models = result.candidates
    if result.labelled is not None and len(models) > 1:
        result.kendall = kendall_tau(result.selection_average,
                                     {lb: average(result.labelled.results[lb]) for lb in models})
    result.comparisons = comparisons(result, config)
    result.choice_test = choice_comparison(result, config)
    result.weights = {lb: w for lb, m in models.items() if (w := weights_of(Path(m).parent))}
    return result


def weights_of(folder: Path) -> dict[str, float]:
    """A candidate's learned weights (``weights.json`` of its folder: collection -> weight; {} when none)."""
    try:
        w = json.loads((folder / "weights.json").read_text(encoding="utf-8"))
        return {str(n): float(v) for n, v in zip(w["collections"], w["weights"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def vs_uniform(split: str) -> str:
    """The name of the paired tests of every report model against uniform fine-tuning on ``split``."""
    return f"{split}: vs {UNIFORM}"


def vs_coco_uniform(split: str) -> str:
    """The name of the paired test of the adapted model against COCO -> uniform on ``split``."""
    return f"{split}: adapted vs {COCO_UNIFORM}"


def comparisons(result: AdaptResult, config: AdaptConfig) -> dict[str, Any]:
    """Paired tests over queries: every report model against uniform fine-tuning, and the adapted model against
    COCO -> uniform, on the synthetic test and on the labelled split."""
    from drmix.evaluation.compare import Scored, compare

    adapted = result.adapted
    out = {}
    for name, suite in (("synthetic test", result.synthetic_test), (config.eval.eval_split, result.labelled)):
        if suite is None:
            continue
        pq = {lb: suite.per_query[lb] for lb in result.models}
        out[vs_uniform(name)] = compare([Scored(lb, q) for lb, q in pq.items()], baseline=UNIFORM,
                                                         metric="ndcg@10", seed=config.optim.seed)
        out[vs_coco_uniform(name)] = compare(
            [Scored(COCO_UNIFORM, pq[COCO_UNIFORM]), Scored(adapted, pq[adapted])], baseline=COCO_UNIFORM,
            metric="ndcg@10", seed=config.optim.seed)
    return out


def choice_comparison(result: AdaptResult, config: AdaptConfig) -> Any:
    """With --dev-labels and --eval-data: the labelled-dev choice against the synthetic-dev choice on the labelled
    split, paired over its queries (None when both chose the same candidate)."""
    from drmix.evaluation.compare import Scored, compare

    if result.dev_labels is None or result.labelled is None or result.synthetic_choice is None:
        return None
    syn, lab = result.synthetic_choice, result.dev_labels.selected
    if syn == lab:
        return None
    pq = result.labelled.per_query
    return compare([Scored(f"synthetic-dev choice ({syn})", pq[syn]), Scored(f"labelled-dev choice ({lab})", pq[lab])],
                   baseline=f"synthetic-dev choice ({syn})", metric="ndcg@10", seed=config.optim.seed)
