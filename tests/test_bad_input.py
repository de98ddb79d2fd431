"""Input users can get wrong ends in one DrmixError naming the file and the fix, never a traceback."""
from __future__ import annotations

import json
import logging
import os
import pickle

import pytest
import torch
from typer.testing import CliRunner

from drmix.cli import app
from drmix.config import TrainConfig, load_config
from drmix.data.collections import load_collections, load_jsonl_collection
from drmix.errors import CheckpointError, ConfigError, DataError, DrmixError, IndexLoadError, ModelError


def _row(q="q", p="p"):
    return json.dumps({"query": q, "positive": p}) + "\n"


def test_data_that_is_a_device_file():
    with pytest.raises(DataError) as e:
        load_collections(["/dev/null"])
    assert "/dev/null" in str(e.value) and "neither a file nor a folder" in str(e.value)


def test_yaml_collection_list_listing_itself(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("- b.yaml\n")
    b.write_text("- a.yaml\n")
    with pytest.raises(DataError) as e:
        load_collections([str(a)])
    assert "cycle" in str(e.value) and str(a.resolve()) in str(e.value)


def test_yaml_unknown_key_is_named(tmp_path):
    (tmp_path / "x.jsonl").write_text(_row())
    y = tmp_path / "list.yaml"
    y.write_text("- {path: x.jsonl, wieght: 2}\n")
    with pytest.raises(DataError) as e:
        load_collections([str(y)])
    assert "wieght" in str(e.value) and str(y) in str(e.value)


def test_config_values_checked_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--data", str(tmp_path), "--matryoshka-dims", "0", "--output-dir", str(out)])
    assert isinstance(r.exception, ConfigError) and "matryoshka_dims" in str(r.exception)
    assert not out.exists()
    with pytest.raises(ConfigError):
        load_config(TrainConfig, None, {"matryoshka_dims": [16, -4]})
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("mixed_precision: no\n")  # YAML 1.1 reads `no` as false
    assert load_config(TrainConfig, cfg_file).optim.mixed_precision == "no"


def test_matryoshka_larger_than_embedding_and_missing_gpu(tiny_model_path, tmp_path):
    from drmix.device import check_device
    from drmix.train.trainer import Trainer

    from train_helpers import config, make_collections

    data = make_collections(tmp_path / "data", n=4)
    with pytest.raises(ConfigError) as e:
        Trainer(config(tiny_model_path, data, tmp_path / "run", matryoshka_dims=[16, 64]))
    assert "[64]" in str(e.value) and "32" in str(e.value)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError):
            check_device("cuda")
    with pytest.raises(ConfigError):
        check_device("gpu0")


def test_small_collection_warns(caplog):
    from drmix.train.preflight import warn_small_collections

    with caplog.at_level(logging.WARNING):
        got = warn_small_collections(["one", "big"], [1, 100], 8, "homogeneous")
    assert got == ["one (1)"] and "one (1)" in caplog.text
    assert warn_small_collections(["one"], [1], 8, "mixed") == []


def test_search_and_eval_output_of_the_wrong_type(tmp_path):
    r = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "none"), "-q", "x", "--output", str(tmp_path)])
    assert isinstance(r.exception, ConfigError) and "is a folder" in str(r.exception)
    f = tmp_path / "f.txt"
    f.write_text("x")
    r = CliRunner().invoke(app, ["eval", "--data", str(tmp_path / "data"), "--output", str(f)])
    assert isinstance(r.exception, ConfigError) and "is a file" in str(r.exception)
    assert logging.getLogger("faiss.loader").getEffectiveLevel() >= logging.WARNING  # set by the CLI callback


def test_read_only_locations(tmp_path, monkeypatch):
    from drmix.io.atomic import atomic_dir
    from drmix.lock import acquire

    def denied(*a, dir=None, **k):
        raise PermissionError(13, "Permission denied", str(dir))

    monkeypatch.setattr("tempfile.mkdtemp", denied)
    monkeypatch.setattr("tempfile.mkstemp", denied)
    with pytest.raises(ConfigError) as e:
        with atomic_dir(tmp_path / "idx"):
            pass
    assert "no permission" in str(e.value)
    with pytest.raises(ConfigError) as e:
        acquire(tmp_path / "run")
    assert "cannot write" in str(e.value)


def test_truncated_docs_jsonl_in_an_index(tmp_path):
    from drmix.retrieval.index import DOCS_FILE, DocStore

    DocStore.write(tmp_path, ["a", "b"], {"a": {"title": "A", "text": "x" * 50}, "b": {"title": "B", "text": "y" * 50}})
    store = DocStore.open(tmp_path, 2)
    assert store.get(1)["title"] == "B"
    data = (tmp_path / DOCS_FILE).read_bytes()
    (tmp_path / DOCS_FILE).write_bytes(data[: len(data) - 30])
    with pytest.raises(IndexLoadError) as e:
        DocStore.open(tmp_path, 2).get(1)
    assert "truncated" in str(e.value) and "#2" in str(e.value)


class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def _checkpoint(tmp_path):
    from safetensors.torch import save_model

    from drmix.train.checkpoint import rng_state, to_saveable

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    d = tmp_path / "step-1"
    d.mkdir()
    save_model(model, str(d / "model.safetensors"))
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": to_saveable(rng_state())},
               d / "optimizer.pt")
    torch.save({}, d / "strategy.pt")
    (d / "trainer_state.json").write_text(json.dumps({"step": 1}))
    return d, model, opt, sched


def test_checkpoint_with_pickled_object_or_truncated_weights(tmp_path):
    from drmix.train.checkpoint import load_checkpoint

    d, model, opt, sched = _checkpoint(tmp_path)
    state, _ = load_checkpoint(d, model=model, optimizer=opt, scheduler=sched)
    assert state == {"step": 1}
    good = (d / "optimizer.pt").read_bytes()
    torch.save({"optimizer": _Payload()}, d / "optimizer.pt")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d, model=model, optimizer=opt, scheduler=sched)
    assert isinstance(e.value.__cause__, pickle.UnpicklingError)
    (d / "optimizer.pt").write_bytes(good)
    w = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(w[: len(w) // 2])
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d, model=model, optimizer=opt, scheduler=sched)
    assert "step-1" in str(e.value)


def test_resume_after_a_collection_changed_size(tiny_model_path, tmp_path):
    from drmix.train.resume_check import ResumeMismatchError
    from drmix.api import train

    from train_helpers import config, make_collections

    data = make_collections(tmp_path / "data", n=8)
    out = tmp_path / "run"
    train(config(tiny_model_path, data, out, max_steps=1))
    with open(data / "greek.jsonl", "a") as f:
        f.write(_row("one more", "example"))
    with pytest.raises(ResumeMismatchError) as e:
        train(config(tiny_model_path, data, out, max_steps=2, resume=True))
    assert "greek 8 -> 9" in str(e.value)


def test_cache_sees_content_changed_with_same_size_and_mtime(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text(_row("alpha", "first") + _row("beta", "second"))
    st = f.stat()
    assert load_jsonl_collection(f).dataset["query"] == ["alpha", "beta"]
    f.write_text(_row("omega", "first") + _row("zeta", "second"))  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # what cp -p / rsync -a / touch -r leave
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    assert load_jsonl_collection(f).dataset["query"] == ["omega", "zeta"]
    f.write_text(_row("omega", "first") + "x" * (len(_row("zeta", "second")) - 1) + "\n")  # same size, not JSON
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DataError) as e:
        load_jsonl_collection(f)
    assert e.value.line == 2


def test_remote_code_error_names_the_flag(monkeypatch, tmp_path):
    import sentence_transformers

    from drmix.model.encoder import load_encoder

    def refuse(*a, **k):
        raise ValueError("The repository contains custom code which must be executed; set trust_remote_code=True.")

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", refuse)
    with pytest.raises(ModelError) as e:
        load_encoder(str(tmp_path))
    assert "--trust-remote-code" in str(e.value)


def test_eval_warns_when_every_judgement_is_zero(tiny_model_path, tmp_path, caplog):
    from drmix.data.beir import write_beir
    from drmix.evaluation.evaluate import evaluate_model

    root = write_beir(tmp_path / "z", {"a": {"title": "", "text": "alpha"}, "b": {"title": "", "text": "beta"}},
                      {"q": "alpha"}, {"test": {"q": {"a": 0}}})
    with caplog.at_level(logging.WARNING):
        try:
            evaluate_model(tiny_model_path, [root], show_progress=False, k=2, metrics=("ndcg@2",))
        except DrmixError:
            pass
    assert "every judgement" in caplog.text


def test_interrupt_says_where_to_resume(monkeypatch, tmp_path, capsys):
    import typer

    import drmix.api as trainer_mod
    from drmix.cli.train import run_train

    def interrupted(config):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer_mod, "train", interrupted)
    (tmp_path / "data").mkdir()
    with pytest.raises(typer.Exit) as e:
        run_train(None, {"data": [str(tmp_path / "data")], "output_dir": str(tmp_path / "run")})
    assert e.value.exit_code == 130
    assert "run the same command" in " ".join(capsys.readouterr().err.split())


def _cli(argv, capsys):
    from drmix.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2 and "Traceback" not in err, err
    return err


def test_pipeline_drama_with_an_unknown_llm_key(tmp_path, capsys):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d", "text": "a passage"}\n')
    out = tmp_path / "run"
    err = _cli(["pipeline", "drama", "--corpus", str(tmp_path / "corpus.jsonl"), "--output-dir", str(out),
                "--generate", "--llm", "bogus=1"], capsys)
    assert "llm" in err and "bogus" in err and "timeout" in err   # names the key and lists the valid ones
    assert not out.exists()
    err = _cli(["pipeline", "drama", "--corpus", str(tmp_path / "corpus.jsonl"), "--output-dir", str(out),
                "--generate", "--llm", "timeout=-1"], capsys)
    assert "timeout" in err and "greater than 0" in err


def test_a_folder_given_as_the_config_file(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("batch_size: 4\n")
    err = _cli(["train", str(tmp_path)], capsys)
    assert "is a folder, not a YAML config file" in err and str(tmp_path / "config.yaml") in err
    with pytest.raises(ConfigError, match="--data"):
        load_config(TrainConfig, tmp_path)


def test_a_batch_larger_than_all_examples_is_refused_before_the_model_loads(tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text(_row("a", "b") + _row("c", "d") + _row("e", "f"))
    out = tmp_path / "run"
    unloadable = tmp_path / "unloadable-model"      # a folder that exists but holds no model: loading it fails
    unloadable.mkdir()
    (unloadable / "config.json").write_text("{}")
    err = _cli(["train", "--data", str(tmp_path / "c.jsonl"), "--batch-size", "1000000000", "--model",
                str(unloadable), "--output-dir", str(out)], capsys)
    assert "--batch-size 1000000000" in err and "3 training examples" in err and "--batch-size 3" in err
    assert not out.exists()


def test_beir_folder_without_qrels_names_the_missing_file(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d", "text": "a passage"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q", "text": "a query"}\n')
    with pytest.raises(DataError) as e:
        load_collections([str(tmp_path)])
    assert e.value.path == str(tmp_path / "qrels" / "train.tsv") and "qrels" in e.value.message
    assert "query-id<TAB>corpus-id<TAB>score" in e.value.fix and "corpus.jsonl:1" not in str(e.value)


def test_mixture_file_without_any_weight(tiny_model_path, tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text(_row("a", "b") + _row("c", "d"))
    err = _cli(["train", "--data", str(tmp_path / "c.jsonl"), "--mixture", "file", "--batch-size", "2",
                "--model", tiny_model_path, "--output-dir", str(tmp_path / "run")], capsys)
    assert "--mixture file needs a weight" in err and "['c']" in err and "--weights-file" in err
    assert not (tmp_path / "run").exists()
