"""The OpenAI-compatible backend against a loopback HTTP server started in the test (never the network)."""
from __future__ import annotations

import socket

import pytest
from loopback_llm import LoopbackServer

from drmix.llm.base import ChatRequest, GenerationParams, LLMError
from drmix.llm.http import OpenAIBackend


@pytest.fixture
def server(request):
    servers = []

    def make(reply):
        s = LoopbackServer(reply)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def _chat(text):
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def _req(text="hi"):
    return ChatRequest.of([{"role": "user", "content": text}], GenerationParams(temperature=0.0, max_new_tokens=7))


def test_request_body_key_and_order(server, monkeypatch):
    s = server(lambda body, n: (200, _chat("echo:" + body["messages"][-1]["content"])))
    monkeypatch.setenv("MY_KEY", "sekrit")
    b = OpenAIBackend(s.url, "served-model", api_key_env="MY_KEY", concurrency=3)
    out = b.complete_many([_req(str(i)) for i in range(6)])
    assert [c.text for c in out] == [f"echo:{i}" for i in range(6)]
    body = s.bodies[0]
    assert body["model"] == "served-model" and body["max_tokens"] == 7 and body["temperature"] == 0.0
    assert s.headers[0]["Authorization"] == "Bearer sekrit"
    b.close()


def test_retries_overload_then_succeeds(server):
    s = server(lambda body, n: (503, {"error": "busy"}) if n < 3 else (200, _chat("done")))
    b = OpenAIBackend(s.url, "m", max_retries=3, backoff=0.0, concurrency=1)
    assert b.complete(_req()).text == "done"
    assert len(s.bodies) == 3


def test_garbage_and_client_errors_are_counted_failures(server):
    replies = {1: (200, "not json at all"), 2: (200, {"choices": []}), 3: (400, {"error": "too long"})}
    s = server(lambda body, n: replies[n])
    b = OpenAIBackend(s.url, "m", max_retries=0, concurrency=1)
    out = [b.complete(_req()) for _ in range(3)]
    assert [c.ok for c in out] == [False, False, False]
    assert "malformed" in out[0].error and "malformed" in out[1].error and "HTTP 400" in out[2].error


def test_auth_failure_and_unreachable_endpoint_raise(server):
    s = server(lambda body, n: (401, {"error": "no key"}))
    with pytest.raises(LLMError, match="HTTP 401"):
        OpenAIBackend(s.url, "m", api_key_env="DRMIX_TEST_NO_SUCH_VAR").complete(_req())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(LLMError, match="unreachable"):
        OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.0).complete(_req())
    with pytest.raises(LLMError, match="http"):
        OpenAIBackend("localhost:8000", "m")


def test_timeout_is_a_counted_failure(server):
    import time

    def slow(body, n):
        time.sleep(0.5)
        return 200, _chat("late")

    s = server(slow)
    out = OpenAIBackend(s.url, "m", timeout=0.05, max_retries=1, backoff=0.0).complete(_req())
    assert not out.ok and "timeout" in out.error


def test_completion_joins_turns_like_the_local_backend(server):
    """``--completion`` over HTTP sends the turns joined by a blank line, the prompt the local backend builds."""
    from drmix.llm.local import TransformersBackend

    s = server(lambda body, n: (200, {"choices": [{"text": "q"}]}))
    b = OpenAIBackend(s.url, "m", concurrency=1)
    req = ChatRequest.of([{"role": "system", "content": "Language: English"},
                          {"role": "user", "content": "Passage: a b c"}], completion=True)
    assert b.complete(req).text == "q"
    assert s.bodies[0]["prompt"] == "Language: English\n\nPassage: a b c"
    local = TransformersBackend.__new__(TransformersBackend)   # prompt_text reads no model state for completion
    local.tokenizer = None
    assert TransformersBackend.prompt_text(local, req) == s.bodies[0]["prompt"]
    b.close()
