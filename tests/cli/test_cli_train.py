"""The drmix command line: help, config file + flag overrides, one-line errors with exit code 2."""
import json

import pytest
import yaml

from cli_helpers import run
from drmix.cli.options import overrides_from_kwargs
from drmix.config import TrainConfig, load_config
from drmix.errors import ConfigError


def test_help_lists_commands_and_train_fields(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # rich wraps help to the terminal width
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "train" in out
    code, out, _ = run(["train", "--help"], capsys)
    assert code == 0
    for flag in ("--batch-size", "--mixture-temperature", "--resume", "--data", "--tdro"):
        assert flag in out


def test_yaml_config_with_flag_overrides(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data": ["a.jsonl"], "batch_size": 8, "max_steps": 5}))
    cfg = load_config(TrainConfig, tmp_path / "c.yaml", {"batch_size": 16, "tdro": {"lr": 0.1}})
    assert (cfg.contrastive.batch_size, cfg.optim.max_steps, cfg.data.collections, cfg.dro) == (16, 5, ["a.jsonl"], {"lr": 0.1})


def test_mapping_flags_parse_yaml_values():
    got = overrides_from_kwargs({"tdro": ["lr=0.02", "measurement=ratio"], "data": [], "batch_size": None},
                                {"tdro": "mapping", "data": "list", "batch_size": "scalar"})
    assert got == {"tdro": {"lr": 0.02, "measurement": "ratio"}}


def test_config_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("data: [a.jsonl\nbatch_size: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, tmp_path / "bad.yaml")
    assert e.value.line is not None and "YAML" in e.value.message
    (tmp_path / "typo.yaml").write_text("data: [a.jsonl]\nbatch_sise: 3\n")
    with pytest.raises(ConfigError, match="batch_sise"):
        load_config(TrainConfig, tmp_path / "typo.yaml")


def test_bad_data_is_one_line_and_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q"}\n')
    code, _, err = run(["-q", "train", "--data", str(bad), "--output-dir", str(tmp_path / "out")], capsys)
    assert code == 2
    assert f"{bad}:1" in err and "Traceback" not in err


def test_train_from_the_command_line(tiny_model_path, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"query": f"q{i}", "positive": f"p{i}"}) + "\n" for i in range(6)))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"model": tiny_model_path, "data": [str(data)], "max_steps": 3}))
    code, out, err = run(["-q", "train", str(tmp_path / "c.yaml"), "--batch-size", "2", "--output-dir",
                          str(tmp_path / "run"), "--no-show-progress"], capsys)
    assert code == 0, err
    assert "trained 3 steps" in out
    saved = TrainConfig.flatten(yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()))
    assert saved["batch_size"] == 2 and saved["max_steps"] == 3
