"""What a log record measures: the window's mean losses, not the last step's."""
import math
import types

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
    assert w.last_loss is None                                          # nothing logged yet
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


def test_processes_pool_their_examples_and_average_their_step_losses():
    # this process: a (1.0, 3.0); the other process (simulated collectives): a (5.0), b (4.0, 6.0), step loss 4.0
    w = StepWindow(["a", "b"], "cpu")
    _run(w, [(2.0, [1.0, 3.0], [0, 0])])
    other = torch.tensor([[5.0, 10.0], [1.0, 2.0]], dtype=torch.float64)      # [sums; counts] per collection
    rec = w.read(lambda v: (v + 4.0) / 2, lambda t: t + other, lr=1e-3, strategy_seconds=0.0)
    assert rec["loss"] == pytest.approx(3.0) and rec["raw_loss"] == pytest.approx(3.0)
    assert rec["collection_losses"] == pytest.approx({"a": 3.0, "b": 5.0})    # (1+3+5)/3, not the mean of means
    assert w.last_loss == pytest.approx(3.0)


def test_a_reduced_loss_is_not_counted_per_collection_and_counts_restart_each_window():
    w = StepWindow(["a", "b"], "cpu")
    w.start_step()
    w.count(np.array([0, 1, 1]))
    w.add(torch.tensor(2.0), torch.tensor(2.0), np.array([0, 1, 1]), 1)       # a scalar, not per example
    w.end_step(3)
    rec = _read(w)
    assert rec["collection_losses"] == {"a": None, "b": None}
    assert rec["collection_counts"] == {"a": 1, "b": 2} and rec["loss"] == pytest.approx(2.0)
    _run(w, [(1.0, [1.0], [1])])
    rec = _read(w)
    assert rec["collection_counts"] == {"a": 0, "b": 1} and rec["raw_loss"] == pytest.approx(1.0)
    assert math.isnan(_read(w)["loss"])                                         # an empty window


def test_throughput_counts_training_time_and_not_the_strategys(monkeypatch):
    import drmix.train.window as window_module

    clock = iter([0.0, 10.0, 10.25, 15.0, 20.0, 20.25, 22.0])   # the seconds the window reads, in order
    monkeypatch.setattr(window_module, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    w = StepWindow(["a"], "cpu")                         # 0.0
    w.start_step()                                       # 10.0 -> 10.25: 0.25 s of training
    w.add(torch.tensor(1.0), torch.tensor([1.0, 1.0]), np.array([0, 0]), 1)
    w.end_step(8)
    assert w.time(lambda: None) == pytest.approx(4.75)  # reads 10.25 then 15.0
    w.start_step()                                       # 20.0
    w.add(torch.tensor(1.0), torch.tensor([1.0, 1.0]), np.array([0, 0]), 1)
    w.end_step(8)
    w.time(lambda: None)                                 # 20.25 (0.25 s of training), 22.0
    rec = w.read(lambda v: v, lambda t: t, lr=0.5, strategy_seconds=4.0)
    assert rec["train_seconds"] == pytest.approx(0.5) and rec["samples_per_s"] == pytest.approx(32.0)
    assert rec["strategy_seconds"] == 4.0 and rec["lr"] == 0.5
    rec = w.read(lambda v: v, lambda t: t, lr=0.5, strategy_seconds=4.0)
    assert rec["train_seconds"] == 0.0 and rec["samples_per_s"] == 0.0          # the window restarts


def test_counts_are_whole_numbers_and_loss_sums_keep_small_losses_beside_large_ones():
    w = StepWindow(["a"], "cpu")
    big = float(2 ** 24)                        # float32 sums would drop the two 1.0s added to it
    _run(w, [(1.0, [big, 1.0, 1.0], [0, 0, 0])])
    rec = _read(w)
    assert rec["collection_losses"]["a"] == (big + 2.0) / 3
    assert rec["collection_counts"] == {"a": 3} and type(rec["collection_counts"]["a"]) is int   # 3, not 3.0
