"""The HTTP backend's limits against a loopback server: ``timeout`` bounds an attempt's total time (a server
trickling its answer is cut and counted as a timeout), ``Retry-After`` is honoured, and every failure carries
its cause."""
from __future__ import annotations

from email.utils import formatdate

import pytest
from loopback_llm import LoopbackServer, chat

from drmix.llm.base import ChatRequest, GenerationParams, LLMError
from drmix.llm.http import OpenAIBackend, retry_after_seconds, status_cause


@pytest.fixture
def server():
    servers = []

    def make(reply, **kw):
        s = LoopbackServer(reply, **kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def _req(text="hi"):
    return ChatRequest.of([{"role": "user", "content": text}], GenerationParams(temperature=0.0))


class RecordingBackend(OpenAIBackend):
    """Records the waits between attempts instead of sleeping them."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.waits = []

    async def _sleep(self, seconds):
        self.waits.append(seconds)


def test_a_trickling_server_is_cut_at_the_timeout_and_counted_as_a_timeout(server):
    s = server(lambda body, n: (200, chat("a long enough answer")), trickle=0.5)  # ~60 bytes: ~30 s in full
    out = OpenAIBackend(s.url, "m", timeout=1.0, max_retries=0).complete(_req())
    assert not out.ok and out.cause == "timeout" and "timeout" in out.error
    assert len(s.bodies) == 1


def test_a_trickle_after_a_success_is_still_a_timeout_not_unreachable(server):
    s = server(lambda body, n: (200, chat("ok")), trickle=0.5)
    b = OpenAIBackend(s.url, "m", timeout=0.6, max_retries=1, backoff=0.0, concurrency=2)
    out = b.complete_many([_req("a"), _req("b")])
    assert [c.cause for c in out] == ["timeout", "timeout"] and len(s.bodies) == 4  # 2 requests x 2 tries


def test_retry_after_seconds_and_dates():
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(" 1.5 ") == 1.5
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    now = 1_700_000_000.0
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert retry_after_seconds(formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_retry_after_is_honoured_on_429_and_503_else_backoff(server):
    replies = {1: (429, {"error": "slow down"}, {"Retry-After": "3"}),
               2: (503, {"error": "busy"}, {"Retry-After": "1"}),
               3: (503, {"error": "busy"}),
               4: (200, chat("done"))}
    s = server(lambda body, n: replies[n])
    b = RecordingBackend(s.url, "m", max_retries=3, backoff=0.25, concurrency=1)
    assert b.complete(_req()).text == "done"
    assert b.waits == [3.0, 1.0, 0.25 * 2 ** 2]  # the server's two waits, then the third backoff step


def test_retry_after_is_capped(server):
    s = server(lambda body, n: (429, {}, {"Retry-After": "86400"}) if n == 1 else (200, chat("ok")))
    b = RecordingBackend(s.url, "m", max_retries=1, max_retry_after=5.0)
    assert b.complete(_req()).ok and b.waits == [5.0]


def test_every_failure_carries_its_cause(server):
    replies = {1: (500, {}), 2: (429, {}), 3: (400, {}), 4: (200, "garbage"), 5: (200, chat("  ")),
               6: (200, {"choices": []})}
    s = server(lambda body, n: replies[n])
    b = OpenAIBackend(s.url, "m", max_retries=0, concurrency=1)
    out = [b.complete(_req()) for _ in range(6)]
    assert [c.cause for c in out] == ["http_5xx", "http_429", "http_4xx", "unparsable", "empty", "unparsable"]
    assert [status_cause(x) for x in (408, 429, 502)] == ["http_4xx", "http_429", "http_5xx"]


def test_unreachable_endpoint_stops_the_run_and_answers_arrive_one_by_one(server):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(LLMError, match="unreachable"):
        OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", max_retries=0).complete_many([_req("a"), _req("b")])
    s = server(lambda body, n: (200, chat("echo:" + body["messages"][-1]["content"])))
    seen = []
    out = OpenAIBackend(s.url, "m", concurrency=2).complete_many(
        [_req(str(i)) for i in range(5)], on_result=lambda i, c: seen.append((i, c.text)))
    assert [c.text for c in out] == [f"echo:{i}" for i in range(5)]
    assert sorted(seen) == [(i, f"echo:{i}") for i in range(5)]


def test_an_endpoint_that_goes_away_stops_the_run_after_a_few_requests(server):
    import socket

    s = server(lambda body, n: (200, chat("ok")))
    b = OpenAIBackend(s.url, "m", max_retries=0, concurrency=1, stop_after=3)
    assert b.complete(_req()).ok
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    b.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"   # nothing listens there: refused
    sock.close()
    seen = []
    with pytest.raises(LLMError, match="stopped answering: 3 requests in a row"):
        b.complete_many([_req(str(i)) for i in range(10)], on_result=lambda i, c: seen.append(c.cause))
    assert seen == ["connection", "connection"]           # the first two are counted, the third stops the run


def test_works_from_inside_a_running_event_loop(server):
    import asyncio

    s = server(lambda body, n: (200, chat("ok")))

    async def notebook_cell():  # e.g. Jupyter, where a loop already runs
        return OpenAIBackend(s.url, "m").complete_many([_req("a"), _req("b")])

    assert [c.text for c in asyncio.run(notebook_cell())] == ["ok", "ok"]
