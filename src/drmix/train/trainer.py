"""The trainer: one loop for every kind of training drmix does.

It owns devices and processes (through ``accelerate``: CPU, one GPU, or DDP under ``accelerate launch``
/ ``torchrun``), the AdamW optimiser with warm-up and linear/cosine decay, gradient accumulation and
clipping, checkpoints (atomic, exactly resumable), the metrics log and the progress bar. What data to
draw and how to weigh each example's loss is the :class:`~drmix.mixture.base.Strategy`'s business.

Per micro-step: the sampler draws a *global* batch with the strategy's weights; each process encodes
its slice (queries, positives, hard negatives); :func:`~drmix.model.losses.contrastive_losses` returns
per-example losses (with documents of all processes as negatives); ``strategy.loss`` reduces them.

The model is wrapped in a small module that encodes queries and documents in one ``forward`` so that
DDP sees a single forward per backward even though the encoder runs twice.

Beside the loop: :mod:`drmix.train.encoding` (batches to model inputs), :mod:`drmix.train.inputs` (the
prefetched training stream), :mod:`drmix.train.streams` (the strategies' extra batch streams),
:mod:`drmix.train.reference` (reference-model scoring), :mod:`drmix.train.optim` (optimiser, schedule) and
:mod:`drmix.train.saving` (output directory, logs, checkpoints' trainer state, final model).
Strategies see the run only through :class:`~drmix.mixture.base.StepContext`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drmix.config import TrainConfig
from drmix.data.batch import Batch
from drmix.data.collections import Collection, collections_for, load_beir_collection
from drmix.data.sampling import BatchBuilder, MixtureSampler
from drmix.device import all_reduce, check_device
from drmix.errors import ConfigError
from drmix.mixture.base import StepContext, Strategy
from drmix.model.backbone import BackboneOptions, default_lora_r, load_retriever
from drmix.model.instructions import record_prompts
from drmix.model.losses import contrastive_losses
from drmix.train.checkpoint import load_checkpoint, save_checkpoint
from drmix.train.encoding import BatchEncoder
from drmix.train.gradcache import GradCache
from drmix.train.guard import NonFiniteGuard
from drmix.train.inputs import InputPipeline
from drmix.train.lock import run_lock
from drmix.train.lora import apply_lora
from drmix.train.optim import build_optimizer
from drmix.train.precision import Precision
from drmix.train.sharding import backward as sharding_backward
from drmix.train.sharding import full_state_dict, rebuild_with_state, sharding_kind
from drmix.train.preflight import check_batch_fits, check_model_fit, check_strategy, warn_small_collections
from drmix.train.reference import ReferenceScorer
from drmix.train.reporting import CollectionLosses, RunReporting
from drmix.train.saving import JsonlLog, RunOutput, TrainResult
from drmix.train.streams import AuxiliaryStreams
from drmix.train.tracking import HFCallbacks, split_callbacks

__all__ = ["JsonlLog", "TrainResult", "Trainer", "train"]

log = logging.getLogger(__name__)


class _DualEncoder(torch.nn.Module):
    """Encodes queries and documents in one forward (one DDP forward per backward)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, q_features: dict, d_features: dict) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.model(q_features)["sentence_embedding"]
        d = self.model(d_features)["sentence_embedding"]
        return q, d


class Trainer:
    """Fine-tunes a SentenceTransformer on a mixture of collections under a Strategy."""

    def __init__(self, config: TrainConfig, *, strategy: Strategy | None = None,
                 callbacks: Sequence[Callable[[StepContext], None]] = (), collections: list[Collection] | None = None,
                 model: Any = None, builder: Any = None,
                 loss_fn: Callable[..., torch.Tensor] | None = None, card: dict[str, Any] | None = None) -> None:
        """``builder`` (turns sampled ``(collection, row)`` pairs into a :class:`Batch`; has ``state_dict``)
        and ``loss_fn`` (``loss_fn(query_emb, doc_emb, gather=bool) -> per-example losses``, used instead of
        InfoNCE) let other objectives reuse this loop and its checkpoints, e.g. COCO pretraining; ``card``
        overrides fields of the model card's :class:`~drmix.report.card.CardInfo` (e.g. ``kind``, ``loss``).

        ``callbacks`` are plain callables (called with the :class:`StepContext` after every step) or
        ``transformers.TrainerCallback`` objects (see :mod:`drmix.train.tracking`)."""
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, set_seed

        self.config = config
        self.callbacks, hf_callbacks = split_callbacks(callbacks)
        # built before the Accelerator: TrainingArguments resets accelerate's process state
        hf = HFCallbacks(hf_callbacks, config) if hf_callbacks else None
        check_device(config.device)
        # Encoders often hold parameters the embedding never uses (e.g. BERT's pooler under mean pooling).
        ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
        # precision is per trainer (train/precision.py), not accelerate's process-wide mixed_precision
        self.accelerator = Accelerator(mixed_precision="no", cpu=(config.device == "cpu"), kwargs_handlers=[ddp])
        self.device = self.accelerator.device
        self.precision = Precision(config.mixed_precision, self.device)
        self.world = self.accelerator.num_processes
        self.rank = self.accelerator.process_index
        self.is_main = self.accelerator.is_main_process
        if config.batch_size % self.world:
            raise ConfigError(f"batch_size {config.batch_size} is not divisible by the {self.world} processes.",
                              fix=f"use a multiple of {self.world}.")
        self.out = Path(config.output_dir)
        set_seed(config.seed)

        self.collections = collections or collections_for(config)
        self.names = [c.name for c in self.collections]
        self.sizes = [len(c) for c in self.collections]
        check_batch_fits(self.names, self.sizes, config.batch_size)
        from drmix.model.encoder import resolve_model_path

        # config.yaml, checkpoints and the card record the model actually used (not `model: null`)
        config = self.config = config.model_copy(update={"model": resolve_model_path(config.model)})
        backbone = BackboneOptions.from_config(config)
        self.model = model if model is not None else load_retriever(
            config.model, backbone, device=str(self.device), trust_remote_code=config.trust_remote_code)
        self.model.to(self.device)
        self.lora_r = default_lora_r(config.lora_r, self.model)
        if self.lora_r:
            if config.lora_r is None:
                log.info("decoder backbone: LoRA r=%d alpha=%s dropout=%s (the tDRO paper's setting; --lora-r 0 "
                         "trains all weights)", self.lora_r, config.lora_alpha, config.lora_dropout)
            apply_lora(self.model, r=self.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                       targets=config.lora_targets)
        check_model_fit(config, self.model)
        warn_small_collections(self.names, self.sizes, config.batch_size, config.batching)
        self.encoder = BatchEncoder(self.model, self.device, query_max_length=config.query_max_length,
                                    doc_max_length=config.doc_max_length, num_negatives=config.num_negatives)

        if strategy is None:
            from drmix.mixture.registry import build_strategy

            strategy = build_strategy(config, self.names, [c.weight for c in self.collections])
        self.strategy = strategy
        check_strategy(config, strategy, self.names)
        self.strategy.setup(self.names, self.sizes)

        self.sampler = MixtureSampler(self.sizes, config.batch_size, mode=config.batching, seed=config.seed)
        tokens = (self.encoder.token_ids(self.collections, num_proc=config.tokenize_num_proc)
                  if config.pretokenize and builder is None else None)
        self.builder = builder if builder is not None else BatchBuilder(self.collections, config.num_negatives,
                                                                         seed=config.seed, tokens=tokens)
        self.loss_fn = loss_fn
        self.inputs = InputPipeline(self.sampler, self.builder, self._prepare_inputs, prefetch=config.input_prefetch,
                                    workers=config.input_workers, threadable=self.encoder.threadable)
        # separate streams for strategies that draw extra batches (look-ahead, dev measurement)
        self.streams = AuxiliaryStreams(self.collections,
                                        [load_beir_collection(d, split=config.dev_split) for d in config.dev],
                                        num_negatives=config.num_negatives, seed=config.seed)
        self.reference = (ReferenceScorer.load(config.reference_model, self.encoder, self._losses_from_embeddings,
                                               gather=self.world > 1, trust_remote_code=config.trust_remote_code,
                                               backbone=dataclasses.replace(backbone, gradient_checkpointing=False))
                          if config.reference_model else None)

        self.optimizer, self.scheduler = build_optimizer(self.model, config)
        self.wrapped, self.optimizer = self.accelerator.prepare(_DualEncoder(self.model), self.optimizer)
        self.sharding = sharding_kind(self.accelerator)  # "fsdp" | "deepspeed" | None
        if config.compile:
            if self.sharding is not None:
                raise ConfigError(f"--compile is not supported with {self.sharding} sharding.",
                                  fix="drop --compile, or train without FSDP/DeepSpeed.")
            from drmix.train.compile import compile_model

            compile_model(self.model, config.compile_backend)  # in place: parameter names unchanged
        if self.sharding is not None:
            log.warning("sharded with %s: no intermediate checkpoints are written, so a killed run starts over "
                        "(docs/llm.md)", self.sharding)
        self.grad_cache = (GradCache(self.wrapped, config.grad_cache_chunk, backward=self._backward,
                                     no_sync=lambda: self.accelerator.no_sync(self.wrapped))
                           if config.grad_cache_chunk else None)
        self.output = RunOutput(self.out, is_main=self.is_main)
        self.metrics = self.output.metrics
        self.reporting = RunReporting(config, self.out, names=self.names, sizes=self.sizes,
                                      hf=hf if self.is_main else None, enabled=self.is_main, card=card)
        self.stop_hooks = bool(hf_callbacks)  # same on every rank: a callback's stop is agreed on by all
        self.output.metrics.listeners.append(self.reporting.record)
        self.output.trajectory.listeners.append(self.reporting.record)
        self.collection_losses = CollectionLosses(self.names, self.device)
        self.evaluator = None
        if config.eval_data:
            from drmix.evaluation.evaluate import DevEvaluator

            self.evaluator = DevEvaluator(config.eval_data, split=config.eval_split,
                                          max_queries=config.eval_max_queries, seed=config.seed,
                                          query_instructions=config.query_instructions)
        self.step = 0
        #: False: the model runs in eval mode (no dropout) in the training forward (COCO, as its authors do)
        self.dropout = True
        self.lookahead_seconds = 0.0
        self.guard = NonFiniteGuard(self.device, max_consecutive=config.max_nonfinite_steps, world_size=self.world)

    # -- encoding and losses -------------------------------------------------------------------------
    def _prepare_inputs(self, batch: Batch) -> tuple[Batch, dict, dict, torch.Tensor]:
        """This process's slice of a global batch and its host tensors (runs on an input thread)."""
        b = self.config.batch_size // self.world
        local = batch.slice(self.rank * b, (self.rank + 1) * b)
        return (local, *self.encoder.host_inputs(self.model, local, self.encoder.negatives_in(batch)))

    def _losses_from_embeddings(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *,
                                gather: bool) -> torch.Tensor:
        cfg = self.config
        if self.loss_fn is not None:
            return self.loss_fn(q.float(), d.float(), gather=gather and cfg.cross_device_negatives)
        B, H = mask.shape
        p = d[:B]
        negs = None
        if H:
            negs = d.new_zeros(B, H, d.size(-1))
            negs[mask] = d[B:]
        return contrastive_losses(q.float(), p.float(), None if negs is None else negs.float(), mask if H else None,
                                  temperature=cfg.temperature, in_batch=cfg.in_batch_negatives,
                                  gather=gather and cfg.cross_device_negatives,
                                  matryoshka_dims=cfg.matryoshka_dims)

    def _forward_backward(self, q: dict, d: dict, mask: torch.Tensor, local: Batch,
                          ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode, per-example losses, the strategy's scalar, backward (whole batch, or GradCache chunks)."""
        kept: dict[str, torch.Tensor] = {}

        def objective(qe: torch.Tensor, de: torch.Tensor) -> torch.Tensor:
            # what a strategy needs for gradients through the embeddings (iDRO's per-cluster gradients)
            ctx.embeddings, ctx.grad_cache = (qe, de), self.grad_cache
            kept["losses"] = self._losses_from_embeddings(qe, de, mask, gather=True)
            return self.strategy.loss(kept["losses"], local, ctx)

        if self.grad_cache is not None:
            loss = self.grad_cache.step((q, d), objective)
        else:
            loss = objective(*self.wrapped(q, d))
            self._backward(loss)
        return loss, kept["losses"]

    def _backward(self, loss: torch.Tensor) -> None:
        # through the accelerator: DeepSpeed's engine runs its own backward (drmix.train.sharding)
        sharding_backward(self.accelerator, loss / self.config.gradient_accumulation_steps, self.precision)

    def compute_losses(self, batch: Batch, *, model=None) -> torch.Tensor:
        """Per-example losses of ``batch`` on one process (no cross-device gathering), with gradient."""
        model = model or self.model
        q, d, mask = self.encoder.device_inputs(model, batch, self.encoder.negatives_in(batch))
        qe = model(q)["sentence_embedding"]
        de = model(d)["sentence_embedding"]
        return self._losses_from_embeddings(qe, de, mask, gather=False)

    def reference_losses(self, batch: Batch) -> torch.Tensor:
        """Per-example losses of the frozen reference model on the same inputs (no gradient)."""
        if self.reference is None:
            raise ConfigError("this strategy needs a reference model.", fix="set reference_model in the config.")
        return self.reference(batch)

    def context(self) -> StepContext:
        """What the strategy and the callbacks see of this run (see :class:`StepContext`)."""
        cfg = self.config
        return StepContext(
            step=self.step, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
            collection_names=self.names, collection_sizes=self.sizes, compute_losses=self.compute_losses,
            reference_losses=self.reference,
            draw_batch=self.streams.draw_batch, dev_names=self.streams.dev_names,
            draw_dev_batch=self.streams.draw_dev_batch if self.streams.dev_collections else None,
            log=self.metrics.append, world_size=self.world, rank=self.rank, device=self.device,
            batch_size=cfg.batch_size, accumulation_steps=cfg.gradient_accumulation_steps,
            encode_queries=self.encoder.encode_queries, training_queries=self.streams.training_queries,
            all_reduce=all_reduce)

    # -- state ------------------------------------------------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {**self.inputs.state_dict(), **self.streams.state_dict(), "collections": self.names,
                "sizes": self.sizes, "lookahead_seconds": self.lookahead_seconds,
                "nonfinite": self.guard.state_dict(), "precision": self.precision.state_dict(),
                "config": self.config.model_dump(mode="json")}

    def _restore(self, path: Path) -> None:
        state, strategy_state = load_checkpoint(path, model=self.model, optimizer=self.optimizer,
                                                scheduler=self.scheduler)
        if state.get("collections") != self.names:
            raise ConfigError(f"the checkpoint was trained on collections {state.get('collections')}, "
                              f"the data now gives {self.names}.", path=path,
                              fix="resume with the same data, or start a new --output-dir.")
        self.inputs.load_state_dict(state)
        self.streams.load_state_dict(state)
        self.lookahead_seconds = state.get("lookahead_seconds", 0.0)
        self.guard.load_state_dict(state.get("nonfinite"))
        self.precision.load_state_dict(state.get("precision"))
        self.strategy.load_state_dict(strategy_state)
        self.step = int(state["step"])
        self.output.truncate_after(self.step)
        log.info("resumed from %s at step %d", path, self.step)

    def _save(self) -> None:
        if self.sharding is not None:  # sharded optimiser state: no resumable checkpoint (drmix.train.sharding)
            return
        if self.is_main:
            save_checkpoint(self.out, self.step, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                            trainer_state=self._trainer_state(), strategy_state=self.strategy.state_dict(),
                            keep=self.config.keep_checkpoints)
            self.reporting.saved()
        self.accelerator.wait_for_everyone()

    # -- the loop ----------------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train under the output directory's lock (one writer per directory; see drmix.train.lock)."""
        with run_lock(self.out, enabled=self.is_main):
            try:
                return self._train()
            finally:
                self.reporting.close()  # trackers flushed even when training stops with an error

    def _train(self) -> TrainResult:
        cfg = self.config
        ckpt = self.output.prepare(cfg, self.names, self.sizes)
        if ckpt is not None:
            self._restore(ckpt)
        if self.step >= cfg.max_steps and self.output.finished:
            log.info("run in %s is already complete (%d steps)", self.out, self.step)
            return self.output.result(self.step, None)
        self.reporting.start(self.step, self.model)
        ctx = self.context()
        last_loss = None
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   disable=not (cfg.show_progress and self.is_main))
        window_seconds, window_n = 0.0, 0
        counts = np.zeros(len(self.names), dtype=np.int64)
        self.wrapped.train()
        while self.step < cfg.max_steps:
            step_loss, step_raw = 0.0, 0.0  # device tensors after the first micro-step: read every log_every
            t_step = time.perf_counter()
            for micro in range(cfg.gradient_accumulation_steps):
                weights = self.strategy.sampling_weights()
                batch, (local, q, d, mask) = self.inputs.next(weights)
                counts += np.bincount(batch.collection_ids, minlength=len(self.names))
                last = micro == cfg.gradient_accumulation_steps - 1
                sync = contextlib.nullcontext() if last else self.accelerator.no_sync(self.wrapped)
                with sync, self.precision.autocast():
                    q, d, mask = self.encoder.to_device((q, d, mask))
                    if self.reference is not None:
                        self.reference.set_live(local, q, d, mask)
                    ctx.step = self.step
                    ctx.micro_step = micro
                    self.wrapped.train(self.dropout)   # a strategy or evaluation may have left it in eval mode
                    loss, losses = self._forward_backward(q, d, mask, local, ctx)
                    self.guard.observe_loss(loss)
                step_loss = step_loss + loss.detach().float() / cfg.gradient_accumulation_steps
                step_raw = step_raw + losses.detach().float().mean() / cfg.gradient_accumulation_steps
                self.collection_losses.add(losses, local.collection_ids)
            self.precision.unscale_(self.optimizer)
            grad_norm = None
            if cfg.max_grad_norm > 0:
                grad_norm = self.accelerator.clip_grad_norm_(self.wrapped.parameters(), cfg.max_grad_norm)
            lr = self.scheduler.get_last_lr()[0]
            if self.guard.before_step(self.optimizer, grad_norm, scaler=self.precision.scaler):  # non-finite: skip
                self.precision.step(self.optimizer)
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step += 1
            window_n += cfg.batch_size * cfg.gradient_accumulation_steps
            ctx.step = self.step
            t_la = time.perf_counter()
            self.strategy.after_step(ctx)
            self.lookahead_seconds += time.perf_counter() - t_la
            window_seconds += t_la - t_step
            record = self.strategy.trajectory_record(self.step)
            if record is not None:
                self.output.trajectory.append({"step": self.step, **record})
            logging_step = self.step % cfg.log_every == 0 or self.step == cfg.max_steps
            if logging_step:  # the only host syncs of the loop: losses are read every log_every steps
                last_loss = self._mean_across(float(step_loss))
                self.metrics.append({"step": self.step, "loss": last_loss, "raw_loss": self._mean_across(float(step_raw)),
                                     "lr": lr, "samples_per_s": window_n / max(window_seconds, 1e-9),
                                     "train_seconds": window_seconds, "strategy_seconds": self.lookahead_seconds,
                                     "collection_counts": dict(zip(self.names, counts.tolist())),
                                     "collection_losses": self.collection_losses.read(self._sum_across),
                                     **self.guard.sync()})  # reads the skip counters; raises after too many
                window_seconds, window_n = 0.0, 0
                counts[:] = 0
            if self.evaluator is not None and cfg.eval_every and self.step % cfg.eval_every == 0:
                self._evaluate()
            for cb in self.callbacks:
                cb(ctx)
            stop = self._callbacks_stop()
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps or stop:
                self._save()
            if logging_step:
                bar.set_postfix(loss=f"{last_loss:.4f}", lr=f"{lr:.2e}")
            bar.update(1)
            if stop:
                log.info("a callback stopped training at step %d", self.step)
                break
        bar.close()
        self.inputs.close()
        if self.evaluator is not None and (not cfg.eval_every or cfg.max_steps % cfg.eval_every):
            self._evaluate()
        return self._finish(last_loss)

    def _callbacks_stop(self) -> bool:
        """Whether a ``TrainerCallback`` asked to stop (main process), agreed on by every process."""
        if not self.stop_hooks:
            return False
        stop = self.reporting.step_end(self.step, self.model)
        if self.world == 1:
            return stop
        flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
        return bool(self.accelerator.reduce(flag, reduction="sum").item() > 0)

    def _sum_across(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.world == 1 else self.accelerator.reduce(t, reduction="sum")

    def _mean_across(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], device=self.device)
        return self.accelerator.reduce(t, reduction="mean").item()

    def _evaluate(self) -> None:
        if self.is_main:
            scores = self.evaluator(self.model)
            self.metrics.append({"step": self.step, "eval": scores})
            log.info("step %d eval: %s", self.step, scores)
        self.accelerator.wait_for_everyone()

    def _model_for_saving(self) -> Any:
        """The model to save: ours, or under FSDP/ZeRO one rebuilt on the main process from the gathered full
        state dict (a collective: every process calls it; ``None`` on the others)."""
        if self.sharding is None:
            return self.model
        state = full_state_dict(self.accelerator, self.wrapped)
        if not self.is_main:
            return None

        def build() -> Any:
            opts = dataclasses.replace(BackboneOptions.from_config(self.config), gradient_checkpointing=False)
            model = load_retriever(self.config.model, opts, device="cpu",
                                   trust_remote_code=self.config.trust_remote_code)
            if self.lora_r:
                apply_lora(model, r=self.lora_r, alpha=self.config.lora_alpha, dropout=self.config.lora_dropout,
                           targets=self.config.lora_targets)
            return model

        log.info("%s: saving the full weights gathered from every process", self.sharding)
        return rebuild_with_state(build, state)

    def _finish(self, last_loss: float | None) -> TrainResult:
        model = self._model_for_saving()
        if self.is_main:
            # the training collections' instructions and the evaluation ones become named prompts of the folder
            record_prompts(model, {**{c.name: c.instruction for c in self.collections if c.instruction},
                                   **self.config.query_instructions})
        weights = self.strategy.final_weights()
        self.output.save_final(model, weights, getattr(self.strategy, "weight_names", self.names))
        self.reporting.finish(model, weights)  # model/README.md, report.html (main process)
        self.accelerator.wait_for_everyone()
        return self.output.result(self.step, last_loss)


def train(config: TrainConfig, *, strategy: Strategy | None = None,
          callbacks: Sequence[Callable[[StepContext], None]] = (), **kwargs: Any) -> TrainResult:
    """Train a model as ``config`` says; see :class:`Trainer`."""
    return Trainer(config, strategy=strategy, callbacks=callbacks, **kwargs).train()
