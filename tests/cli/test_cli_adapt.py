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
                  "tDRO stage 1 (+synthetic)", "candidate infdds+synthetic", "final evaluation",
                  "index of the adapted model", "total"):
        assert f"| {stage} |" in text, stage
    # the gpu preset's COCO: 400 steps of 128 span pairs
    assert "| COCO | 51,200 | 0 |" in text
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--candidates", "sideways"], "unknown candidate 'sideways'"),
    (["--eval-data", "/nonexistent/beir"], "BEIR directory not found"),
    (["--llm-options", "temperature=0.1"], "unknown LLM option 'temperature'"),
    (["--index-backend", "milvus"], "--index-backend milvus writes a collection: give --index-uri"),
    (["--index-backend", "elastic"], "unknown index backend 'elastic'"),
])
def test_bad_input_is_one_line_before_anything_runs(inputs, tmp_path, capsys, args, message):
    corpus, data = inputs
    out = tmp_path / "run"
    code, _, err = run(["adapt", "--corpus", str(corpus), "--data", str(data), "--output-dir", str(out), *args],
                       capsys)
    assert code == 2 and message in " ".join(err.split()) and "Traceback" not in err
    assert not out.exists()


def test_the_last_lines_are_the_search_command_that_runs_as_printed(inputs, tmp_path, capsys, monkeypatch):
    """The run itself is the recipe's (tests/recipes/test_adapt.py); here: what the command prints after it."""
    import shlex
    from types import SimpleNamespace

    from drmix.recipes import adapt

    corpus, data = inputs
    out = tmp_path / "run"
    record = {"corpora": {"target": {"location": str(out / "index" / "target")}}}

    def fake_run(config, **kw):
        out.mkdir()
        (out / "summary.md").write_text("# drmix adapt\n")
        return SimpleNamespace(table="the table", output_dir=out, index=record)

    monkeypatch.setattr(adapt, "run_adapt", fake_run)
    code, text, err = run(["adapt", "--corpus", str(corpus), "--data", str(data), "--output-dir", str(out)], capsys)
    assert code == 0, err
    last = [line for line in text.splitlines() if line.strip()][-1]
    argv = shlex.split(last)
    assert argv[:4] == ["drmix", "search", "--index", str(out / "index" / "target")]
    assert argv[4:] == ["--query", "your question"]           # no synthetic test query to show: a placeholder
    import typer.main

    from drmix.cli import app

    search = typer.main.get_command(app).commands["search"]
    params = search.make_context("search", argv[2:]).params      # it parses as drmix search's own options
    assert params["index_dir"] == str(out / "index" / "target") and list(params["query"]) == ["your question"]


def test_a_config_error_points_at_adapts_own_fields(inputs, tmp_path, capsys):
    """A bad value, a misspelt key and an unknown key of adapt's config name `drmix adapt --help` (adapt's options
    are not drmix train's)."""
    corpus, data = inputs
    misspelt, unknown = tmp_path / "misspelt.yaml", tmp_path / "unknown.yaml"
    misspelt.write_text("candidatess: [uniform]\n")
    unknown.write_text("zzz: 1\n")
    for args in (["--candidates", "sideways"], [str(misspelt)], [str(unknown)]):
        code, _, err = run(["adapt", *args, "--corpus", str(corpus), "--data", str(data), "--output-dir",
                            str(tmp_path / "run")], capsys)
        text = " ".join(err.split())
        assert code == 2 and "`drmix adapt --help`" in text and "drmix train" not in text, text
