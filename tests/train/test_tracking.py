"""report_to: scalars reach TensorBoard event files (read back with tensorboard's EventAccumulator) and W&B."""
import pytest

from drmix.errors import ConfigError
from drmix.train.tracking import HFCallbacks, Tracking, parse_report_to, scalars_of


def test_scalars_of_flattens_every_kind_of_record():
    rec = {"step": 4, "loss": 0.5, "raw_loss": 0.6, "lr": 1e-5, "samples_per_s": 12.0, "nonfinite_skipped": 0,
           "collection_losses": {"a": 0.4, "b": float("nan")}, "collection_counts": {"a": 8, "b": 0}}
    assert scalars_of(rec) == {"train/loss": 0.5, "train/raw_loss": 0.6, "train/lr": 1e-5,
                               "train/samples_per_s": 12.0, "train/nonfinite_skipped": 0.0, "loss/a": 0.4,
                               "examples/a": 8.0, "examples/b": 0.0}
    assert scalars_of({"step": 2, "weights": {"a": 0.25, "b": 0.75}}) == {"weight/a": 0.25, "weight/b": 0.75}
    assert scalars_of({"step": 3, "eval": {"scifact/ndcg@10": 0.4, "avg/ndcg@10": 0.4}}) == \
        {"eval/scifact/ndcg@10": 0.4, "eval/avg/ndcg@10": 0.4}


def test_parse_report_to():
    assert parse_report_to([]) == [] and parse_report_to(["none"]) == []
    assert parse_report_to(["tensorboard,wandb", "tensorboard"]) == ["tensorboard", "wandb"]
    with pytest.raises(ConfigError, match="mlflow"):
        parse_report_to(["mlflow"])


def _events(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_event_files_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    t = Tracking.from_config(["tensorboard"], tmp_path, config={"max_steps": 4})
    t.record({"step": 1, "loss": 0.9, "lr": 1e-5, "weights": {"a": 0.5, "b": 0.5}})
    t.record({"step": 2, "loss": 0.7, "lr": 2e-5, "collection_losses": {"a": 0.6}, "samples_per_s": 30.0})
    t.record({"step": 2, "eval": {"scifact/ndcg@10": 0.25}})
    t.close()
    ev = _events(tmp_path / "tensorboard")
    assert ev["train/loss"] == [(1, 0.9), (2, 0.7)]
    assert ev["train/lr"] == [(1, 1e-5), (2, 2e-5)]
    assert ev["weight/a"] == [(1, 0.5)] and ev["loss/a"] == [(2, 0.6)] and ev["train/samples_per_s"] == [(2, 30.0)]
    assert ev["eval/scifact/ndcg@10"] == [(2, 0.25)]


def test_tensorboard_resume_drops_events_after_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    t = Tracking.from_config(["tensorboard"], tmp_path)
    for s in (1, 2, 3, 4):
        t.record({"step": s, "loss": float(s)})
    t.close()
    t = Tracking.from_config(["tensorboard"], tmp_path, start_step=2)  # resumed from the step-2 checkpoint
    t.record({"step": 3, "loss": 30.0})
    t.close()
    assert _events(tmp_path / "tensorboard")["train/loss"] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_wandb_offline(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    t = Tracking.from_config(["wandb"], tmp_path, config={"max_steps": 2})
    t.record({"step": 1, "loss": 0.5})
    t.close()
    run_id = (tmp_path / "wandb" / "run_id").read_text().strip()
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")), wandb.__version__


def test_hf_trainer_callbacks_see_logs_and_can_stop(tmp_path):
    from transformers import TrainerCallback

    from drmix.config import TrainConfig

    seen = []

    class Stop(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            seen.append(("log", state.global_step, logs["train/loss"]))

        def on_evaluate(self, args, state, control, metrics=None, **kw):
            seen.append(("eval", state.global_step, metrics))

        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = state.global_step >= 3
            return control

    cbs = HFCallbacks([Stop()], TrainConfig(output_dir=str(tmp_path), max_steps=10, learning_rate=3e-5))
    assert cbs.args.learning_rate == 3e-5 and cbs.args.max_steps == 10
    cbs.train_begin(0, None)
    assert not cbs.step_end(1, None)
    cbs.logged({"step": 1, "loss": 0.5})
    cbs.logged({"step": 1, "eval": {"scifact/ndcg@10": 0.3}})
    assert not cbs.step_end(2, None) and cbs.step_end(3, None)
    assert seen == [("log", 1, 0.5), ("eval", 1, {"eval_scifact/ndcg@10": 0.3})]
    assert cbs.state.log_history[0] == {"train/loss": 0.5, "step": 1}


def test_hf_callbacks_see_the_steps_epochs_derive_and_the_warmup_steps(tmp_path):
    from drmix.config import TrainConfig

    cbs = HFCallbacks([], TrainConfig(output_dir=str(tmp_path), epochs=2, max_steps=1000, warmup_ratio=0.1))
    assert cbs.args.max_steps == 1000 and cbs.args.warmup_steps == 100
    cbs.sync_steps(TrainConfig(output_dir=str(tmp_path), epochs=2, max_steps=30, warmup_steps=4))
    assert cbs.state.max_steps == 30 and cbs.args.max_steps == 30 and cbs.args.warmup_steps == 4
