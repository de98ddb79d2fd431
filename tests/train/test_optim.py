"""The schedule's warm-up: --warmup-steps replaces --warmup-ratio."""
import pytest
import torch

from drmix.config import TrainConfig
from drmix.train.optim import build_optimizer, warmup_steps


def test_warmup_steps_replace_the_ratio():
    assert warmup_steps(TrainConfig(max_steps=95, warmup_ratio=0.1)) == 10          # ceil(9.5)
    assert warmup_steps(TrainConfig(max_steps=95, warmup_ratio=0.1, warmup_steps=3)) == 3
    assert warmup_steps(TrainConfig(max_steps=95, warmup_steps=0)) == 0


def test_the_schedule_warms_up_for_warmup_steps_then_decays_linearly():
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = build_optimizer(model, TrainConfig(max_steps=10, warmup_steps=2, warmup_ratio=0.5,
                                                      learning_rate=1.0))
    lrs = []
    for _ in range(5):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()                      # no gradients: the weights stay; the schedule moves on
        scheduler.step()
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 7 / 8, 6 / 8])
