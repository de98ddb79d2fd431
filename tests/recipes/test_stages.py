"""The recipes' reuse check (drmix.recipes.stages): a finished stage is reused only when made with the same settings."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from drmix.config import TrainConfig
from drmix.recipes.stages import Stage, check_stages, prepare_stages, run_stage
from drmix.train.resume_check import ResumeMismatchError


def _config(out: Path, **kw) -> TrainConfig:
    return TrainConfig(output_dir=str(out), resume=True, **kw)


def _finished(cfg: TrainConfig) -> Path:
    """A stage folder as the trainer leaves it: config.yaml recorded, model saved."""
    out = Path(cfg.run.output_dir)
    (out / "model").mkdir(parents=True)
    (out / "model" / "modules.json").write_text("[]")
    (out / "eval-test.json").write_text("{}")
    (out / "config.yaml").write_text(cfg.dump_yaml())
    return out


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_a_stage_made_with_the_same_settings_is_reused(tmp_path):
    out = _finished(_config(tmp_path / "s0", learning_rate=1e-4))
    calls = []
    # operational fields (logging, checkpointing, the device, the resume flags) may differ
    now = _config(out, learning_rate=1e-4, log_every=3, save_every=7, device="cpu", resume_with_changes=True)
    res = run_stage("stage 0", now, lambda: calls.append(1))
    assert res.skipped and res.model_dir == out / "model" and calls == []
    assert (out / "eval-test.json").exists()


def test_a_stage_made_with_other_settings_is_refused_with_the_fields_and_the_fix(tmp_path):
    out = _finished(_config(tmp_path / "s0", learning_rate=1e-4, max_steps=10))
    before = _snapshot(tmp_path)
    calls = []
    with pytest.raises(ResumeMismatchError) as e:
        run_stage("stage 0", _config(out, learning_rate=2e-4, max_steps=10), lambda: calls.append(1))
    msg = str(e.value)
    assert "stage 0: learning_rate 0.0001 -> 0.0002" in msg
    assert "max_steps" not in msg
    assert "--resume-with-changes" in msg and "--overwrite" in msg and "--output-dir" in msg
    assert calls == [] and _snapshot(tmp_path) == before


def test_resume_with_changes_removes_the_earlier_stage_and_runs_it_again(tmp_path, caplog):
    out = _finished(_config(tmp_path / "s0", learning_rate=1e-4))
    seen = []
    now = _config(out, learning_rate=2e-4, resume_with_changes=True)
    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        res = run_stage("stage 0", now, lambda: seen.append(sorted(p.name for p in out.iterdir()) if out.exists()
                                                           else None))
    assert not res.skipped
    assert seen == [None]                       # the run started from nothing: no old model, no old eval cache
    assert "stage 0: re-run with the changed settings (learning_rate 0.0001 -> 0.0002)" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == []    # nothing renamed aside is left behind


def test_a_stage_without_a_record_runs(tmp_path):
    calls = []
    res = run_stage("stage 0", _config(tmp_path / "new"), lambda: calls.append(1))
    assert not res.skipped and calls == [1]


def test_stages_built_on_a_changed_stage_are_rerun_and_the_others_reused(tmp_path, caplog):
    s0 = _config(tmp_path / "stage0", learning_rate=1e-4)
    s1 = _config(tmp_path / "stage1", reference_model=str(tmp_path / "stage0" / "model"))
    s2 = _config(tmp_path / "stage2", weights_file=str(tmp_path / "stage1" / "weights.json"))
    other = _config(tmp_path / "stage0b")        # a name that starts like stage0's folder: not built on it
    for c in (s0, s1, s2, other):
        _finished(c)
    stages = [Stage("stage 0", s0.replace(**{"learning_rate": 3e-4})), Stage("stage 1", s1),
              Stage("stage 2", s2), Stage("other", other)]
    with pytest.raises(ResumeMismatchError):
        check_stages(stages)
    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        rerun = prepare_stages(stages, allow_changes=True)
    assert [s.name for s in rerun] == ["stage 0", "stage 1", "stage 2"]
    assert "stage 1: re-run with the changed settings (it is built on stage 0)" in caplog.text
    assert "stage 2: re-run with the changed settings (it is built on stage 1)" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stage0b"]


def test_overwrite_reruns_every_existing_stage(tmp_path):
    s0 = _config(tmp_path / "stage0")
    _finished(s0)
    stages = [Stage("stage 0", s0), Stage("stage 1", _config(tmp_path / "stage1"))]
    assert check_stages(stages) == []
    assert [s.name for s in check_stages(stages, overwrite=True)] == ["stage 0"]


def test_a_projection_of_a_larger_record_compares_only_its_fields(tmp_path):
    record = tmp_path / "drama.yaml"
    record.write_text("seed: 1\nmax_docs: 10\ntest_max_queries: 5\n")
    (tmp_path / "aug").mkdir()
    same = Stage("augment", {"seed": 1, "max_docs": 10}, output_dir=tmp_path / "aug", record=record)
    assert same.changes() == {}
    changed = Stage("augment", {"seed": 1, "max_docs": 20}, output_dir=tmp_path / "aug", record=record)
    assert changed.changes() == {"max_docs": {"before": 10, "after": 20}}


def test_the_default_model_matches_the_path_the_trainer_records(tmp_path):
    from drmix.model.encoder import resolve_model_path

    out = tmp_path / "s"
    earlier = _config(out).replace(**{"model": resolve_model_path(None)})   # what train() writes
    _finished(earlier)
    assert Stage("s", _config(out)).changes() == {}
    assert set(Stage("s", _config(out, model="org/other-model")).changes()) == {"model"}
