"""The trainer: one loop for every kind of training drmix does.

It owns devices and processes (through ``accelerate``: CPU, one GPU, or DDP under ``accelerate launch``
/ ``torchrun``), the AdamW optimiser with warm-up and linear/cosine decay, gradient accumulation and
clipping, checkpoints (atomic, exactly resumable), the metrics log and the progress bar. Three things plug in:

* the :class:`~drmix.train.objective.Objective` -- how drawn rows become a batch and embeddings become per-example
  losses (InfoNCE by default; COCO's span loss for pretraining);
* the :class:`~drmix.mixture.base.Strategy` -- which collection each batch comes from and how per-example losses
  are reduced; it sees the run only through :class:`~drmix.mixture.base.StepContext`;
* :mod:`listeners <drmix.train.listeners>` -- evaluation, trackers, callbacks, the model card and report.

Per micro-step: the sampler draws a *global* batch with the strategy's weights; each process encodes its slice
(queries, positives, hard negatives); the objective returns per-example losses (with documents of all processes
as negatives); ``strategy.loss`` reduces them. The model is wrapped in a small module that encodes queries and
documents in one ``forward`` so that DDP sees a single forward per backward although the encoder runs twice.

Beside the loop: :mod:`drmix.train.encoding` (batches to model inputs), :mod:`drmix.train.inputs` (the
prefetched training stream), :mod:`drmix.train.streams` (the strategies' extra batch streams),
:mod:`drmix.train.reference` (reference-model scoring), :mod:`drmix.train.optim` (optimiser, schedule),
:mod:`drmix.train.window` (what is measured between two log records) and :mod:`drmix.train.saving` (output
directory, logs, checkpoints' trainer state, final model). With the evaluation and report listeners attached,
the entry point is :func:`drmix.api.train`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from drmix.config import TrainConfig
from drmix.data.batch import Batch
from drmix.data.collections import Collection, collections_for, load_beir_collection
from drmix.data.sampling import MixtureSampler, RowBuilder
from drmix.device import all_reduce, check_device
from drmix.errors import ConfigError
from drmix.mixture.base import StepContext, Strategy
from drmix.model.backbone import BackboneOptions, default_lora_r, load_retriever
from drmix.model.instructions import record_prompts
from drmix.train.checkpoint import checkpoint_step, drop_checkpoints_after, load_checkpoint, save_checkpoint
from drmix.train.encoding import BatchEncoder
from drmix.train.gradcache import GradCache
from drmix.train.guard import NonFiniteGuard
from drmix.train.inputs import InputPipeline
from drmix.train.listeners import Listener, TrackerListener, callback_listeners
from drmix.lock import run_lock
from drmix.train.lora import apply_lora
from drmix.train.objective import Objective, objective_from_config
from drmix.train.optim import build_optimizer
from drmix.train.precision import Precision, release_foreign_state
from drmix.train.sharding import backward as sharding_backward
from drmix.train.sharding import full_state_dict, rebuild_with_state, sharding_kind
from drmix.train.preflight import (check_batch_fits, check_model_fit, check_schedule, check_strategy,
                                   warn_small_collections)
from drmix.train.reference import ReferenceScorer
from drmix.train.saving import JsonlLog, RunOutput, TrainResult
from drmix.train.streams import AuxiliaryStreams
from drmix.train.window import StepWindow

__all__ = ["JsonlLog", "TrainResult", "Trainer"]

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
    """Trains a SentenceTransformer on a mixture of collections: an objective under a strategy, watched by listeners.

    ``callbacks`` are plain callables (called with the :class:`StepContext` after every step) or
    ``transformers.TrainerCallback`` objects; ``listeners`` are :class:`~drmix.train.listeners.Listener` objects
    (:func:`drmix.api.train` adds evaluation, the model card and the report). ``collections`` and ``model`` replace
    what the config would load."""

    def __init__(self, config: TrainConfig, *, objective: Objective | None = None, strategy: Strategy | None = None,
                 callbacks: Sequence[Callable[[StepContext], None]] = (), listeners: Sequence[Listener] = (),
                 collections: list[Collection] | None = None, model: Any = None) -> None:
        from drmix.mixture.registry import check_config
        from drmix.train import arguments as args

        config = args.train_config(config, "Trainer")  # the Python API's types, before anything loads
        config, model = args.model_argument(config, model, "Trainer")
        callbacks, listeners = args.callback_list(callbacks, "Trainer"), args.listener_list(listeners, "Trainer")
        args.check_parts("Trainer", strategy=strategy, objective=objective, collections=collections)
        check_config(config)  # the strategy and its options, before any model or data loads
        # the loss (a registered objective), before any model or data loads too
        objective = objective if objective is not None else objective_from_config(config)
        if model is None:  # a Hub id that cannot load here fails now, not after the data (drmix.model.encoder)
            from drmix.model.encoder import resolve_model_path

            resolve_model_path(config.model.name_or_path)
        cb_listeners, set_main = callback_listeners(callbacks, config)  # before the Accelerator (see there)
        self._start_processes(config)
        set_main(self.is_main)
        from drmix.data.formats import reading_scored_pairs

        # each node's local rank 0 first: it builds the node's caches (DRMIX_CACHE), the node's other ranks read them
        with reading_scored_pairs(getattr(objective, "scored_pairs", False)), self.node_caches():  # --loss cosent
            self.collections = collections or collections_for(config)
        self.names = [c.name for c in self.collections]
        self.sizes = [len(c) for c in self.collections]
        check_batch_fits(self.names, self.sizes, config.contrastive.batch_size)
        self._steps_from_epochs()
        self._load_model(model)
        config = self.config
        self.objective = objective
        self.encoder = BatchEncoder(self.model, self.device, query_max_length=config.data.query_max_length,
                                    doc_max_length=config.data.doc_max_length,
                                    num_negatives=config.contrastive.num_negatives)
        self._set_prompts()
        if self.objective.documents_on_both_sides:
            self.encoder.q_prompt = self.encoder.d_prompt
        self._setup_strategy(strategy)
        self._setup_inputs()
        self._setup_optimisation()
        self.output = RunOutput(self.out, is_main=self.is_main)
        self.metrics = self.output.metrics
        trackers = [TrackerListener(config.run.report_to)] if config.run.report_to else []
        self.listeners: list[Listener] = [*listeners, *cb_listeners, *trackers]
        self.stop_hooks = any(lst.can_stop for lst in self.listeners)  # same on every rank
        for jsonl in (self.output.metrics, self.output.trajectory):
            jsonl.listeners += [lst.on_record for lst in self.listeners]
        self.window = StepWindow(self.names, self.device)
        self.step = 0
        self.lookahead_seconds = 0.0
        self.guard = NonFiniteGuard(self.device, max_consecutive=config.optim.max_nonfinite_steps,
                                    world_size=self.world)

    # -- setting up ------------------------------------------------------------------------------------------
    def _start_processes(self, config: TrainConfig) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, set_seed

        check_device(config.run.device)
        # Encoders often hold parameters the embedding never uses (e.g. BERT's pooler under mean pooling).
        ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
        # precision is per trainer (train/precision.py), not accelerate's process-wide mixed_precision
        release_foreign_state(cpu=(config.run.device == "cpu"))  # e.g. after a sentence-transformers trainer
        self.accelerator = Accelerator(mixed_precision="no", cpu=(config.run.device == "cpu"), kwargs_handlers=[ddp])
        self.device = self.accelerator.device
        self.precision = Precision(config.optim.mixed_precision, self.device)
        self.world = self.accelerator.num_processes
        self.rank = self.accelerator.process_index
        self.is_main = self.accelerator.is_main_process
        if config.contrastive.batch_size % self.world:
            raise ConfigError(f"batch_size {config.contrastive.batch_size} is not divisible by the {self.world} "
                              "processes.", fix=f"use a multiple of {self.world}.")
        self.out = Path(config.run.output_dir)
        self.config = config
        set_seed(config.optim.seed)
        self._check_shared_output()

    def _check_shared_output(self) -> None:
        """Several processes: the output directory must be one folder on every node (every rank reads the
        checkpoint to resume from, which rank 0 writes); one a node sees on its own disk is refused before any data
        or model loads (:meth:`drmix.retrieval.ranks.Ranks.check_shared`)."""
        from drmix.retrieval.ranks import Ranks, launched

        if self.world > 1 and launched():
            Ranks.from_env().check_shared(
                self.out, what="the output directory", fix="put --output-dir on a filesystem every node mounts at "
                "the same path (NFS, Lustre, ...); the data and the model need only be readable at the same path")

    def node_caches(self) -> contextlib.AbstractContextManager:
        """Around building what drmix caches (collections' Arrow files, pre-tokenised ids): the local rank 0 of each
        node builds it first, then the node's other ranks read it (a node's own DRMIX_CACHE, or one every node
        shares: caches are written atomically, so two nodes building the same entry keep one)."""
        return self.accelerator.local_main_process_first() if self.world > 1 else contextlib.nullcontext()

    def _steps_from_epochs(self) -> None:
        """``--epochs``: ``max_steps = ceil(epochs x examples / (batch_size x accumulation))`` (one epoch draws as many
        rows as the collections hold, whatever the mixture weights), recorded in the config and the log."""
        from drmix.train.saving import steps_for_epochs

        cfg = self.config
        for warning in check_schedule(cfg, sum(self.sizes)):   # --epochs 1e15; a warm-up that outlasts the run
            if self.is_main:
                log.warning(warning)
        if cfg.optim.epochs is None:
            return
        steps = steps_for_epochs(cfg.optim.epochs, sum(self.sizes), cfg.contrastive.batch_size,
                                 cfg.contrastive.gradient_accumulation_steps)
        if self.is_main:
            log.info("--epochs %g: %d examples / (batch %d x accumulation %d) -> max_steps %d", cfg.optim.epochs,
                     sum(self.sizes), cfg.contrastive.batch_size, cfg.contrastive.gradient_accumulation_steps, steps)
        self.config = cfg.replace(max_steps=steps)

    def _set_prompts(self) -> None:
        """``--query-prompt`` / ``--document-prompt``: what training prepends, and the saved folder's ``query`` /
        ``document`` prompts (sentence-transformers' ``prompts``), so ``encode(..., prompt_name="query")`` matches."""
        data = self.config.data
        prompts = getattr(self.model, "prompts", None)
        for given, attr, name in ((data.query_prompt, "q_prompt", "query"), (data.document_prompt, "d_prompt", "document")):
            if given is None:
                continue
            setattr(self.encoder, attr, given)
            if isinstance(prompts, dict):
                prompts[name] = given

    def _load_model(self, model: Any) -> None:
        from drmix.model.encoder import resolve_model_path

        # config.yaml, checkpoints and the card record the model actually used (not `model: null`)
        config = self.config = self.config.replace(model=resolve_model_path(self.config.model.name_or_path))
        self.model = model if model is not None else load_retriever(
            config.model.name_or_path, BackboneOptions.from_config(config.model), device=str(self.device),
            trust_remote_code=config.model.trust_remote_code)
        self.model.to(self.device)
        m = config.model
        self.lora_r = default_lora_r(m.lora_r, self.model)
        if self.lora_r:
            if m.lora_r is None:
                log.info("decoder backbone: LoRA r=%d alpha=%s dropout=%s (the tDRO paper's setting; --lora-r 0 "
                         "trains all weights)", self.lora_r, m.lora_alpha, m.lora_dropout)
            apply_lora(self.model, r=self.lora_r, alpha=m.lora_alpha, dropout=m.lora_dropout, targets=m.lora_targets)
        check_model_fit(config.contrastive, self.model)
        warn_small_collections(self.names, self.sizes, config.contrastive.batch_size, config.contrastive.batching)

    def _setup_strategy(self, strategy: Strategy | None) -> None:
        if strategy is None:
            from drmix.mixture.registry import build_strategy

            strategy = build_strategy(self.config, self.names, [c.weight for c in self.collections])
        self.strategy = strategy
        check_strategy(self.config, strategy, self.names)
        self.strategy.setup(self.names, self.sizes)

    def _setup_inputs(self) -> None:
        cfg = self.config
        self.sampler = MixtureSampler(self.sizes, cfg.contrastive.batch_size, mode=cfg.contrastive.batching,
                                      seed=cfg.optim.seed)
        with self.node_caches():
            tokens = (self.encoder.token_ids(self.collections, num_proc=cfg.data.tokenize_num_proc)
                      if cfg.data.pretokenize and self.objective.wants_tokens() else None)
        self.builder = self.objective.builder(self.collections, seed=cfg.optim.seed, tokens=tokens)
        if not isinstance(self.builder, RowBuilder):
            raise TypeError(f"the {self.objective.name} objective's batch builder {type(self.builder).__name__} is "
                            "not a drmix.data.sampling.RowBuilder (keys, scores, row_keys, build, state_dict, "
                            "load_state_dict)")
        if cfg.contrastive.batch_sampler == "no_duplicates":
            if self.builder.row_keys is None:
                raise ConfigError(f"batch_sampler no_duplicates needs row keys, and the {self.objective.name} "
                                  "objective's batch builder has none.", fix="drop --batch-sampler no_duplicates.")
            self.sampler.no_duplicates, self.sampler.row_keys = True, self.builder.row_keys
        self.inputs = InputPipeline(self.sampler, self.builder, self._prepare_inputs,
                                    prefetch=cfg.data.input_prefetch, workers=cfg.data.input_workers,
                                    threadable=self.encoder.threadable)
        # separate streams for strategies that draw extra batches (look-ahead, dev measurement)
        self.streams = AuxiliaryStreams(self.collections,
                                        [load_beir_collection(d, split=cfg.mixture.dev_split) for d in cfg.mixture.dev],
                                        num_negatives=cfg.contrastive.num_negatives, seed=cfg.optim.seed,
                                        keys=self.builder.keys, scores=self.builder.scores)
        backbone = dataclasses.replace(BackboneOptions.from_config(cfg.model), gradient_checkpointing=False)
        self.reference = (ReferenceScorer.load(cfg.mixture.reference_model, self.encoder, self._losses_from_embeddings,
                                               gather=self.world > 1, trust_remote_code=cfg.model.trust_remote_code,
                                               backbone=backbone)
                          if cfg.mixture.reference_model else None)

    def _setup_optimisation(self) -> None:
        cfg = self.config
        self.optimizer, self.scheduler = build_optimizer(self.model, cfg)
        self.wrapped, self.optimizer = self.accelerator.prepare(_DualEncoder(self.model), self.optimizer)
        self.sharding = sharding_kind(self.accelerator)  # "fsdp" | "deepspeed" | None
        if cfg.optim.compile:
            if self.sharding is not None:
                raise ConfigError(f"--compile is not supported with {self.sharding} sharding.",
                                  fix="drop --compile, or train without FSDP/DeepSpeed.")
            from drmix.train.compile import compile_model

            compile_model(self.model, cfg.optim.compile_backend)  # in place: parameter names unchanged
        if self.sharding is not None:
            log.warning("sharded with %s: no intermediate checkpoints are written, so a killed run starts over "
                        "(docs/llm.md)", self.sharding)
        self.grad_cache = (GradCache(self.wrapped, cfg.contrastive.grad_cache_chunk, backward=self._backward,
                                     no_sync=lambda: self.accelerator.no_sync(self.wrapped))
                           if cfg.contrastive.grad_cache_chunk else None)

    # -- encoding and losses ---------------------------------------------------------------------------------
    def _prepare_inputs(self, batch: Batch) -> tuple[Batch, dict, dict, torch.Tensor]:
        """This process's slice of a global batch and its host tensors (runs on an input thread)."""
        b = self.config.contrastive.batch_size // self.world
        local = batch.slice(self.rank * b, (self.rank + 1) * b)
        return (local, *self.encoder.host_inputs(self.model, local, self.encoder.negatives_in(batch)))

    def _losses_from_embeddings(self, q: torch.Tensor, d: torch.Tensor, mask: torch.Tensor, *,
                                gather: bool, batch: Batch | None = None) -> torch.Tensor:
        return self.objective.losses(q, d, mask, gather=gather, batch=batch)

    def _forward_backward(self, q: dict, d: dict, mask: torch.Tensor, local: Batch,
                          ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode, per-example losses, the strategy's scalar, backward (whole batch, or GradCache chunks)."""
        kept: dict[str, torch.Tensor] = {}

        def objective(qe: torch.Tensor, de: torch.Tensor) -> torch.Tensor:
            # what a strategy needs for gradients through the embeddings (iDRO's per-cluster gradients)
            ctx.embeddings, ctx.grad_cache = (qe, de), self.grad_cache
            kept["losses"] = self._losses_from_embeddings(qe, de, mask, gather=True, batch=local)
            return self.strategy.loss(kept["losses"], local, ctx)

        if self.grad_cache is not None:
            loss = self.grad_cache.step((q, d), objective)
        else:
            loss = objective(*self.wrapped(q, d))
            self._backward(loss)
        return loss, kept["losses"]

    def _backward(self, loss: torch.Tensor) -> None:
        # through the accelerator: DeepSpeed's engine runs its own backward (drmix.train.sharding)
        sharding_backward(self.accelerator, loss / self.config.contrastive.gradient_accumulation_steps,
                          self.precision)

    def compute_losses(self, batch: Batch, *, model=None) -> torch.Tensor:
        """Per-example losses of ``batch`` on one process (no cross-device gathering), with gradient."""
        model = model or self.model
        q, d, mask = self.encoder.device_inputs(model, batch, self.encoder.negatives_in(batch))
        qe = model(q)["sentence_embedding"]
        de = model(d)["sentence_embedding"]
        return self._losses_from_embeddings(qe, de, mask, gather=False, batch=batch)

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
            batch_size=cfg.contrastive.batch_size, accumulation_steps=cfg.contrastive.gradient_accumulation_steps,
            encode_queries=self.encoder.encode_queries, training_queries=self.streams.training_queries,
            all_reduce=all_reduce)

    # -- state -----------------------------------------------------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {**self.inputs.state_dict(), **self.streams.state_dict(), "collections": self.names,
                "sizes": self.sizes, "lookahead_seconds": self.lookahead_seconds,
                "nonfinite": self.guard.state_dict(), "precision": self.precision.state_dict(),
                "config": self.config.model_dump(mode="json"),
                **self.output.hf_state(self.step, self.config, sum(self.sizes))}   # transformers' keys

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
        if self.is_main and self.config.run.resume_from:
            drop_checkpoints_after(self.out, self.step)
        log.info("resumed from %s at step %d", path, self.step)

    def _save(self) -> None:
        if self.sharding is not None:  # sharded optimiser state: no resumable checkpoint (drmix.train.sharding)
            return
        if self.is_main:
            save_checkpoint(self.out, self.step, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                            trainer_state=self._trainer_state(), strategy_state=self.strategy.state_dict(),
                            keep=self.config.run.keep_checkpoints, naming=self.config.run.checkpoint_naming)
            for lst in self.listeners:
                lst.on_save(self)
        self.accelerator.wait_for_everyone()

    def barrier(self) -> None:
        """Wait for every process (listeners that work on the main process only call it after)."""
        self.accelerator.wait_for_everyone()

    # -- the loop --------------------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train under the output directory's lock (one writer per directory; see drmix.lock)."""
        with run_lock(self.out, enabled=self.is_main):
            try:
                return self._train()
            finally:
                for lst in self.listeners:  # trackers flushed even when training stops with an error
                    lst.close()

    def _train(self) -> TrainResult:
        cfg = self.config
        ckpt = self.output.prepare(cfg, self.names, self.sizes)
        # a finished run (the final checkpoint kept or not) is complete before a restore truncates its logs
        done = self.output.finished_step(resumed_at=(checkpoint_step(ckpt) or 0) if ckpt else 0,
                                         explicit=bool(cfg.run.resume_from))
        if done is not None and done >= cfg.optim.max_steps:
            log.info("run in %s is already complete (%d steps)", self.out, done)
            return self.output.result(done, None)
        if ckpt is not None:
            self._restore(ckpt)
        if ckpt is None and self.output.finished:
            raise ConfigError(f"the run finished without a final checkpoint (--no-save-final-checkpoint, or FSDP / "
                              f"DeepSpeed sharding, which writes none), so it cannot continue to max_steps "
                              f"{cfg.optim.max_steps}.", path=self.out,
                              fix=f"train further in a new --output-dir with --model {self.out / 'model'}.")
        for lst in self.listeners:
            lst.on_start(self)
        self._record_start_weights()
        ctx = self.context()
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.optim.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   disable=not (cfg.run.show_progress and self.is_main))
        self.wrapped.train()
        while self.step < cfg.optim.max_steps:
            lr = self._optimiser_step(ctx)
            stop = self._after_step(ctx, lr)
            last = self.step == cfg.optim.max_steps and cfg.run.save_final_checkpoint
            if stop or self.step % cfg.run.save_every == 0 or last:
                self._save()
            if self.window.last_loss is not None and self._logging_step():
                bar.set_postfix(loss=f"{self.window.last_loss:.4f}", lr=f"{lr:.2e}")
            bar.update(1)
            if stop:
                log.info("a callback stopped training at step %d", self.step)
                break
        bar.close()
        self.inputs.close()
        for lst in self.listeners:
            lst.on_train_end(self)
        return self._finish(self.window.last_loss)

    def _record_start_weights(self) -> None:
        """The strategy's sampling weights as training starts (or resumes): one ``metrics.jsonl`` record at
        this step (``{"step", "event": "start", "strategy", "weights"}``) and one log line."""
        weights = {n: float(w) for n, w in zip(self.names, self.strategy.sampling_weights())}
        mix = self.config.mixture
        how = (f"transferred ({mix.transfer})" if mix.transfer else mix.scheme if self.strategy.name == "static"
               else "initial")
        self.metrics.append({"step": self.step, "event": "start", "strategy": self.strategy.name, "mixture": how,
                             "weights": weights})
        if self.is_main:
            log.info("mixture weights at step %d (strategy %s, %s): %s", self.step, self.strategy.name, how,
                     ", ".join(f"{n} {w:.4f}" for n, w in weights.items()))

    def _optimiser_step(self, ctx: StepContext) -> float:
        """One optimiser step over ``gradient_accumulation_steps`` micro-batches; returns its learning rate."""
        cfg = self.config
        accumulation = cfg.contrastive.gradient_accumulation_steps
        self.window.start_step()
        for micro in range(accumulation):
            batch, (local, q, d, mask) = self.inputs.next(self.strategy.sampling_weights())
            self.window.count(batch.collection_ids)
            sync = contextlib.nullcontext() if micro == accumulation - 1 else self.accelerator.no_sync(self.wrapped)
            with sync, self.precision.autocast():
                q, d, mask = self.encoder.to_device((q, d, mask))
                if self.reference is not None:
                    self.reference.set_live(local, q, d, mask)
                ctx.step, ctx.micro_step = self.step, micro
                self.wrapped.train(self.objective.dropout)   # a strategy or evaluation may have left it in eval
                loss, losses = self._forward_backward(q, d, mask, local, ctx)
                self.guard.observe_loss(loss)
            self.window.add(loss, losses, local.collection_ids, accumulation)
        self.precision.unscale_(self.optimizer)
        grad_norm = None
        if cfg.optim.max_grad_norm > 0:
            grad_norm = self.accelerator.clip_grad_norm_(self.wrapped.parameters(), cfg.optim.max_grad_norm)
        lr = self.scheduler.get_last_lr()[0]
        if self.guard.before_step(self.optimizer, grad_norm, scaler=self.precision.scaler):  # non-finite: skip
            self.precision.step(self.optimizer)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.window.end_step(cfg.contrastive.batch_size * accumulation)
        return lr

    def _logging_step(self) -> bool:
        return self.step % self.config.run.log_every == 0 or self.step == self.config.optim.max_steps

    def _after_step(self, ctx: StepContext, lr: float) -> bool:
        """The strategy's update, the log records, the listeners; True when a listener stops training."""
        ctx.step = self.step
        self.lookahead_seconds += self.window.time(lambda: self.strategy.after_step(ctx))
        record = self.strategy.trajectory_record(self.step)
        if record is not None:
            self.output.trajectory.append({"step": self.step, **record})
        if self._logging_step():  # the only host syncs of the loop: losses are read every log_every steps
            self.metrics.append({"step": self.step, **self.window.read(self._mean_across, self._sum_across, lr=lr,
                                                                        strategy_seconds=self.lookahead_seconds),
                                 **self.guard.sync()})  # reads the skip counters; raises after too many
        stop = False
        for lst in self.listeners:
            stop = lst.on_step_end(self, ctx) or stop
        return self._agree(stop) if self.stop_hooks else False

    def _agree(self, stop: bool) -> bool:
        """Whether any process's listener asked to stop (every process calls it, at every step)."""
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

    # -- the end ---------------------------------------------------------------------------------------------
    def _model_for_saving(self) -> Any:
        """The model to save: ours, or under FSDP/ZeRO one rebuilt on the main process from the gathered full
        state dict (a collective: every process calls it; ``None`` on the others)."""
        if self.sharding is None:
            return self.model
        state = full_state_dict(self.accelerator, self.wrapped)
        if not self.is_main:
            return None
        m = self.config.model

        def build() -> Any:
            opts = dataclasses.replace(BackboneOptions.from_config(m), gradient_checkpointing=False)
            model = load_retriever(m.name_or_path, opts, device="cpu", trust_remote_code=m.trust_remote_code)
            if self.lora_r:
                apply_lora(model, r=self.lora_r, alpha=m.lora_alpha, dropout=m.lora_dropout, targets=m.lora_targets)
            return model

        log.info("%s: saving the full weights gathered from every process", self.sharding)
        return rebuild_with_state(build, state)

    def _finish(self, last_loss: float | None) -> TrainResult:
        model = self._model_for_saving()
        if self.is_main:
            # the training collections' instructions and the evaluation ones become named prompts of the folder
            record_prompts(model, {**{c.name: c.instruction for c in self.collections if c.instruction},
                                   **self.config.eval.query_instructions})
        weights = self.strategy.final_weights()
        self.output.save_final(model, weights)
        for lst in self.listeners:
            lst.on_finish(self, model, weights)
        self.accelerator.wait_for_everyone()
        result = self.output.result(self.step, last_loss)
        result.details = self.objective.details()
        return result
