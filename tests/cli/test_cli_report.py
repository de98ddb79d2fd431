"""drmix report (rebuild report.html, never over a user's file) and drmix push (through a loopback Hub)."""
from __future__ import annotations

import shutil

import pytest

from drmix.cli import main
from drmix.errors import ConfigError
from report.test_html_report import make_run


def _main(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_report_rebuilds_and_refuses_a_foreign_file(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    code, out, err = _main(["report", str(run)], capsys)
    assert code in (0, None), err
    assert "<svg" in (run / "report.html").read_text() and str(run / "report.html") in out
    code, _, _ = _main(["report", str(run)], capsys)  # its own page is rebuilt
    assert code in (0, None)
    (run / "report.html").write_text("<html>my notes</html>")
    code, _, err = _main(["report", str(run)], capsys)
    assert code == 2 and "did not write" in err and "--overwrite" in err
    assert (run / "report.html").read_text() == "<html>my notes</html>"
    code, _, _ = _main(["report", str(run), "--overwrite"], capsys)
    assert code in (0, None) and "<svg" in (run / "report.html").read_text()


def test_report_of_a_folder_without_runs(tmp_path, capsys):
    code, _, err = _main(["report", str(tmp_path)], capsys)
    assert code == 2 and "no run" in err


def test_push_command_through_a_loopback_hub(tmp_path, tiny_model_path, capsys, monkeypatch):
    from huggingface_hub import constants

    from loopback_hub import LoopbackHub

    hub = LoopbackHub(require_token="hf_cli")
    try:
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # where HfApi() goes without endpoint=
        run = make_run(tmp_path / "run")
        shutil.rmtree(run / "model")
        shutil.copytree(tiny_model_path, run / "model")
        code, out, err = _main(["push", str(run), "me/cli-model", "--token", "hf_cli"], capsys)
        assert code in (0, None), err
        assert "pushed" in out and "modules.json" in hub.repos["me/cli-model"]
        assert "report.html" in hub.repos["me/cli-model"] and "drmix/eval.md" in hub.repos["me/cli-model"]
    finally:
        hub.close()
    with pytest.raises(ConfigError):
        from drmix.hub import check_can_push

        check_can_push("not-an-id")
