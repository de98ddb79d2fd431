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


# -- what the command writes on stderr around progress bars, and for torchrun's launcher ---------------------------
def test_the_error_line_starts_on_a_line_of_its_own_after_a_bar_left_open(tmp_path, capsys):
    """A library's loop that raised (NanoBEIR's loading offline) leaves its bar open; drmix's line follows it on a
    line of its own, the bar kept as it stopped."""
    import sys

    from tqdm.auto import tqdm

    from cli_helpers import run

    bar = tqdm(total=3, desc="loading datasets", file=sys.stderr)
    bar.update(1)
    code, _, err = run(["report", str(tmp_path / "missing")], capsys)
    assert code == 2
    before, sep, _ = err.partition("error:")
    assert sep and before.endswith("\n") and "1/3" in before.rsplit("\r", 1)[-1], repr(err)
    del bar


def test_a_log_record_is_written_between_the_bars_not_after_one(capsys):
    import logging
    import sys

    from tqdm.auto import tqdm

    from drmix.cli import _between_bars

    handler = _between_bars(logging.StreamHandler(sys.stderr))
    bar = tqdm(total=3, desc="encoding", file=sys.stderr)
    bar.update(1)
    capsys.readouterr()
    handler.emit(logging.LogRecord("drmix", logging.WARNING, __file__, 1, "a warning mid-bar", None, None))
    err = capsys.readouterr().err
    line = next(seg for seg in err.replace("\r", "\n").split("\n") if "a warning mid-bar" in seg)
    assert line == "a warning mid-bar", repr(err)          # not after the bar's text
    assert "encoding" in err.rsplit("a warning mid-bar", 1)[1]   # the bar drawn again below it
    bar.close()


def test_under_torchrun_the_error_file_makes_the_launchers_summary_quote_the_line(tmp_path, capsys, monkeypatch):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from cli_helpers import run

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    code, _, err = run(["report", str(tmp_path / "missing")], capsys)
    assert code == 2
    line = " ".join(err.split()).removeprefix("error: ")
    failure = ProcessFailure(local_rank=0, pid=1, exitcode=2, error_file=str(error_file))   # as the agent reads it
    summary = ChildFailedError("drmix", {0: failure}).format_msg()
    assert f"ConfigError: {line}" in " ".join(summary.split())
    assert "To enable traceback" not in summary and "Traceback" not in summary
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE")
    error_file.unlink()
    assert run(["report", str(tmp_path / "missing")], capsys)[0] == 2 and not error_file.exists()
