"""The tDRO recipe end to end on the tiny model: stage 0, stage 1, stage 2, evaluation, resume."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from drmix.config import TrainConfig
from drmix.recipes.optimize import fill_missing_negatives
from drmix.recipes.tdro import PipelineConfig, results_table, run_tdro_pipeline

WORDS = {
    "animals": ["cat", "dog", "horse", "sheep", "goat", "mouse", "tiger", "lion", "zebra", "camel", "otter", "eagle"],
    "food": ["bread", "rice", "apple", "cheese", "pasta", "soup", "salad", "honey", "butter", "lemon", "olive", "melon"],
    "tools": ["hammer", "saw", "drill", "wrench", "chisel", "ladder", "shovel", "rake", "axe", "pliers", "file", "vise"],
}


def write_collections(root: Path) -> Path:
    """Three collections of 12 examples; 'tools' has no hard negatives (stage 1 fills them)."""
    d = root / "train"
    d.mkdir()
    for name, words in WORDS.items():
        rows = []
        for i, w in enumerate(words):
            row = {"query": f"what about the {w}", "positive": f"the {w} is a {name} word number {i}"}
            if name != "tools":
                row["negatives"] = [f"the {words[(i + 1) % len(words)]} is not it"]
            rows.append(row)
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def write_beir(root: Path) -> Path:
    d = root / "beir-test"
    (d / "qrels").mkdir(parents=True)
    docs = [(f"d{i}", f"the {w} is a {n} word") for i, (n, w) in
            enumerate((n, w) for n, ws in WORDS.items() for w in ws[:4])]
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t.split(" is ")[0]}) + "\n"
                                             for i, (_, t) in enumerate(docs)))
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" +
                                          "".join(f"q{i}\td{i}\t1\n" for i in range(len(docs))))
    return d


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.fixture()
def pipeline_config(tmp_path, tiny_model_path) -> PipelineConfig:
    return PipelineConfig(
        model=tiny_model_path, data=[str(write_collections(tmp_path))], output_dir=str(tmp_path / "run"),
        max_steps=3, batch_size=6, learning_rate=1e-3, warmup_ratio=0.0, query_max_length=16, doc_max_length=16,
        log_every=1, save_every=100, show_progress=False, seed=3, test_data=[str(write_beir(tmp_path))],
        stage1={"max_steps": 4, "temperature": 0.05}, transfers=["top:0.7", "reweight"], device="cpu",
        stage1_miner=tiny_model_path,
    )


def test_pipeline_runs_all_stages_and_resumes(pipeline_config, caplog):
    result = run_tdro_pipeline(pipeline_config)
    root = Path(pipeline_config.run.output_dir)

    # Stage 0 is the uniform baseline and the reference of stage 1.
    s1 = root / "stage1-tdro"
    s1_cfg = TrainConfig.flatten(yaml.safe_load((s1 / "config.yaml").read_text()))
    assert s1_cfg["reference_model"] == str(root / "stage0-reference" / "model")
    assert (s1_cfg["batching"], s1_cfg["in_batch_negatives"], s1_cfg["max_steps"]) == ("mixed", False, 4)
    # the authors' seven negatives (s1_tdro.sh: train_n_passages 8); the temperature is the stage1 override here
    # (at the authors' 0.002 the tiny model's losses underflow to exactly 0 in float32) -- stage 0 keeps its own
    assert (s1_cfg["num_negatives"], s1_cfg["temperature"]) == (7, 0.05)
    s0_cfg = TrainConfig.flatten(yaml.safe_load((root / "stage0-reference" / "config.yaml").read_text()))
    assert (s0_cfg["num_negatives"], s0_cfg["temperature"]) == (1, 0.05)
    # every example had fewer than 7 negatives: the missing ones were mined, and the counts are written
    mined = json.loads((s1 / "negatives.json").read_text())
    assert mined["rule"] == "mine" and mined["num_negatives"] == 7
    assert {n: c["needed"] for n, c in mined["collections"].items()} == {"animals": 12, "food": 12, "tools": 12}
    assert all(0 < c["mined"] <= 12 * 7 for c in mined["collections"].values())

    # Stage 1 trajectory: one line per step, every collection with an equal share (6 / 3 = 2) of each batch.
    traj = read_jsonl(s1 / "weights.jsonl")
    assert [r["step"] for r in traj] == [1, 2, 3, 4]
    assert all(r["counts"] == {"animals": 2, "food": 2, "tools": 2} for r in traj)
    # 'tools' had no negatives: mined, so its hard-negative-only losses are not identically 0.
    assert any(r["proxy_loss"]["tools"] > 0 for r in traj)
    weights = json.loads((s1 / "weights.json").read_text())
    assert weights["collections"] == ["animals", "food", "tools"] and weights["steps"] == 4
    assert sum(weights["weights"]) == pytest.approx(1.0)
    assert weights["weights"] == pytest.approx(list(traj[-1]["weights"].values()))
    assert (s1 / "weights.png").read_bytes()[:4] == b"\x89PNG"

    # Stage 2, top:0.7 of 3 collections keeps floor(2.1) = 2: the lightest is never sampled.
    lightest = min(weights["collections"], key=lambda n: weights["weights"][weights["collections"].index(n)])
    counts = [r["collection_counts"] for r in read_jsonl(root / "stage2-tdro-top-0.7" / "metrics.jsonl")
              if "collection_counts" in r]
    assert len(counts) == 3 and all(c[lightest] == 0 for c in counts)
    assert set(result.models) == {"uniform", "top:0.7", "reweight"}

    # Evaluation: one row per model, the table compares against uniform; the numbers are the ones
    # `drmix eval` gives for the same model folder (recomputed here from the saved per-query scores).
    assert set(result.results) == {"uniform", "top:0.7", "reweight"}
    from drmix.evaluation.evaluate import evaluate_model

    direct = evaluate_model(str(result.models["reweight"]), pipeline_config.test.test_data, show_progress=False,
                            max_length=pipeline_config.data.doc_max_length)
    assert result.results["reweight"]["beir-test"] == pytest.approx(direct.results["beir-test"], abs=1e-6)
    cache = json.loads((root / "stage2-tdro-reweight" / "eval-test.json").read_text())
    pq = cache["per_query"]["beir-test"]
    assert sum(v["ndcg@10"] for v in pq.values()) / len(pq) == pytest.approx(
        result.results["reweight"]["beir-test"]["ndcg@10"], abs=1e-12)
    # The paired comparison's delta is the difference of the two means.
    rows = {d.dataset: d for d in result.comparison.rows["reweight"]}
    assert rows["beir-test"].delta == pytest.approx(result.results["reweight"]["beir-test"]["ndcg@10"]
                                                    - result.results["uniform"]["beir-test"]["ndcg@10"], abs=1e-12)
    summary = (root / "summary.md").read_text()
    assert "Paired tests vs uniform" in summary and "## Selected: uniform (default)" in summary
    assert (root / "model").resolve() == result.models["uniform"].resolve()
    assert "| ndcg@10 | uniform | top:0.7 | reweight |" in summary
    assert "| collection | weight | top:0.7 |" in summary

    # A rerun skips every finished stage and reuses cached evaluations.
    stamp = (s1 / "weights.json").stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger="drmix.recipes"):
        again = run_tdro_pipeline(pipeline_config)
    assert (s1 / "weights.json").stat().st_mtime_ns == stamp
    assert sum("finished earlier" in r.message for r in caplog.records) == 4
    assert again.results == result.results


def test_fill_missing_negatives_uses_other_examples_of_the_same_collection(tmp_path):
    from drmix.data.collections import load_collections

    cols = load_collections([str(write_collections(tmp_path))])
    before = {c.name: list(c.dataset["negatives"]) for c in cols}
    cols = fill_missing_negatives(cols, 2, seed=0)
    tools = next(c for c in cols if c.name == "tools")
    positives = [p[0] for p in tools.dataset["positives"]]
    for i, negs in enumerate(tools.dataset["negatives"]):
        assert len(negs) == 2 and len(set(negs)) == 2
        assert positives[i] not in negs and all(n in positives for n in negs)
    # collections that had negatives are untouched
    animals = next(c for c in cols if c.name == "animals")
    assert list(animals.dataset["negatives"]) == before["animals"]


def test_results_table_deltas_against_the_first_column():
    table = results_table({"uniform": {"a": {"ndcg@10": 0.5}, "b": {"ndcg@10": 0.3}},
                           "top:0.7": {"a": {"ndcg@10": 0.6}, "b": {"ndcg@10": 0.2}}})
    lines = table.splitlines()
    assert lines[2] == "| a | 0.5000 | 0.6000 (+0.1000) |"
    assert lines[3] == "| b | 0.3000 | 0.2000 (-0.1000) |"
    # average: uniform 0.4, top 0.4 -> +0.0000
    assert lines[4] == "| average | 0.4000 | 0.4000 (+0.0000) |"


def test_groupdro_pipeline_forwards_no_reference(pipeline_config):
    cfg = pipeline_config.replace(**{"strategy": "groupdro", "transfers": ["loss"], "test_data": [],
                                             "max_steps": 2, "stage1": {"max_steps": 2}})
    result = run_tdro_pipeline(cfg)
    root = Path(cfg.run.output_dir)
    # stage 0 still trains the uniform baseline, but stage 1 forwards no reference model
    assert result.models["uniform"] == root / "stage0-reference" / "model"
    assert yaml.safe_load((root / "stage1-groupdro" / "config.yaml").read_text())["mixture"]["reference_model"] is None
    assert set(result.models) == {"uniform", "loss"}
    w = json.loads((root / "stage1-groupdro" / "weights.json").read_text())
    assert w["strategy"] == "groupdro" and w["measurement"] == "raw"
    # GroupDRO's weights are exp(0.01 * sum over steps of each collection's mean raw loss), renormalised:
    # recomputed from the logged per-step proxy losses, which a reference forward would not change.
    traj = read_jsonl(root / "stage1-groupdro" / "weights.jsonl")
    names = w["collections"]
    totals = np.array([sum(r["proxy_loss"][n] for r in traj) for n in names])
    expected = np.exp(0.01 * totals) / np.exp(0.01 * totals).sum()
    np.testing.assert_allclose(w["weights"], expected, rtol=1e-9)
    assert all(r["reference_loss"][n] is None for r in traj for n in names)


def test_a_rerun_with_a_changed_stage_setting_is_refused_or_reruns_that_stage(pipeline_config, caplog):
    """A changed stage-1 setting: refused before anything is written (pipeline.yaml still names the earlier
    settings); with --resume-with-changes stage 1 and the stage 2 built on its weights train again, and the
    unchanged stage 0 is reused."""
    from drmix.train.resume_check import ResumeMismatchError

    cfg = pipeline_config.replace(**{"transfers": ["reweight"], "test_data": [], "max_steps": 2,
                                             "stage1": {"max_steps": 2}})
    run_tdro_pipeline(cfg)
    root = Path(cfg.run.output_dir)
    recorded = (root / "pipeline.yaml").read_bytes()
    stamps = {d: (root / d / "model" / "modules.json").stat().st_mtime_ns
              for d in ("stage0-reference", "stage1-tdro", "stage2-tdro-reweight")}
    changed = cfg.replace(**{"stage1": {"max_steps": 3}})
    with pytest.raises(ResumeMismatchError, match=r"stage 1: max_steps 2 -> 3") as e:
        run_tdro_pipeline(changed)
    assert "stage 0" not in str(e.value) and "--resume-with-changes" in str(e.value)
    assert (root / "pipeline.yaml").read_bytes() == recorded
    assert read_jsonl(root / "stage1-tdro" / "weights.jsonl")[-1]["step"] == 2
    with pytest.raises(ResumeMismatchError, match=r"stage 1 \(missing negatives\): stage1_fill_negatives"):
        run_tdro_pipeline(cfg.replace(**{"stage1_fill_negatives": "off"}))   # a recipe field of stage 1

    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        run_tdro_pipeline(changed.replace(**{"resume_with_changes": True}))
    assert "stage 1: re-run with the changed settings (max_steps 2 -> 3)" in caplog.text
    assert "stage 2 (reweight): re-run with the changed settings (it is built on stage 1)" in caplog.text
    assert [r["step"] for r in read_jsonl(root / "stage1-tdro" / "weights.jsonl")] == [1, 2, 3]
    assert (root / "stage0-reference" / "model" / "modules.json").stat().st_mtime_ns == stamps["stage0-reference"]
    assert (root / "stage2-tdro-reweight" / "model" / "modules.json").stat().st_mtime_ns != stamps["stage2-tdro-reweight"]
    assert yaml.safe_load((root / "pipeline.yaml").read_text())["stages"]["stage1"] == {"max_steps": 3}


def test_cli_optimize_learns_weights(tmp_path, tiny_model_path):
    from drmix.cli import main

    out = tmp_path / "opt"
    with pytest.raises(SystemExit) as e:
        main(["mixture", "optimize", "--model", tiny_model_path, "--data", str(write_collections(tmp_path)),
              "--strategy", "groupdro", "--max-steps", "2", "--batch-size", "6", "--query-max-length", "16",
              "--doc-max-length", "16", "--output-dir", str(out), "--no-show-progress", "--device", "cpu"])
    assert e.value.code == 0
    cfg = TrainConfig.flatten(yaml.safe_load((out / "config.yaml").read_text()))
    # paper settings applied: mixed batches, hard-negative-only InfoNCE
    assert (cfg["batching"], cfg["in_batch_negatives"], cfg["strategy"]) == ("mixed", False, "groupdro")
    w = json.loads((out / "weights.json").read_text())
    assert w["steps"] == 2 and set(w["top"]) == {str(k) for k in range(10, 100, 10)}
    # the weights moved from uniform, by exactly GroupDRO's rule on the logged losses
    traj = read_jsonl(out / "weights.jsonl")
    totals = np.array([sum(r["proxy_loss"][n] for r in traj) for n in w["collections"]])
    np.testing.assert_allclose(w["weights"], np.exp(0.01 * totals) / np.exp(0.01 * totals).sum(), rtol=1e-9)
    assert max(w["weights"]) - min(w["weights"]) > 1e-6


def test_cli_tdro_without_reference_is_a_one_line_error(tmp_path, tiny_model_path, capsys):
    from drmix.cli import main

    with pytest.raises(SystemExit) as e:
        main(["mixture", "optimize", "--model", tiny_model_path, "--data", str(write_collections(tmp_path)),
              "--max-steps", "1", "--output-dir", str(tmp_path / "x")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "needs a frozen reference model" in err and "Traceback" not in err


def test_stage1_killed_and_resumed_matches_an_uninterrupted_run(tmp_path, tiny_model_path, monkeypatch):
    # tDRO stage 1 (the tiny model is its own reference); a run killed after step 3 (checkpoint at step 2)
    # and resumed ends with the same weights, trajectory and DRO state as a run that was never interrupted.
    from drmix.config import TrainConfig
    from drmix.recipes.optimize import optimize_weights, stage1_config

    data = str(write_collections(tmp_path))

    def config(out: str) -> TrainConfig:
        base = TrainConfig(model=tiny_model_path, data=[data], max_steps=4, batch_size=6, learning_rate=1e-3,
                           query_max_length=16, doc_max_length=16, save_every=2, log_every=1, show_progress=False,
                           device="cpu", seed=5)
        return stage1_config(base, strategy="tdro", reference=tiny_model_path, output_dir=tmp_path / out)

    optimize_weights(config("straight"))

    def kill_at_3(ctx):
        if ctx.step == 3:
            raise RuntimeError("killed")

    from drmix import api as trainer_mod

    original = trainer_mod.train
    with monkeypatch.context() as m:
        m.setattr(trainer_mod, "train", lambda cfg, **kw: original(cfg, callbacks=[kill_at_3], **kw))
        with pytest.raises(RuntimeError, match="killed"):
            optimize_weights(config("killed"))
    assert (tmp_path / "killed" / "checkpoints").exists() and not (tmp_path / "killed" / "model").exists()
    optimize_weights(config("killed"))            # resume=True (stage-1 config) continues from step 2

    a = json.loads((tmp_path / "straight" / "weights.json").read_text())
    b = json.loads((tmp_path / "killed" / "weights.json").read_text())
    assert b["steps"] == a["steps"] == 4
    np.testing.assert_allclose(b["weights"], a["weights"], rtol=1e-6)
    np.testing.assert_allclose(list(b["mean"].values()), list(a["mean"].values()), rtol=1e-6)
    ta = read_jsonl(tmp_path / "straight" / "weights.jsonl")
    tb = read_jsonl(tmp_path / "killed" / "weights.jsonl")
    assert [r["step"] for r in tb] == [1, 2, 3, 4]
    assert [r["counts"] for r in tb] == [r["counts"] for r in ta]


@pytest.mark.parametrize("change, message", [
    ({"transfers": ["bogus"]}, "unknown transfer 'bogus'"),
    ({"transfers": ["top:1.5"]}, "neither a fraction"),
    ({"test_data": ["/missing/beir"]}, "test_data: BEIR directory not found"),
    ({"select_on": ["/missing/dev"]}, "select_on: BEIR directory not found"),
])
def test_pipeline_validates_everything_before_stage0(pipeline_config, change, message):
    from drmix.errors import ConfigError

    cfg = pipeline_config.replace(**change)
    with pytest.raises(ConfigError, match=message):
        run_tdro_pipeline(cfg)
    assert not (Path(cfg.run.output_dir) / "stage0-reference").exists()


@pytest.mark.parametrize("change, message", [
    # a stage's overrides, typed by TrainConfig: checked when the config is made, not when the stage runs
    ({"stage1": {"max_stepz": 5}}, "invalid --stage1 override max_stepz: not a drmix field; did you mean max_steps"),
    ({"stage2": {"max_steps": -5}}, "invalid --stage2 override max_steps"),
    ({"stage0": {"learning_rate": 0}}, "invalid --stage0 override learning_rate"),
    ({"stage1": {"normalize": False}}, "--stage1: tDRO stage 1's temperature"),
    # stage 1's strategy options, typed by the DRO strategies' registered model
    ({"dro": {"lr": -1}}, "invalid dro option for strategy 'tdro': lr"),
    ({"tdro": {"measurment": "raw"}}, "invalid dro option .* measurment"),
    # the training fields every stage sets itself: given for the whole pipeline they would be ignored
    ({"weights_file": "/some/weights.json"}, "--weights-file .* is not used by drmix pipeline tdro"),
    ({"transfer": "reweight"}, "--transfer .* is not used by drmix pipeline tdro.*--transfers reweight"),
    ({"mixture": "size"}, "--mixture .* is not used by drmix pipeline tdro.*--stage0 mixture=size"),
    ({"mixture_temperature": 3.0}, "--mixture-temperature .* is not used"),
    ({"batching": "mixed"}, "--batching .* is not used by drmix pipeline tdro.*--stage2 batching=mixed"),
])
def test_settings_are_checked_when_the_config_is_made(pipeline_config, change, message):
    from drmix.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        pipeline_config.replace(**change)
    assert not Path(pipeline_config.run.output_dir).exists()


def test_cli_pipeline_bad_override_is_one_line_before_training(pipeline_config, capsys):
    from drmix.cli import main

    c = pipeline_config
    with pytest.raises(SystemExit) as e:
        main(["pipeline", "tdro", "--model", c.model.name_or_path, "--data", c.data.collections[0], "--output-dir", c.run.output_dir,
              "--stage1", "max_stepz=5", "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "max_stepz" in err and "Traceback" not in err
    assert not (Path(c.run.output_dir) / "stage0-reference").exists()


def test_cli_pipeline_weights_file_is_refused_not_ignored(pipeline_config, tmp_path, capsys):
    from drmix.cli import main

    c = pipeline_config
    w = tmp_path / "w.json"
    w.write_text('{"a": 1}')
    with pytest.raises(SystemExit) as e:
        main(["pipeline", "tdro", "--model", c.model.name_or_path, "--data", c.data.collections[0], "--output-dir",
              c.run.output_dir, "--weights-file", str(w), "--device", "cpu"])
    assert e.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--weights-file (weights_file) is not used by drmix pipeline tdro" in err and "Traceback" not in err
    assert not Path(c.run.output_dir).exists()


def test_selection_reads_only_the_dev_split(pipeline_config, tmp_path, monkeypatch, caplog):
    import drmix.data.beir as beir

    # A selection directory whose *test* qrels are garbage: reading them would raise. Its dev qrels favour
    # nothing in particular; the test evaluation is switched off, so only dev can have chosen.
    dev = tmp_path / "beir-dev"
    src = Path(pipeline_config.test.test_data[0])
    (dev / "qrels").mkdir(parents=True)
    for f in ("corpus.jsonl", "queries.jsonl"):
        (dev / f).write_text((src / f).read_text())
    (dev / "qrels" / "dev.tsv").write_text((src / "qrels" / "test.tsv").read_text())
    (dev / "qrels" / "test.tsv").write_text("this is not a qrels file\n")
    calls = []
    real = beir.load_beir

    def spy(root, split="test", **kw):
        calls.append((Path(root).name, split))
        return real(root, split, **kw)

    monkeypatch.setattr(beir, "load_beir", spy)
    cfg = pipeline_config.replace(**{"select_on": [str(dev)], "test_data": [], "transfers": ["reweight"],
                                             "max_steps": 2, "stage1": {"max_steps": 2}})
    result = run_tdro_pipeline(cfg)
    assert ("beir-dev", "dev") in calls and ("beir-dev", "test") not in calls
    assert all(split != "test" for _, split in calls)
    assert result.selected in {"uniform", "reweight"}
    avg = {lb: r["beir-dev"]["ndcg@10"] for lb, r in result.selection.items()}
    best = max(avg, key=lambda lb: (avg[lb], lb == "uniform"))
    assert result.selected == best
    root = Path(cfg.run.output_dir)
    assert (root / "model").resolve() == result.models[best].resolve()
    summary = json.loads((root / "summary.json").read_text())
    assert summary["selected"] == best and summary["select_split"] == "dev"
    assert f"## Selected: {best}" in (root / "summary.md").read_text()


def test_selection_on_the_test_split_of_test_data_is_refused(pipeline_config):
    from drmix.errors import ConfigError

    cfg = pipeline_config.replace(**{"select_on": list(pipeline_config.test.test_data), "select_split": "test"})
    with pytest.raises(ConfigError, match="would be made on the test set"):
        run_tdro_pipeline(cfg)


def test_stage1_config_is_the_authors_setting_and_overrides_win():
    from drmix.config import TrainConfig
    from drmix.recipes.optimize import STAGE1_NEGATIVES, STAGE1_TEMPERATURE, stage1_config

    assert (STAGE1_NEGATIVES, STAGE1_TEMPERATURE) == (7, 0.002)       # s1_tdro.sh: train_n_passages 8, 0.002
    base = TrainConfig(data=["x"], num_negatives=1, temperature=0.05, in_batch_negatives=True, batching="homogeneous")
    cfg = stage1_config(base, strategy="tdro", reference="r", output_dir="o")
    c = cfg.contrastive
    assert (c.num_negatives, c.temperature, c.in_batch_negatives, c.cross_device_negatives, c.batching,
            cfg.mixture.scheme) == (7, 0.002, False, False, "mixed", "uniform")
    prev = stage1_config(base, strategy="tdro", reference="r", output_dir="o",
                         overrides={"num_negatives": 1, "temperature": 0.05})
    assert (prev.contrastive.num_negatives, prev.contrastive.temperature) == (1, 0.05)           # the earlier setting, by name


def test_stage1_fill_rules_from_the_config():
    assert PipelineConfig(data=["x"]).stages.stage1_fill_negatives == "mine"
    assert PipelineConfig(data=["x"], stage1_fill_negatives=False).stages.stage1_fill_negatives == "off"
    assert PipelineConfig(data=["x"], stage1_fill_negatives=True).stages.stage1_fill_negatives == "mine"
    assert PipelineConfig(data=["x"], stage1_fill_negatives="random").stages.stage1_fill_negatives == "random"
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        PipelineConfig(data=["x"], stage1_fill_negatives="bogus")


def test_mine_missing_negatives_tops_every_example_up(tmp_path, monkeypatch):
    """Each example keeps its own negatives and gains the best-ranked others of its collection (hand-made
    embeddings: one coordinate per word, so the ranking is known); the report counts what was mined."""
    from drmix.augment import mine as mine_mod
    from drmix.data.collections import load_collections
    from drmix.recipes.optimize import mine_missing_negatives

    cols = load_collections([str(write_collections(tmp_path))])
    vocab = {w: i for i, w in enumerate(sorted({w for ws in WORDS.values() for w in ws}))}

    def vec(text):
        v = np.zeros(len(vocab) + 1, np.float32)
        for tok in text.split():
            if tok in vocab:
                v[vocab[tok]] = 1.0
        v[-1] = 0.5 if " is not " not in text else 0.1        # shared direction: every text relates a little
        return v / np.linalg.norm(v)

    monkeypatch.setattr(mine_mod, "embed", lambda model, q, d, **kw: (np.stack([vec(x) for x in q]),
                                                                       np.stack([vec(x) for x in d])))
    before = {c.name: [list(n) for n in c.dataset["negatives"]] for c in cols}
    report = mine_missing_negatives(cols, 3, model=object(), max_score_ratio=None)
    for c in cols:
        negs = c.dataset["negatives"]
        pos = c.dataset["positives"]
        for i, n in enumerate(negs):
            assert len(n) == 3 and n[:len(before[c.name][i])] == before[c.name][i]    # own ones first, kept
            assert pos[i][0] not in n and len(set(n)) == 3
        assert report[c.name] == {"examples": 12, "needed": 12, "mined": 12 * 3 - sum(map(len, before[c.name])),
                                  "short": 0, "pool": 24 if c.name != "tools" else 12, "filtered": 0}
    # enough already: nothing is mined, the miner is never loaded
    assert mine_missing_negatives(cols, 2, model=None) == {n: {"examples": 12, "needed": 0, "mined": 0, "short": 0}
                                                          for n in WORDS}


def test_a_rerun_after_inputs_changed_in_place_is_refused_and_a_cut_test_set_is_evaluated_again(pipeline_config):
    """A collection cut in place refuses every stage built from it, naming the rows; a test set's qrels cut in
    place is no stage change, and its evaluation is made again on the queries left."""
    from drmix.train.resume_check import ResumeMismatchError

    cfg = pipeline_config.replace(**{"transfers": ["reweight"], "max_steps": 2, "stage1": {"max_steps": 2,
                                                                                            "temperature": 0.05}})
    run_tdro_pipeline(cfg)
    root = Path(cfg.run.output_dir)
    qrels = Path(cfg.test.test_data[0]) / "qrels" / "test.tsv"
    lines = qrels.read_text().splitlines(keepends=True)
    assert len(json.loads((root / "stage0-reference" / "eval-test.json").read_text())["per_query"]["beir-test"]) \
        == len(lines) - 1
    qrels.write_text("".join(lines[:4]))                    # 3 queries left
    run_tdro_pipeline(cfg)
    assert len(json.loads((root / "stage0-reference" / "eval-test.json").read_text())["per_query"]["beir-test"]) == 3
    data = Path(cfg.data.collections[0]) / "tools.jsonl"
    rows = data.read_text().splitlines(keepends=True)
    data.write_text("".join(rows[:-2]))
    with pytest.raises(ResumeMismatchError, match=rf"stage 0: data \S+: tools.jsonl: rows {len(rows)} -> "
                                                  rf"{len(rows) - 2}") as e:
        run_tdro_pipeline(cfg)
    assert "stage 1: data" in str(e.value) and "stage 2 (reweight): data" in str(e.value)


def test_every_stage_config_is_composed_from_the_recipe_parts_field_by_field(pipeline_config, tiny_model_path):
    """plan_tdro: each stage's TrainConfig, every field, as the recipe composed it before its config was made of
    parts (a folder made then is reused: its records compare equal)."""
    from drmix.recipes.tdro import plan_tdro

    plan = plan_tdro(pipeline_config)
    root = pipeline_config.run.output_dir
    data = pipeline_config.flat()["data"]
    shared = {**TrainConfig().flat(), "model": tiny_model_path, "data": data, "max_steps": 3, "batch_size": 6,
              "learning_rate": 1e-3, "warmup_ratio": 0.0, "query_max_length": 16, "doc_max_length": 16,
              "log_every": 1, "save_every": 100, "show_progress": False, "seed": 3, "device": "cpu", "resume": True}
    stage0 = {**shared, "output_dir": f"{root}/stage0-reference"}
    stage1 = {**shared, "output_dir": f"{root}/stage1-tdro", "max_steps": 4, "temperature": 0.05,
              "batching": "mixed", "in_batch_negatives": False, "cross_device_negatives": False, "num_negatives": 7,
              "strategy": "tdro", "reference_model": f"{root}/stage0-reference/model"}
    stage2 = {t: {**shared, "output_dir": f"{root}/stage2-tdro-{folder}", "transfer": t,
                  "weights_file": f"{root}/stage1-tdro/weights.json"}
              for t, folder in (("top:0.7", "top-0.7"), ("reweight", "reweight"))}
    assert type(plan.stage0) is TrainConfig and plan.stage0.flat() == stage0
    assert plan.stage1.flat() == stage1
    assert {label: cfg.flat() for label, (_, cfg) in plan.stage2.items()} == stage2
    assert [t for t, _ in plan.stage2.values()] == ["top:0.7", "reweight"]
    assert (plan.reference, str(plan.weights_path)) == (f"{root}/stage0-reference/model",
                                                         f"{root}/stage1-tdro/weights.json")
    # given a reference model there is no stage 0, and uniform is trained as a stage 2
    given = plan_tdro(pipeline_config.replace(reference_model=tiny_model_path))
    assert given.stage0 is None and list(given.stage2) == ["uniform", "top:0.7", "reweight"]
    assert given.stage2["uniform"][1].flat() == {**shared, "output_dir": f"{root}/stage2-uniform"}
