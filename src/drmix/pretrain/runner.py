"""``drmix pretrain coco`` as a library function: chunk the target corpora, then train with the COCO loss.

The training loop is the shared :class:`~drmix.train.trainer.Trainer` (same optimiser, schedule, DDP,
checkpoints and exact resume as ``drmix train``); COCO plugs in through its ``builder`` (two spans of a
drawn document, :class:`~drmix.pretrain.coco.SpanBuilder`) and ``loss_fn``
(:func:`~drmix.pretrain.coco.coco_losses`) hooks. The output ``model/`` folder is a SentenceTransformer that
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
from pathlib import Path
from typing import Literal

from pydantic import Field

from drmix.config import TrainConfig
from drmix.errors import ConfigError

log = logging.getLogger(__name__)


class CocoConfig(TrainConfig):
    """Options of ``drmix pretrain coco``: every training field plus the span settings."""

    corpus: list[str] = Field(default_factory=list,
                              description="Target corpora: BEIR directories (corpus.jsonl) or JSONL files with 'text'.")
    output_dir: str = Field("runs/coco", description="Where the model, logs, checkpoints and span tables go.")
    learning_rate: float = Field(1e-4, gt=0, description="Peak learning rate (paper: 1e-4 for a base model).")
    span_max_tokens: int = Field(30, ge=1, description="Greedy sentence packing: at most this many tokens a chunk.")
    new_chunk_probability: float = Field(0.1, ge=0, le=1, description="Chance of starting a new chunk before "
                                                                      "each sentence.")
    span_max_length: int = Field(128, ge=4, description="Tokens a span is cropped to when encoded (paper: 128).")
    max_documents: int | None = Field(None, ge=1, description="Seeded sample of at most this many documents per "
                                                              "corpus (default: all).")
    num_proc: int | None = Field(None, ge=1, description="Processes for sentence splitting (default: one).")
    mixture: Literal["pooled", "uniform", "size"] = Field(
        "pooled", description="pooled: all corpora in one dataset, random mixed batches, each document once per "
                              "epoch (the authors'); uniform / size: one collection per corpus drawn with "
                              "--batching under uniform or size-proportional corpus weights.")
    dropout: bool = Field(False, description="Train with the backbone's dropout; default off: the backbone runs "
                                             "in eval mode in the COCO forward, as the authors do.")


def _card(config: CocoConfig, names: list[str]) -> dict:
    """What the model card says about a COCO-pretrained model (drmix.report.card.CardInfo fields)."""
    return {"kind": "COCO-pretrained", "papers": ["coco"],
            "tags": ["drmix", "dense-retrieval", "coco-pretraining"],
            "summary": (f"Continuously pretrained with COCO (COCO-DR, Sec. 4.1) on the target corpora {', '.join(names)}: "
                        "two spans of one document are a positive pair. It is a starting point for fine-tuning, not "
                        "a finished retriever."),
            "loss": "COCO contrastive loss between two spans of one document (in-batch negatives)",
            "loss_config": {"temperature": config.temperature, "span_max_tokens": config.span_max_tokens,
                            "dropout": config.dropout},
            "weights_how": "every corpus pooled into one collection" if config.mixture == "pooled"
            else f"{config.mixture} over the corpora"}


def check_earlier_run(config: CocoConfig) -> dict:
    """Before anything is written: an earlier run in ``output_dir`` is continued only with ``--resume`` and only
    with the COCO settings its ``coco.yaml`` recorded (the trainer's own check sees only the training fields,
    not the span settings), by the resume rules of :mod:`drmix.train.resume_check`; with
    ``--resume-with-changes`` the changes are logged. Returns them."""
    import yaml

    from drmix.outputs import run_finished
    from drmix.train.checkpoint import latest_checkpoint
    from drmix.train.resume_check import ResumeMismatchError, training_changes

    out = Path(config.output_dir)
    if not (run_finished(out) or latest_checkpoint(out) is not None):
        return {}
    if not config.resume:
        raise ConfigError("the output directory already holds a run.", path=out,
                          fix="pass --resume to continue it, or choose another --output-dir.")
    try:
        before = yaml.safe_load((out / "coco.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    if not isinstance(before, dict):
        return {}
    changes = training_changes(before, config.model_dump(mode="json"))
    if changes:
        listed = ", ".join(f"{k} {v['before']!r} -> {v['after']!r}" for k, v in changes.items())
        if not config.resume_with_changes:
            raise ResumeMismatchError(f"the earlier COCO run was made with different settings: {listed}.",
                                      path=out / "coco.yaml", fix="resume with the original settings, pass "
                                      "--resume-with-changes to continue with the new ones, or start a new "
                                      "--output-dir.")
        log.warning("COCO resumed with changed settings: %s", listed)
    return changes


def pretrain_coco(config: CocoConfig, *, callbacks=()):
    """Run COCO; returns the trainer's TrainResult (``model_dir`` is the pretrained SentenceTransformer)."""
    from drmix.data.collections import Collection
    from drmix.model.backbone import BackboneOptions, load_retriever
    from drmix.pretrain.coco import SpanBuilder, build_spans, coco_loss_fn, corpus_name
    from drmix.train.trainer import Trainer

    if not config.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR_OR_JSONL (repeatable).")
    if config.strategy != "static":
        raise ConfigError("COCO pretraining takes no mixture strategy.", fix="drop --strategy.")
    names = [corpus_name(c) for c in config.corpus]
    if len(set(names)) != len(names):
        raise ConfigError(f"two corpora have the same name ({', '.join(names)}).",
                          fix="put each corpus in a directory of its own name.")
    out = Path(config.output_dir)
    check_earlier_run(config)
    model = load_retriever(config.model, BackboneOptions.from_config(config), device=config.device,
                           trust_remote_code=config.trust_remote_code)
    collections, all_stats = [], []
    for i, (path, name) in enumerate(zip(config.corpus, names)):
        ds, stats = build_spans(path, out / "spans", model.tokenizer, corpus_index=i, seed=config.seed,
                                max_tokens=config.span_max_tokens, new_chunk_probability=config.new_chunk_probability,
                                max_documents=config.max_documents, num_proc=config.num_proc, name=name)
        log.info("COCO spans: %s", stats.describe())
        if stats.dropped_short + stats.dropped_empty:
            log.warning("%s: %d of %d documents dropped (fewer than 2 chunks of <= %d tokens)", name,
                        stats.dropped_short + stats.dropped_empty, stats.documents, config.span_max_tokens)
        collections.append(Collection(name=name, dataset=ds, source=str(path)))
        all_stats.append(stats)
    pooled = config.mixture == "pooled"
    if pooled and len(collections) > 1:
        import datasets

        collections = [Collection(name="+".join(names),
                                  dataset=datasets.concatenate_datasets([c.dataset for c in collections]),
                                  source=", ".join(str(c.source) for c in collections))]
    train_cfg = TrainConfig.model_validate({
        **config.model_dump(exclude=set(CocoConfig.model_fields) - set(TrainConfig.model_fields) | {"mixture"}),
        "mixture": "uniform" if pooled else config.mixture, "num_negatives": 0, "query_max_length": config.span_max_length,
        "doc_max_length": config.span_max_length, "in_batch_negatives": True})
    trainer = Trainer(train_cfg, collections=collections, model=model,
                      builder=SpanBuilder(collections, seed=config.seed), loss_fn=coco_loss_fn(config.temperature),
                      callbacks=callbacks, card=_card(config, names))
    trainer.encoder.q_prompt = trainer.encoder.d_prompt  # both sides are document spans
    trainer.dropout = config.dropout
    if trainer.is_main:
        from drmix.io import atomic_write_text

        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "coco.yaml", config.dump_yaml())
    result = trainer.train()
    if trainer.is_main:
        from dataclasses import asdict

        from drmix.io import atomic_write_json

        atomic_write_json(out / "spans.json", [asdict(s) for s in all_stats])
    result.span_stats = all_stats
    return result
