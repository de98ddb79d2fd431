"""MTEB tasks through the ``mteb`` package, written as drmix's ``eval.json`` (``drmix eval --mteb``).

:func:`evaluate_mteb` runs any MTEB task (``NFCorpus``, ``SciFact``, ``STS12`` ...; ``mteb`` 2.x,
``pip install drmix[mteb]``) or a local BEIR directory (:func:`beir_task`, MTEB's custom retrieval task
built from local files) on a drmix model folder or any SentenceTransformer-loadable model, with
``mteb.evaluate``: MTEB loads the data, encodes, searches and scores by its own protocol (exact search of
its top 1000, its prompts, its metrics). drmix then writes

* MTEB's own result files, ``OUT/mteb/results/<model>/<revision>/<Task>.json`` (``mteb.ResultCache``'s
  layout, readable by ``mteb.load_results`` and MTEB's leaderboard tools);
* ``OUT/eval.json`` / ``OUT/eval.md`` in the format of ``drmix eval`` (:class:`~drmix.evaluation.evaluate.
  EvalReport`): per task the MTEB ``main_score`` and, for retrieval tasks, drmix's metrics (ndcg@10,
  recall@100, mrr@10, map@100 by default) with **per-query scores**, so ``drmix compare`` runs its paired
  tests and ``drmix report`` shows the table.

Per-query scores: MTEB's results hold only the means. For retrieval tasks MTEB saves its ranking
(``prediction_folder``: query -> document -> score, its top 1000), and drmix scores that ranking per query
with :func:`drmix.evaluation.metrics.evaluate_run` (pytrec_eval, as MTEB does) against the qrels MTEB
evaluated (queries without a relevant document dropped, as MTEB drops them; the task's
``ignore_identical_ids`` and ``skip_first_result`` applied as MTEB applies them), so the mean of
``ndcg@10`` over queries equals MTEB's ``ndcg_at_10``. For the other task types (STS, classification,
clustering ...) MTEB exposes no per-example score: ``eval.json`` records the main score and says so under
``info[task]["per_query"]``, and ``drmix compare`` refuses their paired test with that reason.

Offline: a task name MTEB does not know fails at once (with MTEB's suggestion); a known task whose data
is not in the local Hugging Face cache fails before the model is loaded -- in seconds, since the Hub is
probed once with a 3 s timeout instead of the Hub client's retries (set ``HF_HUB_OFFLINE=1`` to read a
cache an earlier online run filled).
"""
from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError
from drmix.evaluation.evaluate import EvalReport, _resolve_model
from drmix.evaluation.metrics import DEFAULT_METRICS, evaluate_run, parse_metric

log = logging.getLogger(__name__)

MTEB_DIR = "mteb"          # MTEB's result files inside the eval output folder
HUB_PROBE_TIMEOUT = 3.0    # seconds: the one request that tells an offline machine from a slow Hub


def _import_mteb():
    try:
        import mteb
    except ImportError:
        raise ConfigError("the mteb package is not installed.",
                          fix="pip install 'drmix[mteb]' (or pip install mteb).") from None
    return mteb


# ---------------------------------------------------------------------------------------------- tasks

def beir_task(root: str | Path, split: str = "test", *, name: str | None = None, language: str = "eng-Latn"):
    """An MTEB retrieval task (``mteb.AbsTaskRetrieval``) over a local BEIR directory.

    MTEB's custom-task route: a subclass with its own ``TaskMetadata`` whose ``load_data`` fills
    ``self.dataset`` (here from :func:`drmix.data.beir.load_beir`, which checks every file and line).
    ``name`` defaults to the folder's name; ``language`` is MTEB's ``eval_langs`` code (metadata only).
    """
    _import_mteb()
    from mteb import TaskMetadata
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    from drmix.data.beir import available_splits

    root = Path(root).expanduser()
    if split not in available_splits(root):
        raise DataError(f"the BEIR directory has no qrels/{split}.tsv (splits: "
                        f"{', '.join(available_splits(root)) or 'none'}).", path=root,
                        fix="pass --split with one of its splits.")
    task_name = name or root.resolve().name
    metadata = TaskMetadata(
        name=task_name, description=f"Local BEIR directory {root}", reference=None,
        dataset={"path": str(root.resolve()), "revision": "local"}, type="Retrieval", category="t2t",
        modalities=["text"], eval_splits=[split], eval_langs=[language], main_score="ndcg_at_10")

    class LocalBeirRetrieval(AbsTaskRetrieval):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:  # noqa: ARG002 - MTEB's signature
            if self.data_loaded:
                return
            from datasets import Dataset

            from drmix.data.beir import load_beir

            data = load_beir(root, split)
            corpus = Dataset.from_dict({"id": list(data.corpus),
                                        "title": [d.get("title") or "" for d in data.corpus.values()],
                                        "text": [d.get("text") or "" for d in data.corpus.values()]})
            queries = Dataset.from_dict({"id": list(data.queries), "text": list(data.queries.values())})
            self.dataset = {"default": {split: {"corpus": corpus, "queries": queries,
                                                "relevant_docs": {q: dict(d) for q, d in data.qrels.items()},
                                                "top_ranked": None}}}
            self.data_loaded = True

    LocalBeirRetrieval.metadata = metadata
    LocalBeirRetrieval.__name__ = LocalBeirRetrieval.__qualname__ = f"LocalBeir_{task_name}"
    return LocalBeirRetrieval()


def parse_task_list(values: Sequence[str] | None) -> list[str]:
    """``["NFCorpus,SciFact", "STS12"]`` -> ``["NFCorpus", "SciFact", "STS12"]`` (repeatable, comma-separated)."""
    out: list[str] = []
    for v in values or ():
        out.extend(t.strip() for t in str(v).split(",") if t.strip())
    return out


def resolve_task(spec: Any, split: str | None = None):
    """An MTEB task from a name (``"SciFact"``), a BEIR directory, or an ``mteb.AbsTask`` (returned as is)."""
    mteb = _import_mteb()
    if isinstance(spec, mteb.AbsTask):
        return spec
    text = str(spec)
    if Path(text).expanduser().is_dir():
        return beir_task(text, split or "test")
    try:
        task = mteb.get_task(text)
    except KeyError as e:
        hint = str(e.args[0]) if e.args else text
        raise ConfigError(f"unknown MTEB task {text!r} ({hint.removeprefix('KeyError: ')}).",
                          fix="use an MTEB task name (mteb.get_tasks() lists them; names are case-sensitive) "
                              "or a local BEIR directory.") from None
    if split is not None:
        if split not in task.metadata.eval_splits:
            raise ConfigError(f"MTEB task {text} evaluates the split(s) {task.metadata.eval_splits}, not {split!r}.",
                              fix="drop --split (each task's own splits are used) or pass one of those.")
        task = mteb.get_task(text, eval_splits=[split])
    return task


def _is_local(task) -> bool:
    return str(task.metadata.dataset.get("revision")) == "local" or Path(str(task.metadata.dataset.get("path", ""))).is_dir()


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> tuple[bool, str]:
    """One HEAD request to the Hub endpoint (``HF_ENDPOINT``, proxies from the environment); ``(ok, why)``."""
    import httpx
    from huggingface_hub import constants

    try:
        httpx.head(constants.ENDPOINT, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as e:
        return False, f"{type(e).__name__}: {e}"
    return True, ""


def load_task_data(task) -> None:
    """Load the task's data now, turning an unavailable dataset into a :class:`DataError` (in seconds)."""
    if task.data_loaded:
        return
    name = task.metadata.name
    if not _is_local(task) and not _hub_offline():
        ok, why = hub_reachable()
        if not ok:
            raise DataError(f"MTEB task {name} needs its data set {task.metadata.dataset.get('path')} from the "
                            f"Hugging Face Hub, which is not reachable from here ({why}).",
                            fix="run online once (the data is then cached), set HF_HUB_OFFLINE=1 to read a cache an "
                                "earlier run filled, or evaluate a local BEIR directory (--mteb DIR or --data DIR).")
    from datasets.exceptions import DatasetNotFoundError
    from huggingface_hub.errors import HfHubHTTPError

    try:
        task.load_data()
    except (OSError, DatasetNotFoundError, HfHubHTTPError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        offline = " (HF_HUB_OFFLINE is set and the data is not in the local cache)" if _hub_offline() else ""
        raise DataError(f"MTEB task {name}: its data set {task.metadata.dataset.get('path')} could not be "
                        f"loaded{offline}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                        fix="run online once (the data is then cached under ~/.cache/huggingface), or evaluate a "
                            "local BEIR directory (--mteb DIR).") from None


# ------------------------------------------------------------------------------------------ evaluation

def _dataset_key(task_name: str, subset: str, split: str, n_splits: int) -> str:
    key = task_name if subset == "default" else f"{task_name}/{subset}"
    return key if n_splits == 1 else f"{key}:{split}"


def _per_query(task, predictions: Mapping[str, Mapping[str, float]], subset: str, split: str,
               metrics: Sequence[str]) -> dict[str, dict[str, float]]:
    """drmix's per-query metrics of MTEB's saved ranking against the qrels MTEB evaluated."""
    qrels = task.dataset[subset][split]["relevant_docs"]
    run = {q: dict(docs) for q, docs in predictions.items()}
    if getattr(task, "ignore_identical_ids", False):
        run = {q: {d: s for d, s in docs.items() if d != q} for q, docs in run.items()}
    if getattr(task, "skip_first_result", False):
        run = {q: dict(sorted(docs.items(), key=lambda kv: kv[1], reverse=True)[1:]) for q, docs in run.items()}
    qrels = {q: docs for q, docs in qrels.items() if docs}
    return evaluate_run(qrels, run, metrics, per_query=True)


def _model_label(model: Any, given: str) -> str:
    return given or (str(model) if isinstance(model, (str, Path)) else "default" if model is None else "model")


def evaluate_mteb(model: Any, tasks: Sequence[Any], *, output: str | Path | None = None, batch_size: int = 64,
                  metrics: Sequence[str] = DEFAULT_METRICS, model_name: str = "", split: str | None = None,
                  max_length: int | None = None, model_kwargs: dict | None = None,
                  show_progress: bool = False) -> EvalReport:
    """Run MTEB ``tasks`` (names, BEIR directories or ``mteb.AbsTask`` objects) on ``model`` (a
    SentenceTransformer, a folder, a drmix run, a hub id, or ``None`` for the bundled default).

    ``split``: evaluate only this split of every task (default: each task's own evaluation splits).
    ``output``: when given, MTEB's result files go to ``output/mteb`` (replaced atomically) and
    ``eval.json`` / ``eval.md`` beside it (each written atomically); callers check the folder first with
    :func:`drmix.outputs.claim_output` (``drmix eval`` does). Returns the :class:`EvalReport`.
    """
    mteb = _import_mteb()
    metrics = tuple(metrics)
    for m in metrics:
        parse_metric(m)
    if not tasks:
        raise ConfigError("no MTEB task given.", fix="pass --mteb TASK[,TASK...] (e.g. --mteb NFCorpus,SciFact).")
    resolved = [resolve_task(t, split) for t in tasks]
    names = [t.metadata.name for t in resolved]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"MTEB task(s) {dupes} given twice.", fix="name each task once.")
    for t in resolved:  # every data set before the model: a missing one fails in seconds
        load_task_data(t)
    label = _model_label(model, model_name)
    encoder, _ = _resolve_model(model, max_length, model_kwargs)
    card = getattr(encoder, "model_card_data", None)
    if card is not None and not (card.model_name or card.base_model):
        card.model_name = label  # the name MTEB files the results under (else "no_model_name/available")
    encode_kwargs = {"batch_size": batch_size, "show_progress_bar": show_progress}
    if not log.isEnabledFor(logging.DEBUG):  # MTEB's step-by-step INFO lines only with -v
        logging.getLogger("mteb").setLevel(logging.WARNING)
    from drmix.io.atomic import atomic_dir

    with tempfile.TemporaryDirectory(prefix="drmix-mteb-") as scratch:
        predictions_dir = Path(scratch) / "predictions"
        if output is None:
            results = mteb.evaluate(encoder, resolved, cache=None, prediction_folder=predictions_dir,
                                    overwrite_strategy="always", encode_kwargs=encode_kwargs,
                                    show_progress_bar=show_progress, co2_tracker=False)
            report = _report(resolved, results, predictions_dir, metrics, label, split, None)
        else:
            with atomic_dir(Path(output) / MTEB_DIR) as tmp:
                results = mteb.evaluate(encoder, resolved, cache=mteb.ResultCache(cache_path=tmp),
                                        prediction_folder=predictions_dir, overwrite_strategy="always",
                                        encode_kwargs=encode_kwargs, show_progress_bar=show_progress,
                                        co2_tracker=False)
                report = _report(resolved, results, predictions_dir, metrics, label, split, tmp)
            report.write(output)
    return report


def _report(tasks: list, results, predictions_dir: Path, metrics: tuple[str, ...], label: str,
            split: str | None, result_root: Path | None) -> EvalReport:
    _import_mteb()
    from mteb.abstasks.retrieval import AbsTaskRetrieval

    by_name = {t.metadata.name: t for t in tasks}
    scores: dict[str, dict[str, float]] = {}
    info: dict[str, dict[str, Any]] = {}
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    splits_seen: list[str] = []
    for tr in results.task_results:
        task = by_name[tr.task_name]
        retrieval = isinstance(task, AbsTaskRetrieval)
        pred_file = predictions_dir / f"{tr.task_name}_predictions.json"
        predictions = json.loads(pred_file.read_text(encoding="utf-8")) if retrieval and pred_file.is_file() else {}
        result_file = None
        if result_root is not None:
            found = sorted(result_root.rglob(f"{tr.task_name}.json"))
            result_file = str(Path(MTEB_DIR) / found[0].relative_to(result_root)) if found else None
        for sp, rows in tr.scores.items():
            splits_seen.append(sp)
            for row in rows:
                subset = row.get("hf_subset", "default")
                key = _dataset_key(tr.task_name, subset, sp, len(tr.scores))
                entry: dict[str, Any] = {"mteb_task": tr.task_name, "type": task.metadata.type, "split": sp,
                                         "subset": subset, "main_score": task.metadata.main_score,
                                         "mteb_version": tr.mteb_version, "seconds": round(tr.evaluation_time or 0, 2)}
                if result_file:
                    entry["result_file"] = result_file
                row_scores = {"main_score": float(row["main_score"])}
                if retrieval and subset in predictions and sp in predictions[subset]:
                    pq = _per_query(task, predictions[subset][sp], subset, sp, metrics)
                    per_query[key] = pq
                    n = len(pq)
                    row_scores.update({m: sum(v[m] for v in pq.values()) / n for m in metrics})
                    data = task.dataset[subset][sp]
                    entry.update(queries=n, documents=len(data["corpus"]))
                else:
                    entry["per_query"] = (f"not exposed by MTEB for {task.metadata.type} tasks: it reports only the "
                                          "task's aggregate scores")
                scores[key] = row_scores
                info[key] = entry
                log.info("%s: %s", key, ", ".join(f"{m}={v:.4f}" for m, v in row_scores.items()))
    shown_split = split or ",".join(dict.fromkeys(splits_seen))
    return EvalReport(model=label, split=shown_split, results=scores, info=info, per_query=per_query)


def mteb_unpaired(data: Mapping[str, Any]) -> dict[str, str]:
    """Datasets of an ``eval.json`` that were evaluated without per-query scores, with the reason."""
    info = data.get("info") or {}
    pq = data.get("per_query") or {}
    return {name: str(entry["per_query"]) for name, entry in info.items()
            if isinstance(entry, dict) and isinstance(entry.get("per_query"), str) and name not in pq}


def is_mteb_result(obj: Any) -> bool:
    """Whether a parsed JSON object is one of MTEB's own result files (a ``TaskResult``)."""
    return isinstance(obj, dict) and "task_name" in obj and "scores" in obj and "mteb_version" in obj


__all__ = ["beir_task", "evaluate_mteb", "hub_reachable", "is_mteb_result", "load_task_data", "mteb_unpaired",
           "parse_task_list", "resolve_task", "MTEB_DIR"]
