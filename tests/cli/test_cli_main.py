"""The main command line: verbosity flags before or after the command, datasets' progress bars."""
import pytest
import typer

from drmix.cli import app, hoist_root_flags


@pytest.fixture(scope="module")
def group():
    g = typer.main.get_command(app)
    return g, typer.Context(g)


@pytest.mark.parametrize("args, expected", [
    (["train", "-v", "--max-steps", "3"], ["-v", "train", "--max-steps", "3"]),
    (["train", "--max-steps", "3", "-vv"], ["-vv", "train", "--max-steps", "3"]),
    (["pipeline", "tdro", "--quiet"], ["--quiet", "pipeline", "tdro"]),
    (["-v", "train"], ["-v", "train"]),
    (["search", "-q", "a query", "-v"], ["-v", "search", "-q", "a query"]),   # search's own -q is --query
    (["eval", "--model", "-v"], ["eval", "--model", "-v"]),                   # the value of --model
    (["train", "--", "-v"], ["train", "--", "-v"]),
    (["nosuchcommand", "-v"], ["nosuchcommand", "-v"]),
])
def test_verbosity_flags_after_the_command_move_in_front(group, args, expected):
    assert hoist_root_flags(*group, args) == expected


def _invoke(args):
    from typer.testing import CliRunner

    return CliRunner().invoke(app, args)


def test_flags_after_the_command_reach_the_main_options(tmp_path):
    import logging

    _invoke(["report", str(tmp_path / "missing"), "-q"])          # fails after the main options ran
    assert logging.getLogger().level == logging.WARNING
    _invoke(["report", str(tmp_path / "missing"), "-vv"])
    assert logging.getLogger().level == logging.DEBUG


def test_datasets_bars_are_off_unless_verbose(tmp_path):
    import datasets

    try:
        _invoke(["report", str(tmp_path / "missing")])
        assert not datasets.is_progress_bar_enabled()
        _invoke(["report", str(tmp_path / "missing"), "-v"])
        assert datasets.is_progress_bar_enabled()
    finally:
        datasets.enable_progress_bars()


def test_library_settings_wait_for_the_import_without_causing_it():
    import subprocess
    import sys

    code = ("import sys\nfrom drmix.cli import main\ntry:\n    main(['report', '/nonexistent/run'])\n"
            "except SystemExit:\n    pass\nassert 'datasets' not in sys.modules and 'transformers' not in sys.modules\n"
            "import datasets\nassert not datasets.is_progress_bar_enabled()\n"
            "from transformers.utils import logging\nassert not logging.is_progress_bar_enabled()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
