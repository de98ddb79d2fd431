"""``drmix pipeline tdro|coco|drama`` and ``drmix adapt`` on the command line: each recipe's ``--help`` lists only
the options its stages read; a training option a recipe leaves out is refused in one line naming the recipe and
the option, from a flag or a YAML file alike; a config error's fix names the command that was run."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import typer

from cli_helpers import run
from drmix.cli import app

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {"pipeline tdro": "PipelineConfig", "pipeline coco": "CocoPipelineConfig", "pipeline drama": "DramaConfig",
           "adapt": "AdaptConfig"}


def _command(path: str):
    cmd = typer.main.get_command(app)
    for word in path.split():
        cmd = cmd.commands[word]
    return cmd


def _config(path: str):
    from drmix.recipes.adapt import AdaptConfig
    from drmix.recipes.coco import CocoPipelineConfig
    from drmix.recipes.drama import DramaConfig
    from drmix.recipes.tdro import PipelineConfig

    return {"PipelineConfig": PipelineConfig, "CocoPipelineConfig": CocoPipelineConfig, "DramaConfig": DramaConfig,
            "AdaptConfig": AdaptConfig}[RECIPES[path]]


@pytest.mark.parametrize("path", list(RECIPES))
def test_help_lists_the_fields_the_recipe_carries_and_hides_the_ones_it_refuses(path):
    cmd, cls = _command(path), _config(path)
    shown = {p.name for p in cmd.params if getattr(p, "param_type_name", "") == "option" and not p.hidden}
    hidden = {p.name for p in cmd.params if getattr(p, "hidden", False)}
    assert set(cls.flat_fields()) <= shown
    assert hidden == set(cls.left_out_fields()) and not hidden & shown
    assert shown - set(cls.flat_fields()) <= {"help", "estimate", "estimate_gpus"}


def test_coco_help_has_none_of_the_options_it_cannot_use():
    """The options the issue found listed for a recipe whose strategy is static or idro."""
    shown = {o for p in _command("pipeline coco").params if not p.hidden for o in p.opts}
    assert not shown & {"--reference-model", "--dev", "--dro", "--influence", "--strategy-options", "--resume",
                        "--resume-from"}
    assert {"--weights-file", "--transfer", "--mixture", "--idro", "--strategy"} <= shown    # static weights use them
    tdro = {o for p in _command("pipeline tdro").params if not p.hidden for o in p.opts}
    assert not tdro & {"--weights-file", "--transfer", "--mixture", "--batching", "--dev", "--influence", "--idro"}
    assert {"--dro", "--tdro", "--strategy", "--reference-model", "--transfers"} <= tdro


def test_the_option_count_table_of_docs_testing_is_the_scripts():
    """docs/testing.md prints scripts/recipe_options.py's table: the counts measured before the change (stored)
    beside today's."""
    import json

    m = runpy.run_path(str(ROOT / "scripts" / "recipe_options.py"))
    counts = m["option_counts"]()
    for path in RECIPES:
        cmd = _command(path)
        assert counts[f"drmix {path}"] == sum(1 for p in cmd.params if p.param_type_name == "option"
                                              and p.name != "help" and not p.hidden)
    before = json.loads((ROOT / "tests" / "benchmarks" / "fixtures" / "recipe-options-before.json").read_text())
    assert before["drmix pipeline coco"] == 89 and set(before) == set(counts)
    table = m["table"](before, counts)
    assert "| `drmix pipeline coco --help` | 89 | " in table
    assert table in (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("argv, flag, recipe", [
    (["pipeline", "coco", "--reference-model", "m"], "--reference-model", "drmix pipeline coco"),
    (["pipeline", "coco", "--dev", "d"], "--dev", "drmix pipeline coco"),
    (["pipeline", "coco", "--tdro", "lr=0.1"], "--dro", "drmix pipeline coco"),          # its older name
    (["pipeline", "tdro", "--transfer", "reweight"], "--transfer", "drmix pipeline tdro"),
    (["pipeline", "tdro", "--influence", "update_every=5"], "--influence", "drmix pipeline tdro"),
    (["pipeline", "drama", "--resume-from", "c"], "--resume-from", "drmix pipeline drama"),
    (["adapt", "--strategy", "tdro"], "--strategy", "drmix adapt"),
])
def test_a_left_out_flag_is_one_line_naming_the_recipe_and_the_option(argv, flag, recipe, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run([*argv, "--data", str(tmp_path / "d"), "--output-dir", str(out)], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{flag} (" in err and f"is not used by {recipe}: " in err and "Fix: " in err
    assert not out.exists()


def test_a_left_out_key_in_a_yaml_config_is_one_line_naming_the_file(tmp_path, capsys):
    f = tmp_path / "coco.yaml"
    f.write_text("mixture: {strategy: idro, dev: [beir/dev]}\n")
    code, _, err = run(["pipeline", "coco", str(f), "--output-dir", str(tmp_path / "out")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(f) in err and "--dev (dev) is not used by drmix pipeline coco" in err


@pytest.mark.parametrize("argv, command", [
    (["pipeline", "coco"], "drmix pipeline coco"), (["pipeline", "tdro"], "drmix pipeline tdro"),
    (["pipeline", "drama"], "drmix pipeline drama"), (["adapt"], "drmix adapt"), (["train"], "drmix train"),
    (["mixture", "optimize"], "drmix mixture optimize"), (["pretrain", "coco"], "drmix pretrain coco"),
])
def test_a_config_error_fix_names_the_command_that_was_run(argv, command, tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("learning_rat: 0.001\n")
    code, _, err = run([*argv, str(f)], capsys)
    assert code == 2 and "learning_rat: not a drmix field; did you mean learning_rate" in err
    assert f"see `{command} --help`" in err and (command == "drmix train" or "drmix train --help" not in err)
