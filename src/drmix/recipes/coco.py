"""The COCO-DR recipe (``drmix pipeline coco``): COCO on the target corpora, fine-tuning, evaluation.

Specification: COCO-DR ("COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and
Distributionally Robust Learning", Yu et al., EMNLP 2022, arXiv:2210.15212), Sec. 4 and Table 2 (the -COCO ablation):

1. ``coco/`` -- continuous contrastive pretraining on the target corpora (:mod:`drmix.pretrain.coco`);
2. ``finetune-coco-<strategy>/`` -- fine-tuning of the COCO model on the source collections with the
   chosen strategy (``static`` = uniform mixture, or ``idro``);
3. ``finetune-base-<strategy>/`` -- the same fine-tuning (same data, seed, steps and strategy) from the
   original model, i.e. without COCO;
4. evaluation of both on the BEIR test sets: nDCG@10 per dataset and on average, the difference, and a
   paired t-test over queries (every query of every dataset, COCO vs no COCO).

Each stage writes a subdirectory of ``output_dir``; rerunning the command skips finished stages and
resumes an interrupted one. The table is written to ``summary.md`` / ``summary.json``.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from drmix.config import PipelineBaseConfig, TrainConfig
from drmix.errors import ConfigError
from drmix.io import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)


class CocoPipelineConfig(PipelineBaseConfig):
    """``drmix pipeline coco``: the fine-tuning fields, the target corpora, COCO overrides and the test sets."""

    corpus: list[str] = Field(default_factory=list, description="Target corpora for COCO (BEIR dirs or JSONL).")
    output_dir: str = Field("runs/coco-pipeline", description="Root directory; each stage writes a subdirectory.")
    strategy: Literal["static", "idro"] = Field("static", description="Fine-tuning strategy: static (uniform) or idro.")
    coco: dict[str, Any] = Field(default_factory=dict, description="Overrides of COCO fields (max_steps, batch_size, "
                                                                   "learning_rate, span_max_tokens, max_documents, ...).")


@dataclass
class CocoPipelineResult:
    output_dir: Path
    models: dict[str, Path]
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)   # label -> dataset -> qid -> v
    table: str = ""


def _own_fields() -> set[str]:
    return set(CocoPipelineConfig.model_fields) - set(TrainConfig.model_fields)


def coco_stage_config(config: CocoPipelineConfig):
    from drmix.pretrain.runner import CocoConfig

    values = config.model_dump(exclude=_own_fields() | {"strategy", "data", "mixture", "learning_rate",
                                                        "output_dir", "idro", "tdro", "infdds", "eval_data", "transfer",
                                                        "weights_file", "reference_model", "dev"})
    values.update(corpus=list(config.corpus), output_dir=str(Path(config.output_dir) / "coco"), resume=True)
    values.update(config.coco)
    try:
        return CocoConfig.model_validate(values)
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"invalid --coco option {'.'.join(map(str, err['loc']))}: {err['msg']}.",
                          fix="see `drmix pretrain coco --help` for the fields.") from None


def finetune_config(config: CocoPipelineConfig, model: str | None, out: Path) -> TrainConfig:
    values = config.model_dump(exclude=_own_fields())
    values.update(model=model, output_dir=str(out), resume=True)
    return TrainConfig.model_validate(values)


def per_query_scores(model_dir: str | Path, test_data: list[str], *, split: str = "test",
                     max_queries: int | None = None, max_docs: int | None = None, seed: int = 0,
                     metric: str = "ndcg@10", max_length: int | None = None,
                     cache: Path | None = None) -> dict[str, dict[str, float]]:
    """``{dataset: {query_id: metric}}`` of a model on BEIR test sets (cached in ``cache`` when given)."""
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import dataset_names, subsample
    from drmix.evaluation.metrics import evaluate_run
    from drmix.model.encoder import load_encoder
    from drmix.model.instructions import query_prompt_for
    from drmix.retrieval.index import index_corpus, search_queries

    key = {"data": [str(Path(d).resolve()) for d in test_data], "split": split, "max_queries": max_queries,
           "max_docs": max_docs, "seed": seed, "metric": metric, "max_length": max_length}
    if cache is not None and cache.exists():
        got = json.loads(cache.read_text(encoding="utf-8"))
        if got.get("key") == key:
            return got["scores"]
    model = load_encoder(str(model_dir) if model_dir else None)
    out: dict[str, dict[str, float]] = {}
    for name, root in zip(dataset_names(test_data), test_data):
        data = subsample(load_beir(root, split), max_queries=max_queries, max_docs=max_docs, seed=seed)
        index = index_corpus(model, data.corpus, show_progress=False, store_texts=False, max_length=max_length)
        run = search_queries(model, index, data.queries, k=100, max_length=max_length,
                             prompt=query_prompt_for(model, data.name))  # a dataset prompt saved in the folder
        out[name] = {q: v[metric] for q, v in evaluate_run(data.qrels, run, [metric], per_query=True).items()}
    if cache is not None:
        atomic_write_json(cache, {"key": key, "model": str(model_dir), "scores": out})
    return out


def paired_test(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, float]:
    """Paired t-test over every query of every dataset (``b - a``): mean difference, 95% interval, p."""
    from scipy import stats

    diffs = np.array([b[d][q] - a[d][q] for d in a for q in a[d] if q in b.get(d, {})])
    if len(diffs) < 2:
        return {"n": int(len(diffs)), "mean": float(diffs.mean()) if len(diffs) else float("nan"),
                "low": float("nan"), "high": float("nan"), "p": float("nan")}
    sd = diffs.std(ddof=1)
    half = stats.t.ppf(0.975, len(diffs) - 1) * sd / np.sqrt(len(diffs))
    p = float(stats.ttest_1samp(diffs, 0.0).pvalue) if sd > 0 else (1.0 if diffs.mean() == 0 else 0.0)
    return {"n": int(len(diffs)), "mean": float(diffs.mean()), "low": float(diffs.mean() - half),
            "high": float(diffs.mean() + half), "p": p}


def comparison_table(scores: dict[str, dict[str, dict[str, float]]], base: str, other: str,
                     metric: str = "ndcg@10") -> str:
    """Markdown: per dataset and on average the two models, the difference and the paired test."""
    lines = [f"| {metric} | {base} | {other} | difference | 95% interval | p (paired t, queries) |",
             "|---|---:|---:|---:|---|---:|"]
    for d in scores[base]:
        t = paired_test({d: scores[base][d]}, {d: scores[other][d]})
        a = float(np.mean(list(scores[base][d].values())))
        b = float(np.mean(list(scores[other][d].values())))
        lines.append(f"| {d} | {a:.4f} | {b:.4f} | {b - a:+.4f} | [{t['low']:+.4f}, {t['high']:+.4f}] | {t['p']:.3g} |")
    if len(scores[base]) > 1:
        a = float(np.mean([np.mean(list(v.values())) for v in scores[base].values()]))
        b = float(np.mean([np.mean(list(v.values())) for v in scores[other].values()]))
        t = paired_test(scores[base], scores[other])
        lines.append(f"| average | {a:.4f} | {b:.4f} | {b - a:+.4f} | all queries: [{t['low']:+.4f}, "
                     f"{t['high']:+.4f}] | {t['p']:.3g} |")
    return "\n".join(lines) + "\n"


def run_coco_pipeline(config: CocoPipelineConfig) -> CocoPipelineResult:
    """Run every stage (skipping finished ones) and write ``summary.md`` / ``summary.json``."""
    from drmix.pretrain.runner import pretrain_coco
    from drmix.train.trainer import train

    if not config.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR (repeatable).")
    if not config.data:
        raise ConfigError("no fine-tuning data given.", fix="pass --data (training collections).")
    if not config.test_data:
        raise ConfigError("no test data given.", fix="pass --test-data BEIR_DIR (repeatable).")
    root = Path(config.output_dir)
    coco_cfg = coco_stage_config(config)
    coco_out = Path(coco_cfg.output_dir)
    if (coco_out / "model" / "modules.json").exists():
        log.info("COCO: finished earlier in %s", coco_out)
    else:
        pretrain_coco(coco_cfg)
    models: dict[str, Path] = {}
    strat = "uniform" if config.strategy == "static" else config.strategy
    for label, start in ((f"no COCO + {strat}", config.model), (f"COCO + {strat}", str(coco_out / "model"))):
        out = root / f"finetune-{'coco' if start != config.model else 'base'}-{strat}"
        if not (out / "model" / "modules.json").exists():
            train(finetune_config(config, start, out))
        models[label] = out / "model"
    result = CocoPipelineResult(root, models)
    for label, path in models.items():
        result.scores[label] = per_query_scores(path, config.test_data, split=config.test_split,
                                                max_queries=config.test_max_queries, max_docs=config.test_max_docs,
                                                seed=config.seed, cache=path.parent / f"scores-{config.test_split}.json")
    base, other = list(models)
    result.table = comparison_table(result.scores, base, other)
    atomic_write_text(root / "summary.md", "# COCO-DR pipeline\n\n" + result.table)
    atomic_write_json(root / "summary.json", {
        "models": {k: str(v) for k, v in models.items()},
        "ndcg@10": {k: {d: float(np.mean(list(s.values()))) for d, s in v.items()} for k, v in result.scores.items()},
        "paired": paired_test(result.scores[base], result.scores[other])})
    return result
