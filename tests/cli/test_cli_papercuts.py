"""Small things a new user trips over: index model paths, eval subsamples, file modes, log lines, library noise."""
from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from typer.testing import CliRunner

from drmix.cli import app, main
from drmix.data.beir import write_beir
from drmix.errors import ModelError

CORPUS = {f"d{i}": {"title": "", "text": f"document number {i} about topic {i % 3}"} for i in range(12)}
QUERIES = {f"q{i}": f"topic {i % 3} number {i}" for i in range(6)}
QRELS = {"test": {f"q{i}": {f"d{i}": 1} for i in range(6)}}


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    return write_beir(tmp_path_factory.mktemp("papercuts") / "toy", CORPUS, QUERIES, QRELS)


def invoke(*args):
    result = CliRunner().invoke(app, list(map(str, args)))
    return result


def test_index_records_an_absolute_model_path_and_names_a_missing_one(beir, tiny_model_path, tmp_path,
                                                                       monkeypatch):
    model = tmp_path / "models" / "tiny"
    shutil.copytree(tiny_model_path, model)
    monkeypatch.chdir(tmp_path)
    result = invoke("index", "--corpus", beir, "--model", "models/tiny", "--output", "idx")
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["model"] == str(model.resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # searching from another folder finds the model
    result = invoke("search", "--index", tmp_path / "idx", "-q", "topic 1", "--k", "2", "--json")
    assert result.exit_code == 0, result.output
    shutil.rmtree(model)
    result = invoke("search", "--index", tmp_path / "idx", "-q", "topic 1")
    assert isinstance(result.exception, ModelError)
    assert str(model.resolve()) in result.exception.message and "meta.json" in result.exception.path
    assert "Hub" not in result.exception.format()


def _eval(beir, out, *extra):
    result = invoke("eval", "--data", beir, "--model", "default", "--output", out, *extra)
    assert result.exit_code == 0, result.output
    return json.loads((out / "eval.json").read_text())


def test_eval_max_queries_and_docs_subsample_with_a_seed(beir, tmp_path):
    a = _eval(beir, tmp_path / "a", "--max-queries", "2", "--max-docs", "3", "--seed", "1")
    b = _eval(beir, tmp_path / "b", "--max-queries", "2", "--max-docs", "3", "--seed", "1")
    info = a["info"]["toy"]
    assert info["queries"] == 2 and info["documents"] == 3
    assert info["subsample"] == {"of_queries": 6, "of_documents": 12, "seed": 1}
    assert set(a["per_query"]["toy"]) == set(b["per_query"]["toy"])  # seeded: the same sample
    # the kept queries' judged documents are always in the corpus: with 2 queries and 1 document room
    # each query's own document (its only relevant one) is retrievable
    c = _eval(beir, tmp_path / "c", "--max-queries", "2", "--max-docs", "1")
    assert c["info"]["toy"]["documents"] == 2
    assert all(v["recall@100"] == 1.0 for v in c["per_query"]["toy"].values())
    full = _eval(beir, tmp_path / "full")
    assert "subsample" not in full["info"]["toy"] and full["info"]["toy"]["queries"] == 6


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_get_the_modes_the_umask_gives(beir, tmp_path, umask):
    old = os.umask(umask)
    try:
        _eval(beir, tmp_path / "ev")
        assert invoke("index", "--corpus", beir, "--output", tmp_path / "idx").exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "ev" / "eval.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "idx").stat().st_mode & 0o777 == 0o777 & ~umask
    assert (tmp_path / "idx" / "meta.json").stat().st_mode & 0o777 == 0o666 & ~umask


def _run_main(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr()
    assert e.value.code in (0, None), out.err
    return out


def test_one_line_per_message_at_any_width(beir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out_dir = tmp_path / ("a-rather-long-folder-name-" * 3) / "eval"
    out = _run_main(["eval", "--data", str(beir), "--output", str(out_dir)], capsys)
    assert f"wrote {out_dir / 'eval.json'} and {out_dir / 'eval.md'}" in out.out.splitlines()
    logged = [line for line in out.err.splitlines() if "evaluating on toy" in line]
    assert len(logged) == 1 and logged[0].endswith("evaluating on toy: 12 documents, 6 queries")


def test_library_load_reports_only_with_verbose(beir, tiny_model_path, tmp_path, capsys):
    """A checkpoint with a weight the architecture does not use makes transformers print a LOAD REPORT."""
    from safetensors.torch import load_file, save_file

    noisy = tmp_path / "noisy"
    shutil.copytree(tiny_model_path, noisy)
    weights = load_file(noisy / "model.safetensors")
    weights["cls.predictions.bias"] = torch.zeros(3)
    save_file(weights, noisy / "model.safetensors", metadata={"format": "pt"})
    import logging

    class Collect(logging.Handler):  # transformers' own handler may write to an earlier test's stderr
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    collect = Collect()
    logger = logging.getLogger("transformers")
    logger.addHandler(collect)
    try:
        quiet = _run_main(["eval", "--data", str(beir), "--model", str(noisy)], capsys)
        assert not any("LOAD REPORT" in m for m in collect.messages) and "ndcg@10" in quiet.out
        assert "LOAD REPORT" not in quiet.err
        _run_main(["-v", "eval", "--data", str(beir), "--model", str(noisy)], capsys)
        assert any("LOAD REPORT" in m for m in collect.messages)
    finally:
        logger.removeHandler(collect)
