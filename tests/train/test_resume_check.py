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


def _checkpoint(run_dir, *, step=4, config_in_state=None, names=("a", "b"), sizes=(16, 16)):
    """A checkpoint folder holding only what the resume check reads: trainer_state.json."""
    ckpt = run_dir / "checkpoints" / f"step-{step}"
    ckpt.mkdir(parents=True)
    state = {"step": step, "collections": list(names), "sizes": list(sizes)}
    if config_in_state is not None:
        state["config"] = config_in_state
    (ckpt / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")
    return ckpt


def test_resume_check_refuses_or_logs_exactly_the_changed_training_fields(tmp_path):
    from drmix.train.resume_check import check_resume

    ckpt = _checkpoint(tmp_path, config_in_state=TrainConfig(seed=1, learning_rate=1e-3).model_dump(mode="json"))
    logged = []
    # the same training settings (bookkeeping changed): nothing refused, nothing logged
    same = TrainConfig(seed=1, learning_rate=1e-3, log_every=7, output_dir="elsewhere")
    assert check_resume(tmp_path, ckpt, same, allow_changes=False, log=logged.append) == {}
    assert logged == []
    with pytest.raises(ResumeMismatchError, match="learning_rate 0.001 -> 0.002, seed 1 -> 2") as e:
        check_resume(tmp_path, ckpt, TrainConfig(seed=2, learning_rate=2e-3), allow_changes=False, log=logged.append)
    assert e.value.path == str(ckpt)
    changed = TrainConfig(seed=1, learning_rate=2e-3)
    assert logged == []
    changes = check_resume(tmp_path, ckpt, changed, allow_changes=True, log=logged.append)
    assert changes == {"learning_rate": {"before": 1e-3, "after": 2e-3}}
    assert logged == [{"step": 4, "event": "resume_with_changes", "changes": changes}]


def test_a_checkpoint_without_a_recorded_config_is_compared_with_config_yaml(tmp_path):
    from drmix.train.resume_check import check_resume, recorded_config

    ckpt = _checkpoint(tmp_path)                                   # written before configs were recorded in it
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"seed": 3, "temperature": 0.05}), encoding="utf-8")
    with pytest.raises(ResumeMismatchError, match="seed 3 -> 1"):
        check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=False, log=print)
    # the checkpoint's own record wins over config.yaml
    assert recorded_config(tmp_path, {"config": {"seed": 9}}) == {"seed": 9}
    assert recorded_config(tmp_path, {"config": "not a mapping"}) == {"seed": 3, "temperature": 0.05}
    # nothing readable recorded: nothing to compare, the resume goes on
    (tmp_path / "config.yaml").write_text("- a list\n", encoding="utf-8")
    assert recorded_config(tmp_path, None) is None
    (tmp_path / "config.yaml").write_text("seed: [unclosed\n", encoding="utf-8")
    assert recorded_config(tmp_path, {}) is None
    (tmp_path / "config.yaml").unlink()
    assert recorded_config(tmp_path, None) is None
    assert check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=False, log=print) == {}
    # no readable trainer_state.json either: config.yaml alone is compared, and a logged change is at step 0
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"seed": 3}), encoding="utf-8")
    (ckpt / "trainer_state.json").write_text("{broken", encoding="utf-8")
    logged = []
    check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=True, log=logged.append, names=["a", "b"],
                 sizes=[16, 12])                               # no recorded sizes to compare with either
    assert logged == [{"step": 0, "event": "resume_with_changes", "changes": {"seed": {"before": 3, "after": 1}}}]


def test_collections_that_changed_size_are_refused_even_with_resume_with_changes(tmp_path):
    from drmix.train.resume_check import check_resume

    ckpt = _checkpoint(tmp_path, config_in_state=TrainConfig(seed=1).model_dump(mode="json"), sizes=(16, 16))
    for allow in (False, True):
        with pytest.raises(ResumeMismatchError) as e:
            check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=allow, log=print, names=["a", "b"],
                         sizes=[16, 12])
        assert "b 16 -> 12" in str(e.value) and "a 16" not in str(e.value) and e.value.path == str(ckpt)
    with pytest.raises(ResumeMismatchError, match="a 16 -> 8, b 16 -> 12"):
        check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=False, log=print, names=["a", "b"],
                     sizes=[8, 12])
    # sizes not known to the caller: not compared
    assert check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=False, log=print, names=["a", "b"]) == {}
    # the same sizes, or another set of collections (reported when the checkpoint is restored): not refused here
    assert check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=False, log=print, names=["a", "b"],
                        sizes=[16, 16]) == {}
    assert check_resume(tmp_path, ckpt, TrainConfig(seed=1), allow_changes=False, log=print, names=["a", "c"],
                        sizes=[16, 12]) == {}


def test_only_a_different_value_is_a_change():
    # the same mapping in another order, the same list: no change; a field the checkpoint lacks: its default ran
    before = {"seed": 1, "dro": {"eta": 0.1, "gamma": 2}, "data": ["x", "y"]}
    reordered = {"seed": 1, "dro": {"gamma": 2, "eta": 0.1}, "data": ["x", "y"]}
    assert training_changes(before, {**reordered, "temperature": 0.5}) == {}
    assert training_changes(reordered, before) == {}
    assert training_changes(before, {"seed": 1, "dro": {"eta": 0.1, "gamma": 2}, "data": ["y", "x"]}) == \
        {"data": {"before": ["x", "y"], "after": ["y", "x"]}}
    # a field that is gone now compares with None
    assert training_changes({"seed": 1, "temperature": 0.5}, {"seed": 1}) == \
        {"temperature": {"before": 0.5, "after": None}}
