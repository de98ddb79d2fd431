"""drmix index / search / eval through a throwaway typer app (the main app wires the same register())."""
from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from drmix.cli.retrieval import register
from drmix.data.beir import write_beir
from drmix.errors import ConfigError, DataError, IndexLoadError

CORPUS = {"cat": {"title": "Cats", "text": "Cats are small domesticated felines that purr."},
          "ship": {"title": "Ships", "text": "A container ship carries cargo across the ocean."},
          "bread": {"title": "Bread", "text": "Sourdough bread is leavened with wild yeast."}}
QUERIES = {"q1": "which animal purrs", "q2": "how is cargo moved over the sea"}
QRELS = {"test": {"q1": {"cat": 1}, "q2": {"ship": 1}}}


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture(scope="module")
def indexed(app, tmp_path_factory):
    """A BEIR dir and its index built with the default model (real MiniLM: tiny random weights can't rank)."""
    root = tmp_path_factory.mktemp("cli")
    data = write_beir(root / "toy", CORPUS, QUERIES, QRELS)
    result = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(root / "idx")])
    assert result.exit_code == 0, result.output
    return root, data


def test_index_writes_meta_and_texts(indexed):
    root, data = indexed
    meta = json.loads((root / "idx" / "meta.json").read_text())
    assert meta["model"] == "default" and meta["count"] == 3 and meta["kind"] == "flat"
    assert meta["corpus"] == str((data / "corpus.jsonl").resolve()) and meta["has_texts"] is True


def test_search_json_and_run_file(app, indexed):
    root, _ = indexed
    out = root / "run.jsonl"
    result = CliRunner().invoke(app, ["search", "--index", str(root / "idx"), "-q", "which animal purrs",
                                      "-q", "how is cargo moved over the sea", "--k", "2", "--json",
                                      "--output", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["query_id"] for r in rows] == ["1", "2"]
    assert [r["hits"][0]["doc_id"] for r in rows] == ["cat", "ship"]
    assert rows[0]["hits"][0]["text"] == "Cats Cats are small domesticated felines that purr."
    assert [h["rank"] for h in rows[0]["hits"]] == [1, 2]
    saved = [json.loads(line) for line in out.read_text().splitlines()]
    assert saved[1]["hits"][0] == {"rank": 1, "doc_id": "ship", "score": rows[1]["hits"][0]["score"]}


def test_search_trec_run_scored_by_eval_run(app, indexed, tmp_path):
    root, data = indexed
    runner = CliRunner()
    run = tmp_path / "run.trec"
    result = runner.invoke(app, ["search", "--index", str(root / "idx"), "--queries", str(data / "queries.jsonl"),
                                 "--k", "2", "--format", "trec", "--output", str(run)])
    assert result.exit_code == 0, result.output
    lines = run.read_text().splitlines()
    assert [line.split()[:4] for line in lines[::2]] == [["q1", "Q0", "cat", "1"], ["q2", "Q0", "ship", "1"]]
    assert all(len(line.split()) == 6 and line.endswith(" drmix") for line in lines)
    printed = runner.invoke(app, ["search", "--index", str(root / "idx"), "--queries", str(data / "queries.jsonl"),
                                  "--k", "2", "--format", "trec"])
    assert printed.stdout.splitlines() == lines
    result = runner.invoke(app, ["eval", "--run", str(run), "--data", str(data), "--output", str(tmp_path / "e")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "e" / "eval.json").read_text())
    assert report["results"]["toy"] == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0,
                                                      "map@100": 1.0})
    assert report["model"] == "run.trec" and report["info"]["toy"]["run"] == str(run)
    result = runner.invoke(app, ["eval", "--run", str(run), "--data", str(data), "--model", "x", "--dims", "8"])
    assert isinstance(result.exception, ConfigError) and "--model, --dims" in str(result.exception)
    result = runner.invoke(app, ["eval", "--run", str(run), "--data", str(data), "--max-queries", "1", "--seed",
                                 "1", "--output", str(tmp_path / "sampled")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "sampled" / "eval.json").read_text())
    assert report["info"]["toy"]["queries"] == 1 and report["info"]["toy"]["subsample"]["of_queries"] == 2
    assert "toy (sample: 1 of 2 queries)" in (tmp_path / "sampled" / "eval.md").read_text()
    result = runner.invoke(app, ["eval", "--run", str(run), "--data", str(data), "--max-docs", "3"])
    assert isinstance(result.exception, ConfigError) and "--max-docs" in str(result.exception)
    result = runner.invoke(app, ["search", "--index", str(root / "idx"), "-q", "x", "--format", "trec", "--json"])
    assert isinstance(result.exception, ConfigError)


def test_search_query_files_and_table(app, indexed, tmp_path):
    root, data = indexed
    txt = tmp_path / "q.txt"
    txt.write_text("sourdough yeast\n\nocean cargo\n")
    result = CliRunner().invoke(app, ["search", "--index", str(root / "idx"), "--queries", str(txt), "--k", "1"])
    assert result.exit_code == 0, result.output
    assert "bread" in result.output and "ship" in result.output and "Sourdough" in result.output
    result = CliRunner().invoke(app, ["search", "--index", str(root / "idx"), "--queries",
                                      str(data / "queries.jsonl"), "--k", "1", "--json"])
    assert [json.loads(x)["query_id"] for x in result.stdout.splitlines()] == ["q1", "q2"]


def test_search_bad_inputs(app, indexed, tmp_path):
    root, _ = indexed
    runner = CliRunner()
    result = runner.invoke(app, ["search", "--index", str(tmp_path / "none"), "-q", "x"])
    assert isinstance(result.exception, IndexLoadError)
    result = runner.invoke(app, ["search", "--index", str(root / "idx")])
    assert isinstance(result.exception, ConfigError)
    (tmp_path / "empty.txt").write_text("\n")
    result = runner.invoke(app, ["search", "--index", str(root / "idx"), "--queries", str(tmp_path / "empty.txt")])
    assert isinstance(result.exception, DataError)


def test_eval_prints_and_writes(app, indexed, tmp_path):
    _, data = indexed
    result = CliRunner().invoke(app, ["eval", "--data", str(data), "--output", str(tmp_path / "out"), "--k", "3"])
    assert result.exit_code == 0, result.output
    assert "ndcg@10" in result.output and "toy" in result.output
    report = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert report["results"]["toy"] == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0,
                                                      "map@100": 1.0})
    # per-query scores (what `drmix compare` pairs): every judged query, each perfect here
    per_query = report["per_query"]["toy"]
    assert set(per_query) == {"q1", "q2"}
    assert all(v == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0, "map@100": 1.0})
               for v in per_query.values())
    assert "| average | 1.0000 |" in (tmp_path / "out" / "eval.md").read_text()


def test_index_hnsw_option_and_missing_corpus(app, indexed, tmp_path):
    _, data = indexed
    result = CliRunner().invoke(app, ["index", "--corpus", str(data / "corpus.jsonl"), "--output",
                                      str(tmp_path / "h"), "--kind", "hnsw", "--hnsw-m", "8", "--no-texts"])
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "h" / "meta.json").read_text())
    assert meta["kind"] == "hnsw" and meta["params"]["M"] == 8 and meta["has_texts"] is False
    result = CliRunner().invoke(app, ["index", "--corpus", str(tmp_path / "nope"), "--output", str(tmp_path / "x")])
    assert isinstance(result.exception, DataError)


def test_index_and_eval_share_cached_embeddings_and_pass_their_encoding_options(app, tmp_path, monkeypatch):
    import drmix.retrieval.encode as enc

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    calls = []
    real = enc._ChunkTokens.__init__

    def spy(self, model, texts, *args, **kwargs):
        real(self, model, texts, *args, **kwargs)
        calls.append((len(texts), args[-1] if len(args) > 4 else kwargs.get("num_proc")))
    monkeypatch.setattr(enc._ChunkTokens, "__init__", spy)
    data = write_beir(tmp_path / "toy", CORPUS, QUERIES, QRELS)
    result = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(tmp_path / "idx"),
                                      "--cache-embeddings", "--tokenize-num-proc", "1"])
    assert result.exit_code == 0, result.output
    assert calls == [(3, 1)]                                        # the three documents, one process
    flat = "".join(result.output.split())                          # wrapped at any width: compare without spaces
    assert f"indexwrittento{(tmp_path / 'idx').resolve()}".replace(" ", "") in flat
    assert list((tmp_path / "cache" / "embedding-cache").glob("*/*.keys.npy"))
    result = CliRunner().invoke(app, ["eval", "--data", str(data), "--cache-embeddings", "--tokenize-num-proc", "2"])
    assert result.exit_code == 0, result.output
    assert calls[1:] == [(2, 2)]                                    # only the queries: the corpus came from the cache


def test_search_with_output_writes_the_run_and_prints_one_line(app, indexed, tmp_path):
    """A run of every query goes to the file, and the terminal gets one line saying so (a table of every query was
    printed as well: 24.9 MB for SciFact's 1,109 queries)."""
    root, data = indexed
    for run_format, name in (("trec", "run.trec"), ("jsonl", "run.jsonl")):
        run = tmp_path / name
        result = CliRunner().invoke(app, ["search", "--index", str(root / "idx"), "--queries",
                                          str(data / "queries.jsonl"), "--k", "2", "--format", run_format,
                                          "--output", str(run)])
        assert result.exit_code == 0, result.output
        assert " ".join(result.stdout.split()) == f"wrote 4 hits of 2 queries to {run} ({run_format})"
        assert len(run.read_text().splitlines()) == (4 if run_format == "trec" else 2)


def test_search_a_splits_judged_queries(app, indexed, tmp_path):
    """--data DIR [--split NAME] searches exactly the queries that split judges, --qrels FILE those a file judges:
    the run's query ids are the qrels' (what ranx and pytrec_eval require)."""
    root, _ = indexed
    queries = {**QUERIES, "q3": "what makes sourdough rise", "q4": "an unjudged query"}
    data = write_beir(tmp_path / "beir", CORPUS, queries, {"test": QRELS["test"], "dev": {"q3": {"bread": 1}}})
    runner = CliRunner()

    def searched(*args):
        run = tmp_path / "run.trec"
        result = runner.invoke(app, ["search", "--index", str(root / "idx"), *args, "--k", "1", "--format", "trec",
                                     "--output", str(run), "--overwrite"])
        assert result.exit_code == 0, result.output
        return [line.split()[0] for line in run.read_text().splitlines()]

    assert searched("--data", str(data)) == ["q1", "q2"]                         # the test split by default
    assert searched("--data", str(data), "--split", "dev") == ["q3"]
    assert searched("--queries", str(data / "queries.jsonl"), "--qrels", str(data / "qrels" / "dev.tsv")) == ["q3"]
    assert searched("--queries", str(data / "queries.jsonl")) == ["q1", "q2", "q3", "q4"]
    for args, error, message in (
            (["--queries", str(data / "queries.jsonl"), "--split", "dev"], ConfigError, "--split names a split"),
            (["-q", "x", "--qrels", str(data / "qrels" / "dev.tsv")], ConfigError, "--query texts have no ids"),
            (["--data", str(data), "-q", "x"], ConfigError, "give the queries one way; got --query, --data"),
            (["--data", str(data), "--split", "train"], DataError, "split 'train' has no qrels file"),
            (["--queries", str(tmp_path / "q.txt"), "--qrels", str(data / "qrels" / "dev.tsv")], DataError,
             "the qrels judge 1 queries that are not among the 1 queries given (first: 'q3')")):
        (tmp_path / "q.txt").write_text("only one\n")
        result = runner.invoke(app, ["search", "--index", str(root / "idx"), *args])
        assert isinstance(result.exception, error) and message in str(result.exception), result.output
