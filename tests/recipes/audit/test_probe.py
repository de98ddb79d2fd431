"""The probe inside the whole-mixture run: where it measures, what it measures, and that it changes nothing."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from drmix.mixture.base import StepContext
from drmix.recipes.audit.probe import SignalProbe, probe_steps


def test_probe_steps_are_evenly_spaced_and_before_the_last():
    assert probe_steps(100, 4) == [20, 40, 60, 80]
    assert probe_steps(150, 4) == [30, 60, 90, 120]
    assert probe_steps(4, 2) == [1, 3]
    assert probe_steps(2, 3) == [1]           # distinct, at least 1, never the final step (its learning rate is 0)


class Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([0.5, -0.25, 1.0]))


def _losses(model: Toy):
    return lambda batch: (batch.x @ model.w - batch.y) ** 2


def _context(model: Toy, optimizer, batches: dict[int, list], dev: list) -> StepContext:
    drawn = {i: iter(bs) for i, bs in batches.items()}
    return StepContext(step=3, model=model, optimizer=optimizer, scheduler=None, collection_names=["a", "b"],
                       collection_sizes=[10, 10], compute_losses=_losses(model),
                       draw_batch=lambda i, size: next(drawn[i]), dev_names=["d"],
                       draw_dev_batch=lambda j, size: dev[j], batch_size=2)


def _batch(rng, n=2):
    return SimpleNamespace(x=torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float32),
                           y=torch.tensor(rng.normal(size=n), dtype=torch.float32))


def test_influence_is_the_dev_change_after_adamws_own_step_and_alignment_the_gradient_cosine():
    """Against torch: the look-ahead is the step torch.optim.AdamW takes from the same state, the influence the
    change of the negative dev loss after it, the alignment the cosine with the summed dev gradient."""
    rng = np.random.default_rng(0)
    model = Toy()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.01)
    _losses(model)(_batch(rng)).mean().backward()
    opt.step()                                  # the trainer's state: one step taken
    opt.zero_grad()
    batches = {0: [_batch(rng), _batch(rng)], 1: [_batch(rng), _batch(rng)]}
    dev = [_batch(rng, 4)]
    before = model.w.detach().clone()
    probe = SignalProbe([3], draws=2)
    probe.setup(["a", "b"], [10, 10])
    probe.measure(_context(model, opt, copy.deepcopy(batches), dev))
    assert torch.equal(model.w, before)        # restored after every look-ahead

    def dev_loss(m):
        with torch.no_grad():
            return float(_losses(m)(dev[0]).mean())

    g_dev = torch.autograd.grad(_losses(model)(dev[0]).mean(), [model.w])[0].double()
    for i, name in enumerate(["a", "b"]):
        for k, batch in enumerate(batches[i]):
            m2, o2 = copy.deepcopy(model), None
            o2 = torch.optim.AdamW(m2.parameters(), lr=0.1, weight_decay=0.01)
            o2.load_state_dict(copy.deepcopy(opt.state_dict()))     # step() writes the state it loaded
            loss = _losses(m2)(batch).mean()
            loss.backward()
            g = m2.w.grad.detach().double().clone()
            o2.step()
            assert probe.measured["influence"][name][k] == pytest.approx(dev_loss(model) - dev_loss(m2), rel=1e-5)
            cos = float(g @ g_dev / (g.norm() * g_dev.norm()))
            assert probe.measured["gradalign"][name][k] == pytest.approx(cos, rel=1e-6)


def test_the_measurements_are_checkpointed_and_written(tmp_path):
    probe = SignalProbe([2, 4], draws=1)
    probe.setup(["a", "b"], [3, 3])
    probe.measured["influence"]["a"].append(0.5)
    probe.done.append(2)
    again = SignalProbe([2, 4], draws=1)
    again.setup(["a", "b"], [3, 3])
    again.load_state_dict(probe.state_dict())
    assert again.measured["influence"] == {"a": [0.5], "b": []} and again.done == [2]
    written = again.final_weights()
    assert written["weights"] == [0.5, 0.5] and written["signals"]["points"] == [2]
    assert written["signals"]["influence"]["a"] == [0.5]
