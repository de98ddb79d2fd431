"""An OpenAI-compatible chat-completions backend (vLLM, llama.cpp server, Ollama, hosted APIs) over httpx.

``POST {base_url}/chat/completions`` with ``model``, ``messages``, ``temperature``, ``top_p``, ``max_tokens``
and ``seed`` (``/completions`` with a raw ``prompt`` for base models). The API key is read from the
environment variable named by ``api_key_env`` (never from a file or a flag, so it stays out of configs and
logs). Requests run concurrently on an ``httpx.AsyncClient``, at most ``concurrency`` in flight; each answer
is handed to ``on_result`` as it arrives (the cache persists it at once).

``timeout`` bounds each attempt's *total* time -- connecting, sending, and receiving the whole body -- with
``asyncio.timeout`` around the request, as httpx's maintainers advise for a total limit (httpx's own timeouts
are per network operation, so a server trickling a byte every half second would never trip them;
encode/httpx#1450). Such an attempt counts as a ``timeout``.

Failure policy (each failed request carries a cause from :data:`drmix.llm.base.FAILURE_CAUSES`):
* connection refused / DNS failure after the retries while no request has ever reached the endpoint, or for
  ``stop_after`` requests in a row after it had answered (it went away), HTTP 401/403/404 -> :class:`LLMError`
  (every request would fail the same way: stop with a fix);
* timeouts, connection errors, HTTP 408/409/425/429 and 5xx are retried ``max_retries`` times, waiting the
  server's ``Retry-After`` (seconds or an HTTP date, RFC 9110 Sec. 10.2.3; at most ``max_retry_after``) when
  it sends one, else ``backoff * 2**attempt`` seconds (at most 30 s); still failing -> a counted failed
  :class:`Completion`;
* any other 4xx, a body that is not a completion (``unparsable``) or an empty completion (``empty``) -> a
  counted failed :class:`Completion`.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from drmix.llm.base import ChatRequest, Completion, LLMBackend, LLMError, OnResult, clean_answer

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_FATAL_STATUS = {401, 403, 404}
T = TypeVar("T")


def status_cause(status: int) -> str:
    """The failure cause counted for an HTTP status: ``http_429``, ``http_5xx`` or ``http_4xx``."""
    return "http_429" if status == 429 else "http_5xx" if status >= 500 else "http_4xx"


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date), None when absent or
    unreadable; a date in the past is 0."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        from datetime import timezone

        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from synchronous code (in a helper thread when a loop already runs here)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class OpenAIBackend(LLMBackend):
    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 3, backoff: float = 1.0, concurrency: int = 4,
                 max_retry_after: float = 120.0, stop_after: int | None = None) -> None:
        import httpx  # noqa: F401  (fail here, not at the first request, when it is missing)

        if not base_url.startswith(("http://", "https://")):
            raise LLMError(f"endpoint URL {base_url!r} is not an http(s) URL.",
                           fix="pass --base-url http://HOST:PORT/v1 (the server's OpenAI-compatible root).")
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.concurrency = max(1, int(concurrency))
        self.max_retry_after = float(max_retry_after)
        self._headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env, "")
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._reached = False  # has any request reached the endpoint (an HTTP answer of any status)?
        self._unreachable_run = 0  # requests in a row that ended in a connection failure
        self.stop_after = stop_after if stop_after is not None else max(8, 2 * self.concurrency)

    def describe(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self.model_id, "base_url": self.base_url}

    def _payload(self, request: ChatRequest) -> tuple[str, dict[str, Any]]:
        p = request.params
        body: dict[str, Any] = {"model": self.model_id, "temperature": p.temperature, "top_p": p.top_p,
                                "max_tokens": p.max_new_tokens, "seed": p.seed}
        if request.completion:
            body["prompt"] = request.completion_prompt()
            return "/completions", body
        body["messages"] = request.message_dicts()
        return "/chat/completions", body

    @staticmethod
    def _text(data: Any, completion: bool) -> str:
        choice = data["choices"][0]
        text = choice["text"] if completion else choice["message"]["content"]
        if not isinstance(text, str):
            raise TypeError("completion text is not a string")
        return text

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        """Seconds before retry ``attempt`` (1-based): the server's Retry-After, else exponential backoff."""
        asked = retry_after_seconds(retry_after)
        if asked is None:
            return min(30.0, self.backoff * 2 ** (attempt - 1))
        if asked > self.max_retry_after:
            log.warning("endpoint asked to retry after %.0f s; waiting %.0f s", asked, self.max_retry_after)
        return min(asked, self.max_retry_after)

    async def _complete_one(self, client: Any, request: ChatRequest) -> Completion:
        import httpx

        path, body = self._payload(request)
        url = self.base_url + path
        t0 = time.perf_counter()
        tries = self.max_retries + 1
        cause, detail, retry_after = "other", "", None
        for attempt in range(tries):
            if attempt:
                await self._sleep(self._wait(attempt, retry_after))
            retry_after = None
            try:
                async with asyncio.timeout(self.timeout):
                    resp = await client.post(url, json=body)
            except (TimeoutError, httpx.TimeoutException):
                cause, detail = "timeout", f"no complete answer within --timeout {self.timeout:g} s"
                continue
            except httpx.TransportError as e:  # connection refused, DNS, reset, a broken answer
                cause, detail = "connection", f"{type(e).__name__}: {e}"
                continue
            self._reached = True
            self._unreachable_run = 0
            status = resp.status_code
            if status in _FATAL_STATUS:
                hint = {401: f"set the API key in the environment variable {self.api_key_env}",
                        403: f"check the API key in {self.api_key_env} and its permissions",
                        404: "check --base-url (it usually ends in /v1) and --llm-model"}[status]
                raise LLMError(f"endpoint {url} answered HTTP {status}: {resp.text[:200]!r}.", fix=hint + ".")
            if status in _RETRY_STATUS:
                cause, detail, retry_after = status_cause(status), f"HTTP {status}", resp.headers.get("Retry-After")
                continue
            secs = time.perf_counter() - t0
            if status >= 400:
                return Completion("", error=f"HTTP {status}: {resp.text[:200]}", seconds=secs,
                                  cause=status_cause(status))
            try:
                text = self._text(resp.json(), request.completion)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                return Completion("", error=f"malformed response ({type(e).__name__}): {resp.text[:200]}",
                                  seconds=secs, cause="unparsable")
            if not text.strip():
                return Completion("", error="empty completion", seconds=secs, cause="empty")
            return clean_answer(Completion(text, seconds=secs))[0]
        if cause == "connection":
            self._unreachable_run += 1
            if not self._reached:
                raise LLMError(f"endpoint {url} is unreachable ({detail}) after {tries} tries.",
                               fix="start the server or correct --base-url.")
            if self._unreachable_run >= self.stop_after:
                raise LLMError(f"endpoint {url} stopped answering: {self._unreachable_run} requests in a row could "
                               f"not connect ({detail}).", fix="restart the server and rerun: answers received so "
                                                               "far are cached.")
        return Completion("", error=f"{detail} after {tries} tries", seconds=time.perf_counter() - t0, cause=cause)

    async def _complete_all(self, requests: Sequence[ChatRequest], on_result: OnResult | None) -> list[Completion]:
        import httpx

        out: list[Completion | None] = [None] * len(requests)
        gate = asyncio.Semaphore(self.concurrency)
        # httpx's own limits are per network operation; the total one is asyncio.timeout in _complete_one
        async with httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), headers=self._headers,
                                     limits=httpx.Limits(max_connections=self.concurrency)) as client:
            async def one(i: int) -> tuple[int, Completion]:
                async with gate:
                    return i, await self._complete_one(client, requests[i])

            tasks = [asyncio.ensure_future(one(i)) for i in range(len(requests))]
            try:
                for fut in asyncio.as_completed(tasks):
                    i, comp = await fut
                    out[i] = comp
                    if on_result is not None:
                        on_result(i, comp)
            finally:  # an LLMError (or an interrupt): stop the requests still in flight
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return out  # type: ignore[return-value]

    def complete(self, request: ChatRequest) -> Completion:
        return self.complete_many([request])[0]

    def complete_many(self, requests: Sequence[ChatRequest], on_result: OnResult | None = None) -> list[Completion]:
        if not requests:
            return []
        return _run(self._complete_all(requests, on_result))

    def close(self) -> None:
        """Nothing to release: each :meth:`complete_many` opens and closes its own connection pool."""
