"""Evaluation during training as a trainer listener: the ``eval_data`` BEIR directories every ``eval_every``
steps and at the end (:class:`~drmix.evaluation.evaluate.DevEvaluator`), and sentence-transformers evaluators
(``--evaluator nanobeir``, or evaluator objects given to :func:`drmix.api.train`), on the main process; the scores
go to ``metrics.jsonl`` as ``{"step": N, "eval": {...}}`` records -- ``"scifact/ndcg@10"`` for drmix's, an
evaluator's own keys as ``"<dataset>/<metric>"`` (``"NanoNFCorpus/cosine_ndcg@10"``,
``"NanoBEIR_mean/cosine_ndcg@10"``), where the report and the model card read them."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from drmix.errors import ConfigError
from drmix.evaluation.evaluate import DevEvaluator
from drmix.listener import Listener

log = logging.getLogger(__name__)

#: the evaluators ``--evaluator`` names
EVALUATOR_NAMES = ("nanobeir",)
_EVALUATOR_FIX = ("use --evaluator nanobeir or nanobeir:NAME,NAME (e.g. nanobeir:msmarco,nfcorpus), evaluate local "
                  "BEIR folders with --eval-data, or pass evaluator objects to drmix.train(..., evaluator=...).")


def build_evaluator(spec: str) -> Any:
    """The sentence-transformers evaluator ``spec`` names (``nanobeir[:NAME,NAME]``); its datasets are loaded now,
    so a Hub that cannot be reached fails here, before any model or data loads."""
    name, _, arg = spec.partition(":")
    if name.strip().lower() != "nanobeir":
        raise ConfigError(f"unknown evaluator {spec!r} (known: {', '.join(EVALUATOR_NAMES)}).", fix=_EVALUATOR_FIX)
    from sentence_transformers.sentence_transformer.evaluation import NanoBEIREvaluator
    from sentence_transformers.sentence_transformer.evaluation.nano_beir import DATASET_NAME_TO_HUMAN_READABLE

    names = [n.strip().lower() for n in arg.split(",") if n.strip()] or None
    unknown = [n for n in names or () if n not in DATASET_NAME_TO_HUMAN_READABLE]
    if unknown:
        raise ConfigError(f"evaluator {spec!r}: NanoBEIR has no dataset {', '.join(map(repr, unknown))}.",
                          fix=f"name some of: {', '.join(DATASET_NAME_TO_HUMAN_READABLE)}.")
    try:
        evaluator = NanoBEIREvaluator(dataset_names=names)
    except Exception as e:  # noqa: BLE001 - whatever datasets / huggingface_hub raise when the Hub cannot be read
        from huggingface_hub import constants

        why = ("HF_HUB_OFFLINE is set and they are not in the local cache" if constants.HF_HUB_OFFLINE
               else f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise ConfigError(f"evaluator {spec!r}: NanoBEIR's datasets (sentence-transformers/NanoBEIR-en on the "
                          f"Hugging Face Hub) could not be loaded ({why}).",
                          fix="run once with network access to cache them, or evaluate local BEIR folders with "
                              "--eval-data instead of --evaluator.") from None
    try:
        evaluator.drmix_spec = spec  # named in the config (--evaluator), not given as an object
    except AttributeError:  # pragma: no cover - an evaluator class with __slots__
        pass
    return evaluator


def evaluator_name(evaluator: Any) -> str:
    return str(getattr(evaluator, "name", "") or type(evaluator).__name__)


def evaluator_scores(evaluator: Any, model: Any, step: int) -> dict[str, float]:
    """``evaluator(model)`` as ``{"<dataset>/<metric>": value}``: a key led by the evaluator's name is split after
    it, any other at its first ``_`` (NanoBEIR's per-dataset ``NanoNFCorpus_cosine_ndcg@10``)."""
    raw = evaluator(model, output_path=None, epoch=-1, steps=step)
    if not isinstance(raw, dict):  # an evaluator of the old API returns its primary score only
        return {f"{evaluator_name(evaluator)}/score": float(raw)}
    prefix = evaluator_name(evaluator) + "_"
    out: dict[str, float] = {}
    for key, value in raw.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        key = str(key)
        if key.startswith(prefix) and len(key) > len(prefix):
            dataset, metric = prefix[:-1], key[len(prefix):]
        else:
            dataset, _, metric = key.partition("_")
            dataset, metric = (dataset, metric) if metric else (evaluator_name(evaluator), dataset)
        out[f"{dataset}/{metric}"] = float(value)
    return out


class PeriodicEvaluation(Listener):
    """Evaluates the model every ``eval_every`` steps (0: only at the end) and once more at the end unless the
    last step was just evaluated: the ``eval_data`` folders (when set) and the ``evaluators``."""

    def __init__(self, config: Any, evaluators: Sequence[Any] = ()) -> None:
        e = config.eval
        self.every = e.eval_every
        self.evaluator = (DevEvaluator(e.eval_data, split=e.eval_split, max_queries=e.eval_max_queries,
                                       seed=config.optim.seed, query_instructions=e.query_instructions)
                          if e.eval_data else None)
        self.evaluators = list(evaluators)
        #: ``{dataset: evaluator}`` of the scores a sentence-transformers evaluator made (the card names it)
        self.sources: dict[str, Any] = {}

    def on_step_end(self, trainer: Any, ctx: Any) -> bool:
        if self.every and trainer.step % self.every == 0:
            self.evaluate(trainer)
        return False

    def on_train_end(self, trainer: Any) -> None:
        if not self.every or trainer.config.optim.max_steps % self.every:
            self.evaluate(trainer)

    def evaluate(self, trainer: Any) -> None:
        if trainer.is_main:
            scores = self.evaluator(trainer.model) if self.evaluator is not None else {}
            for ev in self.evaluators:
                made = evaluator_scores(ev, trainer.model, trainer.step)
                self.sources.update((key.rpartition("/")[0], ev) for key in made)
                scores.update(made)
            trainer.metrics.append({"step": trainer.step, "eval": scores})
            log.info("step %d eval: %s", trainer.step, scores)
        trainer.barrier()
