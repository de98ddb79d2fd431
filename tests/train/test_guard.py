"""The non-finite guard: a model whose loss is forced non-finite keeps its weights; counts; strict JSON logs."""
from __future__ import annotations

import json

import pytest
import torch

from drmix.mixture.base import Strategy
from drmix.train.guard import NonFiniteError, NonFiniteGuard, supports_found_inf
from drmix.lock import LOCK_NAME
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


def _steps(guard, opt, finite):
    """One optimiser step per flag: a loss that is finite or NaN, a finite gradient norm."""
    for ok in finite:
        guard.observe_loss(torch.tensor(1.0 if ok else float("nan")))
        guard.before_step(opt, torch.tensor(1.0))


def test_a_resumed_guard_keeps_counting_and_stops_on_the_whole_run_of_skips():
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p], lr=0.1, foreach=False)
    before = NonFiniteGuard("cpu", max_consecutive=4)
    assert before.state_dict() == before.sync() == {"skipped_steps": 0, "consecutive_skipped": 0}   # no step yet
    _steps(before, opt, [False, False, False, True, False, False])   # 5 skipped, the last 2 in a row
    state = before.state_dict()
    assert state == {"skipped_steps": 5, "consecutive_skipped": 2}
    after = NonFiniteGuard("cpu", max_consecutive=4)
    after.load_state_dict(json.loads(json.dumps(state)))             # as trainer_state.json holds it
    assert after.state_dict() == state
    _steps(after, opt, [False])
    assert after.sync() == {"skipped_steps": 6, "consecutive_skipped": 3}
    _steps(after, opt, [False])                                      # 2 before the checkpoint + 2 after
    with pytest.raises(NonFiniteError, match="4 consecutive steps"):
        after.sync()
    fresh = NonFiniteGuard("cpu", max_consecutive=4)
    fresh.load_state_dict(None)                                      # a checkpoint without the field
    assert fresh.state_dict() == {"skipped_steps": 0, "consecutive_skipped": 0}
    fresh.load_state_dict({"skipped_steps": 2})                      # or with part of it
    assert fresh.state_dict() == {"skipped_steps": 2, "consecutive_skipped": 0}
    fresh.load_state_dict({})
    _steps(fresh, opt, [False, True])
    assert fresh.sync() == {"skipped_steps": 1, "consecutive_skipped": 0}


def test_the_longest_run_counts_even_when_the_last_step_was_finite():
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p], lr=0.1, foreach=False)
    g = NonFiniteGuard("cpu", max_consecutive=3)
    _steps(g, opt, [False, False, False, True])      # a run of 3 between two syncs, then a finite step
    with pytest.raises(NonFiniteError, match="3 consecutive steps"):
        g.sync()
    assert g.sync() == {"skipped_steps": 3, "consecutive_skipped": 0}   # the longest run restarts after a sync
    default = NonFiniteGuard("cpu")                   # 20 consecutive skipped steps stop a run by default
    _steps(default, opt, [False] * 19)
    assert default.sync()["consecutive_skipped"] == 19
    _steps(default, opt, [False])
    with pytest.raises(NonFiniteError, match="20 consecutive"):
        default.sync()


def test_without_a_norm_the_guard_measures_the_gradients_itself():
    # max_grad_norm 0: no clipping, so the trainer hands no norm and the guard computes it
    p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p, q], lr=0.1, foreach=False)
    g = NonFiniteGuard("cpu")
    g.observe_loss(torch.tensor(1.0))
    p.grad, q.grad = torch.ones(2), torch.tensor([1.0, float("inf")])
    assert g.before_step(opt, None) is False
    q.grad = None                                     # a parameter without a gradient is left out
    g.observe_loss(torch.tensor(1.0))
    assert g.before_step(opt, None) is True
    p.grad = None                                     # no gradient at all: a finite (zero) norm
    g.observe_loss(torch.tensor(1.0))
    assert g.before_step(opt, None) is True
    assert g.sync() == {"skipped_steps": 1, "consecutive_skipped": 0}


def test_fused_optimisers_get_the_skip_flag_and_a_grad_scaler_keeps_its_own():
    p = torch.nn.Parameter(torch.ones(2))
    fused = torch.optim.AdamW([p], lr=0.1, fused=True)
    g = NonFiniteGuard("cpu")
    p.grad = torch.ones(2)
    g.observe_loss(torch.tensor(1.0))
    assert g.before_step(fused, torch.tensor(1.0)) is True
    assert fused.found_inf.dtype == torch.float32 and float(fused.found_inf) == 0.0   # a finite step runs
    fused.step()
    assert not torch.equal(p.detach(), torch.ones(2))
    # mixed precision with a GradScaler: the scaler sets found_inf itself; the guard only counts the skip
    del fused.found_inf
    g.observe_loss(torch.tensor(float("nan")))
    assert g.before_step(fused, torch.tensor(1.0), scaler=object()) is True
    assert not hasattr(fused, "found_inf")
    assert g.sync() == {"skipped_steps": 1, "consecutive_skipped": 1}
    # an optimiser is fused only when every parameter group is
    r = torch.nn.Parameter(torch.ones(2))
    mixed = torch.optim.AdamW([p], lr=0.1, fused=True)
    mixed.add_param_group({"params": [r], "fused": False})
    assert not supports_found_inf(mixed)
    assert not supports_found_inf(torch.optim.SGD([p], lr=0.1))


def test_every_process_skips_when_one_process_saw_a_non_finite_loss(monkeypatch):
    import drmix.train.guard as guard_module

    calls = []

    def other_rank_was_bad(t, op):               # the all-reduce across 2 processes: the other one was not finite
        calls.append(op)
        return torch.ones_like(t)

    monkeypatch.setattr(guard_module, "all_reduce", other_rank_was_bad)
    p = torch.nn.Parameter(torch.ones(2))
    plain = torch.optim.AdamW([p], lr=0.1, foreach=False)
    g = NonFiniteGuard("cpu", world_size=2)
    g.observe_loss(torch.tensor(1.0))
    assert g.before_step(plain, torch.tensor(1.0)) is False
    assert calls == ["max"]
    assert NonFiniteGuard("cpu", world_size=1).before_step(plain, torch.tensor(1.0)) is True
    assert NonFiniteGuard("cpu").before_step(plain, torch.tensor(1.0)) is True
    assert calls == ["max"]                      # one process (the default): nothing to agree on


def test_one_allowed_skip_stops_at_the_first_and_finite_steps_never_stop():
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p], lr=0.1, foreach=False)
    g = NonFiniteGuard("cpu", max_consecutive=1)
    for _ in range(3):                           # finite steps, read at every log record
        _steps(g, opt, [True])
        assert g.sync() == {"skipped_steps": 0, "consecutive_skipped": 0}
    _steps(g, opt, [False])
    with pytest.raises(NonFiniteError, match="1 consecutive steps"):
        g.sync()
