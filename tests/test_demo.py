"""The demo flow end to end on the tiny model: data, base evaluation, two mixtures, results table."""
from __future__ import annotations

import json
import math

import pytest

from drmix.data.localdocs import LocalDocsOptions
from drmix.demo import DemoOptions, _prepare_output, results_markdown, run_demo
from drmix.errors import ConfigError

FAMILIES = {"small": ["json", "textwrap", "shlex"], "large": ["logging", "pathlib", "argparse", "calendar"]}


@pytest.fixture(scope="module")
def demo_result(tiny_model_path, tmp_path_factory):
    data = LocalDocsOptions(families=FAMILIES, test_queries=6, dev_queries=2, distractors=10, min_train_pairs=5,
                            num_negatives=1, max_words=40)
    out = tmp_path_factory.mktemp("demo") / "out"
    return run_demo(out, model=tiny_model_path, steps=2, batch_size=4, max_pairs=500, data=data,
                    query_max_length=16, doc_max_length=32, eval_max_length=32, show_progress=False)


def test_demo_writes_table_rows_per_family_plus_average(demo_result):
    res = json.loads(demo_result.results_json.read_text())
    assert res["families"] == ["large", "small"]
    assert list(res["table"]) == ["large", "small", "average"]
    for run in ("base", "uniform", "temperature"):
        fam_values = [res["table"][f][run] for f in ("large", "small")]
        assert res["table"]["average"][run] == pytest.approx(sum(fam_values) / 2)
        assert all(0.0 <= v <= 1.0 for v in fam_values)
        # the table is what the evaluation reports say
        report = json.loads((demo_result.output_dir / "eval" / run / "eval.json").read_text())
        assert res["table"]["small"][run] == pytest.approx(report["results"]["small"]["ndcg@10"])
    md = demo_result.results_md.read_text().splitlines()
    header = md.index("| family | base | uniform | temperature |")
    assert [line.split(" | ")[0] for line in md[header + 2:header + 5]] == ["| large", "| small", "| average"]


def test_demo_temperature_weights_follow_sizes(demo_result):
    data_dir = demo_result.output_dir / "data" / "train"
    sizes = {f: len((data_dir / f"{f}.jsonl").read_text().splitlines()) for f in ("large", "small")}
    assert sizes["large"] != sizes["small"]
    root = {f: math.sqrt(n) for f, n in sizes.items()}  # |D|^(1/tau), tau = 2
    expected = {f: r / sum(root.values()) for f, r in root.items()}
    temp, uni = (json.loads((demo_result.run_dirs[m] / "weights.json").read_text()) for m in ("temperature", "uniform"))
    temp, uni = (dict(zip(w["collections"], w["weights"])) for w in (temp, uni))
    assert temp == pytest.approx(expected)
    assert uni == pytest.approx({"large": 0.5, "small": 0.5})
    assert json.loads(demo_result.results_json.read_text())["train_pairs"] == sizes


def test_demo_outputs_models_and_no_checkpoints(demo_result):
    for mixture in ("uniform", "temperature"):
        run = demo_result.run_dirs[mixture]
        assert (run / "model" / "modules.json").exists()
        assert not (run / "checkpoints").exists()
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
                 if "loss" in json.loads(line)]
        assert steps[-1] == 2
    assert json.loads((demo_result.output_dir / "demo.json").read_text())["status"] == "done"
    assert (demo_result.output_dir / "data" / "beir" / "small" / "qrels" / "test.tsv").exists()


def test_demo_refuses_foreign_or_previous_output(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds no earlier demo"):
        _prepare_output(foreign, overwrite=True)
    prev = tmp_path / "prev"
    (prev / "runs" / "uniform").mkdir(parents=True)
    (prev / "demo.json").write_text("{}")
    (prev / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="pass --overwrite"):
        _prepare_output(prev, overwrite=False)
    _prepare_output(prev, overwrite=True)
    assert sorted(p.name for p in prev.iterdir()) == ["notes.txt"]


def test_demo_options_validation_and_quick():
    with pytest.raises(ConfigError, match="steps"):
        run_demo("/tmp/never-written-demo", steps=0)
    quick = DemoOptions(quick=True, steps=7).resolved()
    assert (quick.steps, quick.families, quick.data.test_queries) == (7, ["stdlib", "tooling"], 20)
    assert DemoOptions(quick=True).resolved().steps == 8
    assert DemoOptions().resolved().steps == 15


def test_results_markdown_table():
    table = {"a": {"base": 0.5, "uniform": 0.25, "temperature": 0.125},
             "average": {"base": 0.5, "uniform": 0.25, "temperature": 0.125}}
    md = results_markdown(table, {"uniform": {"a": 1.0}, "temperature": {"a": 1.0}}, {"a": 10}, steps=3, model="m")
    assert "| a | 0.5000 | 0.2500 | 0.1250 |" in md
    assert "| a | 10 | 1.000 | 1.000 |" in md
