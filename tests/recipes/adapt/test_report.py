"""The outputs of ``drmix adapt`` (:mod:`drmix.recipes.adapt.report`): the report's first sentence read from a
finished run's result (on the labelled split when given, else on the synthetic test)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from drmix.recipes.adapt.report import report_headline


class _Comparison:
    def __init__(self, label: str, t_p: float):
        self.rows = {label: []}
        self._p = t_p

    def average(self, label):
        return SimpleNamespace(t_p=self._p)


def _suite(scores: dict[str, float]):
    # two datasets per model: their mean is the score
    return SimpleNamespace(results={m: {"a": {"ndcg@10": v - 0.01}, "b": {"ndcg@10": v + 0.01}}
                                    for m, v in scores.items()})


def test_the_report_reads_the_labelled_split_when_given_else_the_synthetic_test():
    adapted = "adapted (size+synthetic)"
    models = {"base model": "b", "uniform fine-tuning": "u", "COCO → uniform": "c", adapted: "s"}
    candidates = {"uniform": "c", "uniform+synthetic": "us", "size+synthetic": "s"}
    labelled = _suite({"base model": 0.3, "uniform fine-tuning": 0.40, "COCO → uniform": 0.41, adapted: 0.44,
                       "uniform": 0.41, "uniform+synthetic": 0.43, "size+synthetic": 0.44})
    synthetic = _suite({"base model": 0.5, "uniform fine-tuning": 0.60, "COCO → uniform": 0.70, adapted: 0.66,
                        "uniform+synthetic": 0.65})
    comparisons = {"test: vs uniform fine-tuning": _Comparison(adapted, 0.004),
                   "test: adapted vs COCO → uniform": _Comparison(adapted, 0.02),
                   "synthetic test: vs uniform fine-tuning": _Comparison(adapted, 0.5),
                   "synthetic test: adapted vs COCO → uniform": _Comparison(adapted, 0.6)}
    result = SimpleNamespace(models=models, selected="size+synthetic", candidates=candidates, labelled=labelled,
                             synthetic_test=synthetic, comparisons=comparisons, adapted=adapted)
    text, data = report_headline(result, "test")
    assert "by +0.040 nDCG@10 (p 0.004) on the labelled test split of a and b" in text and "+0.030 (p 0.02)" in text
    assert data["on"] == "labelled" and data["parts"]["coco"] == pytest.approx(0.01)
    assert data["parts"]["synthetic"] == pytest.approx(0.02) and data["parts"]["mixture"] == pytest.approx(0.01)
    result.labelled = None
    text, data = report_headline(result, "test")
    assert "(p 0.5) on the synthetic test split (no labelled data was given)" in text and "(p 0.6)" in text
    assert data["on"] == "synthetic test"
    # COCO +0.10, the synthetic set -0.05, the mixture +0.01 on the synthetic test
    assert data["parts"]["coco"] == pytest.approx(0.10) and data["parts"]["synthetic"] == pytest.approx(-0.05)
    assert data["parts"]["mixture"] == pytest.approx(0.01)
    assert "Lowered the score: the synthetic train set." in text


def test_names_and_llm_queries_reach_the_report_and_the_card_as_text(tmp_path, tiny_model_path, monkeypatch):
    """Corpus and collection names that are HTML, and LLM-written queries that are HTML and break code spans: the
    report (summary.md, report.html) and the model card render them as text, in a Markdown renderer that lets raw
    HTML through (as GitHub and the Hub do) and in report.html."""
    import json
    import shutil
    import sys
    from pathlib import Path

    from markdown_it import MarkdownIt

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/recipes: test_adapt.py
    from loopback_llm import LoopbackServer, chat
    from test_adapt import make_config

    from drmix.recipes.adapt import run_adapt
    from drmix.report import html

    monkeypatch.setattr(html, "_line_figure", lambda *a, **kw: None)
    monkeypatch.setattr(html, "_weights_figure", lambda *a, **kw: None)
    cfg = make_config(tmp_path, tiny_model_path)
    hostile = "<img src=x onerror=alert(1)>"
    corpora = []
    for name in ("pets", "travel"):                    # the corpora under folder names that are HTML
        folder = tmp_path / "hostile" / f"{name}{hostile}"
        folder.mkdir(parents=True)
        shutil.copy(tmp_path / name / "corpus.jsonl", folder / "corpus.jsonl")
        corpora.append(str(folder))
    data = tmp_path / "hostile-data"
    data.mkdir()
    for f in (tmp_path / "train").glob("*.jsonl"):       # a collection whose name is HTML
        shutil.copy(f, data / f"{f.stem}<script>alert(2)<.jsonl")
    server = LoopbackServer(lambda body, n: (200, chat("Query: when do <script>alert(3)</script> `x` clubs meet <b>b</b>")))
    try:
        result = run_adapt(cfg.replace(corpus=corpora, data=[str(data)], eval_data=[], llm=server.url,
                                       llm_model="served", llm_options={"max_retries": 0}, generate_max_docs=8,
                                       candidates=["uniform"]))
    finally:
        server.close()
    root = Path(cfg.run.output_dir)
    assert result.index and result.weights                       # the index section and the weights table shown
    permissive = MarkdownIt("commonmark", {"html": True}).enable("table")
    for page in (root / "summary.md", root / "model" / "README.md"):
        text = page.read_text(encoding="utf-8")
        assert "onerror" in text                                  # the names are there, as text
        rendered = permissive.render(text)
        for tag in ("<img", "<script", "<b>"):
            assert tag not in rendered, (page.name, tag)
    report = (root / "report.html").read_text(encoding="utf-8")
    assert "<img src=x" not in report and "<script>alert" not in report and "&lt;img src=x" in report
    synthetic = json.loads((root / "summary.json").read_text())["synthetic"]
    assert all(s["generated"].get("generate") for s in synthetic.values())     # the LLM's queries were written


def test_the_search_command_shown_is_a_code_span_whatever_the_query(tmp_path):
    """The report's example query is the first synthetic test query, which an LLM may have written: a backtick
    or HTML in it stays inside the code span."""
    import json

    from markdown_it import MarkdownIt

    from drmix.recipes.adapt.report import _index_section

    (tmp_path / "synthetic" / "pets").mkdir(parents=True)
    query = "`<script>alert(1)</script>` <b>bold</b>"
    (tmp_path / "synthetic" / "pets" / "queries.jsonl").write_text(json.dumps({"_id": "s1", "text": query}) + "\n")
    record = {"backend": "memory", "kind": "flat", "model": "m", "corpora": {"pets": {"location": "/x/pets"}}}
    text = "\n".join(_index_section(record, tmp_path))
    rendered = MarkdownIt("commonmark", {"html": True}).render(text)
    assert "<script" not in rendered and "<b>" not in rendered and "&lt;script&gt;" in rendered
