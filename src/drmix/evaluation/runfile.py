"""Score run files (TREC, or drmix search's JSONL) against BEIR qrels: ``drmix eval --run RUN --data DIR``.

The same metrics and conventions as a model's evaluation (:func:`drmix.evaluation.metrics.evaluate_run`): each
run is cut to its top ``k`` per query (score, then document id, descending -- trec_eval's order), a judged query
the run does not rank scores 0, and the report is an :class:`~drmix.evaluation.evaluate.EvalReport` (eval.json,
eval.md, ``drmix compare``) whose model is named after the run files.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from drmix.data.beir import CORPUS_FILE, load_beir, read_corpus_ids
from drmix.errors import ConfigError
from drmix.evaluation.evaluate import EvalReport, _check_k, dataset_names, subsample
from drmix.evaluation.metrics import DEFAULT_METRICS, evaluate_run, truncate_run
from drmix.retrieval.trec import read_run

log = logging.getLogger(__name__)


def warn_unknown_documents(path: str | Path, run: dict[str, dict[str, float]], corpus_file: Path) -> list[str]:
    """Warn when the run ranks document ids the qrels' corpus does not hold (a run of another corpus or version,
    or ids written another way: ``doc12`` for ``12``): they can never be relevant, so the scores are silently
    low. Names how many and the first few; returns them (sorted). Nothing when the folder has no corpus file."""
    if not corpus_file.is_file():
        return []
    known = read_corpus_ids(corpus_file)
    ranked = {d for docs in run.values() for d in docs}
    missing = sorted(ranked - known)
    if missing:
        shown = ", ".join(repr(d) for d in missing[:5]) + (", ..." if len(missing) > 5 else "")
        log.warning("%s: %d of the %d document ids the run ranks are not in %s (%s); they can never be relevant. "
                    "Was the run made from another corpus, or are its ids written another way?", path, len(missing),
                    len(ranked), corpus_file, shown)
    return missing


def evaluate_run_files(runs: Sequence[str | Path], data_dirs: Sequence[str | Path], *, split: str = "test",
                       k: int = 100, metrics: Sequence[str] = DEFAULT_METRICS, model_name: str = "",
                       max_queries: int | None = None, seed: int = 0) -> EvalReport:
    """Score ``runs[i]`` against the ``split`` qrels of ``data_dirs[i]``; returns the report a model's
    evaluation gives (``info`` names each run file; ``model`` is ``model_name`` or the run files' names).
    ``max_queries`` scores a seeded sample of the judged queries, the queries a model's evaluation with the
    same ``max_queries`` and ``seed`` keeps (:func:`~drmix.evaluation.evaluate.subsample`), labelled as sampled."""
    if len(runs) != len(data_dirs):
        raise ConfigError(f"{len(runs)} --run file(s) for {len(data_dirs)} --data director(ies).",
                          fix="give one --run per --data, in the same order.")
    metrics = tuple(metrics)
    _check_k(k, metrics)
    results, info, per_query = {}, {}, {}
    for name, root, path in zip(dataset_names(data_dirs), data_dirs, runs):
        t0 = time.perf_counter()
        data = load_beir(root, split, load_corpus=False)
        run = truncate_run(read_run(path), k)
        unknown = len(set(run) - set(data.qrels))
        if unknown:
            log.warning("%s: %d of the run's %d queries are not judged in %s (split %s); they are ignored",
                        path, unknown, len(run), root, split)
        warn_unknown_documents(path, run, Path(root) / CORPUS_FILE)
        judged = len(data.qrels)
        if max_queries is not None:
            data = subsample(data, max_queries=max_queries, seed=seed)
        values = evaluate_run(data.qrels, run, metrics, per_query=True)
        per_query[name] = values
        results[name] = {m: sum(v[m] for v in values.values()) / len(values) for m in metrics}
        info[name] = {"queries": len(data.qrels), "seconds": round(time.perf_counter() - t0, 2), "path": str(root),
                      "run": str(path)}
        if len(data.qrels) != judged:
            info[name].update(subsample={"of_queries": judged, "seed": seed})
        log.info("%s: %s", name, ", ".join(f"{m}={v:.4f}" for m, v in results[name].items()))
    label = model_name or ", ".join(Path(p).name for p in runs)
    return EvalReport(model=label, split=split, results=results, info=info, per_query=per_query)
