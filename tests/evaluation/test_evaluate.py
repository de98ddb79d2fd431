"""EvalReport arithmetic/formatting, evaluate_model end to end on a toy BEIR set, the dev evaluator."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from drmix.data.beir import BeirDataset, load_beir, write_beir
from drmix.errors import ConfigError, DataError
from drmix.evaluation.evaluate import DevEvaluator, EvalReport, dataset_names, evaluate_model, subsample

# Each query is its document's exact text, so a cosine index ranks that document first (score 1.0).
# The real MiniLM is used here: the tiny random model maps every text to nearly the same vector.
CORPUS = {f"d{i}": {"title": f"title {i}", "text": f"document number {i} about {w}"}
          for i, w in enumerate(["cats", "dogs", "ships", "trains", "rivers", "mountains", "music", "bread"])}
QUERIES = {f"q{i}": f"title {i} document number {i} about {CORPUS[f'd{i}']['text'].split()[-1]}" for i in range(8)}


@pytest.fixture(scope="module")
def minilm():
    from drmix.model.encoder import load_encoder

    return load_encoder(None, device="cpu")


@pytest.fixture()
def toy(tmp_path):
    qrels = {"test": {f"q{i}": {f"d{i}": 1} for i in range(6)}, "dev": {"q6": {"d6": 1}, "q7": {"d7": 1}}}
    return write_beir(tmp_path / "toy", CORPUS, QUERIES, qrels)


def test_report_average_markdown_json(tmp_path):
    report = EvalReport(model="m", split="test", results={"a": {"ndcg@10": 0.5, "mrr@10": 0.25},
                                                          "b": {"ndcg@10": 0.7, "mrr@10": 0.75}})
    assert report.average() == pytest.approx({"ndcg@10": 0.6, "mrr@10": 0.5})
    md = report.to_markdown().splitlines()
    assert md[2] == "| dataset | ndcg@10 | mrr@10 |"
    assert md[4:] == ["| a | 0.5000 | 0.2500 |", "| b | 0.7000 | 0.7500 |", "| average | 0.6000 | 0.5000 |"]
    report.write(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert saved["results"] == report.results and saved["average"] == pytest.approx(report.average())
    assert (tmp_path / "out" / "eval.md").read_text() == report.to_markdown()
    assert [name for name, _ in report.rows()] == ["a", "b", "average"]


def test_sampled_evaluation_is_labelled_in_its_table():
    info = {"a": {"queries": 100, "documents": 1500, "subsample": {"of_queries": 300, "of_documents": 5183,
                                                                   "seed": 0}},
            "b": {"queries": 40, "documents": 900, "subsample": {"of_queries": 40, "of_documents": 2000, "seed": 0}},
            "c": {"queries": 7, "documents": 9}}
    report = EvalReport(model="m", split="test", results={n: {"ndcg@10": 0.5} for n in "abc"}, info=info)
    md = report.to_markdown().splitlines()
    assert md[4:8] == ["| a (sample: 100 of 300 queries, 1,500 of 5,183 documents) | 0.5000 |",
                       "| b (sample: 900 of 2,000 documents) | 0.5000 |", "| c | 0.5000 |",
                       "| average (of samples) | 0.5000 |"]
    assert "not comparable with the full dataset" in md[-1]
    assert "sample" not in EvalReport(model="m", split="test", results={"c": {"ndcg@10": 0.5}},
                                      info={"c": info["c"]}).to_markdown()


def test_evaluate_model_perfect_retrieval(minilm, toy, caplog):
    report = evaluate_model(minilm, [toy], split="test", k=5, show_progress=False, model_name="my-model")
    assert "cuts off at 100" in caplog.text  # recall@100 and map@100 are capped by k=5
    assert report.model == "my-model" and report.split == "test"
    assert report.results["toy"] == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0, "map@100": 1.0})
    assert report.info["toy"]["queries"] == 6 and report.info["toy"]["documents"] == 8


def test_the_bundled_model_is_labelled_by_its_name_not_default(minilm, toy):
    """drmix eval without --model (model_name "default") and the bundled folder itself are named all-MiniLM-L6-v2
    in the table, eval.md and eval.json; another model keeps the name it was given."""
    from drmix.model.paths import default_model_path

    report = evaluate_model(minilm, [toy], split="test", k=5, show_progress=False, model_name="default")
    assert report.model == "all-MiniLM-L6-v2 (bundled)"
    assert report.to_markdown().startswith("Model: `all-MiniLM-L6-v2 (bundled)` — split: `test`")
    assert report.to_json()["model"] == "all-MiniLM-L6-v2 (bundled)"
    assert evaluate_model(minilm, [toy], split="test", k=5, show_progress=False).model == "all-MiniLM-L6-v2 (bundled)"
    assert EvalReport(model=default_model_path(), split="test", results={}).model == "all-MiniLM-L6-v2 (bundled)"
    assert EvalReport(model="runs/mix/model", split="test", results={}).model == "runs/mix/model"


def test_evaluate_model_two_datasets_and_errors(minilm, toy, tmp_path):
    other = write_beir(tmp_path / "x" / "toy", CORPUS, QUERIES, {"test": {"q0": {"d1": 1}}})
    report = evaluate_model(minilm, [toy, other], metrics=["recall@100"], show_progress=False)
    assert list(report.results) == [f"{tmp_path.name}/toy", "x/toy"]  # same folder name: parent prepended
    assert report.results["x/toy"] == {"recall@100": 1.0}  # 8 documents, all retrieved
    with pytest.raises(ConfigError):
        evaluate_model(minilm, [])
    with pytest.raises(DataError, match="split 'nope'"):
        evaluate_model(minilm, [toy], split="nope")


def test_dataset_names_disambiguate(tmp_path):
    assert dataset_names([tmp_path / "a" / "s", tmp_path / "b" / "s", tmp_path / "c"]) == ["a/s", "b/s", "c"]


def test_subsample_keeps_judged_documents():
    qrels = {f"q{i}": {f"d{i}": 1, f"d{i + 10}": 0} for i in range(5)}
    corpus = {f"d{i}": {"title": "", "text": str(i)} for i in range(40)}
    data = BeirDataset(root=Path("x"), corpus=corpus, queries={q: q for q in qrels}, qrels=qrels)
    sub = subsample(data, max_queries=2, max_docs=6, seed=3)
    assert len(sub.qrels) == 2 and set(sub.queries) == set(sub.qrels)
    judged = {d for docs in sub.qrels.values() for d in docs}
    assert judged <= set(sub.corpus) and len(sub.corpus) == 6
    assert subsample(data, max_queries=2, max_docs=6, seed=3).corpus.keys() == sub.corpus.keys()  # deterministic
    tight = subsample(data, max_queries=5, max_docs=3)
    assert len(tight.corpus) == 10  # the 10 judged documents are never dropped


def test_dev_evaluator_falls_back_and_restores_mode(minilm, toy, tmp_path, caplog):
    test_only = write_beir(tmp_path / "only", CORPUS, QUERIES, {"test": {"q0": {"d0": 1}}})
    evaluator = DevEvaluator([toy, test_only], max_queries=1, max_docs=4, seed=0)
    assert "no 'dev' split" in caplog.text
    assert len(evaluator.datasets["toy"].qrels) == 1 and len(evaluator.datasets["toy"].corpus) == 4
    minilm.train()
    with caplog.at_level(logging.WARNING):
        scores = evaluator(minilm)
    assert minilm.training
    minilm.eval()
    assert scores["toy/ndcg@10"] == pytest.approx(1.0) and scores["only/mrr@10"] == pytest.approx(1.0)
    assert scores["avg/recall@100"] == pytest.approx(1.0)
    assert set(scores) == {f"{d}/{m}" for d in ("toy", "only", "avg")
                           for m in ("ndcg@10", "recall@100", "mrr@10", "map@100")}
    assert load_beir(toy, "dev").qrels == {"q6": {"d6": 1}, "q7": {"d7": 1}}


@pytest.mark.slow
def test_scifact_ndcg_matches_public_figure(shared_data):
    report = evaluate_model(None, [shared_data / "scifact"], split="test", show_progress=False)
    assert report.results["scifact"]["ndcg@10"] == pytest.approx(0.645, abs=0.01)


def test_evaluate_model_records_the_set_and_the_sample_it_evaluated(minilm, toy):
    report = evaluate_model(minilm, [toy], split="test", max_queries=4, seed=2, show_progress=False)
    info = report.info["toy"]
    assert (info["queries"], info["documents"], info["path"]) == (4, 8, str(toy))
    assert info["subsample"] == {"of_queries": 6, "of_documents": 8, "seed": 2}
    assert "subsample" not in evaluate_model(minilm, [toy], show_progress=False).info["toy"]


def test_the_index_is_built_with_the_progress_asked_for_and_large_corpora_cache_their_ids(monkeypatch):
    """Corpora of 2,000 documents and more keep their token ids on disk (drmix.data.tokenized.corpus_ids)."""
    import drmix.evaluation.evaluate as ev

    class Stop(Exception):
        pass

    seen = []

    def spy(model, corpus, **kw):
        seen.append((len(corpus), kw["cache_ids"], kw["show_progress"], kw["max_length"]))
        raise Stop

    monkeypatch.setattr(ev, "index_corpus", spy)
    for n, progress in ((2000, True), (1999, False)):
        data = BeirDataset(root=Path("x"), corpus={f"d{i}": {"title": "", "text": "t"} for i in range(n)},
                           queries={"q": "t"}, qrels={"q": {"d0": 1}})
        with pytest.raises(Stop):
            ev.evaluate_dataset(object(), data, query_prompt="", show_progress=progress, max_length=7)
    assert seen == [(2000, True, True, 7), (1999, False, False, 7)]
    # with Matryoshka sizes the evaluation at each size shows the progress asked for too
    import drmix.evaluation.matryoshka as mat

    monkeypatch.setattr(mat, "evaluate_dims", lambda *a, **kw: (seen.append((kw["show_progress"], a[4])), 1 / 0))
    for progress in (True, False):
        with pytest.raises(ZeroDivisionError):
            ev.evaluate_dataset(object(), data, query_prompt="", show_progress=progress, dims=[8])
    assert seen[2:] == [(True, [8]), (False, [8])]
