"""What a run writes for users of sentence-transformers / transformers' Trainer: steps from --epochs, HF's
trainer_state.json fields, the run root loadable as a model, --resume-from, --no-save-final-checkpoint."""
from __future__ import annotations

import json

import pytest
import torch

from drmix.api import train
from drmix.errors import ConfigError
from drmix.train.saving import root_modules, steps_for_epochs
from train_helpers import config, make_collections, read_metrics


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"), n=12)     # 2 collections x 12 rows = 24 examples


@pytest.mark.parametrize("epochs, examples, batch, accumulation, steps", [
    (1, 24, 8, 1, 3), (2, 24, 8, 1, 6), (1, 25, 8, 1, 4), (0.5, 24, 8, 2, 1), (3, 100, 32, 2, 5), (0.01, 10, 8, 1, 1)])
def test_steps_for_epochs_is_the_ceiling_of_examples_over_the_step_size(epochs, examples, batch, accumulation, steps):
    assert steps_for_epochs(epochs, examples, batch, accumulation) == steps


def test_root_modules_point_into_the_model_folder(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    assert [m["path"] for m in root_modules(model)] == ["model", "model/1_Pooling"]
    assert [m["type"] for m in root_modules(model)][1] == "sentence_transformers.models.Pooling"


@pytest.fixture(scope="module")
def epoch_run(tiny_model_path, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("epochs") / "run"
    result = train(config(tiny_model_path, data, out, epochs=1, max_steps=50, save_every=2, keep_checkpoints=3,
                          checkpoint_naming="hf"))
    return out, result


def test_epochs_set_max_steps_and_config_yaml_records_both(epoch_run):
    import yaml

    out, result = epoch_run
    assert result.steps == 3                                    # ceil(1 x 24 / 8), not the 50 given
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3]
    optim = yaml.safe_load((out / "config.yaml").read_text())["optim"]
    assert optim["max_steps"] == 3 and optim["epochs"] == 1


def test_hf_checkpoint_names_and_trainer_state_fields(epoch_run):
    out, _ = epoch_run
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir()) == ["checkpoint-2", "checkpoint-3"]
    assert (out / "checkpoints" / "latest").read_text().strip() == "checkpoint-3"
    state = json.loads((out / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["step"] == 2 and state["max_steps"] == 3
    assert state["epoch"] == pytest.approx(2 * 8 / 24, abs=1e-4) and state["num_train_epochs"] == 1
    assert state["train_batch_size"] == 8 and state["save_steps"] == 2 and state["logging_steps"] == 1
    logged = read_metrics(out)
    assert [h["step"] for h in state["log_history"]] == [1, 2]  # the records up to the checkpoint's step
    assert [h["loss"] for h in state["log_history"]] == [r["loss"] for r in logged[:2]]
    assert [h["learning_rate"] for h in state["log_history"]] == [r["lr"] for r in logged[:2]]
    assert state["log_history"][0]["epoch"] == pytest.approx(8 / 24, abs=1e-4)


def test_the_run_root_loads_as_the_saved_model(epoch_run):
    from sentence_transformers import SentenceTransformer

    out, _ = epoch_run
    texts = ["alpha beta gamma", "omega psi"]
    by_root = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_tensor=True)
    by_model = SentenceTransformer(str(out / "model"), device="cpu").encode(texts, convert_to_tensor=True)
    assert torch.equal(by_root, by_model)
    assert [m["path"] for m in json.loads((out / "modules.json").read_text())][0] == "model"


def test_resume_from_an_earlier_checkpoint_replays_the_same_steps(tiny_model_path, data, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    train(config(tiny_model_path, data, out, max_steps=4, save_every=2, keep_checkpoints=3))
    first = load_file(str(out / "model" / "model.safetensors"))
    losses = [r["loss"] for r in read_metrics(out)]
    again = train(config(tiny_model_path, data, out, max_steps=4, save_every=2, keep_checkpoints=3,
                         resume_from=str(out / "checkpoints" / "step-2")))
    assert again.steps == 4
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3, 4]    # steps 3-4 replaced, not appended
    assert [r["loss"] for r in read_metrics(out)] == losses          # exact resume: the same steps again
    second = load_file(str(out / "model" / "model.safetensors"))
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_resume_from_a_folder_that_is_no_checkpoint_lists_the_runs_checkpoints(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    train(config(tiny_model_path, data, out, max_steps=2, save_every=1, keep_checkpoints=2))
    with pytest.raises(ConfigError, match="not a drmix checkpoint folder") as e:
        train(config(tiny_model_path, data, out, max_steps=2, resume_from=str(out / "model")))
    assert "step-2" in e.value.fix and "step-1" in e.value.fix


def test_resume_from_a_path_that_does_not_exist_says_so(tmp_path):
    from drmix.train.saving import RunOutput

    missing = tmp_path / "run" / "checkpoints" / "step-9"
    with pytest.raises(ConfigError) as e:
        RunOutput(tmp_path / "run", is_main=True).chosen_checkpoint(str(missing))
    assert (e.value.path, e.value.message) == (str(missing), "does not exist.")
    assert "drop --resume-from" in e.value.fix
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match="is not a drmix checkpoint folder"):
        RunOutput(tmp_path / "run", is_main=True).chosen_checkpoint(str(tmp_path / "folder"))


def test_no_final_checkpoint_keeps_only_periodic_ones_and_a_rerun_is_complete(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    train(config(tiny_model_path, data, out, max_steps=3, save_every=2, save_final_checkpoint=False))
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir()) == ["step-2"]
    stamp = (out / "model" / "model.safetensors").stat().st_mtime_ns
    rerun = train(config(tiny_model_path, data, out, max_steps=3, save_every=2, resume=True,
                         save_final_checkpoint=False))
    assert rerun.steps == 3 and (out / "model" / "model.safetensors").stat().st_mtime_ns == stamp


def test_no_checkpoint_at_all_refuses_to_extend_a_finished_run(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    train(config(tiny_model_path, data, out, max_steps=2, save_final_checkpoint=False))
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    with pytest.raises(ConfigError, match="without a final checkpoint") as e:
        train(config(tiny_model_path, data, out, max_steps=4, resume=True, save_final_checkpoint=False))
    assert str(out / "model") in e.value.fix

