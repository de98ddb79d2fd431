"""What a log record measures: the window's mean losses, not the last step's."""
import math

import numpy as np
import pytest
import torch

from drmix.train.window import StepWindow


def _run(window, steps):
    """Feed ``steps`` = [(strategy loss, per-example losses, collection ids), ...], one micro-batch each."""
    for loss, losses, ids in steps:
        window.start_step()
        window.count(np.asarray(ids))
        window.add(torch.tensor(loss), torch.tensor(losses), np.asarray(ids), 1)
        window.end_step(len(ids))


def _read(window):
    return window.read(lambda v: v, lambda t: t, lr=1e-3, strategy_seconds=0.0)


def test_logged_loss_is_the_mean_of_the_window_steps():
    # one collection per batch: a (losses 3.0, 3.2), b (0.2, 0.4), a (3.4, 3.6)
    w = StepWindow(["a", "b"], "cpu")
    _run(w, [(3.1, [3.0, 3.2], [0, 0]), (0.3, [0.2, 0.4], [1, 1]), (3.5, [3.4, 3.6], [0, 0])])
    rec = _read(w)
    assert rec["loss"] == pytest.approx((3.1 + 0.3 + 3.5) / 3)          # not 3.5, the last step's
    assert rec["raw_loss"] == pytest.approx((3.1 + 0.3 + 3.5) / 3)
    assert rec["collection_losses"] == pytest.approx({"a": 3.3, "b": 0.3})
    assert rec["collection_counts"] == {"a": 4, "b": 2}
    # the next window starts empty
    _run(w, [(1.0, [0.5, 1.5], [1, 1])])
    rec = _read(w)
    assert rec["loss"] == pytest.approx(1.0) and rec["collection_losses"] == {"a": None, "b": pytest.approx(1.0)}


def test_strategy_loss_and_raw_loss_are_averaged_apart():
    # a strategy that weights the loss: its scalar differs from the examples' mean
    w = StepWindow(["a"], "cpu")
    _run(w, [(2.0, [1.0, 1.0], [0, 0]), (4.0, [3.0, 3.0], [0, 0])])
    rec = _read(w)
    assert rec["loss"] == pytest.approx(3.0) and rec["raw_loss"] == pytest.approx(2.0)


def test_accumulated_micro_steps_make_one_step():
    w = StepWindow(["a"], "cpu")
    w.start_step()
    for loss in (1.0, 3.0):                      # two micro-batches of one optimiser step
        w.add(torch.tensor(loss), torch.tensor([loss]), np.array([0]), 2)
    w.end_step(2)
    w.start_step()
    w.add(torch.tensor(6.0), torch.tensor([6.0]), np.array([0]), 1)
    w.end_step(1)
    assert _read(w)["loss"] == pytest.approx((2.0 + 6.0) / 2)


def test_a_skipped_non_finite_step_stays_out_of_the_mean():
    w = StepWindow(["a"], "cpu")
    _run(w, [(1.0, [1.0], [0]), (float("nan"), [float("nan")], [0]), (3.0, [3.0], [0])])
    assert _read(w)["loss"] == pytest.approx(2.0)
    _run(w, [(float("inf"), [1.0], [0])])
    assert math.isnan(_read(w)["loss"])
