"""drmix eval --mteb: MTEB runs a local task, drmix writes eval.json with per-query scores that agree with
MTEB's means and with drmix's own BEIR evaluation; compare pairs them; unknown and offline tasks fail fast."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("mteb")

from drmix.cli import app, main  # noqa: E402
from drmix.data.beir import write_beir  # noqa: E402
from drmix.errors import ConfigError, DataError  # noqa: E402
from drmix.evaluation.compare import compare, load_scored  # noqa: E402
from drmix.evaluation.evaluate import evaluate_model  # noqa: E402
from drmix.evaluation.mteb import evaluate_mteb, parse_task_list, resolve_task  # noqa: E402

WORDS = "cats dogs ships trains rivers mountains music bread apples stars".split()


@pytest.fixture()
def toy(tmp_path) -> Path:
    """Ten documents, ten queries, two graded judgements each (so nDCG differs from 1 for a random model)."""
    corpus = {f"d{i}": {"title": f"title {i}", "text": f"text {i} about {w} and {WORDS[(i * 3) % 10]}"}
              for i, w in enumerate(WORDS)}
    queries = {f"q{i}": f"{w} {WORDS[(i + 1) % 10]}" for i, w in enumerate(WORDS)}
    qrels = {"test": {f"q{i}": {f"d{i}": 1, f"d{(i + 1) % 10}": 2} for i in range(10)},
             "dev": {"q0": {"d0": 1}}}
    return write_beir(tmp_path / "toy", corpus, queries, qrels)


@pytest.fixture(scope="module")
def tiny_model(tiny_model_path):
    from drmix.model.encoder import load_encoder

    return load_encoder(tiny_model_path, device="cpu")


def _mteb_file(out: Path, task: str) -> dict:
    files = list((out / "mteb").rglob(f"{task}.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_local_task_per_query_matches_mteb_and_drmix_beir(tiny_model, toy, tmp_path):
    out = tmp_path / "out"
    report = evaluate_mteb(tiny_model, [str(toy)], output=out, model_name="tiny")
    pq = report.per_query["toy"]
    assert sorted(pq) == sorted(f"q{i}" for i in range(10))
    # MTEB's own mean (its result file) equals the mean of drmix's per-query scores of MTEB's ranking
    mteb_scores = _mteb_file(out, "toy")["scores"]["test"][0]
    mean_ndcg = sum(v["ndcg@10"] for v in pq.values()) / len(pq)
    assert mean_ndcg == pytest.approx(mteb_scores["ndcg_at_10"], abs=1e-5)
    assert report.results["toy"]["main_score"] == pytest.approx(mteb_scores["main_score"])
    assert sum(v["map@100"] for v in pq.values()) / len(pq) == pytest.approx(mteb_scores["map_at_100"], abs=1e-5)
    assert 0.0 < mean_ndcg < 1.0  # a random model: a non-trivial value
    # ... and drmix's own BEIR evaluation of the same model scores every query the same
    beir = evaluate_model(tiny_model, [toy], show_progress=False, k=1000)
    for q, row in beir.per_query["toy"].items():
        assert pq[q]["ndcg@10"] == pytest.approx(row["ndcg@10"], abs=1e-6), q
        assert pq[q]["mrr@10"] == pytest.approx(row["mrr@10"], abs=1e-6), q
    assert report.info["toy"]["queries"] == 10 and report.info["toy"]["documents"] == 10
    assert report.info["toy"]["result_file"].startswith("mteb/")
    assert json.loads((out / "eval.json").read_text())["per_query"] == report.per_query


def test_split_option_and_errors(tiny_model, toy):
    with pytest.raises(DataError, match="no qrels/nope.tsv"):
        resolve_task(str(toy), "nope")
    report = evaluate_mteb(tiny_model, [str(toy)], split="dev", metrics=["ndcg@10"])
    assert report.split == "dev" and list(report.per_query["toy"]) == ["q0"]
    with pytest.raises(ConfigError, match="given twice"):
        evaluate_mteb(tiny_model, [str(toy), str(toy)])
    with pytest.raises(ConfigError, match="unknown metric"):
        evaluate_mteb(tiny_model, [str(toy)], metrics=["bleu"])
    assert parse_task_list(["NFCorpus, SciFact", "STS12"]) == ["NFCorpus", "SciFact", "STS12"]


def test_unknown_task_fails_at_once_with_mteb_suggestion():
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="unknown MTEB task 'NFCorpusX'.*NFCorpus"):
        evaluate_mteb(None, ["NFCorpusX"])
    assert time.perf_counter() - t0 < 10


def test_offline_known_task_fails_before_the_model_loads(tmp_path):
    # HF_HUB_OFFLINE=1 (tests/conftest.py): the data set is not cached -> DataError, the model is never read
    t0 = time.perf_counter()
    with pytest.raises(DataError, match="NFCorpus.*could not be loaded.*HF_HUB_OFFLINE"):
        evaluate_mteb(str(tmp_path / "no-such-model"), ["NFCorpus"])
    assert time.perf_counter() - t0 < 10


def test_unreachable_hub_fails_in_seconds(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused
    t0 = time.perf_counter()
    with pytest.raises(DataError, match="not reachable from here"):
        evaluate_mteb(None, ["SciFact"])
    assert time.perf_counter() - t0 < 10


def _sts_task():
    """A local STS task (MTEB's custom-task route): no per-example scores come out of MTEB for it."""
    from datasets import Dataset
    from mteb import TaskMetadata
    from mteb.abstasks.sts import AbsTaskSTS

    class ToySTS(AbsTaskSTS):
        metadata = TaskMetadata(name="ToySTS", description="toy", dataset={"path": "local/toysts", "revision": "local"},
                                type="STS", category="t2t", eval_splits=["test"], eval_langs=["eng-Latn"],
                                main_score="cosine_spearman")

        def load_data(self, num_proc=None, **kwargs):
            if self.data_loaded:
                return
            rows = {"sentence1": [f"a {w}" for w in WORDS], "sentence2": [f"the {w}s" for w in reversed(WORDS)],
                    "score": [float(i % 6) for i in range(10)]}
            self.dataset = {"default": {"test": Dataset.from_dict(rows)}}
            self.data_loaded = True

    return ToySTS()


def test_non_retrieval_task_has_no_per_query_and_compare_refuses(tiny_model, toy, tmp_path):
    report = evaluate_mteb(tiny_model, [_sts_task(), str(toy)], output=tmp_path / "a", model_name="a")
    assert set(report.results) == {"ToySTS", "toy"} and set(report.per_query) == {"toy"}
    assert "not exposed by MTEB for STS tasks" in report.info["ToySTS"]["per_query"]
    assert report.results["ToySTS"]["main_score"] == pytest.approx(
        _mteb_file(tmp_path / "a", "ToySTS")["scores"]["test"][0]["main_score"])
    sts_only = evaluate_mteb(tiny_model, [_sts_task()], model_name="b")
    sts_only.write(tmp_path / "b")
    with pytest.raises(DataError, match="no per-query scores.*ToySTS: not exposed by MTEB for STS"):
        load_scored(tmp_path / "b")
    # mixed: the retrieval task is compared, the STS task is left out with its reason
    scored = load_scored(tmp_path / "a")[0]
    assert scored.unpaired == {"ToySTS": report.info["ToySTS"]["per_query"]}
    from dataclasses import replace

    comp = compare([scored, replace(scored, label="again")], metric="ndcg@10", permutations=100)
    assert [d.dataset for d in comp.rows["again"]] == ["toy"] and comp.rows["again"][0].delta == 0.0
    # MTEB's own result file (means only) is refused with the way to get per-query scores
    with pytest.raises(DataError, match="MTEB's own result files.*drmix eval --mteb"):
        load_scored(tmp_path / "a" / "mteb")


def test_cli_eval_mteb_then_compare(tiny_model_path, toy, tmp_path):
    from conftest import build_tiny_model

    other = build_tiny_model(tmp_path / "model-b", seed=1)
    runner = CliRunner()
    for name, model in (("base", tiny_model_path), ("other", str(other))):
        r = runner.invoke(app, ["eval", "--mteb", str(toy), "--model", model, "--output", str(tmp_path / name),
                                "--metric", "ndcg@10", "--metric", "recall@100"])
        assert r.exit_code == 0, r.output
        saved = json.loads((tmp_path / name / "eval.json").read_text())
        assert set(saved["per_query"]["toy"]["q3"]) == {"ndcg@10", "recall@100"}
        assert (tmp_path / name / "eval.md").read_text().startswith(f"Model: `{model}`")
        assert _mteb_file(tmp_path / name, "toy")["task_name"] == "toy"
    r = runner.invoke(app, ["compare", str(tmp_path / "base"), str(tmp_path / "other"), "--output",
                            str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    row = json.loads((tmp_path / "cmp" / "compare.json").read_text())["models"]
    (label, rows), = row.items()
    base = json.loads((tmp_path / "base" / "eval.json").read_text())["results"]["toy"]["ndcg@10"]
    new = json.loads((tmp_path / "other" / "eval.json").read_text())["results"]["toy"]["ndcg@10"]
    assert rows[0]["dataset"] == "toy" and rows[0]["delta"] == pytest.approx(new - base)
    # a second run into the same folder needs --overwrite; with it the mteb folder is replaced
    args = ["eval", "--mteb", str(toy), "--model", tiny_model_path, "--output", str(tmp_path / "base")]
    with pytest.raises(ConfigError, match="--overwrite"):
        runner.invoke(app, args, catch_exceptions=False)
    (tmp_path / "base" / "mteb" / "stale.txt").write_text("x")
    assert runner.invoke(app, args + ["--overwrite"]).exit_code == 0
    assert not (tmp_path / "base" / "mteb" / "stale.txt").exists()


def _main(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return e.value.code, " ".join(err.split())


@pytest.mark.parametrize("extra, message", [(["--data", "DATA"], "cannot be combined"),
                                            (["--dims", "16"], "--dims cannot be used with --mteb"),
                                            (["--max-queries", "3"], "--max-queries cannot be used")])
def test_cli_refuses_options_mteb_does_not_honour(toy, extra, message, capsys):
    code, err = _main(["eval", "--mteb", str(toy)] + [str(toy) if e == "DATA" else e for e in extra], capsys)
    assert code == 2 and message in err


def test_cli_eval_needs_data_or_mteb(capsys):
    code, err = _main(["eval"], capsys)
    assert code == 2 and "--mteb" in err


def test_cli_unknown_task_is_one_clear_line(capsys):
    code, err = _main(["eval", "--mteb", "SciFactt"], capsys)
    assert code == 2 and "unknown MTEB task 'SciFactt'" in err and "SciFact" in err
