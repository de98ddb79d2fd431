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
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drmix.config import TrainConfig
from drmix.data.collections import Collection, load_beir_collection, load_collections
from drmix.data.sampling import BatchBuilder, MixtureSampler
from drmix.errors import ConfigError
from drmix.io import atomic_write_json, atomic_write_text, dumps_json
from drmix.mixture.base import Batch, StepContext, Strategy
from drmix.model.encoder import document_prompt, load_encoder, query_prompt
from drmix.model.losses import contrastive_losses
from drmix.outputs import run_finished
from drmix.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from drmix.train.guard import NonFiniteGuard
from drmix.train.lock import clean_stale_temporaries, run_lock
from drmix.train.preflight import check_batch_fits, check_device, check_model_fit, warn_small_collections
from drmix.train.resume_check import check_resume
from drmix.train.gradcache import GradCache
from drmix.train.inputs import Featurizer, InputPipeline, pin_memory_available, to_device
from drmix.train.lora import apply_lora, save_model
from drmix.train.precision import Precision

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    output_dir: Path
    model_dir: Path
    steps: int
    metrics_path: Path
    weights_path: Path | None
    final_loss: float | None = None


class JsonlLog:
    """Append-only JSONL log (one record per line, flushed); truncated to a checkpoint on resume."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = path
        self.enabled = enabled

    def append(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(dumps_json(record) + "\n")  # strict JSON: NaN/inf become null

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (and a torn last line), atomically."""
        if not self.enabled or not self.path.exists():
            return
        keep = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("step", 0) <= step:
                keep.append(line + "\n")
        atomic_write_text(self.path, "".join(keep))


class _DualEncoder(torch.nn.Module):
    """Encodes queries and documents in one forward (one DDP forward per backward)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, q_features: dict, d_features: dict) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.model(q_features)["sentence_embedding"]
        d = self.model(d_features)["sentence_embedding"]
        return q, d


def _schedule(name: str) -> str:
    return {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}[name]


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in n.lower() or n.endswith(".bias") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _adamw(groups: list[dict], lr: float) -> torch.optim.Optimizer:
    """AdamW, fused where PyTorch supports it (CPU and CUDA: about 10x faster steps than the default)."""
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # devices or dtypes without a fused kernel
        return torch.optim.AdamW(groups, lr=lr)


class Trainer:
    """Fine-tunes a SentenceTransformer on a mixture of collections under a Strategy."""

    def __init__(self, config: TrainConfig, *, strategy: Strategy | None = None,
                 callbacks: Sequence[Callable[[StepContext], None]] = (), collections: list[Collection] | None = None,
                 model: Any = None, builder: Any = None,
                 loss_fn: Callable[..., torch.Tensor] | None = None) -> None:
        """``builder`` (turns sampled ``(collection, row)`` pairs into a :class:`Batch`; has ``state_dict``)
        and ``loss_fn`` (``loss_fn(query_emb, doc_emb, gather=bool) -> per-example losses``, used instead of
        InfoNCE) let other objectives reuse this loop and its checkpoints, e.g. COCO pretraining."""
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, set_seed

        self.config = config
        self.callbacks = list(callbacks)
        check_device(config.device)
        # Encoders often hold parameters the embedding never uses (e.g. BERT's pooler under mean pooling).
        ddp = DistributedDataParallelKwargs(find_unused_parameters=True)
        # precision is per trainer (train/precision.py), not accelerate's process-wide mixed_precision
        self.accelerator = Accelerator(mixed_precision="no", cpu=(config.device == "cpu"), kwargs_handlers=[ddp])
        self.precision = Precision(config.mixed_precision, self.accelerator.device)
        self.world = self.accelerator.num_processes
        self.rank = self.accelerator.process_index
        self.is_main = self.accelerator.is_main_process
        if config.batch_size % self.world:
            raise ConfigError(f"batch_size {config.batch_size} is not divisible by the {self.world} processes.",
                              fix=f"use a multiple of {self.world}.")
        self.out = Path(config.output_dir)
        set_seed(config.seed)

        self.collections = collections or load_collections(config.data, max_size=config.max_collection_size,
                                                           seed=config.seed)
        self.names = [c.name for c in self.collections]
        self.sizes = [len(c) for c in self.collections]
        check_batch_fits(self.names, self.sizes, config.batch_size)
        self.model = model if model is not None else load_encoder(
            config.model, device=str(self.accelerator.device), trust_remote_code=config.trust_remote_code)
        self.model.to(self.accelerator.device)
        if config.lora_r:
            apply_lora(self.model, r=config.lora_r, alpha=config.lora_alpha, dropout=config.lora_dropout,
                       targets=config.lora_targets)
        check_model_fit(config, self.model)
        warn_small_collections(self.names, self.sizes, config.batch_size, config.batching)
        self.q_prompt = query_prompt(self.model)
        self.d_prompt = document_prompt(self.model)

        if strategy is None:
            from drmix.mixture.registry import build_strategy

            strategy = build_strategy(config, self.names, [c.weight for c in self.collections])
        self.strategy = strategy
        self.strategy.setup(self.names, self.sizes)

        self.sampler = MixtureSampler(self.sizes, config.batch_size, mode=config.batching, seed=config.seed)
        self.builder = builder if builder is not None else BatchBuilder(self.collections, config.num_negatives,
                                                                         seed=config.seed)
        self.loss_fn = loss_fn
        self._featurizers: dict[int, Featurizer] = {}
        self.inputs = InputPipeline(self.sampler, self.builder, self._prepare_inputs, prefetch=config.input_prefetch,
                                    workers=config.input_workers,
                                    threadable=lambda: self._featurizer(self.model).threadable)
        # separate streams for strategies that draw extra batches (look-ahead, dev measurement)
        self.aux_sampler = MixtureSampler(self.sizes, 1, seed=config.seed + 1)
        self.aux_builder = BatchBuilder(self.collections, config.num_negatives, seed=config.seed + 1)
        self.dev_collections = [load_beir_collection(d, split=config.dev_split) for d in config.dev]
        self.dev_sampler = (MixtureSampler([len(c) for c in self.dev_collections], 1, seed=config.seed + 2)
                            if self.dev_collections else None)
        self.dev_builder = BatchBuilder(self.dev_collections, 0, seed=config.seed + 2)

        self.reference = None
        if config.reference_model:
            self.reference = load_encoder(config.reference_model, device=str(self.accelerator.device),
                                          trust_remote_code=config.trust_remote_code)
            self.reference.eval()
            self.reference.requires_grad_(False)
        # the batch being trained and its device inputs: the reference reuses them when it tokenises alike
        self._live: tuple[Batch, dict, dict, torch.Tensor] | None = None
        self._reference_shares_inputs: bool | None = None

        self.optimizer = _adamw(_param_groups(self.model, config.weight_decay), config.learning_rate)
        from transformers import get_scheduler

        self.scheduler = get_scheduler(_schedule(config.scheduler), self.optimizer,
                                       num_warmup_steps=math.ceil(config.warmup_ratio * config.max_steps),
                                       num_training_steps=config.max_steps)
        self.wrapped, self.optimizer = self.accelerator.prepare(_DualEncoder(self.model), self.optimizer)
        self.grad_cache = (GradCache(self.wrapped, config.grad_cache_chunk, backward=self._backward,
                                     no_sync=lambda: self.accelerator.no_sync(self.wrapped))
                           if config.grad_cache_chunk else None)
        self.metrics = JsonlLog(self.out / "metrics.jsonl", self.is_main)
        self.trajectory = JsonlLog(self.out / "weights.jsonl", self.is_main)
        self.evaluator = None
        if config.eval_data:
            from drmix.evaluation.evaluate import DevEvaluator

            self.evaluator = DevEvaluator(config.eval_data, split=config.eval_split,
                                          max_queries=config.eval_max_queries, seed=config.seed)
        self.step = 0
        #: False: the model runs in eval mode (no dropout) in the training forward (COCO, as its authors do)
        self.dropout = True
        self.lookahead_seconds = 0.0
        self.guard = NonFiniteGuard(self.accelerator.device, max_consecutive=config.max_nonfinite_steps,
                                    world_size=self.world)

    # -- encoding and losses -------------------------------------------------------------------------
    def _featurizer(self, model) -> Featurizer:
        if id(model) not in self._featurizers:
            cuda = pin_memory_available(self.accelerator.device)  # pad to 8 for tensor cores; on CPU it only costs
            self._featurizers[id(model)] = Featurizer(model, pin=cuda, pad_multiple=8 if cuda else 1)
        return self._featurizers[id(model)]

    def _host_inputs(self, model, batch: Batch, num_neg: int) -> tuple[dict, dict, torch.Tensor]:
        """Tokenised (padded, pinned on CUDA) CPU tensors of a batch: queries, documents, negative mask."""
        cfg = self.config
        negs = [n[:num_neg] for n in batch.negatives]
        mask = torch.zeros(len(batch), num_neg, dtype=torch.bool)
        for i, n in enumerate(negs):
            mask[i, :len(n)] = True
        docs = [self.d_prompt + d for d in batch.positives] + [self.d_prompt + d for n in negs for d in n]
        featurize = self._featurizer(model)
        q = featurize([self.q_prompt + t for t in batch.queries], cfg.query_max_length)
        d = featurize(docs, cfg.doc_max_length)
        return q, d, mask

    def _batch_inputs(self, model, batch: Batch, num_neg: int) -> tuple[dict, dict, torch.Tensor]:
        q, d, mask = self._host_inputs(model, batch, num_neg)
        dev = self.accelerator.device
        return to_device(q, dev), to_device(d, dev), mask.to(dev)

    def _prepare_inputs(self, batch: Batch) -> tuple[Batch, dict, dict, torch.Tensor]:
        """This process's slice of a global batch and its host tensors (runs on an input thread)."""
        b = self.config.batch_size // self.world
        local = batch.slice(self.rank * b, (self.rank + 1) * b)
        return (local, *self._host_inputs(self.model, local, self._num_negatives(batch)))

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
            ctx.extras["embeddings"], ctx.extras["grad_cache"] = (qe, de), self.grad_cache
            kept["losses"] = self._losses_from_embeddings(qe, de, mask, gather=True)
            return self.strategy.loss(kept["losses"], local, ctx)

        if self.grad_cache is not None:
            loss = self.grad_cache.step((q, d), objective)
        else:
            loss = objective(*self.wrapped(q, d))
            self._backward(loss)
        return loss, kept["losses"]

    def _backward(self, loss: torch.Tensor) -> None:
        self.precision.backward(loss / self.config.gradient_accumulation_steps)

    def _num_negatives(self, batch: Batch) -> int:
        """Hard negatives per example for this global batch (same on every process)."""
        return min(self.config.num_negatives, max((len(n) for n in batch.negatives), default=0))

    def compute_losses(self, batch: Batch, *, model=None) -> torch.Tensor:
        """Per-example losses of ``batch`` on one process (no cross-device gathering), with gradient."""
        model = model or self.model
        q, d, mask = self._batch_inputs(model, batch, self._num_negatives(batch))
        qe = model(q)["sentence_embedding"]
        de = model(d)["sentence_embedding"]
        return self._losses_from_embeddings(qe, de, mask, gather=False)

    def _reference_inputs(self, batch: Batch) -> tuple[dict, dict, torch.Tensor]:
        """The reference model's device inputs for ``batch``: the training step's own tensors when ``batch``
        is the batch being trained and the reference tokenises exactly as the model does (checked once, on
        the first such batch), so the reference costs no tokenisation on the critical path."""
        num_neg = self._num_negatives(batch)
        live = self._live
        if live is None or live[0] is not batch or self._reference_shares_inputs is False:
            return self._batch_inputs(self.reference, batch, num_neg)
        _, q, d, mask = live
        if self._reference_shares_inputs is None:
            rq, rd, rmask = self._host_inputs(self.reference, batch, num_neg)
            same = all(set(a) == set(b) and all(torch.equal(a[k].cpu(), b[k]) for k in b if torch.is_tensor(b[k]))
                       for a, b in ((q, rq), (d, rd))) and torch.equal(mask.cpu(), rmask)
            self._reference_shares_inputs = same
            if not same:
                log.info("the reference model tokenises differently from the model: its inputs are built apart")
                dev = self.accelerator.device
                return to_device(rq, dev), to_device(rd, dev), rmask.to(dev)
        return dict(q), dict(d), mask

    def reference_losses(self, batch: Batch) -> torch.Tensor:
        """Per-example losses of the frozen reference model on the same inputs (no gradient)."""
        if self.reference is None:
            raise ConfigError("this strategy needs a reference model.", fix="set reference_model in the config.")
        with torch.no_grad():
            q, d, mask = self._reference_inputs(batch)
            qe = self.reference(q)["sentence_embedding"]
            de = self.reference(d)["sentence_embedding"]
            return self._losses_from_embeddings(qe, de, mask, gather=self.world > 1)

    def draw_batch(self, collection: int, size: int) -> Batch:
        return self.aux_builder.build([(collection, r) for r in self.aux_sampler.take(collection, size)])

    def draw_dev_batch(self, dev: int, size: int) -> Batch:
        if self.dev_sampler is None:
            raise ConfigError("this strategy needs dev sets.", fix="pass --dev BEIR_DIR (with a dev split).")
        return self.dev_builder.build([(dev, r) for r in self.dev_sampler.take(dev, size)])

    def context(self) -> StepContext:
        return StepContext(
            step=self.step, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
            collection_names=self.names, collection_sizes=self.sizes, compute_losses=self.compute_losses,
            reference_losses=self.reference_losses if self.reference is not None else None,
            draw_batch=self.draw_batch, dev_names=[c.name for c in self.dev_collections],
            draw_dev_batch=self.draw_dev_batch if self.dev_collections else None,
            log=self.metrics.append, world_size=self.world, rank=self.rank,
            extras={"trainer": self, "config": self.config})

    # -- state ------------------------------------------------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {**self.inputs.state_dict(),
                "aux_sampler": self.aux_sampler.state_dict(), "aux_builder": self.aux_builder.state_dict(),
                "dev_sampler": self.dev_sampler.state_dict() if self.dev_sampler else None,
                "dev_builder": self.dev_builder.state_dict(), "collections": self.names, "sizes": self.sizes,
                "lookahead_seconds": self.lookahead_seconds, "nonfinite": self.guard.state_dict(),
                "precision": self.precision.state_dict(), "config": self.config.model_dump(mode="json")}

    def _restore(self, path: Path) -> None:
        state, strategy_state = load_checkpoint(path, model=self.model, optimizer=self.optimizer,
                                                scheduler=self.scheduler)
        if state.get("collections") != self.names:
            raise ConfigError(f"the checkpoint was trained on collections {state.get('collections')}, "
                              f"the data now gives {self.names}.", path=path,
                              fix="resume with the same data, or start a new --output-dir.")
        self.inputs.load_state_dict(state)
        self.aux_sampler.load_state_dict(state["aux_sampler"])
        self.aux_builder.load_state_dict(state["aux_builder"])
        if self.dev_sampler and state.get("dev_sampler"):
            self.dev_sampler.load_state_dict(state["dev_sampler"])
            self.dev_builder.load_state_dict(state["dev_builder"])
        self.lookahead_seconds = state.get("lookahead_seconds", 0.0)
        self.guard.load_state_dict(state.get("nonfinite"))
        self.precision.load_state_dict(state.get("precision"))
        self.strategy.load_state_dict(strategy_state)
        self.step = int(state["step"])
        self.metrics.truncate_after(self.step)
        self.trajectory.truncate_after(self.step)
        log.info("resumed from %s at step %d", path, self.step)

    def _save(self) -> None:
        if self.is_main:
            save_checkpoint(self.out, self.step, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                            trainer_state=self._trainer_state(), strategy_state=self.strategy.state_dict(),
                            keep=self.config.keep_checkpoints)
        self.accelerator.wait_for_everyone()

    def _prepare_output(self) -> Path | None:
        cfg = self.config
        ckpt = latest_checkpoint(self.out)
        finished = run_finished(self.out)
        if (ckpt or finished) and not cfg.resume:
            raise ConfigError("the output directory already holds a run.", path=self.out,
                              fix="pass --resume to continue it, or choose another --output-dir.")
        if ckpt is not None:  # every rank checks (and refuses) alike; only the main one logs
            check_resume(self.out, ckpt, cfg.model_dump(mode="json"), allow_changes=cfg.resume_with_changes,
                         log=self.metrics.append, names=self.names, sizes=self.sizes)
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            clean_stale_temporaries(self.out)
            atomic_write_text(self.out / "config.yaml", cfg.dump_yaml())
        return ckpt

    # -- the loop ----------------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Train under the output directory's lock (one writer per directory; see drmix.train.lock)."""
        with run_lock(self.out, enabled=self.is_main):
            return self._train()

    def _train(self) -> TrainResult:
        cfg = self.config
        ckpt = self._prepare_output()
        if ckpt is not None:
            self._restore(ckpt)
        if self.step >= cfg.max_steps and run_finished(self.out):
            log.info("run in %s is already complete (%d steps)", self.out, self.step)
            return self._result(None)
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
                    dev = self.accelerator.device
                    q, d, mask = to_device(q, dev), to_device(d, dev), mask.to(dev)
                    if self.reference is not None:  # copies: the model's forward adds outputs to q and d
                        self._live = (local, dict(q), dict(d), mask)
                    ctx.step = self.step
                    ctx.extras["micro_step"] = micro
                    ctx.extras["accumulation_steps"] = cfg.gradient_accumulation_steps
                    self.wrapped.train(self.dropout)   # a strategy or evaluation may have left it in eval mode
                    loss, losses = self._forward_backward(q, d, mask, local, ctx)
                    self.guard.observe_loss(loss)
                step_loss = step_loss + loss.detach().float() / cfg.gradient_accumulation_steps
                step_raw = step_raw + losses.detach().float().mean() / cfg.gradient_accumulation_steps
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
                self.trajectory.append({"step": self.step, **record})
            logging_step = self.step % cfg.log_every == 0 or self.step == cfg.max_steps
            if logging_step:  # the only host syncs of the loop: losses are read every log_every steps
                last_loss = self._mean_across(float(step_loss))
                self.metrics.append({"step": self.step, "loss": last_loss, "raw_loss": self._mean_across(float(step_raw)),
                                     "lr": lr, "samples_per_s": window_n / max(window_seconds, 1e-9),
                                     "train_seconds": window_seconds, "strategy_seconds": self.lookahead_seconds,
                                     "collection_counts": dict(zip(self.names, counts.tolist())),
                                     **self.guard.sync()})  # reads the skip counters; raises after too many
                window_seconds, window_n = 0.0, 0
                counts[:] = 0
            if self.evaluator is not None and cfg.eval_every and self.step % cfg.eval_every == 0:
                self._evaluate()
            for cb in self.callbacks:
                cb(ctx)
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps:
                self._save()
            if logging_step:
                bar.set_postfix(loss=f"{last_loss:.4f}", lr=f"{lr:.2e}")
            bar.update(1)
        bar.close()
        self.inputs.close()
        if self.evaluator is not None and (not cfg.eval_every or cfg.max_steps % cfg.eval_every):
            self._evaluate()
        return self._finish(last_loss)

    def _mean_across(self, value: float) -> float:
        if self.world == 1:
            return value
        t = torch.tensor([value], device=self.accelerator.device)
        return self.accelerator.reduce(t, reduction="mean").item()

    def _evaluate(self) -> None:
        if self.is_main:
            scores = self.evaluator(self.model)
            self.metrics.append({"step": self.step, "eval": scores})
            log.info("step %d eval: %s", self.step, scores)
        self.accelerator.wait_for_everyone()

    def _finish(self, last_loss: float | None) -> TrainResult:
        if self.is_main:
            save_model(self.model, self.out)  # model/ (LoRA merged) and, with LoRA, adapter/
            atomic_write_json(self.out / "weights.json", self.strategy.final_weights())
            self._plot_weights()
        self.accelerator.wait_for_everyone()
        return self._result(last_loss)

    def _plot_weights(self) -> None:
        traj = self.out / "weights.jsonl"
        if not traj.exists() or traj.stat().st_size == 0:
            return
        try:
            from drmix.report.plots import plot_weights
        except ImportError:  # pragma: no cover - plots module is part of the package
            return
        plot_weights(traj, self.out / "weights.png", names=getattr(self.strategy, "weight_names", self.names))

    def _result(self, last_loss: float | None) -> TrainResult:
        weights = self.out / "weights.json"
        return TrainResult(self.out, self.out / "model", self.step, self.out / "metrics.jsonl",
                           weights if weights.exists() else None, last_loss)


def train(config: TrainConfig, *, strategy: Strategy | None = None,
          callbacks: Sequence[Callable[[StepContext], None]] = (), **kwargs: Any) -> TrainResult:
    """Train a model as ``config`` says; see :class:`Trainer`."""
    return Trainer(config, strategy=strategy, callbacks=callbacks, **kwargs).train()
