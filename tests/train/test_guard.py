"""The non-finite guard: a model whose loss is forced non-finite keeps its weights; counts; strict JSON logs."""
from __future__ import annotations

import json

import pytest
import torch

from drmix.mixture.base import Strategy
from drmix.train.guard import NonFiniteError, NonFiniteGuard, supports_found_inf
from drmix.train.lock import LOCK_NAME
from drmix.train.trainer import Trainer

from train_helpers import config, make_collections, params


class PoisonedStrategy(Strategy):
    """Uniform sampling; the loss of the listed (0-based) steps is multiplied by ``value`` (NaN or inf)."""

    name = "poisoned"

    def __init__(self, bad_steps, value=float("nan")):
        self.bad_steps = set(bad_steps)
        self.value = value

    def loss(self, losses, batch, ctx):
        loss = losses.mean()
        return loss * self.value if ctx.step in self.bad_steps else loss


def _strict(path):
    def refuse(token):
        raise AssertionError(f"bare {token} in {path}")
    return [json.loads(line, parse_constant=refuse) for line in open(path)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"), n=16)


def test_all_steps_nonfinite_leave_weights_unchanged_and_json_valid(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    tr = Trainer(config(tiny_model_path, data, out, max_steps=4, max_nonfinite_steps=10),
                 strategy=PoisonedStrategy(range(4)))
    before = params(tr.model).clone()
    tr.train()
    assert torch.equal(params(tr.model), before)
    inner = getattr(tr.optimizer, "optimizer", tr.optimizer)
    steps = [float(st["step"]) for st in inner.state.values()]
    assert steps and set(steps) == {0.0}  # Adam's step count did not advance either
    records = [r for r in _strict(out / "metrics.jsonl") if "loss" in r]
    assert [r["skipped_steps"] for r in records] == [1, 2, 3, 4]
    assert [r["consecutive_skipped"] for r in records] == [1, 2, 3, 4]
    assert all(r["loss"] is None for r in records)


def test_some_steps_skipped_count_and_adam_steps(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    tr = Trainer(config(tiny_model_path, data, out, max_steps=6, log_every=3),
                 strategy=PoisonedStrategy({1, 2, 4}, value=float("inf")))
    before = params(tr.model).clone()
    tr.train()
    assert not torch.equal(params(tr.model), before)
    inner = getattr(tr.optimizer, "optimizer", tr.optimizer)
    assert {float(st["step"]) for st in inner.state.values()} == {3.0}  # 6 steps - 3 skipped
    records = [r for r in _strict(out / "metrics.jsonl") if "loss" in r]
    # logged after 3 steps (indices 1, 2 skipped: a run of 2) and after 6 (index 4 too; index 5 was finite)
    assert [(r["step"], r["skipped_steps"], r["consecutive_skipped"]) for r in records] == [(3, 2, 2), (6, 3, 0)]


def test_stops_after_consecutive_skips_with_clear_error(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    tr = Trainer(config(tiny_model_path, data, out, max_steps=8, max_nonfinite_steps=3, log_every=4),
                 strategy=PoisonedStrategy({0, 1, 2, 3}))
    with pytest.raises(NonFiniteError) as e:
        tr.train()
    assert "4 consecutive steps" in str(e.value) and "learning-rate" in str(e.value)
    assert not (out / "model").exists() and not (out / LOCK_NAME).exists()


def test_guard_flags_infinite_grad_norm_and_fallback_optimizer():
    p = torch.nn.Parameter(torch.ones(2))
    fused = torch.optim.AdamW([p], lr=0.1, fused=True)
    g = NonFiniteGuard("cpu", max_consecutive=5)
    assert supports_found_inf(fused)
    g.observe_loss(torch.tensor(1.0))
    p.grad = torch.ones(2)
    assert g.before_step(fused, torch.tensor(float("inf")))  # fused: step() is called, found_inf skips it
    assert float(fused.found_inf) == 1.0
    fused.step()
    assert torch.equal(p.detach(), torch.ones(2))
    plain = torch.optim.AdamW([p], lr=0.1, foreach=False)
    assert not supports_found_inf(plain)
    g.observe_loss(torch.tensor(float("nan")))
    assert g.before_step(plain, torch.tensor(1.0)) is False  # fallback: the caller skips step()
    g.observe_loss(torch.tensor(2.0))
    assert g.before_step(plain, torch.tensor(1.0)) is True
    assert g.sync() == {"skipped_steps": 2, "consecutive_skipped": 0}
