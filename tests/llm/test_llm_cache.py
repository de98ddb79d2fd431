"""The prompt-hash JSONL cache: hits skip the backend, misses are stored, failures are not cached."""
from __future__ import annotations

import json

from fake_llm import FakeBackend

from drmix.llm.base import ChatRequest, GenerationParams
from drmix.llm.cache import CachedBackend


def _req(text: str, temperature: float = 0.8) -> ChatRequest:
    return ChatRequest.of([{"role": "user", "content": text}], GenerationParams(temperature=temperature))


def test_cache_hits_skip_the_backend_and_survive_a_restart(tmp_path):
    fake = FakeBackend(lambda m: m.upper())
    path = tmp_path / "cache.jsonl"
    cached = CachedBackend(fake, path)
    out = cached.complete_many([_req("a"), _req("b")])
    assert [c.text for c in out] == ["A", "B"] and len(fake.calls) == 2
    assert [c.cached for c in out] == [False, False]
    # a new process (new wrapper, same file): no backend call for known prompts, one for the new one
    fake2 = FakeBackend(lambda m: m.upper())
    again = CachedBackend(fake2, path)
    out2 = again.complete_many([_req("b"), _req("c"), _req("a")])
    assert [c.text for c in out2] == ["B", "C", "A"]
    assert [c.cached for c in out2] == [True, False, True]
    assert [r.messages[-1][1] for r in fake2.calls] == ["c"]
    assert (again.hits, again.misses) == (2, 1)
    assert len(path.read_text().splitlines()) == 3


def test_key_depends_on_parameters_and_model():
    assert _req("a").key("m") != _req("a", temperature=0.0).key("m")
    assert _req("a").key("m") != _req("a").key("other")
    assert _req("a").key("m") == _req("a").key("m")


def test_failures_are_not_cached_and_a_torn_line_is_ignored(tmp_path):
    path = tmp_path / "cache.jsonl"
    fake = FakeBackend(lambda m: None if m == "bad" else "ok")
    cached = CachedBackend(fake, path)
    out = cached.complete_many([_req("bad"), _req("good")])
    assert [c.ok for c in out] == [False, True]
    with open(path, "a") as f:
        f.write('{"key": "trunc')            # a run killed while writing
    again = CachedBackend(FakeBackend(lambda m: "retried"), path)
    assert len(again) == 1
    assert again.complete(_req("bad")).text == "retried"
    assert json.loads(path.read_text().splitlines()[0])["text"] == "ok"
