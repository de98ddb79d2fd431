"""The stages of ``drmix adapt`` (:mod:`drmix.recipes.adapt.stages`), each declared once: a stage is added by one
more ``Stage(...)`` -- here a toy one, declared in this file alone -- and gets what every stage gets: its place
after what it needs, the results of the stages before it, its line in the estimate and the progress, its record
compared on a rerun (reused, or refused when changed)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

from drmix.recipes.adapt import AdaptConfig, StageWork, adapt_stages, estimate_table, plan_adapt, run_adapt
from drmix.recipes.adapt.stages import BASELINE, SELECTION, candidate_stage
from drmix.recipes.stages import Stage, stage_order
from drmix.train.resume_check import ResumeMismatchError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/recipes: test_adapt.py
from test_adapt import make_config  # noqa: E402


def toy_stage(cfg: AdaptConfig, seen: list[str]) -> Stage:
    """A stage after the selection: it reads the candidate chosen from the runner's results and writes it, with
    its record (the settings it was made with: the seed), to ``toy/``."""
    out = Path(cfg.run.output_dir) / "toy"

    def run(results):
        chosen = results[SELECTION].selected
        seen.append(chosen)
        out.mkdir()
        (out / "chosen.txt").write_text(chosen)
        (out / "toy.yaml").write_text(yaml.safe_dump({"seed": cfg.optim.seed}))

    return Stage("toy", {"seed": cfg.optim.seed}, output_dir=out, record=out / "toy.yaml", kind=AdaptConfig,
                 part="optim", needs=(SELECTION,), run=run, done=lambda folder, r: (folder / "chosen.txt").is_file(),
                 what="the choice, written down", work=StageWork("toy", passages=16))


def test_each_stage_is_declared_once_with_its_record_needs_and_work(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform", "tdro:reweight+synthetic"])
    stages = {s.name: s for s in adapt_stages(cfg, plan_adapt(cfg))}
    assert list(stages) == ["synthetic", "COCO", BASELINE, "candidate uniform", "candidate uniform+synthetic",
                            "tDRO stage 1 (+synthetic)", "candidate tdro:reweight+synthetic", SELECTION,
                            "final evaluation", "index"]
    assert [s.name for s in stage_order(list(stages.values()))] == list(stages)      # declared in the order run
    tdro = stages[candidate_stage("tdro:reweight+synthetic")]
    assert tdro.needs == ("COCO", "synthetic", "tDRO stage 1 (+synthetic)")
    assert stages["tDRO stage 1 (+synthetic)"].needs == (candidate_stage("uniform+synthetic"),)
    assert stages["index"].needs == (SELECTION, "candidate uniform", "candidate uniform+synthetic",
                                      "candidate tdro:reweight+synthetic")
    # every stage's work is named as its progress line (the estimate and the progress read it from the stage)
    assert all(s.work is not None and s.work.name == s.label for s in stages.values())
    assert stages["synthetic"].record == Path(cfg.run.output_dir) / "adapt.yaml"
    assert stages["index"].record == Path(cfg.run.output_dir) / "index" / "index.yaml"


def test_a_toy_stage_declared_in_this_file_alone_runs_is_estimated_and_is_reused(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform"], eval_data=[], index=False)
    seen: list[str] = []
    toy = toy_stage(cfg, seen)
    assert "| toy | 0 | 16 |" in estimate_table(cfg, extra=[toy])     # its work, in the estimate
    lines: list[str] = []
    result = run_adapt(cfg, progress=lines.append, extra=[toy])
    assert seen == [result.selected] == ["uniform"]                    # after the selection, with its result
    started = [x for x in lines if x.startswith("adapt [")]
    assert started[-1].startswith("adapt [7/7] toy: the choice, written down -- estimated")
    assert (Path(cfg.run.output_dir) / "toy" / "chosen.txt").read_text() == "uniform"
    lines.clear()
    run_adapt(cfg, progress=lines.append, extra=[toy])                 # a rerun: reused with every other stage
    assert seen == ["uniform"] and "adapt [7/7] toy: reused (made earlier with the same settings)" in lines
    changed = dataclasses.replace(toy, config={"seed": 4})             # made with another setting: refused
    with pytest.raises(ResumeMismatchError, match="toy: seed 3 -> 4"):
        run_adapt(cfg, extra=[changed])
