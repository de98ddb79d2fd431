"""drmix report on a sentence-transformers trainer's output folder (drmix.integrations.sentence_transformers):
its log_history and MixtureDRO's weights.jsonl drawn like a drmix run's records."""
from __future__ import annotations

import json

from drmix.report.html import is_run, render_report, sub_runs
from drmix.report.trainer_state import is_trainer_run, trainer_records

HISTORY = [{"step": 2, "epoch": 0.5, "loss": 1.25, "learning_rate": 1e-3, "grad_norm": 3.0},
           {"step": 2, "eval_toy_cosine_ndcg@10": 0.5, "eval_loss": 0.9, "eval_runtime": 0.1},
           {"step": 4, "loss": 0.75, "learning_rate": 5e-4},
           {"step": 4, "train_runtime": 3.0, "train_loss": 1.0}]


def _st_run(root, *, state_at_root=False, weights=True):
    root.mkdir(parents=True)
    if weights:
        (root / "weights.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
            {"step": 2, "update": 1, "weights": {"a": 0.5, "b": 0.5}, "proxy_loss": {"a": 1.0, "b": 2.0},
             "counts": {"a": 1, "b": 1}},
            {"step": 4, "update": 2, "weights": {"a": 0.4, "b": 0.6}, "proxy_loss": {"a": 0.5, "b": 1.5},
             "counts": {"a": 1, "b": 1}})))
        (root / "weights.json").write_text(json.dumps({"strategy": "groupdro", "collections": ["a", "b"],
                                                       "weights": [0.4, 0.6], "trainer": "sentence-transformers"}))
    for step, history in ((2, HISTORY[:2]), (4, HISTORY)):
        folder = root if state_at_root else root / f"checkpoint-{step}"
        folder.mkdir(exist_ok=True)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": history}))
    return root


def test_log_history_becomes_metric_records(tmp_path):
    run = _st_run(tmp_path / "st")
    assert trainer_records(run) == [{"step": 2, "loss": 1.25, "lr": 1e-3}, {"step": 2, "eval": {"toy_cosine_ndcg@10": 0.5}},
                                    {"step": 4, "loss": 0.75, "lr": 5e-4}]  # the newest checkpoint's history
    assert trainer_records(_st_run(tmp_path / "root", state_at_root=True))[-1]["step"] == 4


def test_trainer_folder_is_a_run_and_its_checkpoints_are_not(tmp_path):
    run = _st_run(tmp_path / "st", weights=False)
    assert is_run(run) and is_trainer_run(run)
    assert not is_run(run / "checkpoint-4") and sub_runs(run) == []
    assert not is_run(tmp_path)                    # nothing of a run in it
    assert sub_runs(tmp_path) == [run]


def test_report_draws_loss_evaluation_and_weights(tmp_path):
    text = render_report(_st_run(tmp_path / "st"))
    for heading in ("Training curves", "Evaluation during training", "Mixture weights"):
        assert heading in text
    assert text.count("<svg") == 4   # loss/lr, per-dataset proxy losses, the evaluation, the weights
    assert "<td>b</td><td>0.6000</td>" in text and "strategy: groupdro" in text
