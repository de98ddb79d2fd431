"""The choice of ``drmix adapt`` and its evaluation: the candidate best on the synthetic dev, the labelled final
evaluation (the only place labels are read), paired tests and Kendall's tau."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.recipes.adapt.config import AdaptConfig

#: the labelled evaluation subsamples with this seed whatever the training seed, so that runs with different
#: seeds are scored on the same queries and can be paired
LABELLED_SEED = 0
#: the labels of the report's four models
BASE, UNIFORM, COCO_UNIFORM = "base model", "uniform fine-tuning", "COCO → uniform"


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



def _average(results: Mapping[str, Mapping[str, float]]) -> float:
    return float(np.mean([r["ndcg@10"] for r in results.values()]))


def kendall_tau(dev: Mapping[str, float], labelled: Mapping[str, float]) -> dict[str, float]:
    """Kendall's tau-b (``scipy.stats.kendalltau``) between two scorings of the same candidates, with its p and
    the number of candidates."""
    from scipy.stats import kendalltau

    names = [n for n in dev if n in labelled]
    res = kendalltau([dev[n] for n in names], [labelled[n] for n in names])
    return {"tau": float(res.statistic), "p": float(res.pvalue), "candidates": len(names)}



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


def _comparisons(result: AdaptResult, config: AdaptConfig) -> dict[str, Any]:
    """Paired tests over queries: every report model against uniform fine-tuning, and the adapted model against
    COCO -> uniform, on the synthetic test and on the labelled split."""
    from drmix.evaluation.compare import Scored, compare

    adapted = next(lb for lb in result.models if lb.startswith("adapted"))
    out = {}
    for name, suite in (("synthetic test", result.synthetic_test), (config.eval.eval_split, result.labelled)):
        if suite is None:
            continue
        pq = {lb: suite.per_query[lb] for lb in result.models}
        out[f"{name}: vs uniform fine-tuning"] = compare([Scored(lb, q) for lb, q in pq.items()], baseline=UNIFORM,
                                                         metric="ndcg@10", seed=config.optim.seed)
        out[f"{name}: adapted vs COCO → uniform"] = compare(
            [Scored(COCO_UNIFORM, pq[COCO_UNIFORM]), Scored(adapted, pq[adapted])], baseline=COCO_UNIFORM,
            metric="ndcg@10", seed=config.optim.seed)
    return out


def _choice_comparison(result: AdaptResult, config: AdaptConfig) -> Any:
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
