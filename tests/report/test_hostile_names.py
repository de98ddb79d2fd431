"""Hostile names (script tags, event handlers, javascript: links, Markdown link injection, pipes, newlines) in
every table drmix writes, in model cards and in report.html: they stay text, and tables keep their columns."""
from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pytest

from drmix.markdown import md_cell, md_code, md_entities, render_html

HOSTILE = [
    "<script>alert(1)</script>",
    "n/xss/<img src=x onerror=alert(3)>",
    "[click](javascript:alert(4))",
    "x](javascript:alert(5))",
    "<javascript:alert(6)>",
    "a | b | c",
    "line\nbreak",
    "`tick` *star* _under_ & amp",
]


class _Live(HTMLParser):
    """Every element and attribute of a page: what a browser would make live."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def _live(page: str) -> _Live:
    p = _Live()
    p.feed(page)
    return p


def assert_inert(page: str) -> None:
    """No script, image, event handler or script URL came alive from the names."""
    live = _live(page)
    assert "script" not in live.tags and "img" not in live.tags and "iframe" not in live.tags, live.tags
    assert not [k for k, _ in live.attrs if k.startswith("on")], live.attrs
    for k, v in live.attrs:
        if k in ("href", "src"):
            assert not re.match(r"\s*(javascript|vbscript|data):", html.unescape(v), re.IGNORECASE), (k, v)


def _text(page: str) -> str:
    return " ".join(" ".join(_live(page).text).split())


def _table_widths(markdown: str) -> list[list[int]]:
    """Cells per row of every table in ``markdown`` (as markdown-it parses it)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables, row, cells = [], None, 0
    for t in tokens:
        if t.type == "table_open":
            tables.append([])
        elif t.type == "tr_open":
            cells = 0
        elif t.type in ("th_open", "td_open"):
            cells += 1
        elif t.type == "tr_close":
            tables[-1].append(cells)
    return tables


def check_markdown(markdown: str, names=HOSTILE) -> None:
    for widths in _table_widths(markdown):
        assert len(set(widths)) == 1, widths  # a pipe or newline in a name never adds a column or a row
    page = render_html(markdown)
    assert_inert(page)
    text = _text(page)
    for name in names:
        assert " ".join(name.split()) in text, name  # shown as the text it is


def test_md_cell_and_md_code_keep_every_name_literal():
    for name in HOSTILE:
        check_markdown(f"| name | code |\n|---|---|\n| {md_cell(name)} | x |\n\n{md_code(name)}\n",
                       names=[name])
        page = render_html(f"<details><summary>{md_entities(name)}</summary>\n\n{md_entities(name)}\n\n</details>")
        assert_inert(page)


def test_raw_html_and_script_links_in_a_markdown_file_stay_text():
    page = render_html("<script>alert(1)</script>\n\n[a](javascript:alert(2)) <img src=x onerror=alert(3)>\n\n"
                       "| x |\n|---|\n| <b onclick=alert(4)>b</b> |\n\n![i](javascript:alert(5))\n")
    assert_inert(page)
    assert "<script>alert(1)</script>" in _text(page)


def test_every_table_writer_escapes_its_cells():
    from drmix.analysis.shift import QUERY_TYPES, ShiftReport
    from drmix.data.builders.localdocs.build import stats_table
    from drmix.evaluation.compare import Comparison, Delta
    from drmix.evaluation.evaluate import EvalReport
    from drmix.evaluation.multi import SweepResult, format_table
    from drmix.evaluation.suite import results_table
    from drmix.recipes.coco import comparison_table
    from drmix.recipes.demo import results_markdown
    from drmix.recipes.tdro import weights_table

    a, b = HOSTILE[0], HOSTILE[1]
    check_markdown(results_table({n: {m: {"ndcg@10": 0.5} for m in HOSTILE} for n in HOSTILE}))
    check_markdown(results_table({a: {n: {"ndcg@10": 0.5, "recall@10": 0.6} for n in HOSTILE},
                                  b: {n: {"ndcg@10": 0.4, "recall@10": 0.7} for n in HOSTILE}},
                                 ["ndcg@10", "recall@10"], share=(a, b)))
    check_markdown(EvalReport(model=a, split=b, results={n: {"ndcg@10": 0.5} for n in HOSTILE}).to_markdown())
    d = [Delta(n, 0.5, 0.6, 0.1, 0.0, 0.2, 0.01, 0.02, 10) for n in HOSTILE]
    check_markdown(Comparison(metric="ndcg@10", baseline=a, rows={n: d for n in HOSTILE}).to_markdown())
    sweep = [SweepResult(n, 10, rows={m: {"pc_recall@10": 0.5, "pc_mrr@10": 0.4} for m in HOSTILE},
                         chosen={"fixed": b}) for n in HOSTILE]
    check_markdown(format_table(sweep))
    check_markdown(weights_table({"collections": HOSTILE, "weights": [1 / len(HOSTILE)] * len(HOSTILE)},
                                 kept={n: HOSTILE[:2] for n in HOSTILE}))
    scores = {m: {n: {"q1": 0.5, "q2": 0.25} for n in HOSTILE} for m in (a, b)}
    check_markdown(comparison_table(scores, a, b))
    fams = {n: {"base": 0.1, "uniform": 0.2, "learned": 0.3} for n in HOSTILE}
    check_markdown(results_markdown(fams, {"uniform": {n: 0.5 for n in HOSTILE},
                                           "learned": {n: 0.1 * (i + 1) for i, n in enumerate(HOSTILE)}},
                                    {n: 3 for n in HOSTILE}, steps=2, model=a, losses={n: 1.0 for n in HOSTILE}))
    k = len(HOSTILE)
    eye = [[1.0] * k for _ in range(k)]
    check_markdown(ShiftReport(names=HOSTILE, roles=["source", "target"] * (k // 2), corpus_jaccard=eye,
                               query_jaccard=eye, intent_jaccard=eye,
                               query_types={n: {t: 0.1 for t in QUERY_TYPES} for n in HOSTILE},
                               sizes={n: {"documents": 1, "queries": 1} for n in HOSTILE}, model=a).to_markdown())
    check_markdown(stats_table([{"family": n, "modules": 1} for n in HOSTILE]))


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(tiny_model_path, device="cpu")


def test_model_card_keeps_hostile_names_as_text(tiny, tmp_path):
    from huggingface_hub import ModelCard

    from drmix.report.card import CardInfo, CollectionInfo, render_model_card, write_model_card

    base = tmp_path / "models" / HOSTILE[1].replace("/", "_")
    base.mkdir(parents=True)
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps({"strategy": "tdro"}))
    info = CardInfo(base_model=str(base), collections=[CollectionInfo(n, 3, 0.1) for n in HOSTILE],
                    weights_how="fixed before training", eval_results={n: {"ndcg@10": 0.5} for n in HOSTILE},
                    eval_split="test", summary="About " + HOSTILE[0], notes=[HOSTILE[2], HOSTILE[5]],
                    command="drmix train --data '" + HOSTILE[1] + "\n```\n<script>x</script>'", papers=["tdro"])
    card = render_model_card(tiny, info)
    body = card.split("\n---\n", 1)[1]
    for widths in _table_widths(body):
        assert len(set(widths)) == 1, widths
    page = render_html(body)
    assert_inert(page)
    text = _text(page)
    for name in HOSTILE:
        assert " ".join(name.split()) in text, name
    # local collections are not Hub dataset ids: the front matter lists none (the body names them, escaped)
    path = write_model_card(tiny, tmp_path / "model", info)
    assert "datasets" not in ModelCard.load(path).data.to_dict()


def test_report_html_of_a_hostile_folder_is_inert(tmp_path):
    from drmix.report.html import write_report

    run = tmp_path / "run"
    run.mkdir()
    losses = {n: 0.5 for n in HOSTILE}
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5, "collection_losses": losses,
                                                   "eval": {f"{HOSTILE[1]}/ndcg@10": 0.3}}) + "\n")
    (run / "weights.json").write_text(json.dumps({"collections": HOSTILE, "weights": [0.1] * len(HOSTILE),
                                                  "strategy": HOSTILE[0]}))
    (run / "config.yaml").write_text("data: ['" + HOSTILE[0] + "']\n")
    # a summary.md as an older drmix (or any tool) wrote it: names unescaped, raw HTML and a script link
    (run / "summary.md").write_text("| dataset | ndcg@10 |\n|---|---:|\n| " + HOSTILE[1] + " | 0.5 |\n| "
                                    + HOSTILE[2] + " | 0.4 |\n\n<script>alert(7)</script>\n")
    (run / "eval.md").write_text("| dataset | x |\n|---|---|\n| " + md_cell(HOSTILE[5]) + " | 1 |\n")
    (run / "javascript:alert(8)").write_text("a file with a scheme-like name")
    (run / "<img src=x onerror=alert(9)>").write_text("a file named like a tag")
    stage = run / HOSTILE[0].replace("/", "_")
    stage.mkdir()
    (stage / "metrics.jsonl").write_text('{"step": 1, "loss": 0.4}\n')
    page = write_report(run).read_text(encoding="utf-8")
    assert_inert(page)
    live = _live(page)
    hrefs = [v for k, v in live.attrs if k == "href"]
    assert "javascript%3Aalert%288%29" in hrefs  # a link to the file, percent-encoded
    text = _text(page)
    for shown in (HOSTILE[1], HOSTILE[2], "<script>alert(7)</script>", "<img src=x onerror=alert(9)>"):
        assert shown in text, shown
