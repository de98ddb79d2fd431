"""``drmix adapt`` from the command line: the estimate, one-line errors before anything runs."""
from __future__ import annotations

import json

import pytest

from cli_helpers import run
from drmix.data.beir import write_beir

CORPUS = {f"d{i}": {"title": "", "text": f"Sentence number {i} is about topic {i} here. It has words."}
          for i in range(20)}


@pytest.fixture()
def inputs(tmp_path):
    corpus = write_beir(tmp_path / "target", CORPUS, {"q0": "topic 0"}, {"test": {"q0": {"d0": 1}}})
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"query": f"q{i}", "positive": f"p{i}"}) + "\n" for i in range(8)))
    return corpus, data


def test_estimate_prints_every_stage_and_runs_nothing(inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    corpus, data = inputs
    out = tmp_path / "run"
    code, text, err = run(["adapt", "--corpus", str(corpus), "--data", str(data), "--preset", "gpu",
                           "--output-dir", str(out), "--estimate"], capsys)
    assert code == 0, err
    assert "Estimated time on cuda" in text
    for stage in ("synthetic set", "COCO", "uniform fine-tuning", "candidate tdro:top:0.7+synthetic",
                  "tDRO stage 1 (+synthetic)", "candidate infdds+synthetic", "final evaluation", "total"):
        assert f"| {stage} |" in text, stage
    # the gpu preset's COCO: 400 steps of 128 span pairs
    assert "| COCO | 51,200 | 0 |" in text
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--candidates", "sideways"], "unknown candidate 'sideways'"),
    (["--eval-data", "/nonexistent/beir"], "BEIR directory not found"),
    (["--llm-options", "temperature=0.1"], "unknown LLM option 'temperature'"),
])
def test_bad_input_is_one_line_before_anything_runs(inputs, tmp_path, capsys, args, message):
    corpus, data = inputs
    out = tmp_path / "run"
    code, _, err = run(["adapt", "--corpus", str(corpus), "--data", str(data), "--output-dir", str(out), *args],
                       capsys)
    assert code == 2 and message in " ".join(err.split()) and "Traceback" not in err
    assert not out.exists()
