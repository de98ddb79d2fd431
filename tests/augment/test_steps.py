"""drmix.augment.steps: augmentation steps register themselves; the recipe runs the enabled ones."""
from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from drmix.augment.steps import (BUILTIN, STEPS, AugmentStep, enabled_steps, register_step, registered_steps,
                                 sample_ids, step_options)
from drmix.recipes.drama import DramaConfig


def test_builtin_steps_in_order_with_their_flags():
    steps = registered_steps()
    assert list(steps)[:3] == ["crop", "generate", "rerank"]
    assert [s.needs_llm for s in list(steps.values())[:3]] == [False, True, True]
    assert steps["rerank"].reads == ("generate",)
    assert {s.build.__module__ for s in steps.values()} == set(BUILTIN) == set(STEPS.builtin)


def test_enabled_steps_follow_the_recipe_flags():
    names = lambda cfg: [s.name for s in enabled_steps(cfg.recipe)]  # noqa: E731
    assert names(DramaConfig(corpus=["x"])) == ["crop"]
    assert names(DramaConfig(corpus=["x"], generate=True)) == ["crop", "generate"]
    assert names(DramaConfig(corpus=["x"], generate=True, rerank=True)) == ["crop", "generate", "rerank"]
    assert names(DramaConfig(corpus=["x"], rerank=True)) == ["crop"]        # rerank reads generate's rows


def test_step_options_are_typed_from_the_recipe_config():
    steps = registered_steps()
    opts = step_options(steps["crop"], DramaConfig(corpus=["x"], min_words=7, max_per_doc=3).augment)
    assert (opts.min_words, opts.max_per_doc, opts.max_queries) == (7, 3, None)
    assert step_options(steps["generate"], DramaConfig(corpus=["x"], generate_max_docs=9).augment).generate_max_docs == 9
    with pytest.raises(ValidationError):
        steps["crop"].options.model_validate({"min_words": 0})


def test_a_name_registers_once():
    class Opts(BaseModel):
        pass

    step = AugmentStep("crop", Opts, lambda ctx, o: ([], {}), help="x")
    with pytest.raises(ValueError, match="augmentation step .crop. is already registered"):
        register_step(step)


def test_sample_ids_is_seeded_sorted_and_complete_when_small():
    ids = [f"d{i}" for i in range(100)]
    picked = sample_ids(ids, 10, seed=1)
    assert len(picked) == 10 and picked == sorted(picked, key=ids.index) and picked == sample_ids(ids, 10, seed=1)
    assert sample_ids(ids, None, 0) == ids and sample_ids(ids[:5], 10, 0) == ids[:5]
