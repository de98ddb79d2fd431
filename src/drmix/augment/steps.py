"""Augmentation steps of the DRAMA recipe register themselves here (DRAMA, arXiv 2502.18460, Sec. 3).

A step turns one target corpus into training rows (``query``, ``positive``, ``negatives`` ...). Each step's
module calls :func:`register_step` with an :class:`AugmentStep`: its name (the file it writes is
``<corpus>-<name>.jsonl``), its typed options (a pydantic model whose fields are fields of the recipe's
config with the same names, so they are flags of ``drmix pipeline drama``), its run order, its builder (one signature:
``build(ctx: AugmentContext, options) -> (rows, stats)``), its help text, whether it needs the LLM, the
recipe flag that turns it on (``None``: always on) and the steps whose rows it reads. The recipe
(:func:`drmix.recipes.drama.augment_corpus`) runs every enabled step in that order and skips a
step whose file exists.

Adding a step: one module that registers it, named in :data:`BUILTIN` (plus its option fields on the recipe
config, docs and tests); a step of another package registers through the ``drmix.augment_steps`` entry-point
group. The built-in steps are ``crop`` (:mod:`drmix.augment.crop`), ``generate`` (:mod:`drmix.augment.generate`)
and ``rerank`` (:mod:`drmix.augment.rerank`). The registry is a :class:`drmix.registry.Registry`, the one
idiom of strategies, allocation policies, augmentation steps and command areas.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from drmix.registry import Registry

log = logging.getLogger(__name__)

#: the modules that register the built-in steps
BUILTIN = ("drmix.augment.crop", "drmix.augment.generate", "drmix.augment.rerank")


def sample_ids(ids: Sequence[str], n: int | None, seed: int) -> list[str]:
    """A seeded sample of ``n`` of ``ids`` in their original order (all of them when ``n`` is None or larger)."""
    import numpy as np

    ids = list(ids)
    if n is None or len(ids) <= n:
        return ids
    keep = np.sort(np.random.default_rng(seed).choice(len(ids), size=n, replace=False))
    return [ids[i] for i in keep]


@dataclass
class AugmentContext:
    """What a step gets: the corpus, the sampled documents, the teacher, the LLM and the earlier steps' rows."""

    corpus_name: str
    corpus: Mapping[str, Mapping[str, str]]        # doc id -> {"title", "text"}
    texts: Mapping[str, str]                       # doc id -> title + text
    ids: list[str]                                 # the sampled documents (max_docs, seeded)
    seed: int
    teacher: Any = None
    backend: Any = None                            # the LLM backend (None when no step needs one)
    mine: Callable[[list[dict[str, Any]]], tuple[list[dict[str, Any]], dict[str, int]]] | None = None
    out: Path | None = None                        # the folder of the step files
    load: Callable[[Path], list[dict[str, Any]]] | None = None           # reads a step file back
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)   # step name -> rows written this run
    why: dict[str, str] = field(default_factory=dict)    # step name -> the fix named when it kept no row

    def stats_file(self, step: str) -> Path:
        """Where a step writes its counts on every exit path (``<corpus>-<step>.stats.json``)."""
        return Path(self.out or ".") / f"{self.corpus_name}-{step}.stats.json"

    def rows_of(self, step: str) -> list[dict[str, Any]]:
        """The rows an earlier step wrote (this run, or read back from its file with ``load``)."""
        if step not in self.rows:
            self.rows[step] = self.load(step_file(self.out, self.corpus_name, step))
        return self.rows[step]


@dataclass(frozen=True)
class AugmentStep:
    name: str
    options: type[BaseModel]
    build: Callable[[AugmentContext, Any], tuple[list[dict[str, Any]], dict[str, Any]]]
    help: str
    needs_llm: bool = False
    enabled_by: str | None = None                  # recipe config flag that turns the step on (None: always)
    reads: tuple[str, ...] = ()                    # steps whose rows it needs
    order: int = 100                               # run order (ties: registration order)


#: every augmentation step, by name, in run order (``order``, then registration order)
STEPS: Registry[AugmentStep] = Registry("augmentation step", BUILTIN, entry_points="drmix.augment_steps",
                                        order=lambda step: step.order, identity=id, builtins_first=True)


def register_step(step: AugmentStep) -> AugmentStep:
    """Register an augmentation step (:meth:`drmix.registry.Registry.register`: the built-ins first, so that a step
    cannot take a built-in's name; a name registered twice is an error)."""
    return STEPS.register(step)


def registered_steps() -> dict[str, AugmentStep]:
    """Every registered step, in run order (``order``, then registration order)."""
    return STEPS.all()


def step_file(out: Path | None, corpus_name: str, step: str) -> Path:
    return Path(out or ".") / f"{corpus_name}-{step}.jsonl"


def enabled_steps(config: Any) -> list[AugmentStep]:
    """The steps ``config`` turns on, in order; a step whose inputs are off is left out with a warning."""
    on = [s for s in registered_steps().values() if s.enabled_by is None or getattr(config, s.enabled_by, False)]
    names = {s.name for s in on}
    kept = []
    for s in on:
        missing = [r for r in s.reads if r not in names]
        if missing:
            log.warning("augmentation step %s needs %s, which is not enabled; skipped", s.name, ", ".join(missing))
            continue
        kept.append(s)
    return kept


def step_options(step: AugmentStep, config: Any) -> BaseModel:
    """The step's typed options, read from the recipe config's fields of the same names."""
    return step.options.model_validate({k: getattr(config, k) for k in step.options.model_fields if hasattr(config, k)})
