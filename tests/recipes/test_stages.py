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


# -- inputs changed at the same path (drmix.provenance) ---------------------------------------------------------
def _collection(path: Path, n: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"query": "q{i}", "positive": "d{i}"}}\n' for i in range(n)))
    return str(path)


def _model(folder: Path, weights: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "modules.json").write_text("[]")
    (folder / "model.safetensors").write_bytes(weights)
    return str(folder)


def _two_stages(tmp_path: Path, data: str, model: str) -> list[Stage]:
    s0 = _config(tmp_path / "run" / "stage0", data=[data], model=model)
    s1 = _config(tmp_path / "run" / "stage1", data=[data],
                 reference_model=str(tmp_path / "run" / "stage0" / "model"))
    return [Stage("stage 0", s0), Stage("stage 1", s1)]


def _finished_run(tmp_path: Path, **kw) -> tuple[list[Stage], Path]:
    data = _collection(tmp_path / "data" / "train.jsonl", 20)
    model = _model(tmp_path / "base", b"\0" * 64)
    (tmp_path / "beir").mkdir()
    stages = _two_stages(tmp_path, data, model)
    record = tmp_path / "run" / "provenance.json"
    prepare_stages(stages, provenance=record)
    for s in stages:
        _finished(s.config)
    return stages, record


def test_the_inputs_recorded_are_the_input_fields_less_other_stages_outputs(tmp_path):
    stages, record = _finished_run(tmp_path)
    import json

    recorded = json.loads(record.read_text())["stages"]
    assert sorted(recorded["stage 0"]["inputs"]) == ["data", "model"]
    # stage 1 starts from the bundled model; its reference, stage 0's model, is an output of a stage: not listed
    assert sorted(recorded["stage 1"]["inputs"]) == ["data", "model"]
    fp = recorded["stage 0"]["inputs"]["data"][str(tmp_path / "data" / "train.jsonl")]
    assert fp["rows"] == 20 and fp["kind"] == "file"
    assert check_stages(stages, provenance=record) == []                  # nothing changed: reused


def test_a_collection_cut_in_place_is_refused_naming_the_input_and_its_rows(tmp_path):
    stages, record = _finished_run(tmp_path)
    data = _collection(tmp_path / "data" / "train.jsonl", 15)
    before = _snapshot(tmp_path)
    with pytest.raises(ResumeMismatchError) as e:
        prepare_stages(stages, provenance=record)
    msg = str(e.value)
    assert f"stage 0: data {data}: rows 20 -> 15" in msg
    assert f"stage 1: data {data}: rows 20 -> 15" in msg
    assert "--resume-with-changes" in msg
    assert _snapshot(tmp_path) == before


def test_a_model_replaced_at_the_same_path_reruns_its_stage_and_those_built_on_it(tmp_path, caplog):
    stages, record = _finished_run(tmp_path)
    _model(tmp_path / "base", b"\1" * 80)
    with pytest.raises(ResumeMismatchError, match="model.safetensors: bytes 64 -> 80"):
        check_stages(stages, provenance=record)
    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        rerun = prepare_stages(stages, allow_changes=True, provenance=record)
    assert [s.name for s in rerun] == ["stage 0", "stage 1"]
    assert "stage 1: re-run with the changed settings (it is built on stage 0)" in caplog.text
    assert not (tmp_path / "run" / "stage0").exists()
    # the record now holds the new model: the next run with it reuses what is trained from it
    for s in stages:
        _finished(s.config)
    assert check_stages(stages, provenance=record) == []


def test_inputs_rewritten_keeping_size_inode_and_mtime_are_refused(tmp_path, monkeypatch):
    """rsync -t / cp -p onto a training file and a model's weights: the change time shows the edit, so the stages
    are refused (not reused), even when the digests were remembered the moment they were taken."""
    from stat_helpers import rewrite_keeping_stat

    from drmix import fingerprint

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fingerprint, "_MEMO", {})
    monkeypatch.setattr(fingerprint, "SETTLE_NS", 0)
    stages, record = _finished_run(tmp_path)
    data = tmp_path / "data" / "train.jsonl"
    assert check_stages(stages, provenance=record) == []
    rewrite_keeping_stat(data, data.read_bytes().replace(b'"q1"', b'"x1"'))
    with pytest.raises(ResumeMismatchError) as e:
        check_stages(stages, provenance=record)
    assert f"stage 0: data {data}: content changed, bytes 700 -> 700" in str(e.value)
    assert f"stage 1: data {data}: content changed" in str(e.value)
    rewrite_keeping_stat(data, data.read_bytes().replace(b'"x1"', b'"q1"'))   # the recorded content again: reused
    assert check_stages(stages, provenance=record) == []
    rewrite_keeping_stat(tmp_path / "base" / "model.safetensors", b"\2" * 64)
    with pytest.raises(ResumeMismatchError, match="model.safetensors: content changed, bytes 64 -> 64"):
        check_stages(stages, provenance=record)


def test_test_and_selection_sets_are_no_stage_input(tmp_path):
    from drmix.recipes.tdro import PipelineConfig

    data = _collection(tmp_path / "data" / "train.jsonl", 2)
    (tmp_path / "beir").mkdir()
    values = {"data": [data], "test_data": [str(tmp_path / "beir")], "select_on": [str(tmp_path / "beir")]}
    stage = Stage("s", values, output_dir=tmp_path / "s", record=tmp_path / "pipeline.yaml", kind=PipelineConfig)
    assert stage.input_paths() == {"data": [data]}


def test_a_stage_not_run_yet_is_not_refused_for_its_inputs(tmp_path):
    data = _collection(tmp_path / "data" / "train.jsonl", 20)
    model = _model(tmp_path / "base", b"\0" * 64)
    stages = _two_stages(tmp_path, data, model)
    record = tmp_path / "run" / "provenance.json"
    prepare_stages(stages, provenance=record)             # interrupted before any stage wrote its folder
    _collection(tmp_path / "data" / "train.jsonl", 15)
    assert prepare_stages(stages, provenance=record) == []


def test_a_target_corpus_rewritten_in_place_is_refused_and_its_labels_are_not_read(tmp_path):
    from drmix.recipes.drama import DramaConfig

    beir = tmp_path / "target"
    corpus = _collection(beir / "corpus.jsonl", 6)
    _collection(beir / "queries.jsonl", 3)
    values = {"corpus": [str(beir)], "seed": 1}
    stage = Stage("augment", values, output_dir=tmp_path / "run" / "augment", record=tmp_path / "run" / "drama.yaml",
                  kind=DramaConfig)
    assert list(stage.inputs()["corpus"][str(beir)]["files"]) == ["corpus.jsonl"]
    record = tmp_path / "run" / "provenance.json"
    prepare_stages([stage], provenance=record)
    (tmp_path / "run" / "augment").mkdir()
    _collection(beir / "queries.jsonl", 1)                        # the labels: not what the stage reads
    assert check_stages([stage], provenance=record) == []
    _collection(Path(corpus), 4)
    with pytest.raises(ResumeMismatchError, match=r"augment: corpus \S+target: corpus.jsonl: rows 6 -> 4"):
        check_stages([stage], provenance=record)
