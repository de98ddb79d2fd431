"""``drmix augment generate|rerank`` end to end: ``--max-docs`` and ``--template`` (they used to crash in typer
before any work), and the failure counts by cause in ``stats.json`` on every exit path."""
from __future__ import annotations

import json
import socket

import pytest
from fake_llm import FakeBackend
from loopback_llm import LoopbackServer, chat

from cli_helpers import run
from drmix.data.beir import write_beir

TOPICS = ["cats", "dogs", "ships", "trains", "rivers", "mountains"]
CORPUS = {f"d{i}": {"title": "", "text": f"This note is about {t}."} for i, t in enumerate(TOPICS)}


@pytest.fixture()
def corpus(tmp_path):
    return write_beir(tmp_path / "toy", CORPUS, {"q0": "cats"}, {"test": {"q0": {"d0": 1}}})


@pytest.fixture()
def fake(monkeypatch):
    """Every backend the CLI builds is a FakeBackend (still behind the real JSONL cache); returns the calls."""
    from drmix.llm import factory
    from drmix.llm.cache import CachedBackend

    calls = []

    def answer(prompt):
        if "Rank these" in prompt:
            return "[3] > [1]"
        return "Query: about " + next(t for t in TOPICS if t in prompt)

    def build(config, *, cache_path=None):
        backend = FakeBackend(answer)
        backend.calls = calls
        return CachedBackend(backend, cache_path)

    monkeypatch.setattr(factory, "build_backend", build)
    return calls


def test_generate_with_max_docs_and_a_template(corpus, tmp_path, capsys, fake):
    template = tmp_path / "qgen.json"
    template.write_text(json.dumps({"system": "MY SYSTEM", "user": "Text: {text}",
                                    "assistant": "Task: {task}\nQuery: {query}\nLanguage: {language}",
                                    "examples": []}))
    out = tmp_path / "gen.jsonl"
    code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(out), "--max-docs", "4",
                        "--template", str(template)], capsys)
    assert code == 0, err
    assert len(fake) == 4 and all(c.messages[0] == ("system", "MY SYSTEM") for c in fake)
    assert all(len(c.messages) == 2 and c.messages[1][1].startswith("Text: This note") for c in fake)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["query"] == "about " + r["positive"].split()[-1].rstrip(".") for r in rows)
    stats = json.loads((tmp_path / "gen.jsonl.stats.json").read_text())
    assert stats["documents"] == 4 and stats["kept"] == 4 and stats["failures"] == {} and stats["finished"]


def test_rerank_with_a_template(corpus, tmp_path, capsys, fake):
    mined = tmp_path / "mined.jsonl"
    mined.write_text("".join(json.dumps({"query": f"about {t}", "positives": ["x"], "negatives": [],
                                         "teacher": {"candidates": [["d0", 0.9], ["d1", 0.8], ["d2", 0.7]]}}) + "\n"
                             for t in TOPICS[:2]))
    template = tmp_path / "rr.json"
    template.write_text(json.dumps({"system": "JUDGE", "user": "Rank these {n}:\n{passages}\nfor {query}",
                                    "passage": "<{id}> {text}"}))
    out = tmp_path / "rr.jsonl"
    code, _, err = run(["augment", "rerank", "--input", str(mined), "--corpus", str(corpus), "--output", str(out),
                        "--k", "3", "--negatives", "2:3", "--template", str(template)], capsys)
    assert code == 0, err
    assert len(fake) == 2 and fake[0].messages[0] == ("system", "JUDGE")
    assert "<1> This note is about cats." in fake[0].messages[1][1]
    line = json.loads(out.read_text().splitlines()[0])
    assert line["llm_rerank"]["order"] == ["d2", "d0", "d1"] and line["positives"] == [CORPUS["d2"]["text"]]


def test_every_request_failing_writes_counts_by_cause(corpus, tmp_path, capsys):
    replies = [(500, {}), (429, {}), (200, "not json"), (200, chat("")), (400, {}), (502, {})]
    server = LoopbackServer(lambda body, n: replies[(n - 1) % len(replies)])
    out = tmp_path / "gen.jsonl"
    try:
        code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(out), "--backend",
                            "openai", "--base-url", server.url, "--llm-model", "m", "--max-retries", "0",
                            "--concurrency", "1"], capsys)
    finally:
        server.close()
    stats_file = tmp_path / "gen.jsonl.stats.json"
    assert code == 2 and "Traceback" not in err and not out.exists()
    assert "6 of 6 answered requests failed" in " ".join(err.split()) and "stats.json" in err
    stats = json.loads(stats_file.read_text())
    assert stats["failures"] == {"http_5xx": 2, "http_429": 1, "unparsable": 1, "empty": 1, "http_4xx": 1}
    assert stats["answered"] == 6 and stats["kept"] == 0


def test_an_unreachable_endpoint_still_writes_stats(corpus, tmp_path, capsys):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(tmp_path / "g.jsonl"),
                        "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--llm-model", "m",
                        "--max-retries", "0"], capsys)
    assert code == 2 and "unreachable" in err and "g.jsonl.stats.json" in " ".join(err.split())
    stats = json.loads((tmp_path / "g.jsonl.stats.json").read_text())
    assert stats["finished"] is False and "unreachable" in stats["error"]


def test_a_trickling_endpoint_is_counted_as_timeouts(corpus, tmp_path, capsys):
    server = LoopbackServer(lambda body, n: (200, chat("Query: anything at all")), trickle=0.5)
    out = tmp_path / "gen.jsonl"
    try:
        code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(out), "--max-docs", "3",
                            "--backend", "openai", "--base-url", server.url, "--llm-model", "m", "--timeout", "1",
                            "--max-retries", "0", "--concurrency", "3"], capsys)
    finally:
        server.close()
    err = " ".join(err.split())
    assert code == 2 and "unreachable" not in err and "3 of 3 answered requests failed (timeout 3)" in err
    assert json.loads((tmp_path / "gen.jsonl.stats.json").read_text())["failures"] == {"timeout": 3}


@pytest.mark.parametrize("command", ["generate", "rerank"])
def test_a_stopped_run_continues_when_the_same_command_runs_again(command, corpus, tmp_path, capsys, fake,
                                                                    monkeypatch):
    """Ctrl-C / SIGTERM after two answers: the message says to run the same command again, and that command
    (no --overwrite) continues from the cache instead of refusing its own unfinished stats.json."""
    from drmix.llm import factory
    from drmix.llm.cache import CachedBackend

    build = factory.build_backend
    stop = {"after": 2}

    def stopping(config, *, cache_path=None):
        backend = build(config, cache_path=cache_path)
        inner = backend.backend if hasattr(backend, "backend") else None
        assert isinstance(backend, CachedBackend) and inner is not None
        answer = inner.answer

        def maybe_stop(prompt):
            if stop["after"] is not None and len(fake) > stop["after"]:
                raise KeyboardInterrupt
            return answer(prompt)

        inner.answer = maybe_stop
        return backend

    monkeypatch.setattr(factory, "build_backend", stopping)
    out = tmp_path / "out.jsonl"
    if command == "generate":
        argv = ["augment", "generate", "--corpus", str(corpus), "--output", str(out), "--concurrency", "1",
                "--llm-batch-size", "1"]
    else:
        mined = tmp_path / "mined.jsonl"
        mined.write_text("".join(json.dumps({"query": f"about {t}", "positives": ["x"], "negatives": [],
                                             "teacher": {"candidates": [["d0", 0.9], ["d1", 0.8], ["d2", 0.7]]}})
                                 + "\n" for t in TOPICS))
        template = tmp_path / "rr.json"
        template.write_text(json.dumps({"system": "JUDGE", "user": "Rank these {n}:\n{passages}\nfor {query}",
                                        "passage": "<{id}> {text}"}))
        argv = ["augment", "rerank", "--input", str(mined), "--corpus", str(corpus), "--output", str(out), "--k", "3",
                "--negatives", "2:3", "--template", str(template), "--concurrency", "1", "--llm-batch-size", "1"]
    code, _, err = run(argv, capsys)
    assert code == 130 and "run the same command again" in " ".join(err.split()), err
    assert not out.exists() and json.loads((tmp_path / "out.jsonl.stats.json").read_text())["finished"] is False
    asked = len(fake)
    stop["after"] = None
    code, _, err = run(argv, capsys)
    assert code == 0, err
    assert len(out.read_text().splitlines()) == 6
    assert json.loads((tmp_path / "out.jsonl.stats.json").read_text())["finished"] is True
    assert len(fake) - asked == 6 - 2  # the two cached answers are not asked again
    code, _, err = run(argv, capsys)  # a finished run's output is the user's: refused without --overwrite
    assert code == 2 and "--overwrite" in err
