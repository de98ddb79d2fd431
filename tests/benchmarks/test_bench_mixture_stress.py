"""benchmarks/bench_mixture_stress.py: the harmful collections, what the arms reuse, and the tables."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_mixture_stress as bs  # noqa: E402
import stress_report as sr  # noqa: E402


def test_the_noisy_copy_moves_the_stated_fraction_of_positives_and_keeps_the_rest():
    rows = [{"query": f"q{i}", "positive": f"p{i}", "negatives": [f"n{i}"]} for i in range(10)]
    noisy = bs.noisy_copy(rows, 0.5, seed=3)
    moved = [i for i, r in enumerate(noisy) if r["positive"] != f"p{i}"]
    assert len(moved) == 5                                          # half, and none kept its own positive
    assert sorted(noisy[i]["positive"] for i in moved) == sorted(f"p{i}" for i in moved)   # a permutation of them
    assert all(noisy[i] == rows[i] for i in range(10) if i not in moved)
    assert [r["query"] for r in noisy] == [r["query"] for r in rows] and rows[moved[0]]["positive"] == f"p{moved[0]}"
    assert bs.noisy_copy(rows, 0.5, seed=3) == noisy               # seeded


def test_the_flood_repeats_the_source_in_order():
    rows = [{"query": "a"}, {"query": "b"}, {"query": "c"}]
    assert [r["query"] for r in bs.flood(rows, 7)] == ["a", "b", "c", "a", "b", "c", "a"]


def test_the_off_task_set_pairs_questions_with_answer_strings(shared_data):
    rows = bs.answer_pairs(shared_data, limit=50)
    assert len(rows) == 50
    doc = json.loads((shared_data / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
    answers = {qa["question"]: qa["answers"][0]["text"] for art in doc["data"] for p in art["paragraphs"]
               for qa in p["qas"]}
    assert all(answers[r["query"]] == r["positive"] != (r["negatives"] or [None])[0] for r in rows)


def test_the_dev_sets_are_the_non_test_splits(tmp_path, shared_data):
    from types import SimpleNamespace

    dev = bs.dev_sets(SimpleNamespace(out=tmp_path, data=shared_data))
    assert [Path(d).name for d in dev] == ["scifact", "nfcorpus"]
    for d, split in zip(dev, ("train", "dev")):
        qrels = (Path(d) / "qrels" / "dev.tsv").read_text(encoding="utf-8")
        assert qrels == (shared_data / Path(d).name / "qrels" / f"{split}.tsv").read_text(encoding="utf-8")
        assert sorted(p.name for p in (Path(d) / "qrels").iterdir()) == ["dev.tsv"]     # no test qrels here


def _weights(tmp_path: Path, weights: dict[str, float]) -> Path:
    audit = tmp_path / "audit"
    audit.mkdir(exist_ok=True)
    (audit / "weights.json").write_text(json.dumps({"collections": list(weights), "weights": list(weights.values())}))
    return audit


@pytest.mark.parametrize("weights, expected", [
    ({"a": 1 / 3, "b": 1 / 3, "noisy_xquad": 1 / 3}, "all"),
    ({"a": 0.5, "b": 0.5, "noisy_xquad": 0.0}, "without-noisy_xquad"),
    ({"a": 0.0, "b": 0.5, "noisy_xquad": 0.5}, "without-a"),
    ({"a": 0.4, "b": 0.4, "noisy_xquad": 0.2}, None),          # a down-weight: trained with the file
    ({"a": 1.0, "b": 0.0, "noisy_xquad": 0.0}, None),          # one of three kept: not a run of the audit
])
def test_the_audit_arm_is_the_audit_run_its_recommendation_names(tmp_path, weights, expected):
    audit = _weights(tmp_path, weights)
    got = bs.shared_model("audit", "noisy", 4, audit, list(weights))
    assert got == (None if expected is None else audit / "runs" / "seed4" / expected / "model")
    assert bs.shared_model("uniform", "noisy", 4, audit, list(weights)) == audit / "runs" / "seed4" / "all" / "model"
    assert bs.shared_model("oracle", "noisy", 4, audit, list(weights)) == (
        audit / "runs" / "seed4" / "without-noisy_xquad" / "model")
    assert bs.shared_model("size", "noisy", 4, audit, list(weights)) is None


def _cell(gains: dict[str, float], verdict: str = "drop") -> dict:
    """Per arm, two queries a target: uniform 0.5 / 0.3 everywhere, every other arm that plus its gain."""
    test = {arm: {t: {"q1": 0.5 + g, "q2": 0.3 + g} for t in sr.TARGETS} for arm, g in gains.items()}
    names = ["a", "noisy_xquad"]
    return {"test": bs.compact(test), "dev": {}, "chosen": "audit",
            "audit": {"verdicts": {"a": "keep", "noisy_xquad": verdict}, "weights": {"a": 1.0, "noisy_xquad": 0.0},
                      "loo": {n: {"mean": -0.01, "low": -0.02, "high": -0.001, "p": 0.01} for n in names},
                      "agreement": {"infdds": {"tau": 1.0, "p": 0.3}}, "voters": ["infdds"], "learned": {},
                      "refused": {}, "harmful": "noisy_xquad"},
            "weights": {"groupdro:reweight": {"a": 0.4, "noisy_xquad": 0.6}}}


def test_the_tables_by_hand():
    gains = {"uniform": 0.0, "audit": 0.02, "oracle": 0.025, "dev-selected": 0.02}
    stored = {"preset": "medium", "settings": {"steps": 100}, "cells": {
        "noisy/0": _cell(gains), "noisy/1": _cell({**gains, "audit": 0.01, "dev-selected": 0.01})}}
    text = sr.report(stored)
    lines = text.splitlines()
    row = next(x for x in lines if x.startswith("| audit |"))
    # every query gains 0.02 and 0.01 in the two seeds: +0.015 pooled, no spread; 60% of the oracle's +0.025
    assert row.startswith("| audit | 0.4150 | 0.4150 | 0.4150 | +0.0150 [+0.0150, +0.0150] | 0 | +0.0200 / +0.0100 | 60% ")
    assert "| noisy | 0 | -0.0100 [-0.0200, -0.0010] | drop | none |" in text
    assert "| noisy | audit | +0.0150 | 0 | yes | 60% [40%, 80%] | missed |" in text      # below 80% of the oracle
    assert "| noisy | – | – | – | – | 0.6000 ↑ | – | 0.0000 |" in text                 # GroupDRO up-weights it
    assert "named the harmful set (drop or down-weight) in 2 of 2 harmful runs (2 drop)" in text
    assert text == sr.report(json.loads(json.dumps(stored)))                           # from stored results alone


FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("stress-*-results.json"))


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_the_docs_table_is_what_report_only_prints_from_its_stored_results(tmp_path, capsys, fixture):
    (tmp_path / "results.json").write_bytes(fixture.read_bytes())
    assert bs.main(["--report-only", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    docs = (Path(__file__).resolve().parents[2] / "docs" / "mixture.md").read_text(encoding="utf-8")
    assert printed.startswith("Preset `") and printed.rstrip("\n") in docs


def test_the_trajectories_say_what_each_method_measured_of_the_harmful_set(tmp_path):
    stage1 = tmp_path / "audit" / "stage1" / "groupdro-seed0"
    stage1.mkdir(parents=True)
    recs = [{"step": s, "weights": {"a": wa, "noisy_xquad": 1 - wa}, "proxy_loss": {"a": pa, "noisy_xquad": pn},
             "reference_loss": {"a": None, "noisy_xquad": None}, "measurement": {"a": pa, "noisy_xquad": pn}}
            for s, wa, pa, pn in ((1, 0.5, 1.0, 3.0), (2, 0.4, 0.5, 2.0))]
    (stage1 / "weights.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    arm = tmp_path / "arms" / "infdds"
    arm.mkdir(parents=True)
    (arm / "weights.jsonl").write_text(json.dumps({"step": 1, "weights": {"a": 0.5, "noisy_xquad": 0.5}, "rewards": {}})
                                       + "\n" + json.dumps({"step": 20, "weights": {"a": 0.6, "noisy_xquad": 0.4},
                                                            "rewards": {"a": 0.02, "noisy_xquad": -0.01}}) + "\n")
    t = bs.trajectories(tmp_path, 0)
    assert t["groupdro"]["noisy_xquad"] == {"proxy_loss": 2.5, "reference_loss": None, "measurement": 2.5,
                                            "first": 0.5, "last": 0.6}
    assert t["infdds"]["noisy_xquad"] == {"rewards": -0.01, "first": 0.5, "last": 0.4}
    cell = {**_cell({"uniform": 0.0, "audit": 0.01, "dev-selected": 0.01, "oracle": 0.02}), "trajectories": t}
    text = sr.report({"preset": "cpu", "settings": {}, "cells": {"noisy/0": cell}})
    assert "| noisy | groupdro | 2.5 / 0.75 | – | 2.5 / 0.75 | 0.5000 → 0.6000 |" in text
    assert "| noisy | infdds | – | – | -0.01 / 0.02 | 0.5000 → 0.4000 |" in text


def test_processes_sharing_an_out_folder_add_their_own_cells(tmp_path):
    path = tmp_path / "results.json"
    bs.save_results(path, {"preset": "medium", "cells": {"clean/0": {"x": 1}}})
    mine = {"preset": "medium", "cells": {"flood/0": {"x": 2}}}       # a second process, with its own scenarios
    bs.save_results(path, mine)
    assert json.loads(path.read_text())["cells"] == {"clean/0": {"x": 1}, "flood/0": {"x": 2}}
    bs.save_results(path, {"preset": "medium", "cells": {"clean/0": {"x": 3}}})   # a cell is its writer's
    assert json.loads(path.read_text())["cells"] == {"clean/0": {"x": 3}, "flood/0": {"x": 2}}


def test_processes_sharing_an_out_folder_keep_each_others_pooled_audits(tmp_path):
    path = tmp_path / "results.json"
    bs.save_results(path, {"cells": {"noisy/0": {"x": 1}}, "pooled": {"noisy": {"y": 1}}})
    bs.save_results(path, {"cells": {"flood/0": {"x": 2}}})                # a process that pooled nothing
    bs.save_results(path, {"cells": {}, "pooled": {"flood": {"y": 2}}})
    got = json.loads(path.read_text())
    assert got["pooled"] == {"noisy": {"y": 1}, "flood": {"y": 2}}
    assert got["cells"] == {"noisy/0": {"x": 1}, "flood/0": {"x": 2}}


def test_the_audit_over_all_seeds_is_an_arm_a_row_and_a_goal_of_its_own():
    gains = {"uniform": 0.0, "audit": 0.0, "oracle": 0.02, "dev-selected": 0.0}
    cells = {f"noisy/{s}": _cell(gains, verdict="keep") for s in (0, 1)}
    pooled_record = {**cells["noisy/0"]["audit"], "verdicts": {"a": "keep", "noisy_xquad": "drop"},
                     "weights": {"a": 1.0, "noisy_xquad": 0.0}}
    # the pooled arm is the oracle's run in seed 0 (+0.02) and gains +0.01 in seed 1: lists in the cells' query order
    stored = {"preset": "medium", "settings": {}, "cells": cells, "pooled": {"noisy": {
        "seeds": [0, 1], "audit": pooled_record,
        "test": {"0": {t: [0.52, 0.32] for t in sr.TARGETS}, "1": {t: [0.51, 0.31] for t in sr.TARGETS}}}}}
    text = sr.report(stored)
    lines = text.splitlines()
    arms = [x.split(" | ")[0][2:] for x in lines if x.startswith("| ") and " | 0." in x and "/" not in x.split(" | ")[0]]
    assert arms[:arms.index("oracle")] == ["uniform", "audit", "audit:pooled"]      # right after the audit's arm
    row = next(x for x in lines if x.startswith("| audit:pooled | 0."))
    assert row.startswith("| audit:pooled | 0.4150 | 0.4150 | 0.4150 | +0.0150 [+0.0150, +0.0150] | 0 | +0.0200 / +0.0100 | 75% ")
    assert "| noisy | all | -0.0100 [-0.0200, -0.0010] | drop | none |" in text        # its row in the audit table
    assert "| noisy | 0 | -0.0100 [-0.0200, -0.0010] | keep | none |" in text
    assert "| noisy | audit:pooled | +0.0150 | 0 | yes | 75% [50%, 100%] | missed |" in text
    assert "one-seed audit's verdict named the harmful set (drop or down-weight) in 0 of 2 harmful runs" in text
    assert "audit over all seeds named the harmful set (drop or down-weight) in 1 of 1 harmful runs (1 drop)" in text
    weights = next(x for x in lines if x.startswith("| noisy | – |"))
    assert weights.endswith("| 0.0000 | 0.0000 |")                                    # audit, then audit:pooled
    assert text == sr.report(json.loads(json.dumps(stored)))


def test_one_seed_audits_pooled_answer_as_one_audit_of_all_their_seeds(tmp_path, tiny_model_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes" / "audit"))
    from audit_inputs import write_inputs

    from drmix.recipes.audit import AuditConfig, run_audit

    train, dev = write_inputs(tmp_path)
    base = dict(model=tiny_model_path, data=[str(train)], dev=[str(dev)], budget_steps=3, batch_size=4,
                learning_rate=1e-3, warmup_ratio=0.0, query_max_length=16, doc_max_length=16, log_every=1,
                save_every=100, show_progress=False, device="cpu", probe_points=1, probe_draws=1,
                stage1_temperature=0.05, stage1_miner=tiny_model_path, signals=["tdro", "infdds"])
    for seed in (3, 4):
        run_audit(AuditConfig(**base, seed=seed, output_dir=str(tmp_path / f"cell{seed}")))
    own = tmp_path / "cell4" / "runs" / "seed4" / "all" / "audit-dev.json"       # seed 4's own dev sample
    before = own.read_text()
    pooled = bs.pool_audits(AuditConfig(**base, seed=3, seeds=2, output_dir=str(tmp_path / "pooled")),
                            {3: tmp_path / "cell3", 4: tmp_path / "cell4"})
    whole = run_audit(AuditConfig(**base, seed=3, seeds=2, output_dir=str(tmp_path / "whole")))
    a, b = pooled.analysis, whole.analysis
    assert a.loo == b.loo and a.verdicts == b.verdicts and a.weights == b.weights
    assert a.agreement == b.agreement and a.learned == b.learned
    assert json.loads((tmp_path / "pooled" / "weights.json").read_text()) == json.loads(
        (tmp_path / "whole" / "weights.json").read_text())
    assert own.read_text() == before                          # the pooled evaluation is cached in pooled/dev
    assert sorted(p.name for p in (tmp_path / "pooled" / "dev").iterdir()) == [
        "seed3-all", "seed3-without-animals", "seed3-without-food", "seed3-without-tools",
        "seed4-all", "seed4-without-animals", "seed4-without-food", "seed4-without-tools"]
    with pytest.raises(SystemExit, match="seeds \\[3, 4\\]"):
        bs.pool_audits(AuditConfig(**base, seed=3, seeds=2, output_dir=str(tmp_path / "p2")), {3: tmp_path / "cell3"})


def test_a_scenario_is_pooled_once_every_seed_of_the_preset_is_in_with_its_folders(tmp_path):
    from types import SimpleNamespace

    args = SimpleNamespace(preset="medium", out=tmp_path)
    stored = {"cells": {"noisy/0": {}, "noisy/1": {}}}
    for s in (0, 1, 2):
        (tmp_path / "noisy" / f"seed{s}" / "audit" / "runs" / f"seed{s}").mkdir(parents=True)
    assert bs.poolable(args, stored, "noisy") == []                  # seed 2 not in yet
    stored["cells"]["noisy/2"] = {}
    assert bs.poolable(args, stored, "noisy") == [0, 1, 2]
    (tmp_path / "noisy" / "seed1" / "audit" / "runs" / "seed1").rmdir()
    assert bs.poolable(args, stored, "noisy") == []                  # a cell made on another machine
    (tmp_path / "noisy" / "seed1" / "audit" / "runs" / "seed1").mkdir()
    stored["pooled"] = {"noisy": {"seeds": [0, 1, 2]}}
    assert bs.poolable(args, stored, "noisy") == []                  # pooled already
    stored["pooled"] = {"noisy": {"seeds": [0, 1]}}
    assert bs.poolable(args, stored, "noisy") == [0, 1, 2]           # pooled from fewer seeds: again
    assert bs.poolable(SimpleNamespace(preset="cpu", out=tmp_path), stored, "noisy") == []   # one seed: nothing
