"""Output folders: commands never delete or rename a user's files (drmix.outputs, drmix.io.atomic_dir)."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from drmix.cli import app
from drmix.data.beir import write_beir
from drmix.errors import ConfigError
from drmix.io import atomic_dir, atomic_write_text
from drmix.outputs import check_output_dir, is_output_of

CORPUS = {"a": {"title": "A", "text": "alpha text"}, "b": {"title": "B", "text": "beta text"}}


def _beir(tmp_path):
    return write_beir(tmp_path / "scifact", CORPUS, {"q": "alpha"}, {"test": {"q": {"a": 1}}})


def test_index_into_its_own_corpus_is_refused_and_corpus_kept(tmp_path, tiny_model_path):
    data = _beir(tmp_path)
    before = sorted(p.name for p in data.iterdir())
    for extra in ([], ["--overwrite"]):  # overlap with the input is refused even with --overwrite
        r = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(data), "--model",
                                     tiny_model_path, *extra])
        assert isinstance(r.exception, ConfigError) and "overlaps the input" in str(r.exception)
    assert sorted(p.name for p in data.iterdir()) == before == ["corpus.jsonl", "qrels", "queries.jsonl"]


def test_index_output_file_refused_never_renamed(tmp_path, tiny_model_path):
    data = _beir(tmp_path)
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    r = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(f), "--model", tiny_model_path])
    assert isinstance(r.exception, ConfigError) and "is a file" in str(r.exception)
    assert f.read_text() == "mine" and not (tmp_path / ".notes.txt.old").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "scifact"]


def test_index_user_folder_needs_overwrite_then_own_index_is_replaced(tmp_path, tiny_model_path):
    data = _beir(tmp_path)
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_text("x")
    args = ["index", "--corpus", str(data), "--output", str(out), "--model", tiny_model_path]
    r = CliRunner().invoke(app, args)
    assert isinstance(r.exception, ConfigError) and "--overwrite" in str(r.exception)
    assert (out / "cat.jpg").read_text() == "x"
    r = CliRunner().invoke(app, [*args, "--overwrite"])
    assert r.exit_code == 0, r.output
    assert not (out / "cat.jpg").exists() and is_output_of(out, "index")
    r = CliRunner().invoke(app, args)  # an earlier index is drmix's own output: replaced without --overwrite
    assert r.exit_code == 0, r.output


def test_multicorpus_and_localdocs_refuse_user_folders(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "keep.txt").write_text("k")
    src = tmp_path / "src"
    src.mkdir()
    r = CliRunner().invoke(app, ["multicorpus", "build", str(src), str(user)])
    assert isinstance(r.exception, ConfigError) and "manifest.json" in str(r.exception)
    r = CliRunner().invoke(app, ["localdocs", "build", str(user), "--family", "stdlib"])
    assert isinstance(r.exception, ConfigError) and "stats.json" in str(r.exception)
    r = CliRunner().invoke(app, ["multicorpus", "build", str(src), str(src / "out")])
    assert isinstance(r.exception, ConfigError) and "overlaps the input" in str(r.exception)
    assert (user / "keep.txt").read_text() == "k"


def test_check_output_dir_kinds(tmp_path):
    assert check_output_dir(tmp_path / "new", "index") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty", "localdocs")
    lc = tmp_path / "lc"
    (lc / "train").mkdir(parents=True)
    (lc / "stats.json").write_text(json.dumps({"families": []}))
    check_output_dir(lc, "localdocs")
    with pytest.raises(ConfigError):  # a localdocs build is not an index
        check_output_dir(lc, "index")
    mc = tmp_path / "mc"
    mc.mkdir()
    (mc / "manifest.json").write_text(json.dumps({"format": "other/1"}))
    with pytest.raises(ConfigError):
        check_output_dir(mc, "multicorpus")
    (mc / "manifest.json").write_text(json.dumps({"format": "drmix-multicorpus/1"}))
    check_output_dir(mc, "multicorpus")


def test_atomic_dir_refuses_file_and_permission_errors_are_one_line(tmp_path, monkeypatch):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ConfigError):
        with atomic_dir(f):
            pass
    assert f.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["f"]

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr("tempfile.mkstemp", denied)
    with pytest.raises(ConfigError) as e:
        atomic_write_text(tmp_path / "x.json", "{}")
    assert "no permission" in str(e.value) and str(tmp_path) in str(e.value)


def test_run_finished_and_model_saved(tmp_path):
    from drmix.outputs import model_saved, run_finished

    run = tmp_path / "run"
    assert not run_finished(run)
    (run / "model").mkdir(parents=True)
    assert not run_finished(run) and not model_saved(run / "model")
    (run / "model" / "modules.json").write_text("[]")
    assert run_finished(run) and model_saved(run / "model")
    (run / "model" / "modules.json").unlink()
    (run / "model" / "modules.json").mkdir()                 # not a file: not saved
    assert not run_finished(run)
