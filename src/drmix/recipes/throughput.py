"""The throughput every time estimate of drmix is made at (``drmix adapt --estimate``, ``drmix index
--estimate``, the recipes' progress lines): measured on this machine with the run's own model and lengths, or
assumed where it cannot be measured here, and always said which.

A measurement takes seconds: the model is loaded, a few batches of the run's own passages are encoded at the
length the run encodes them (:func:`measure_encoding`), and two training steps of the run's batch are taken at
its query and document lengths, after one step that warms up (:func:`measure_training`: the forward and backward
pass of every text of the batch and an optimiser step, as the trainer takes them; nothing is written and the
model on disk is untouched). A rate that cannot be measured -- the estimate is for a GPU and this machine has
none, or the model does not load -- is assumed (:data:`ASSUMED_RATES`) and said so with the reason.

The units are a stage's work (:class:`drmix.recipes.progress.StageWork`): training examples (a hard negative
counts as half an example, a COCO span pair as one) and passages encoded without gradients. Hand-written: no
library measures a training script's throughput on the user's machine before it runs.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: assumed throughput where none is measured: (training examples/s, passages encoded/s). cuda: the assumption of
#: benchmarks/_lease.py (one H100, pre-tokenised inputs, all-MiniLM-L6-v2); cpu: measured on two shared cores with
#: a 2-layer MiniLM at 8/24 tokens (docs/adapt.md) -- slower models and longer texts take longer
ASSUMED_RATES = {"cuda": (1000.0, 10000.0), "cpu": (60.0, 150.0)}
#: the encoder a stage's passages are encoded by, when none is named: the run's model (or a candidate of it)
MODEL = "model"


@dataclass(frozen=True)
class Rate:
    """One throughput: ``per_s`` units a second, ``measured`` here or assumed, and ``how`` (what was measured,
    or why it was assumed)."""

    per_s: float
    measured: bool
    how: str

    def describe(self, unit: str) -> str:
        shown = f"{self.per_s:,.0f}" if self.per_s >= 10 else f"{self.per_s:.3g}"
        return f"{shown} {unit} ({'measured' if self.measured else 'assumed'}: {self.how})"


@dataclass(frozen=True)
class Rates:
    """The rates an estimate is made at on ``device``: training examples/s and, per encoder (:data:`MODEL`, a
    recipe's ``teacher``), passages/s; an encoder without a rate of its own goes at the model's."""

    device: str
    examples: Rate
    passages: Mapping[str, Rate] = field(default_factory=dict)

    def encoding(self, encoder: str = MODEL) -> Rate:
        return self.passages.get(encoder) or self.passages[MODEL]

    def seconds(self, work: Any) -> float:
        """The seconds of a stage's work (:class:`~drmix.recipes.progress.StageWork`) at these rates."""
        return work.examples / self.examples.per_s + work.passages / self.encoding(work.encoder).per_s

    @property
    def measured(self) -> bool:
        """Whether every rate was measured here."""
        return self.examples.measured and all(r.measured for r in self.passages.values())

    def lines(self) -> list[str]:
        """Markdown: each rate, measured or assumed, with what it is."""
        out = [f"- training: {self.examples.describe('examples/s')}"]
        out += [f"- encoding by the {name}: {rate.describe('passages/s')}" for name, rate in self.passages.items()]
        return out


def assumed(device: str, why: str = "see docs/adapt.md") -> Rates:
    """The :data:`ASSUMED_RATES` of ``device`` (``cpu`` or ``cuda``), each saying ``why`` it is assumed."""
    examples, passages = ASSUMED_RATES[device]
    return Rates(device, Rate(examples, False, why), {MODEL: Rate(passages, False, why)})


def _timed(step: Callable[[], Any], repeats: int, timer: Callable[[], float]) -> float:
    """Seconds ``repeats`` calls of ``step`` take, after one call that warms up (allocations, kernels, caches)."""
    step()
    start = timer()
    for _ in range(repeats):
        step()
    return max(timer() - start, 1e-9)


def measure_encoding(model: Any, texts: Sequence[str], *, max_length: int | None, batch_size: int = 32,
                     batches: int = 2, timer: Callable[[], float] = time.perf_counter) -> float:
    """Passages a second ``model`` encodes here: ``batches`` batches of ``texts`` (the run's own passages, taken
    again when fewer) in one call, as a corpus pass encodes them, at ``max_length`` tokens (None: the model's own),
    through :func:`drmix.retrieval.encode.encode_texts` without the embedding cache (a cached passage costs
    nothing and says nothing of the machine), after a call on a few of them that warms up."""
    from drmix.retrieval.encode import encode_texts

    pool = list(texts) or ["a passage"]
    timed = [pool[i % len(pool)] for i in range(batch_size * batches)]

    def encode(part: list[str]) -> Any:
        return encode_texts(model, part, batch_size=batch_size, max_length=max_length, normalize=True,
                            cache_embeddings=False, tokenize_num_proc=1)

    encode(timed[:8])
    start = timer()
    encode(timed)
    return len(timed) / max(timer() - start, 1e-9)


def measure_training(model: Any, texts: Sequence[str], *, batch_size: int, query_max_length: int | None,
                     doc_max_length: int | None, num_negatives: int = 0, steps: int = 2,
                     timer: Callable[[], float] = time.perf_counter) -> float:
    """Training examples a second here: ``steps`` steps of InfoNCE on a batch of ``batch_size`` queries (their
    passages' first words, at ``query_max_length`` tokens) against their passages and ``num_negatives`` other
    passages each (at ``doc_max_length``), forward, backward and an AdamW step, in the units of
    :class:`~drmix.recipes.progress.StageWork` (a negative counts as half an example). The model's weights
    change in memory only; its training mode is restored."""
    import torch

    from drmix.model.losses import info_nce

    pool = list(texts) or ["a passage about something"]
    docs = [pool[i % len(pool)] for i in range(batch_size)]
    queries = [" ".join(d.split()[:8]) for d in docs]
    negatives = [pool[(i + 1 + j) % len(pool)] for i in range(batch_size) for j in range(num_negatives)]
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(params, lr=1e-7)
    was_training, device = model.training, next(model.parameters()).device

    def embed(batch: list[str], length: int | None) -> torch.Tensor:
        kwargs = {"processing_kwargs": {"text": {"max_length": int(length), "truncation": True}}} if length else {}
        features = model.preprocess(batch, **kwargs)   # cut at the run's length, as its batches are
        return model({k: v.to(device) if isinstance(v, torch.Tensor) else v
                      for k, v in features.items()})["sentence_embedding"]

    def step() -> None:
        q, d = embed(queries, query_max_length), embed(docs, doc_max_length)
        negs = embed(negatives, doc_max_length).view(batch_size, num_negatives, -1) if num_negatives else None
        info_nce(q, d, negs).mean().backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)

    model.train()
    try:
        seconds = _timed(step, steps, timer)
    finally:
        model.train(was_training)
    return steps * batch_size * (1 + num_negatives / 2) / seconds


def _name(model: str | None) -> str:
    return model or "the bundled all-MiniLM-L6-v2"


def encoding_rate(device: str, model: str | None, texts: Sequence[str], max_length: int | None, *,
                  loaded: Any = None, timer: Callable[[], float] = time.perf_counter) -> Rate:
    """Passages a second ``model`` (or the already ``loaded`` one) encodes on ``device`` here at ``max_length``
    (None: its own), on ``texts`` (:func:`measure_encoding`); the assumed rate, saying why, when it does not
    load."""
    from drmix.errors import DrmixError
    from drmix.model.encoder import load_encoder

    if loaded is None:
        try:
            loaded = load_encoder(model, device=device)
        except (DrmixError, OSError) as e:
            return Rate(ASSUMED_RATES[device][1], False, f"{_name(model)} did not load to measure ({e})")
    shown = max_length or getattr(loaded, "max_seq_length", None) or "its own"
    per_s = measure_encoding(loaded, texts, max_length=max_length, timer=timer)
    return Rate(per_s, True, f"{_name(model)} on {device}, 2 batches of 32 of the run's passages at {shown} "
                             "tokens")


def measure(device: str, *, model: str | None, texts: Sequence[str], batch_size: int, query_max_length: int | None,
            doc_max_length: int | None, num_negatives: int = 0,
            encoders: Mapping[str, tuple[str | None, int | None]] | None = None,
            timer: Callable[[], float] = time.perf_counter) -> Rates:
    """The rates of a run on ``device`` (``cpu`` or ``cuda``), measured here with its ``model`` and lengths on
    ``texts`` (the run's own passages): training at its batch, query and document lengths; encoding by the model
    at ``doc_max_length``, and by every other encoder of ``encoders`` (``{name: (model, max_length)}``, e.g. a
    recipe's teacher at its own length). Assumed, saying why, when ``device`` is not here or a model does not
    load."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return assumed(device, "no GPU on this machine to measure; the assumption of docs/adapt.md")
    from drmix.errors import DrmixError
    from drmix.model.encoder import load_encoder

    try:
        loaded = load_encoder(model, device=device)
    except (DrmixError, OSError) as e:
        return assumed(device, f"{_name(model)} did not load to measure ({e}); the assumption of docs/adapt.md")
    passages = {MODEL: encoding_rate(device, model, texts, doc_max_length, loaded=loaded, timer=timer)}
    examples = Rate(measure_training(loaded, texts, batch_size=batch_size, query_max_length=query_max_length,
                                     doc_max_length=doc_max_length, num_negatives=num_negatives, timer=timer), True,
                    f"{_name(model)} on {device}, 2 steps of batch {batch_size} at {query_max_length}/"
                    f"{doc_max_length} tokens, {num_negatives} hard negatives")
    for encoder, (path, length) in (encoders or {}).items():
        passages[encoder] = encoding_rate(device, path, texts, length, loaded=loaded if path == model else None,
                                          timer=timer)
    return Rates(device, examples, passages)
