"""Every command's --help renders, shows the default of every option that has one, and keeps brackets."""
import re

import pytest
import typer
from typer.testing import CliRunner

from drmix.cli import app


def _commands(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group (typer ships its own click)
        for name, sub in cmd.commands.items():
            yield from _commands(sub, path + (name,))


def _expected_default(param) -> str | None:
    """The default text an option's help must show, or None when it has no default worth showing."""
    if getattr(param, "param_type_name", "") != "option" or param.hidden:
        return None
    m = re.search(r"\[default: ([^\]]+)\]", param.help or "")
    if m:  # config fields carry their pydantic default in the help text (their click default is None)
        return m.group(1)
    default = param.default
    if default is None or default == () or default == [] or callable(default) or param.show_default is False:
        return None
    if isinstance(default, bool):  # --flag/--no-flag: click shows the chosen side
        return None
    return str(default.value if hasattr(default, "value") else default)


ROOT = typer.main.get_command(app)
COMMANDS = [p for p, _ in _commands(ROOT)]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "drmix")
def test_help_shows_every_default(path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # narrow: the text wraps, it must not be cut
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="drmix", terminal_width=60)
    assert result.exit_code == 0, result.output
    flat = "".join(result.output.split())  # wrapping breaks lines anywhere (even after hyphens): drop whitespace
    cmd = dict(_commands(ROOT))[path]
    missing = []
    for param in cmd.params:
        want = _expected_default(param)
        want = None if want is None else "".join(want.split())
        if want is not None and not re.search(rf"\[default:{re.escape(want)}[];]", flat):  # "; x>=1" for ranges
            missing.append((param.name, want))
    assert not missing, f"defaults not shown in `drmix {' '.join(path)} --help`: {missing}"


def test_brackets_in_help_survive():
    result = CliRunner().invoke(app, ["eval", "--help"], prog_name="drmix", terminal_width=200)
    flat = " ".join(result.output.split())
    assert "drmix[onnx]" in flat
    result = CliRunner().invoke(app, ["train", "--help"], prog_name="drmix", terminal_width=200)
    flat = " ".join(result.output.split())
    assert "[default: 32]" in flat and "[default: 2e-05]" in flat and "[default: linear]" in flat
