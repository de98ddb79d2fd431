"""``drmix mixture audit`` from the command line: the estimate, one-line errors before anything runs."""
from __future__ import annotations

import json

import pytest

from cli_helpers import run
from drmix.data.beir import write_beir


@pytest.fixture()
def inputs(tmp_path):
    dev = write_beir(tmp_path / "dev", {f"d{i}": {"title": "", "text": f"passage {i}"} for i in range(4)},
                     {"q0": "passage 0"}, {"dev": {"q0": {"d0": 1}}})
    folder = tmp_path / "collections"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"query": f"q{i}", "positive": f"{name} p{i}"}) + "\n"
                                                      for i in range(8)))
    return folder, dev


def test_estimate_prints_every_run_and_writes_nothing(inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    folder, dev = inputs
    out = tmp_path / "audit"
    code, text, err = run(["mixture", "audit", "--data", str(folder), "--dev", str(dev), "--output-dir", str(out),
                           "--budget-steps", "30", "--batch-size", "8", "--seeds", "2", "--device", "cpu",
                           "--estimate"], capsys)
    assert code == 0, err
    assert "3 collections, 2 seed(s), 30 steps a run, 8 short runs and 4 stage-1 runs" in " ".join(text.split())
    # seeds --seed (42) and 43; the collections have no hard negatives: stage 1's are mined first
    for stage in ("mined negatives", "seed 42: without:b", "seed 43: all", "seed 43: stage 1 doremi",
                  "dev evaluation", "total"):
        assert f"| {stage} |" in text, stage
    assert "| seed 42: without:b | 360 |" in text        # 30 steps x 8 examples, a hard negative counted as half
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--max-steps", "50"], "--max-steps (max_steps) is not used by drmix mixture audit"),
    (["--eval-data", "x"], "--eval-data (eval_data) is not used by drmix mixture audit"),
    (["--dro", "lrr=1"], "invalid dro option"),
    (["--signals", "loudness"], "unknown signal 'loudness'"),
    (["--dev-split", "test"], "no qrels/test.tsv"),
    (["--budget-steps", "0"], "budget_steps"),
])
def test_bad_input_is_one_line_before_anything_runs(inputs, tmp_path, capsys, args, message):
    folder, dev = inputs
    out = tmp_path / "audit"
    code, _, err = run(["mixture", "audit", "--data", str(folder), "--dev", str(dev), "--output-dir", str(out),
                        *args], capsys)
    assert code == 2 and message in " ".join(err.split()) and "Traceback" not in err
    assert not out.exists()


def test_without_dev_sets_it_says_how_to_give_them(inputs, tmp_path, capsys):
    folder, _ = inputs
    code, _, err = run(["mixture", "audit", "--data", str(folder), "--output-dir", str(tmp_path / "a")], capsys)
    assert code == 2 and "the audit needs dev sets" in " ".join(err.split()) and "--dev DIR" in err
