"""A recipe as a declared stage graph (drmix.recipes.stages.run_stages): a toy recipe whose stages write a file,
run once, are reused on a rerun, are re-run with the stages that need them, and gain a stage by one declaration."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from drmix.config import TrainConfig
from drmix.recipes.progress import StageWork
from drmix.recipes.stages import Stage, StageOutput, check_parts, estimate, run_stages, stage_order
from drmix.train.resume_check import ResumeMismatchError


def _make(calls: list[str], name: str):
    """A stage's ``run``: writes a finished model folder (and its record) as the trainer would."""
    def run(results):
        calls.append(name)
        return None
    return run


def _train(cfg: TrainConfig, calls: list[str], name: str):
    def run(results):
        calls.append(name)
        out = Path(cfg.run.output_dir)
        (out / "model").mkdir(parents=True)
        (out / "model" / "modules.json").write_text("[]")
        (out / "config.yaml").write_text(cfg.dump_yaml())
    return run


def toy(root: Path, calls: list[str], lr: float = 1e-4, extra: bool = False) -> list[Stage]:
    """Two trainings and an evaluation step; ``extra`` adds a third training -- one declaration."""
    first = TrainConfig(output_dir=str(root / "first"), learning_rate=lr, resume=True)
    second = TrainConfig(output_dir=str(root / "second"), learning_rate=2e-4, resume=True)
    stages = [
        Stage("evaluation", run=lambda r: calls.append("evaluation") or sorted(r), needs=("first", "second"),
              work=StageWork("evaluation", passages=300)),
        Stage("second", second, part="optim", run=_train(second, calls, "second"), needs=("first",),
              work=StageWork("second", examples=120)),
        Stage("first", first, part="optim", run=_train(first, calls, "first"), what="the base model",
              work=StageWork("first", examples=60)),
    ]
    if extra:
        third = TrainConfig(output_dir=str(root / "third"), learning_rate=3e-4, resume=True)
        stages.append(Stage("third", third, run=_train(third, calls, "third"), needs=("first",)))
    return stages


def test_stages_run_after_what_they_need_and_report_progress(tmp_path):
    calls: list[str] = []
    lines: list[str] = []
    out = run_stages(toy(tmp_path, calls), root=tmp_path, record=("toy.yaml", TrainConfig()), progress=lines.append,
                     recipe="toy")
    assert calls == ["first", "second", "evaluation"]
    assert out["first"] == StageOutput("first", tmp_path / "first", tmp_path / "first" / "model", False)
    assert out["evaluation"] == ["first", "second"]          # a step gets the results of the stages before it
    assert (tmp_path / "toy.yaml").is_file() and (tmp_path / "provenance.json").is_file()
    started = [x for x in lines if x.startswith("toy [")]
    assert [x.split("]")[0] for x in started] == ["toy [1/3", "toy [2/3", "toy [3/3"]
    assert started[0].startswith("toy [1/3] first: the base model -- estimated 1 s")    # 60 examples at 60/s


def test_a_rerun_reuses_finished_stages_and_a_new_stage_is_one_declaration(tmp_path):
    calls: list[str] = []
    run_stages(toy(tmp_path, calls), root=tmp_path)
    calls.clear()
    lines: list[str] = []
    out = run_stages(toy(tmp_path, calls, extra=True), root=tmp_path, progress=lines.append, recipe="toy")
    # a step without a record always runs; it needs first and second only, so it runs as soon as they are done,
    # before third (declared after it)
    assert calls == ["evaluation", "third"]
    assert out["first"].skipped and out["second"].skipped and not out["third"].skipped
    assert "toy [1/4] first: reused (made earlier with the same settings)" in lines


def test_a_changed_stage_is_refused_or_rerun_with_the_stages_that_need_it(tmp_path, caplog):
    calls: list[str] = []
    run_stages(toy(tmp_path, calls, extra=True), root=tmp_path)
    with pytest.raises(ResumeMismatchError, match="first: learning_rate 0.0001 -> 0.0005"):
        run_stages(toy(tmp_path, calls, lr=5e-4, extra=True), root=tmp_path)
    calls.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        run_stages(toy(tmp_path, calls, lr=5e-4, extra=True), root=tmp_path, allow_changes=True)
    # second and third name nothing inside first/, but declare needs=("first",): re-run with it
    assert calls == ["first", "second", "evaluation", "third"]
    assert "second: re-run with the changed settings (it is built on first)" in caplog.text


def test_the_estimate_is_the_declared_work(tmp_path):
    rows = estimate(toy(tmp_path, []), "cpu")
    assert "| first | 60 | 0 | 0.0 |" in rows and "| evaluation | 0 | 300 | 0.0 |" in rows
    assert rows[-1] == "| total | 180 | 300 | 0.1 |"          # 180/60 s + 300/150 s = 5 s


def test_a_need_that_names_no_stage_or_a_cycle_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs 'nothing'"):
        stage_order([Stage("a", needs=("nothing",))])
    with pytest.raises(ValueError, match="cycle"):
        stage_order([Stage("a", needs=("b",)), Stage("b", needs=("a",))])
    with pytest.raises(ValueError, match="declared twice"):
        stage_order([Stage("a"), Stage("a")])


def test_a_stage_reads_a_part_the_recipe_config_has(tmp_path):
    check_parts(toy(tmp_path, []), TrainConfig())                        # part="optim": TrainConfig().optim
    with pytest.raises(ValueError, match="stage 'first' reads part 'optim.nothing'"):
        check_parts([Stage("first", part="optim.nothing")], TrainConfig())
    with pytest.raises(ValueError, match="reads part 'recipe'"):
        run_stages(toy(tmp_path, []) + [Stage("x", part="recipe", run=lambda r: None)], root=tmp_path,
                   record=("toy.yaml", TrainConfig()))
    assert not (tmp_path / "toy.yaml").exists()                          # refused before anything is written
