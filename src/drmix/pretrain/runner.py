"""``drmix pretrain coco`` as a library function: chunk the target corpora, then train with the COCO loss.

The training loop is the shared :class:`~drmix.train.trainer.Trainer` (same optimiser, schedule, DDP,
checkpoints and exact resume as ``drmix train``); COCO plugs in as its objective
(:class:`~drmix.pretrain.objective.CocoObjective`: two spans of a drawn document, the COCO loss). The output ``model/`` folder is a SentenceTransformer that
``drmix train --model`` fine-tunes.

As the authors' code does it (github.com/OpenMatch/COCO-DR, ``COCO/run_coco_pre_training.py`` and
``COCO/modeling.py``, ``CoCondenserForPretraining.forward``):

* ``mixture: pooled`` (default): every target corpus goes into **one** dataset, drawn as random batches
  without replacement, so a batch mixes the corpora in proportion to their sizes and every document is
  seen once per epoch. ``mixture: uniform`` / ``size`` keep one collection per corpus and draw with
  ``batching`` (``homogeneous``: one corpus a batch; ``mixed``) under uniform or size-proportional corpus
  weights -- drmix's earlier rule, kept as an option (a small corpus then gets as many batches as a large one
  under ``uniform``).
* ``dropout: false`` (default): the backbone runs in eval mode inside the contrastive forward
  (``self.lm.eval()``), so the two spans' embeddings carry no dropout noise; ``dropout: true`` trains with
  the model's dropout (e.g. MiniLM's 0.1).
"""
from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from drmix.config import INPUT, OPERATIONAL, EvalConfig, OptimConfig, Part, RunConfig, TrainConfig, setting
from drmix.config.train import TrainingParts
from drmix.errors import ConfigError
from drmix.io.atomic import atomic_write_json, atomic_write_text
from drmix.train.listeners import Listener

log = logging.getLogger(__name__)


CocoOptim = OptimConfig.variant("CocoOptim", learning_rate=(1e-4, "Peak learning rate (paper: 1e-4 for a base model)."))
CocoRun = RunConfig.variant("CocoRun", output_dir=("runs/coco", "Where the model, logs, checkpoints and span tables go."))


class CocoOptions(Part):
    """The target corpora and how they become spans."""

    title: ClassVar[str] = "COCO: corpora and spans"

    corpus: list[str] = setting(default_factory=list, role=INPUT,
                              description="Target corpora: BEIR directories (corpus.jsonl) or JSONL files with 'text'.")
    span_max_tokens: int = setting(30, ge=1, description="Greedy sentence packing: at most this many tokens a chunk.")
    new_chunk_probability: float = setting(0.1, ge=0, le=1, description="Chance of starting a new chunk before "
                                                                      "each sentence.")
    span_max_length: int = setting(128, ge=4, description="Tokens a span is cropped to when encoded (paper: 128).")
    max_documents: int | None = setting(None, ge=1, description="Seeded sample of at most this many documents per "
                                                              "corpus (default: all).")
    num_proc: int | None = setting(None, ge=1, role=OPERATIONAL,
                                 description="Processes for sentence splitting (default: one).")
    mixture: Literal["pooled", "uniform", "size"] = setting(
        "pooled", description="pooled: all corpora in one dataset, random mixed batches, each document once per "
                              "epoch (the authors'); uniform / size: one collection per corpus drawn with "
                              "--batching under uniform or size-proportional corpus weights.")
    dropout: bool = setting(False, description="Train with the backbone's dropout; default off: the backbone runs "
                                             "in eval mode in the COCO forward, as the authors do.")


class CocoConfig(TrainingParts):
    """Options of ``drmix pretrain coco``: the training parts that apply (model, batches, optimisation,
    evaluation, output) and the COCO part (corpora, spans)."""

    command: ClassVar[str] = "drmix pretrain coco"

    optim: CocoOptim = Field(default_factory=CocoOptim)  # type: ignore[valid-type]
    eval: EvalConfig = Field(default_factory=EvalConfig)
    run: CocoRun = Field(default_factory=CocoRun)  # type: ignore[valid-type]
    coco: CocoOptions = Field(default_factory=CocoOptions)


#: flags of the shared parts that mean nothing for COCO (no labelled data; spans set the lengths)
COCO_SKIP = frozenset({"data", "max_collection_size", "query_max_length", "doc_max_length", "num_negatives",
                       "in_batch_negatives"})


def _card(config: CocoConfig, names: list[str]) -> dict:
    """What the model card says about a COCO-pretrained model (drmix.report.card.CardInfo fields)."""
    c = config.coco
    return {"kind": "COCO-pretrained", "papers": ["coco"],
            "tags": ["drmix", "dense-retrieval", "coco-pretraining"],
            "summary": (f"Continuously pretrained with COCO (COCO-DR, Sec. 4.1) on the target corpora {', '.join(names)}: "
                        "two spans of one document are a positive pair. It is a starting point for fine-tuning, not "
                        "a finished retriever."),
            "loss": "COCO contrastive loss between two spans of one document (in-batch negatives)",
            "loss_config": {"temperature": config.contrastive.temperature, "span_max_tokens": c.span_max_tokens,
                            "dropout": c.dropout},
            "weights_how": "every corpus pooled into one collection" if c.mixture == "pooled"
            else f"{c.mixture} over the corpora"}


def stage_config(config: CocoConfig) -> TrainConfig:
    """The training run COCO is: its parts, one collection per corpus (or one pooled), no hard negatives,
    spans of ``span_max_length`` tokens on both sides."""
    c = config.coco
    return TrainConfig.from_parts(config, mixture="uniform" if c.mixture == "pooled" else c.mixture,
                                  num_negatives=0, query_max_length=c.span_max_length,
                                  doc_max_length=c.span_max_length, in_batch_negatives=True)


def check_earlier_run(config: CocoConfig) -> dict:
    """Before anything is written: an earlier run in ``output_dir`` is continued only with ``--resume`` and only
    with the COCO settings its ``coco.yaml`` recorded (the trainer's own check sees only the training fields,
    not the span settings), by the resume rules of :mod:`drmix.train.resume_check`; with
    ``--resume-with-changes`` the changes are logged. Returns them."""
    import yaml

    from drmix.outputs import run_finished
    from drmix.train.checkpoint import latest_checkpoint
    from drmix.train.resume_check import ResumeMismatchError, training_changes

    out = Path(config.run.output_dir)
    if not (run_finished(out) or latest_checkpoint(out) is not None):
        return {}
    if not config.run.resume:
        raise ConfigError("the output directory already holds a run.", path=out,
                          fix="pass --resume to continue it, or choose another --output-dir.")
    try:
        before = yaml.safe_load((out / "coco.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    if not isinstance(before, dict):
        return {}
    changes = training_changes(before, config.model_dump(mode="json"), CocoConfig)
    if changes:
        listed = ", ".join(f"{k} {v['before']!r} -> {v['after']!r}" for k, v in changes.items())
        if not config.run.resume_with_changes:
            raise ResumeMismatchError(f"the earlier COCO run was made with different settings: {listed}.",
                                      path=out / "coco.yaml", fix="resume with the original settings, pass "
                                      "--resume-with-changes to continue with the new ones, or start a new "
                                      "--output-dir.")
        log.warning("COCO resumed with changed settings: %s", listed)
    return changes


def pretrain_coco(config: CocoConfig, *, callbacks=()):
    """Run COCO; returns the trainer's TrainResult (``model_dir`` is the pretrained SentenceTransformer;
    ``details["span_stats"]`` what chunking did to each corpus)."""
    from drmix.api import train
    from drmix.data.collections import Collection
    from drmix.model.backbone import BackboneOptions, load_retriever
    from drmix.pretrain.coco import build_spans, check_corpus_names
    from drmix.pretrain.objective import CocoObjective

    c = config.coco
    names = check_corpus_names(c.corpus)
    out = Path(config.run.output_dir)
    check_earlier_run(config)
    model = load_retriever(config.model.name_or_path, BackboneOptions.from_config(config.model),
                           device=config.run.device, trust_remote_code=config.model.trust_remote_code)
    collections, all_stats = [], []
    for i, (path, name) in enumerate(zip(c.corpus, names)):
        ds, stats = build_spans(path, out / "spans", model.tokenizer, corpus_index=i, seed=config.optim.seed,
                                max_tokens=c.span_max_tokens, new_chunk_probability=c.new_chunk_probability,
                                max_documents=c.max_documents, num_proc=c.num_proc, name=name)
        log.info("COCO spans: %s", stats.describe())
        if stats.dropped_short + stats.dropped_empty:
            log.warning("%s: %d of %d documents dropped (fewer than 2 chunks of <= %d tokens)", name,
                        stats.dropped_short + stats.dropped_empty, stats.documents, c.span_max_tokens)
        collections.append(Collection(name=name, dataset=ds, source=str(path)))
        all_stats.append(stats)
    if c.mixture == "pooled" and len(collections) > 1:
        import datasets

        collections = [Collection(name="+".join(names),
                                  dataset=datasets.concatenate_datasets([x.dataset for x in collections]),
                                  source=", ".join(str(x.source) for x in collections))]
    train_cfg = stage_config(config)
    objective = CocoObjective(temperature=config.contrastive.temperature,
                              cross_device=config.contrastive.cross_device_negatives, dropout=c.dropout,
                              card=_card(config, names), span_stats=all_stats)
    return train(train_cfg, objective=objective, collections=collections, model=model, callbacks=callbacks,
                 listeners=[_CocoFiles(config, all_stats)])


class _CocoFiles(Listener):
    """``coco.yaml`` (the COCO config) once the output folder is claimed, ``spans.json`` at the end (main process)."""

    def __init__(self, config: CocoConfig, stats: list) -> None:
        self.config, self.stats = config, stats

    def on_start(self, trainer) -> None:
        if trainer.is_main:
            atomic_write_text(Path(trainer.out) / "coco.yaml", self.config.dump_yaml())

    def on_finish(self, trainer, model, weights) -> None:
        if trainer.is_main:
            atomic_write_json(Path(trainer.out) / "spans.json", [asdict(s) for s in self.stats])
