"""The ``audit`` candidate of ``drmix adapt`` (:mod:`drmix.recipes.adapt.audit`): the mixture audit as a stage of
the recipe, scored on the synthetic dev (never the labels), its weights file the candidate's mixture, resumed and
reused as every stage is."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from drmix.errors import ConfigError
from drmix.recipes.adapt import AdaptConfig, plan_adapt, plan_work, run_adapt
from drmix.recipes.adapt.audit import AUDIT_DEFAULTS, audit_stage_name
from drmix.recipes.adapt.stages import candidate_stage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/recipes: test_adapt.py
from test_adapt import label_guard, make_config  # noqa: E402,F401  (label_guard: the fixture)

AUDIT = {"budget_steps": 2, "probe_points": 1, "probe_draws": 1}


def test_the_audit_is_composed_from_the_coco_model_the_candidates_data_and_the_synthetic_dev(tmp_path,
                                                                                             tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform", "audit+synthetic", "audit"],
                      audit={"budget_steps": 7})
    plan = plan_adapt(cfg)
    root = Path(cfg.run.output_dir)
    assert set(plan.audits) == {True, False}
    a = plan.audits[True]
    assert a.model.name_or_path == str(root / "coco" / "model")
    assert a.data.collections == [str(tmp_path / "train")] + plan.train_files     # the candidate's data
    assert plan.audits[False].data.collections == [str(tmp_path / "train")]
    assert a.mixture.dev == plan.synthetic_dirs and a.mixture.dev_split == "dev"
    # --audit over adapt's defaults: the budget given, the rest the defaults (no stage-1 run, no mining)
    assert a.audit.budget_steps == 7 and a.audit.seeds == 1 and a.audit.signals == AUDIT_DEFAULTS["signals"]
    assert a.audit.dev_max_docs == 100_000 and a.audit.stage1_miner == tiny_model_path   # --select-max-docs, teacher
    assert a.run.output_dir == str(root / "audit-synthetic")
    c = plan.candidates["audit+synthetic"][1]
    assert c.mixture.scheme == "file" and c.mixture.weights_file == str(root / "audit-synthetic" / "weights.json")
    assert plan.candidates["audit"][1].mixture.weights_file == str(root / "audit" / "weights.json")
    labelled = {str(Path(d)) for d in cfg.eval.eval_data}
    assert not labelled & {str(Path(d)) for d in a.mixture.dev}


def test_audit_options_are_checked_when_the_config_is_made(tmp_path, tiny_model_path):
    with pytest.raises(ConfigError, match="budget_stepz"):
        make_config(tmp_path, tiny_model_path, audit={"budget_stepz": 3})
    with pytest.raises(ConfigError, match="budget_steps"):
        make_config(tmp_path, tiny_model_path, audit={"budget_steps": 0})
    with pytest.raises(ConfigError, match="signal"):
        make_config(tmp_path, tiny_model_path, audit={"signals": ["oracle"]})
    assert AdaptConfig(preset="cpu").stages.audit == {"budget_steps": 20}
    assert AdaptConfig(preset="cpu", audit={"seeds": 2}).stages.audit == {"seeds": 2}


def test_the_audits_work_counted_by_hand(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform", "audit+synthetic"], audit=AUDIT,
                      num_negatives=0)
    work = {w.name: w for w in plan_work(cfg)}
    names = list(work)
    assert names.index("mixture audit (+synthetic)") < names.index(candidate_stage("audit+synthetic"))
    w = work["mixture audit (+synthetic)"]
    # 2 collections + 2 synthetic train files: the whole mixture and 4 leave-one-out runs of 2 steps x 4;
    # the probe at 1 point: 4 collections x 1 draw x 4 x (1 + 2 dev sets / 3) + 2 dev sets x 4 x 4/3
    assert w.examples == pytest.approx(5 * 2 * 4 + 4 * 4 * (1 + 2 / 3) + 2 * 4 * 4 / 3)
    # 5 models on 2 dev sets of 4 queries and 8 documents
    assert w.passages == 5 * 2 * (4 + 8)


def _drop_food(monkeypatch, seen: list):
    """The audit's dev scores with the run without ``food`` better on every synthetic dev query by 0.5: the
    audit's rule must then drop ``food`` (its leave-one-out interval lies below 0)."""
    from drmix.recipes.audit import runner

    real = runner.evaluate_dev

    def evaluate(config, plan):
        seen.append((list(config.mixture.dev), config.mixture.dev_split))
        scores = real(config, plan)
        for label, by_set in scores.items():
            if label.endswith("without:food"):
                for queries in by_set.values():
                    for q in queries:
                        queries[q] = queries[q] + 0.5
        return scores

    monkeypatch.setattr(runner, "evaluate_dev", evaluate)


def test_the_candidate_trains_with_the_audits_weights_and_resumes(tmp_path, tiny_model_path, monkeypatch,
                                                                  label_guard):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform", "audit"], audit=AUDIT)
    label_guard.forbidden = [Path(d) for d in cfg.eval.eval_data]
    root = Path(cfg.run.output_dir)
    seen: list = []
    _drop_food(monkeypatch, seen)
    from drmix.recipes.audit import runner

    # killed in the audit's dev evaluation, after its short runs
    real = runner.evaluate_dev
    monkeypatch.setattr(runner, "evaluate_dev", lambda *a: (_ for _ in ()).throw(RuntimeError("killed")))
    with pytest.raises(RuntimeError, match="killed"):
        run_adapt(cfg)
    runs = root / "audit" / "runs" / "seed3"
    assert sorted(p.name for p in runs.iterdir()) == ["all", "without-animals", "without-food"]
    stamps = {p: (p / "model").stat().st_mtime_ns for p in runs.iterdir()}
    monkeypatch.setattr(runner, "evaluate_dev", real)
    label_guard.armed = True
    result = run_adapt(cfg)
    assert {p: (p / "model").stat().st_mtime_ns for p in runs.iterdir()} == stamps   # resumed: none retrained
    # scored on adapt's synthetic dev, split dev
    synthetic = [str(root / "synthetic" / n) for n in ("pets", "travel")]
    assert seen == [(synthetic, "dev")]
    written = json.loads((root / "audit" / "weights.json").read_text())
    assert written["verdicts"] == {"animals": "keep", "food": "drop"}
    assert written["weights"] == [1.0, 0.0]
    # the candidate trained with that file: its recorded mixture and the weights it sampled with
    cand = root / "coco-audit"
    recorded = yaml.safe_load((cand / "config.yaml").read_text())
    assert recorded["mixture"]["scheme"] == "file"
    assert recorded["mixture"]["weights_file"] == str(root / "audit" / "weights.json")
    trained = json.loads((cand / "weights.json").read_text())
    assert dict(zip(trained["collections"], trained["weights"])) == {"animals": 1.0, "food": 0.0}
    assert "audit" in result.candidates
    # a rerun reuses the audit stage: its runner is not called again
    from drmix.recipes import audit as audit_mod

    monkeypatch.setattr(audit_mod, "run_audit", lambda *a, **kw: pytest.fail("the audit ran again"))
    lines: list[str] = []
    run_adapt(cfg, progress=lines.append)
    assert any(audit_stage_name(False) in line and "reused" in line for line in lines), lines


def test_under_several_ranks_every_rank_runs_the_audit_stage(tmp_path, tiny_model_path):
    from drmix.recipes import launch
    from drmix.recipes.adapt import adapt_stages

    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform", "audit"], audit=AUDIT)
    stage = next(s for s in adapt_stages(cfg, plan_adapt(cfg)) if s.name == audit_stage_name(False))
    assert stage.run.how == launch.EVERY          # its own stages are announced inside it (tests/recipes/test_launch.py)
    assert not (tmp_path / "run").exists()