"""Per-dataset query instructions: resolution, the saved prompts, eval/search/train wiring."""
from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from drmix.data.beir import write_beir
from drmix.errors import ConfigError
from drmix.model.instructions import prompt_text, query_prompt_for, read_prompts_file, record_prompts

CORPUS = {"a": {"title": "", "text": "alpha beta"}, "b": {"title": "", "text": "gamma delta"}}
QUERIES = {"q1": "alpha", "q2": "gamma"}
QRELS = {"test": {"q1": {"a": 1}, "q2": {"b": 1}}}


class _Model:
    def __init__(self, prompts):
        self.prompts = prompts


def test_prompt_resolution_order():
    m = _Model({"query": "Query: ", "scifact": "Query: Find evidence. "})
    assert query_prompt_for(m, "scifact") == "Query: Find evidence. "  # saved in the folder
    assert query_prompt_for(m, "scifact", instructions={"scifact": "Retrieve"}) == "Query: Retrieve "
    assert query_prompt_for(m, "scifact", explicit="Other:", instructions={"scifact": "x"}) == "Query: Other: "
    assert query_prompt_for(m, "nfcorpus") is None  # the model's own query prompt applies
    assert prompt_text("Ends in space ") == "Ends in space "


def test_prompts_file_yaml_json_and_bad(tmp_path):
    (tmp_path / "p.yaml").write_text("scifact: Retrieve evidence\nnfcorpus: Find articles\n")
    assert read_prompts_file(tmp_path / "p.yaml") == {"scifact": "Retrieve evidence", "nfcorpus": "Find articles"}
    (tmp_path / "p.json").write_text(json.dumps({"scifact": "x"}))
    assert read_prompts_file(tmp_path / "p.json") == {"scifact": "x"}
    (tmp_path / "bad.yaml").write_text("- a list\n")
    with pytest.raises(ConfigError, match="maps dataset names"):
        read_prompts_file(tmp_path / "bad.yaml")
    (tmp_path / "bad.json").write_text("{\n  'x': 1}")
    with pytest.raises(ConfigError) as e:
        read_prompts_file(tmp_path / "bad.json")
    assert e.value.line == 2


def test_recorded_prompt_reproduces_the_training_query_text(tiny_model_path, tmp_path):
    from sentence_transformers import SentenceTransformer

    from drmix.data.collections import apply_instruction

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.prompts = {"query": "query: ", "document": ""}
    record_prompts(model, {"scifact": "Retrieve evidence"})
    with pytest.raises(ConfigError, match="query"):
        record_prompts(model, {"query": "x"})
    model.save(str(tmp_path / "m"))
    plain = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    training_text = "query: " + apply_instruction("Retrieve evidence", "alpha beta")  # trainer: q_prompt + query
    np.testing.assert_allclose(plain.encode(["alpha beta"], prompt_name="scifact"),
                               plain.encode([training_text]), atol=1e-6)


def test_eval_uses_the_folder_prompt_and_the_cli_instruction(tiny_model_path, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    import drmix.evaluation.evaluate as ev
    from drmix.cli.retrieval import register
    from drmix.data.beir import load_beir

    data = write_beir(tmp_path / "toy", CORPUS, QUERIES, QRELS)
    seen = []
    real = ev.search_queries

    def spy(*args, **kwargs):
        seen.append(kwargs.get("prompt"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ev, "search_queries", spy)
    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.prompts = {"query": "", "toy": "Find it: "}
    ev.evaluate_dataset(model, load_beir(data, "test"))
    assert seen[-1] == "Find it: "
    app = typer.Typer()
    register(app)
    (tmp_path / "p.yaml").write_text("toy: From the file\n")
    r = CliRunner().invoke(app, ["eval", "--data", str(data), "--model", tiny_model_path, "--prompts",
                                 str(tmp_path / "p.yaml")])
    assert r.exit_code == 0, r.output
    assert seen[-1] == "From the file "
    r = CliRunner().invoke(app, ["eval", "--data", str(data), "--model", tiny_model_path, "--prompts",
                                 str(tmp_path / "p.yaml"), "--query-instruction", "Explicit"])
    assert r.exit_code == 0, r.output
    assert seen[-1] == "Explicit "


def test_training_saves_collection_and_evaluation_instructions(tiny_model_path, tmp_path):
    from sentence_transformers import SentenceTransformer
    from train_helpers import config, make_collections

    from drmix.api import train

    data = make_collections(tmp_path / "data", n=8)
    spec = [{"path": str(data / "greek.jsonl"), "instruction": "Match the letters"}]
    cfg = config(tiny_model_path, data, tmp_path / "run", max_steps=1,
                 query_instructions={"scifact": "Retrieve evidence"})
    cfg.data.collections = spec
    result = train(cfg)
    prompts = SentenceTransformer(str(result.model_dir), device="cpu").prompts
    assert prompts["greek"] == "Match the letters " and prompts["scifact"] == "Retrieve evidence "


def test_search_takes_an_instruction_or_a_saved_prompt(tiny_model_path, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    import drmix.retrieval.index as index_mod
    from drmix.cli.retrieval import register

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.prompts = {"query": "q: ", "toy": "q: Find it: "}
    model.save(str(tmp_path / "m"))
    data = write_beir(tmp_path / "toy", CORPUS, QUERIES, QRELS)
    app = typer.Typer()
    register(app)
    r = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(tmp_path / "idx"), "--model",
                                 str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    seen = []
    real = index_mod.search_queries

    def spy(*args, **kwargs):
        seen.append(kwargs.get("prompt"))
        return real(*args, **kwargs)

    monkeypatch.setattr(index_mod, "search_queries", spy)
    base = ["search", "--index", str(tmp_path / "idx"), "--query", "alpha", "--json"]
    assert CliRunner().invoke(app, base + ["--prompt-name", "toy"]).exit_code == 0
    assert seen[-1] == "q: Find it: "
    assert CliRunner().invoke(app, base + ["--query-instruction", "Look for"]).exit_code == 0
    assert seen[-1] == "q: Look for "
    bad = CliRunner().invoke(app, base + ["--prompt-name", "nfcorpus"])
    assert bad.exit_code != 0 and isinstance(bad.exception, ConfigError)
