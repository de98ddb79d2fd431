"""Query generation: the prompt's structure, the parser, and bad outputs counted and dropped."""
from __future__ import annotations

import json

import pytest
from fake_llm import FakeBackend

from drmix.augment.generate import QGenTemplate, generate_queries, parse_query
from drmix.errors import DataError


def test_packaged_template_has_system_three_shots_and_the_passage_last():
    t = QGenTemplate.load()
    msgs = t.messages("Line one.\nLine   two.")
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert msgs[-1]["content"] == "Passage: Line one. Line two."          # newlines removed
    for shot in msgs[2:7:2]:
        lines = shot["content"].splitlines()
        assert [ln.split(":")[0] for ln in lines] == ["Task", "Query", "Language"]


@pytest.mark.parametrize("output, expected", [
    ("Task: find facts\nQuery: how do cells make ATP\nLanguage: English", ("how do cells make ATP", "kept")),
    ("**Query:** \"what is ATP\"", ("what is ATP", "kept")),
    ("- query: why is the sky blue", ("why is the sky blue", "kept")),
    ("Task: something\nLanguage: English", (None, "no_query_line")),
    ("Query:   \nLanguage: English", (None, "empty_query")),
    ("Query: <the search query>", (None, "placeholder")),
    ("Query: " + "word " * 60, (None, "too_long")),
    ("", (None, "no_query_line")),
])
def test_parse_query(output, expected):
    assert parse_query(output) == expected


def test_copies_of_the_passage_or_of_an_example_are_rejected():
    assert parse_query("Query: The Sky is blue.", "the sky  is blue.") == (None, "copied_passage")
    assert parse_query("Query: What is ATP", examples=["what is  atp"]) == (None, "copied_example")
    t = QGenTemplate.load()
    shot = t.examples[0]["query"]
    rows, stats = generate_queries({"1": "some text"}, FakeBackend(lambda m: f"Query: {shot}"), template=t)
    assert rows == [] and dict(stats.outcomes) == {"copied_example": 1}


def test_generation_keeps_parsed_queries_and_counts_the_rest():
    answers = {"alpha": "Task: t\nQuery: what is alpha\nLanguage: English", "beta": "I cannot help with that.",
               "gamma": None}

    def answer(user_msg):
        return answers[user_msg.removeprefix("Passage: ")]

    rows, stats = generate_queries({"1": "alpha", "2": "beta", "3": "gamma"}, FakeBackend(answer), chunk=2)
    assert [(r["doc_id"], r["query"]) for r in rows] == [("1", "what is alpha")]
    assert stats.kept == 1 and stats.documents == 3
    assert dict(stats.outcomes) == {"kept": 1, "no_query_line": 1, "llm_error": 1}


def test_custom_template_and_a_broken_one(tmp_path):
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"system": "S", "user": "Doc: {text}", "assistant": "Query: {query}",
                                "examples": [{"text": "x", "query": "y"}]}))
    msgs = QGenTemplate.load(good).messages("z")
    assert [m["content"] for m in msgs] == ["S", "Doc: x", "Query: y", "Doc: z"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"system": "S", "user": "Doc: {passage}", "assistant": "Query: {query}"}))
    with pytest.raises(DataError, match="invalid query-generation template"):
        QGenTemplate.load(bad)
