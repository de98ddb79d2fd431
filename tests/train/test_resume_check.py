"""--resume refuses changed training fields unless --resume-with-changes (then logged in metrics.jsonl)."""
from __future__ import annotations

import json

import pytest
import yaml

from drmix.config import TrainConfig
from drmix.train.resume_check import ResumeMismatchError, training_changes
from drmix.api import train

from train_helpers import config, make_collections


def test_training_changes_ignores_bookkeeping_fields():
    before = {"seed": 1, "learning_rate": 1e-3, "log_every": 10, "output_dir": "a", "tdro": {"eta": 0.1}}
    after = {"seed": 1, "learning_rate": 2e-3, "log_every": 5, "output_dir": "b", "tdro": {"eta": 0.2},
             "new_field": 3}
    assert training_changes(before, after) == {"learning_rate": {"before": 1e-3, "after": 2e-3},
                                               "dro": {"before": {"eta": 0.1}, "after": {"eta": 0.2}}}
    # a recorded config of either layout compares with a current one field by field
    grouped = TrainConfig(seed=1, learning_rate=2e-3, log_every=5, output_dir="b", dro={"eta": 0.2})
    assert training_changes(before, grouped.model_dump(mode="json")) == \
        {"learning_rate": {"before": 1e-3, "after": 2e-3}, "dro": {"before": {"eta": 0.1}, "after": {"eta": 0.2}}}


def test_a_checkpoint_recorded_before_model_paths_were_resolved():
    """Runs recorded `model: null` (the bundled default) before config.yaml held the resolved path."""
    from drmix.model.encoder import default_model_path

    assert training_changes({"model": None}, {"model": default_model_path()}) == {}
    assert training_changes({"model": None}, {"model": "/elsewhere/model"}) == \
        {"model": {"before": default_model_path(), "after": "/elsewhere/model"}}


def test_resume_with_other_hyperparameters(tiny_model_path, tmp_path):
    data = make_collections(tmp_path / "data", n=8)
    out = tmp_path / "run"
    train(config(tiny_model_path, data, out, max_steps=2, save_every=1))
    with pytest.raises(ResumeMismatchError) as e:
        train(config(tiny_model_path, data, out, max_steps=3, resume=True, seed=7, temperature=0.1))
    msg = str(e.value)
    assert "seed 0 -> 7" in msg and "temperature 0.05 -> 0.1" in msg and "max_steps 2 -> 3" in msg
    assert yaml.safe_load((out / "config.yaml").read_text())["optim"]["seed"] == 0  # not rewritten

    res = train(config(tiny_model_path, data, out, max_steps=3, resume=True, seed=7, resume_with_changes=True,
                       log_every=2))
    assert res.steps == 3
    records = [json.loads(line) for line in open(out / "metrics.jsonl")]
    events = [r for r in records if r.get("event") == "resume_with_changes"]
    assert events == [{"step": 2, "event": "resume_with_changes",
                       "changes": {"max_steps": {"before": 2, "after": 3}, "seed": {"before": 0, "after": 7}}}]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3]
