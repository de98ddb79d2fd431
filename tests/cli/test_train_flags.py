"""drmix train under other trainers' flag names (--bf16, --train-group-size, --per-device-batch-size,
--deepspeed), its help in option groups, and argv mistakes reported before torch loads."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cli_helpers import run
from drmix.cli.train_flags import apply_aliases, check_argv
from drmix.config import TrainConfig
from drmix.errors import ConfigError, DataError

NO_ALIASES = {"bf16": False, "fp16": False, "train_group_size": None, "per_device_batch_size": None,
              "deepspeed": None}


def aliases(**kw):
    return {**NO_ALIASES, **kw}


def test_bf16_and_fp16_are_mixed_precision():
    assert apply_aliases({}, aliases(bf16=True)) == {"mixed_precision": "bf16"}
    assert apply_aliases({}, aliases(fp16=True)) == {"mixed_precision": "fp16"}
    assert apply_aliases({"mixed_precision": "bf16"}, aliases(bf16=True)) == {"mixed_precision": "bf16"}
    with pytest.raises(ConfigError, match="two precisions"):
        apply_aliases({}, aliases(bf16=True, fp16=True))
    with pytest.raises(ConfigError, match="--mixed-precision no is given too"):
        apply_aliases({"mixed_precision": "no"}, aliases(fp16=True))


def test_train_group_size_counts_the_positive():
    assert apply_aliases({}, aliases(train_group_size=8)) == {"num_negatives": 7}
    assert apply_aliases({}, aliases(train_group_size=1)) == {"num_negatives": 0}
    with pytest.raises(ConfigError, match="at least 1"):
        apply_aliases({}, aliases(train_group_size=0))
    with pytest.raises(ConfigError, match="--num-negatives 7, but --num-negatives 3"):
        apply_aliases({"num_negatives": 3}, aliases(train_group_size=8))


def test_per_device_batch_size_times_the_processes(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert apply_aliases({}, aliases(per_device_batch_size=16)) == {"batch_size": 16}
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert apply_aliases({"learning_rate": 1e-4}, aliases(per_device_batch_size=16)) == {
        "learning_rate": 1e-4, "batch_size": 64}
    with pytest.raises(ConfigError, match="--batch-size 64, but --batch-size 32"):
        apply_aliases({"batch_size": 32}, aliases(per_device_batch_size=16))


def test_deepspeed_config_is_checked_then_handed_to_accelerate(tmp_path, monkeypatch):
    import importlib.util

    for var in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        monkeypatch.setenv(var, "")      # recorded, so what use_deepspeed sets is removed after the test
        monkeypatch.delenv(var)
    with pytest.raises(ConfigError, match="does not exist"):
        apply_aliases({}, aliases(deepspeed=tmp_path / "ds.json"))
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        apply_aliases({}, aliases(deepspeed=tmp_path / "bad.json"))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed" else real(name, *a))
    with pytest.raises(ConfigError, match="needs the deepspeed package"):
        apply_aliases({}, aliases(deepspeed=ds))
    assert "ACCELERATE_USE_DEEPSPEED" not in os.environ
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "deepspeed" else real(name, *a))
    assert apply_aliases({}, aliases(deepspeed=ds)) == {}
    assert os.environ["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(ds.resolve())


class Captured(Exception):
    pass


@pytest.fixture
def seen(monkeypatch) -> dict:
    """``drmix train``'s config as the command line made it: ``api.train`` records it and stops the run
    (:class:`Captured`)."""
    import drmix.api

    seen: dict = {}

    def fake_train(config, **kw):
        seen["config"] = config
        raise Captured

    monkeypatch.setattr(drmix.api, "train", fake_train)
    return seen


def test_the_command_line_writes_aliases_under_drmix_names(tmp_path, monkeypatch, capsys, seen):
    monkeypatch.setenv("WORLD_SIZE", "2")
    data = tmp_path / "d.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n')
    with pytest.raises(Captured):
        run(["train", "--data", str(data), "--output-dir", str(tmp_path / "run"), "--bf16", "--train-group-size",
             "4", "--per-device-batch-size", "8", "--epochs", "2", "--warmup-steps", "5",
             "--query-prompt", "query: ", "--document-prompt", "passage: ", "--format", "sentence-transformers",
             "--checkpoint-naming", "hf", "--no-save-final-checkpoint"], capsys)
    c = seen["config"]
    assert (c.optim.mixed_precision, c.contrastive.num_negatives, c.contrastive.batch_size) == ("bf16", 3, 16)
    assert (c.optim.epochs, c.optim.warmup_steps, c.data.format) == (2, 5, "st")
    assert (c.data.query_prompt, c.data.document_prompt) == ("query: ", "passage: ")
    assert (c.run.checkpoint_naming, c.run.save_final_checkpoint) == ("hf", False)


def test_check_argv_without_data_and_with_a_mistyped_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="no training data given"):
        check_argv(TrainConfig())
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n")
    with pytest.raises(DataError, match="does not exist") as e:
        check_argv(TrainConfig(data=["data/trian.jsonl"]))
    assert "did you mean data/train.jsonl" in e.value.fix
    with pytest.raises(DataError, match="does not exist"):
        check_argv(TrainConfig(data=["./elsewhere/x.parquet"]))
    # what exists, a split of it, and Hub ids pass (the Hub is asked later, by the loader)
    check_argv(TrainConfig(data=["data/train.jsonl", "data/train.jsonl:train[:10]", "sentence-transformers/msmarco",
                                 {"path": "data", "name": "d"}]))


def test_train_help_is_in_option_groups(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = run(["train", "--help"], capsys)
    assert code == 0
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif current is not None:
            current.append(line)
    assert {"Model", "Data", "Batches and negatives", "Mixture", "Optimisation",
            "Output, checkpoints and tracking"} <= set(sections)

    def where(flag):
        return [title for title, lines in sections.items() if any(x.strip().startswith(flag) for x in lines)]

    assert where("--model ") == ["Model"] and where("--query-prompt") == ["Data"]
    assert where("--epochs") == ["Optimisation"] and where("--bf16") == ["Optimisation"]
    assert where("--train-group-size") == ["Batches and negatives"]
    assert where("--resume-from") == ["Output, checkpoints and tracking"]


def test_argv_mistakes_are_reported_before_torch_loads(tmp_path):
    code = ("import sys\nfrom drmix.cli import main\ntry:\n    main(['train', '--data', 'nope/missing.jsonl'])\n"
            "except SystemExit as e:\n    assert e.code == 2, e.code\n"
            "heavy = [m for m in ('torch', 'transformers', 'datasets', 'peft') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "60"})
    assert done.returncode == 0, done.stderr
    assert "collection path does not exist" in done.stderr


def test_resume_takes_an_optional_checkpoint_path_as_transformers_resume_from_checkpoint():
    from drmix.cli.train_flags import resume_path_args

    assert resume_path_args(["--resume", "--data", "d"]) == ["--resume", "--data", "d"]      # the latest
    assert resume_path_args(["--data", "d", "--resume"]) == ["--data", "d", "--resume"]
    assert resume_path_args(["--resume", "run/checkpoints/step-4", "--data", "d"]) == \
        ["--resume-from", "run/checkpoints/step-4", "--data", "d"]
    assert resume_path_args(["--resume=run/checkpoint-4"]) == ["--resume-from", "run/checkpoint-4"]
    assert resume_path_args(["--resume", "c", "--resume-from", "c"]) == ["--resume-from", "c", "--resume-from", "c"]
    with pytest.raises(ConfigError, match="2 checkpoints: a, b"):
        resume_path_args(["--resume", "a", "--resume-from", "b"])
    with pytest.raises(ConfigError, match="2 checkpoints"):
        resume_path_args(["--resume-from=a", "--resume", "b"])
    # in YAML, resume: PATH is resume_from: PATH; true/false stay the flag
    assert TrainConfig(resume="run/checkpoints/step-4").run.resume_from == "run/checkpoints/step-4"
    assert TrainConfig(resume="run/checkpoints/step-4").run.resume is True
    assert (TrainConfig(resume="true").run.resume, TrainConfig(resume="true").run.resume_from) == (True, None)
    assert TrainConfig(resume="no").run.resume is False
    with pytest.raises(ValueError, match="pass one checkpoint"):
        TrainConfig(resume="a", resume_from="b")


def test_train_resume_path_on_the_command_line_resumes_from_that_checkpoint(tmp_path, capsys, seen):
    data = tmp_path / "d.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n')
    ckpt = tmp_path / "run" / "checkpoints" / "step-2"
    with pytest.raises(Captured):
        run(["train", "--data", str(data), "--output-dir", str(tmp_path / "run"), "--resume", str(ckpt)], capsys)
    assert (seen["config"].run.resume, seen["config"].run.resume_from) == (True, str(ckpt))
    with pytest.raises(Captured):
        run(["train", "--resume", "--data", str(data), "--output-dir", str(tmp_path / "run")], capsys)
    assert (seen["config"].run.resume, seen["config"].run.resume_from) == (True, None)
    code, _, err = run(["train", "--data", str(data), "--resume", "a", "--resume-from", "b"], capsys)
    assert code == 2 and "--resume / --resume-from name 2 checkpoints" in err
