"""The demo flow end to end on the tiny model: data, base evaluation, two mixtures, results table."""
from __future__ import annotations

import json
import math

import pytest

from drmix.data.builders.localdocs import LocalDocsOptions
from drmix.recipes.demo import DemoOptions, _prepare_output, results_markdown, run_demo
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
    for run in ("base", "uniform", "learned"):
        fam_values = [res["table"][f][run] for f in ("large", "small")]
        assert res["table"]["average"][run] == pytest.approx(sum(fam_values) / 2)
        assert all(0.0 <= v <= 1.0 for v in fam_values)
        # the table is what the evaluation reports say
        report = json.loads((demo_result.output_dir / "eval" / run / "eval-test.json").read_text())
        assert res["table"]["small"][run] == pytest.approx(report["results"]["small"]["ndcg@10"])
    md = demo_result.results_md.read_text().splitlines()
    header = md.index("| family | base | uniform | learned | learned - uniform |")
    assert [line.split(" | ")[0] for line in md[header + 2:header + 5]] == ["| large", "| small", "| average"]


def test_demo_learned_weights_follow_the_logged_losses(demo_result):
    """GroupDRO (raw losses, lr 0.1, every family in every batch): final weights = softmax(0.1 * sum_t loss_g,t)."""
    traj = [json.loads(line) for line in (demo_result.run_dirs["learned"] / "weights.jsonl").read_text().splitlines()]
    assert len(traj) == 2
    total = {f: sum(r["proxy_loss"][f] for r in traj) for f in ("large", "small")}
    z = sum(math.exp(0.1 * v) for v in total.values())
    expected = {f: math.exp(0.1 * v) / z for f, v in total.items()}
    res = json.loads(demo_result.results_json.read_text())
    assert res["weights"]["learned"] == pytest.approx(expected, abs=1e-9)
    assert res["weights"]["learned"]["large"] != pytest.approx(0.5, abs=1e-6)  # the weights moved
    assert res["weights"]["uniform"] == pytest.approx({"large": 0.5, "small": 0.5})
    assert res["mean_training_loss"] == pytest.approx({f: v / 2 for f, v in total.items()})
    top = max(expected, key=expected.get)
    assert f"GroupDRO raised the weight of the families with the highest training loss: {top} ended at" \
        in res["explanation"]
    data_dir = demo_result.output_dir / "data" / "train"
    sizes = {f: len((data_dir / f"{f}.jsonl").read_text().splitlines()) for f in ("large", "small")}
    assert res["train_pairs"] == sizes


def test_demo_runs_saw_the_same_batches(demo_result):
    def counts(run):
        lines = (demo_result.run_dirs[run] / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line)["collection_counts"] for line in lines if "collection_counts" in line]
    assert counts("uniform") == counts("learned") == [{"large": 2, "small": 2}, {"large": 2, "small": 2}]


def test_demo_outputs_models_and_no_checkpoints(demo_result):
    for mixture in ("uniform", "learned"):
        run = demo_result.run_dirs[mixture]
        assert (run / "model" / "modules.json").exists()
        assert not (run / "checkpoints").exists()
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
                 if "loss" in json.loads(line)]
        assert steps[-1] == 2
    assert json.loads((demo_result.output_dir / "demo.json").read_text())["status"] == "done"
    assert (demo_result.output_dir / "data" / "beir" / "small" / "qrels" / "test.tsv").exists()
    # drmix demo ends with one report.html: both runs' curves, the results table, links to every file
    from drmix.cli.report import after_run

    after_run(demo_result.output_dir, None, pipeline=True)
    html = (demo_result.output_dir / "report.html").read_text(encoding="utf-8")
    for mixture in ("uniform", "learned"):
        rel = demo_result.run_dirs[mixture].relative_to(demo_result.output_dir).as_posix()
        assert f"{rel}/report.html" in html
    assert "results.md" in html and "<svg" in html


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
    assert DemoOptions(quick=True).resolved().steps == 12
    assert DemoOptions().resolved().steps == 30


def test_results_markdown_table():
    table = {"a": {"base": 0.5, "uniform": 0.25, "learned": 0.125}, "b": {"base": 0.5, "uniform": 0.5, "learned": 0.75},
             "average": {"base": 0.5, "uniform": 0.375, "learned": 0.4375}}
    weights = {"uniform": {"a": 0.5, "b": 0.5}, "learned": {"a": 0.25, "b": 0.75}}
    md = results_markdown(table, weights, {"a": 10, "b": 20}, steps=3, model="m", losses={"a": 1.0, "b": 2.5})
    assert "| a | 0.5000 | 0.2500 | 0.1250 | -0.1250 |" in md
    assert "| average | 0.5000 | 0.3750 | 0.4375 | +0.0625 |" in md
    assert "| b | 20 | 2.500 | 0.500 | 0.750 |" in md
    assert "b ended at 0.750 and a at 0.250 (uniform: 0.500 each)" in md
    assert "Mean training loss: b 2.500, a 1.000." in md
