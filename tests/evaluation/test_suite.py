"""drmix.evaluation.suite: one cached many-model evaluation and one results table."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from drmix.evaluation.suite import cache_file, evaluate_suite, results_table


def _beir(root: Path) -> Path:
    d = root / "toy"
    (d / "qrels").mkdir(parents=True)
    words = ["cat", "dog", "bread", "rice", "hammer", "saw"]
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"the {w} is here"}) + "\n"
                                            for i, w in enumerate(words)))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": w}) + "\n" for i, w in enumerate(words)))
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    return d


def test_suite_caches_per_model_and_recomputes_when_the_key_changes(tmp_path, tiny_model_path, monkeypatch):
    import drmix.evaluation.evaluate as ev

    data = _beir(tmp_path)
    calls = []
    real = ev.evaluate_dataset

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(ev, "evaluate_dataset", counting)
    folder = tmp_path / "run"
    first = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",))
    assert len(calls) == 1 and first.cache_files["m"] == cache_file(folder, "test") == folder / "eval-test.json"
    saved = json.loads((folder / "eval-test.json").read_text())
    assert saved["results"] == first.results["m"] and set(saved["per_query"]["toy"]) == {f"q{i}" for i in range(6)}
    # the mean of the per-query values is the reported mean
    pq = first.per_query["m"]["toy"]
    assert first.results["m"]["toy"]["ndcg@10"] == pytest.approx(sum(v["ndcg@10"] for v in pq.values()) / 6)
    again = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",))
    assert len(calls) == 1 and again.results == first.results                 # cache hit
    evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",), max_queries=3)
    assert len(calls) == 2                                                     # another key: recomputed
    assert json.loads((folder / "eval-test.json").read_text())["key"]["max_queries"] == 3
    assert first.scores()["m"]["toy"] == {q: v["ndcg@10"] for q, v in pq.items()}


def test_a_model_saved_again_at_the_same_path_is_evaluated_again(tmp_path, tiny_model_path, monkeypatch):
    """A stage trained again writes its model to the same folder: the cache of the earlier model is not reused."""
    import shutil

    import drmix.evaluation.evaluate as ev
    from tests.conftest import build_tiny_model

    data = _beir(tmp_path)
    model = tmp_path / "stage" / "model"
    shutil.copytree(tiny_model_path, model)
    calls = []
    real = ev.evaluate_dataset
    monkeypatch.setattr(ev, "evaluate_dataset", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    first = evaluate_suite({"m": str(model)}, [data], metrics=("ndcg@10",))
    evaluate_suite({"m": str(model)}, [data], metrics=("ndcg@10",))
    assert len(calls) == 1                                        # the same model: reused
    shutil.rmtree(model)
    shutil.copytree(build_tiny_model(tmp_path / "other", seed=5), model)
    second = evaluate_suite({"m": str(model)}, [data], metrics=("ndcg@10",))
    assert len(calls) == 2 and second.cache_files["m"] == first.cache_files["m"]


def test_suite_cache_is_what_compare_reads(tmp_path, tiny_model_path):
    from drmix.evaluation.compare import load_scored

    data = _beir(tmp_path)
    res = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": tmp_path / "run"})
    [scored] = load_scored(tmp_path / "run")
    assert scored.per_query == res.per_query["m"]


def test_results_table_single_metric_with_deltas_and_average():
    table = results_table({"uniform": {"a": {"ndcg@10": 0.5}, "b": {"ndcg@10": 0.3}},
                           "top": {"a": {"ndcg@10": 0.6}, "b": {"ndcg@10": 0.2}}})
    assert table.splitlines() == ["| ndcg@10 | uniform | top |", "|---|---:|---:|",
                                  "| a | 0.5000 | 0.6000 (+0.1000) |", "| b | 0.3000 | 0.2000 (-0.1000) |",
                                  "| average | 0.4000 | 0.4000 (+0.0000) |"]


def test_results_table_per_metric_with_share_and_no_average():
    res = {"teacher": {"a": {"ndcg@10": 0.5, "r": 0.8}, "b": {"ndcg@10": 0.4}},
           "student": {"a": {"ndcg@10": 0.45, "r": 0.4}, "b": {"ndcg@10": 0.1}}}
    lines = results_table(res, ["ndcg@10", "r"], deltas=False, average=False, share=("student", "teacher")).splitlines()
    assert lines[0] == "| dataset | metric | teacher | student | student / teacher |"
    assert lines[2:] == ["| a | ndcg@10 | 0.5000 | 0.4500 | 90.0% |", "| a | r | 0.8000 | 0.4000 | 50.0% |",
                         "| b | ndcg@10 | 0.4000 | 0.1000 | 25.0% |"]          # b has no r: no row


def _counting(monkeypatch) -> list[int]:
    import drmix.evaluation.evaluate as ev

    calls: list[int] = []
    real = ev.evaluate_dataset
    monkeypatch.setattr(ev, "evaluate_dataset", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


def test_a_test_set_cut_at_the_same_path_is_evaluated_again(tmp_path, tiny_model_path, monkeypatch):
    """qrels cut from 6 to 3 queries: the cache of the full set is not reported for the cut one."""
    calls = _counting(monkeypatch)
    data = _beir(tmp_path)
    folder = tmp_path / "run"
    first = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",))
    assert len(first.per_query["m"]["toy"]) == 6
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n"
                                                                                   for i in range(3)))
    cut = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",))
    assert len(calls) == 2 and sorted(cut.per_query["m"]["toy"]) == ["q0", "q1", "q2"]
    (data / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\n")   # another split
    evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",))
    assert len(calls) == 2


def test_another_max_length_is_evaluated_again(tmp_path, tiny_model_path, monkeypatch):
    calls = _counting(monkeypatch)
    data = _beir(tmp_path)
    folder = tmp_path / "run"
    evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",), max_length=8)
    evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",), max_length=8)
    assert len(calls) == 1
    evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": folder}, metrics=("ndcg@10",), max_length=16)
    assert len(calls) == 2
    assert json.loads((folder / "eval-test.json").read_text())["key"]["max_length"] == 16


def test_a_rank_other_than_0_computes_the_results_and_writes_no_cache(tmp_path, tiny_model_path, monkeypatch):
    """Under torchrun (drmix adapt) every rank evaluates, rank 0 alone writes the cache file."""
    from drmix.retrieval import shards

    data = _beir(tmp_path)
    written = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": tmp_path / "a"}, metrics=("ndcg@10",))
    monkeypatch.setattr(shards, "writes_here", lambda: False)
    follower = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": tmp_path / "b"}, metrics=("ndcg@10",))
    assert follower.results == written.results and follower.cache_files == {}
    assert not (tmp_path / "b").exists()
def _spying(monkeypatch) -> list[tuple]:
    """Each call of evaluate_dataset: (the queries it was given, its keyword arguments); the real one runs."""
    import drmix.evaluation.evaluate as ev

    calls: list[tuple] = []
    real = ev.evaluate_dataset
    monkeypatch.setattr(ev, "evaluate_dataset", lambda m, data, **k: (calls.append((sorted(data.queries), k)),
                                                                        real(m, data, **k))[1])
    return calls


def test_a_cached_model_does_not_stop_the_next_from_being_evaluated(tmp_path, tiny_model_path, monkeypatch):
    calls = _spying(monkeypatch)
    data = _beir(tmp_path)
    evaluate_suite({"a": tiny_model_path}, [data], cache_dirs={"a": tmp_path / "a"}, metrics=("ndcg@10",))
    both = evaluate_suite({"a": tiny_model_path, "b": tiny_model_path}, [data],
                          cache_dirs={"a": tmp_path / "a", "b": tmp_path / "b"}, metrics=("ndcg@10",))
    assert len(calls) == 2 and list(both.results) == ["a", "b"] and both.results["a"] == both.results["b"]


def test_the_sample_seed_sizes_instructions_and_name_reach_the_evaluation_and_its_record(tmp_path, tiny_model_path,
                                                                                        monkeypatch):
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import subsample
    from drmix.model.encoder import load_encoder

    calls = _spying(monkeypatch)
    data = _beir(tmp_path)
    encoder = load_encoder(tiny_model_path, device="cpu")
    encoder.name = "tiny-encoder"
    res = evaluate_suite({"m": encoder}, [data], cache_dirs={"m": tmp_path / "run"}, metrics=("ndcg@10",),
                         max_queries=3, seed=5, dims=[8], query_instructions={"toy": "Find: "})
    [(queries, kwargs)] = calls
    assert queries == sorted(subsample(load_beir(data, "test"), max_queries=3, seed=5).queries)
    assert queries != sorted(subsample(load_beir(data, "test"), max_queries=3, seed=0).queries)
    assert kwargs["query_instructions"] == {"toy": "Find: "} and kwargs["dims"] == (8,)
    assert set(res.results["m"]["toy"]) == {"ndcg@10", "ndcg@10@8d"}
    saved = json.loads((tmp_path / "run" / "eval-test.json").read_text())
    assert saved["model"] == saved["key"]["model"] == "tiny-encoder"
    assert saved["key"]["query_instructions"] == {"toy": "Find: "} and saved["key"]["seed"] == 5
    plain = evaluate_suite({"m": tiny_model_path}, [data], cache_dirs={"m": tmp_path / "plain"}, metrics=("ndcg@10",))
    assert "query_instructions" not in json.loads((tmp_path / "plain" / "eval-test.json").read_text())["key"]
    assert plain.cache_files["m"] == tmp_path / "plain" / "eval-test.json"


def test_results_table_of_one_dataset_has_no_average_row():
    table = results_table({"uniform": {"a": {"ndcg@10": 0.5}}, "top": {"a": {"ndcg@10": 0.25}}})
    assert table.splitlines() == ["| ndcg@10 | uniform | top |", "|---|---:|---:|", "| a | 0.5000 | 0.2500 (-0.2500) |"]
