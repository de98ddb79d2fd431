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


# -- the first hour: train -> eval -> compare -> report in one run folder -----------------------------------------
def _toy_beir(root):
    import json

    d = root / "toy"
    (d / "qrels").mkdir(parents=True)
    words = ["cat", "dog", "bread", "rice", "hammer", "saw"]
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"the {w} is here"})
                                            + "\n" for i, w in enumerate(words)))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": w}) + "\n"
                                             for i, w in enumerate(words)))
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    return d


def test_eval_and_compare_into_a_run_are_what_report_and_the_card_show(tmp_path, tiny_model_path, capsys):
    import json

    from sentence_transformers import SentenceTransformer

    from drmix.config import TrainConfig
    from drmix.report.card import CARD_FACTS, info_from_train_config

    run = make_run(tmp_path / "runs" / "mix")
    (run / "eval.md").unlink()
    shutil.rmtree(run / "model")
    shutil.copytree(tiny_model_path, run / "model")
    info = info_from_train_config(TrainConfig(data=["a.jsonl"], output_dir=str(run)), names=["a"], sizes=[4])
    (run / CARD_FACTS).write_text(json.dumps(info.to_json()))
    data = _toy_beir(tmp_path)
    # the README's layout, written by name ...
    code, out, err = _main(["eval", "--model", str(run), "--data", str(data), "--output", str(run / "eval")], capsys)
    assert code in (0, None), err
    # ... or by the run folder itself: eval and compare write into RUN/eval and RUN/compare
    code, out, err = _main(["eval", "--model", tiny_model_path, "--data", str(data), "--output", str(tmp_path / "b")],
                           capsys)
    assert code in (0, None), err
    code, out, err = _main(["compare", str(tmp_path / "b"), str(run / "eval"), "--output", str(run)], capsys)
    assert code in (0, None), err                     # not refused as overlapping its input run/eval
    assert (run / "compare" / "compare.md").is_file() and "writing into" in err
    code, out, err = _main(["eval", "--model", str(run), "--data", str(data), "--output", str(run), "--overwrite"],
                           capsys)
    assert code in (0, None), err and (run / "eval" / "eval.json").is_file()
    page = (run / "report.html").read_text()          # refreshed by eval / compare
    assert "eval/eval.md" in page and "compare/compare.md" in page
    card = (run / "model" / "README.md").read_text()
    assert "toy" in card.split("## Evaluation")[1] and f'SentenceTransformer("{run}/model")' in card
    (run / "report.html").unlink()
    code, out, err = _main(["report", str(run)], capsys)
    assert code in (0, None), err and "eval/eval.md" in (run / "report.html").read_text()
    SentenceTransformer(str(run / "model"), device="cpu")   # the folder still loads


def test_eval_output_elsewhere_is_used_as_it_is(tmp_path, tiny_model_path, capsys):
    data = _toy_beir(tmp_path)
    code, _, err = _main(["eval", "--model", tiny_model_path, "--data", str(data), "--output", str(tmp_path / "e")],
                         capsys)
    assert code in (0, None), err and (tmp_path / "e" / "eval.json").is_file() and "writing into" not in err


def test_print_outcome_names_weights_report_and_next_command(tmp_path, capsys):
    from drmix.cli.report import print_outcome

    run = make_run(tmp_path / "run")
    (run / "report.html").write_text("x")
    print_outcome(run, data=["beir/scifact"])
    out = capsys.readouterr().out
    assert "final weights (tdro): alpha 0.3000, beta 0.7000" in out
    assert f"report: {run / 'report.html'}" in out
    assert f"next: drmix eval --model {run} --data beir/scifact --output {run / 'eval'}" in out
    pipeline = tmp_path / "pipe"
    make_run(pipeline / "stage1")
    print_outcome(pipeline)
    out = capsys.readouterr().out
    assert "final weights of stage1 (tdro): alpha 0.3000, beta 0.7000" in out and "--data BEIR_DIR" in out


def test_a_pipeline_names_its_report_once(tmp_path, capsys):
    """after_run writes a pipeline's report.html and print_outcome, which every pipeline command calls next, names
    it: one "report:" line (the demo printed two)."""
    from drmix.cli.report import after_run, print_outcome

    pipeline = tmp_path / "pipe"
    make_run(pipeline / "stage1")
    after_run(pipeline, None, pipeline=True)
    print_outcome(pipeline)
    out = capsys.readouterr().out
    assert (pipeline / "report.html").is_file()
    assert [line for line in out.splitlines() if line.startswith("report: ")] == [f"report: {pipeline / 'report.html'}"]


def test_report_on_a_sentence_transformers_run(tmp_path, capsys):
    from report.test_trainer_state import _st_run

    run = _st_run(tmp_path / "st")
    code, out, _ = _main(["report", str(run)], capsys)
    assert code == 0 and "Mixture weights" in (run / "report.html").read_text()
    (tmp_path / "empty").mkdir()
    code, _, err = _main(["report", str(tmp_path / "empty")], capsys)
    assert code == 2 and "trainer_state.json" in err


def test_only_global_rank_0_writes_the_report_and_pushes(tmp_path, monkeypatch):
    """Under a launcher every rank finishes the command: the pipeline's report.html and the --push-to-hub upload
    are global rank 0's alone."""
    from types import SimpleNamespace

    import drmix.hub
    from drmix.cli import report

    monkeypatch.setattr(drmix.hub, "push_to_hub", lambda *a, **kw: pytest.fail("a rank other than 0 pushed"))
    monkeypatch.setattr("drmix.report.html.write_report", lambda *a: pytest.fail("a rank other than 0 wrote"))
    config = SimpleNamespace(run=SimpleNamespace(push_to_hub="me/model"))
    monkeypatch.setenv("RANK", "1")
    report.after_run(tmp_path / "run", config, pipeline=True)
    assert not (tmp_path / "run").exists()
    pushed: list = []
    monkeypatch.setattr(drmix.hub, "push_to_hub", lambda out, repo: pushed.append((out, repo))
                        or SimpleNamespace(files=[], url="u"))
    monkeypatch.setenv("RANK", "0")
    report.after_run(tmp_path / "run", config)
    assert pushed == [(tmp_path / "run", "me/model")]
