"""The LLM cache keeps each answer the moment it arrives: a torn last line is ignored and cut, and a run
killed with SIGKILL after N answers resumes asking only the rest (counted at a loopback server)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from fake_llm import FakeBackend
from loopback_llm import LoopbackServer, chat, wait_until

import drmix
from drmix.data.beir import write_beir
from drmix.llm.base import ChatRequest, GenerationParams
from drmix.llm.cache import CachedBackend


def _req(text: str) -> ChatRequest:
    return ChatRequest.of([{"role": "user", "content": text}], GenerationParams())


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_each_answer_is_on_disk_before_the_next_is_asked(tmp_path):
    path = tmp_path / "cache.jsonl"
    on_disk = []

    def answer(m):  # what the file holds when each request is asked
        on_disk.append(len(path.read_text().splitlines()) if path.exists() else 0)
        return m.upper()

    cached = CachedBackend(FakeBackend(answer), path)
    seen = []
    out = cached.complete_many([_req(x) for x in "abcab"], on_result=lambda i, c: seen.append(i))
    assert [c.text for c in out] == list("ABCAB")
    assert on_disk == [0, 1, 2]                      # identical requests asked once; each answer already kept
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_a_torn_last_line_is_never_an_answer_and_the_next_append_is_readable(tmp_path, caplog):
    path = tmp_path / "cache.jsonl"
    CachedBackend(FakeBackend(str.upper), path).complete_many([_req("a"), _req("b")])
    good = path.read_bytes()
    torn_key = _req("c").key("fake-llm")
    path.write_bytes(good + json.dumps({"key": torn_key, "model": "fake-llm", "text": "C"}).encode()[:-8])
    fake = FakeBackend(lambda m: "fresh " + m)
    again = CachedBackend(fake, path)
    assert len(again) == 2 and "torn last line" in caplog.text
    assert again.complete(_req("c")).text == "fresh c"              # asked, not read from the torn line
    assert again.complete(_req("d")).text == "fresh d"
    assert path.read_bytes().startswith(good)
    assert [r["text"] for r in _lines(path)] == ["A", "B", "fresh c", "fresh d"]  # every line readable
    third = CachedBackend(FakeBackend(lambda m: None), path)
    assert len(third) == 4 and [third.complete(_req(x)).text for x in "abcd"] == ["A", "B", "fresh c", "fresh d"]


def test_a_complete_record_missing_only_its_newline_is_kept(tmp_path):
    path = tmp_path / "cache.jsonl"
    CachedBackend(FakeBackend(str.upper), path).complete(_req("a"))
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    again = CachedBackend(FakeBackend(str.upper), path)
    assert len(again) == 1
    again.complete(_req("b"))
    assert [r["text"] for r in _lines(path)] == ["A", "B"]


TOPICS = [f"topic{i}" for i in range(10)]


def _drmix(args, **kw):
    env = {**os.environ, "PYTHONPATH": str(Path(drmix.__file__).parents[1]), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "drmix", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def test_a_killed_generate_run_resumes_asking_nothing_twice(tmp_path):
    corpus = write_beir(tmp_path / "toy", {f"d{i}": {"title": "", "text": f"A note about {t}."}
                                           for i, t in enumerate(TOPICS)}, {"q": "x"}, {"test": {"q": {"d0": 1}}})
    out, cache = tmp_path / "gen.jsonl", tmp_path / "gen.jsonl.llm-cache.jsonl"
    answered_first = 6

    def topic(body):
        return next(t for t in TOPICS if t in body["messages"][-1]["content"])

    def first(body, n):
        if n > answered_first:  # hold the 7th request until the client is killed
            server1.released.wait(60)
        return 200, chat(f"Task: t\nQuery: about {topic(body)}\nLanguage: English")

    server1 = LoopbackServer(first)
    args = ["augment", "generate", "--corpus", str(corpus), "--output", str(out), "--backend", "openai",
            "--base-url", server1.url, "--llm-model", "served", "--concurrency", "1", "--max-retries", "0"]
    try:
        proc = _drmix(args)
        try:
            assert wait_until(lambda: cache.exists() and len(cache.read_text().splitlines()) >= answered_first
                              and len(server1.bodies) > answered_first, 120), proc.stderr.read1().decode()[-2000:]
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(30)
    finally:
        server1.close()
    assert proc.returncode == -signal.SIGKILL and not out.exists()
    kept = _lines(cache)
    assert len(kept) == answered_first
    first_topics = {topic(b) for b in server1.bodies[:answered_first]}

    server2 = LoopbackServer(lambda body, n: (200, chat(f"Query: about {topic(body)}")))
    try:
        args[args.index(server1.url)] = server2.url
        proc = _drmix(args)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        asked_again = [topic(b) for b in server2.bodies]
    finally:
        server2.close()
    assert len(asked_again) == len(TOPICS) - answered_first and not first_topics & set(asked_again)
    assert sorted(r["query"] for r in _lines(out)) == sorted(f"about {t}" for t in TOPICS)
    assert len(_lines(cache)) == len(TOPICS)
