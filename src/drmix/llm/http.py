"""An OpenAI-compatible chat-completions backend (vLLM, llama.cpp server, Ollama, hosted APIs) over httpx.

``POST {base_url}/chat/completions`` with ``model``, ``messages``, ``temperature``, ``top_p``, ``max_tokens``
and ``seed`` (``/completions`` with a raw ``prompt`` for base models). The API key is read from the
environment variable named by ``api_key_env`` (never from a file or a flag, so it stays out of configs and
logs). Requests run on a thread pool of ``concurrency`` workers sharing one connection pool.

Failure policy:
* connection refused / DNS failure after the retries, HTTP 401/403/404 -> :class:`LLMError` (every request
  would fail the same way: stop with a fix);
* timeouts, HTTP 429 and 5xx are retried ``max_retries`` times with exponential backoff
  (``backoff * 2**attempt`` seconds, capped at 30 s); still failing -> a counted failed :class:`Completion`;
* any other 4xx, or a body that is not a completion -> a counted failed :class:`Completion`.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from drmix.llm.base import ChatRequest, Completion, LLMBackend, LLMError

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_FATAL_STATUS = {401, 403, 404}


class OpenAIBackend(LLMBackend):
    def __init__(self, base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 3, backoff: float = 1.0, concurrency: int = 4) -> None:
        import httpx

        if not base_url.startswith(("http://", "https://")):
            raise LLMError(f"endpoint URL {base_url!r} is not an http(s) URL.",
                           fix="pass --base-url http://HOST:PORT/v1 (the server's OpenAI-compatible root).")
        self.base_url = base_url.rstrip("/")
        self.model_id = model
        self.api_key_env = api_key_env
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.concurrency = max(1, int(concurrency))
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(timeout=httpx.Timeout(timeout), headers=headers,
                                    limits=httpx.Limits(max_connections=self.concurrency))

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

    def complete(self, request: ChatRequest) -> Completion:
        import httpx

        path, body = self._payload(request)
        url = self.base_url + path
        t0 = time.perf_counter()
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(30.0, self.backoff * 2 ** (attempt - 1)))
            try:
                resp = self._client.post(url, json=body)
            except httpx.TimeoutException:
                last = "timeout"
                continue
            except httpx.TransportError as e:  # connection refused, DNS, reset
                last = f"{type(e).__name__}: {e}"
                continue
            if resp.status_code in _FATAL_STATUS:
                hint = {401: f"set the API key in the environment variable {self.api_key_env}",
                        403: f"check the API key in {self.api_key_env} and its permissions",
                        404: "check --base-url (it usually ends in /v1) and --llm-model"}[resp.status_code]
                raise LLMError(f"endpoint {url} answered HTTP {resp.status_code}: {resp.text[:200]!r}.", fix=hint + ".")
            if resp.status_code in _RETRY_STATUS:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code >= 400:
                return Completion("", error=f"HTTP {resp.status_code}: {resp.text[:200]}",
                                  seconds=time.perf_counter() - t0)
            try:
                text = self._text(resp.json(), request.completion)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                return Completion("", error=f"malformed response ({type(e).__name__}): {resp.text[:200]}",
                                  seconds=time.perf_counter() - t0)
            return Completion(text, seconds=time.perf_counter() - t0)
        if last != "timeout" and not last.startswith("HTTP"):
            raise LLMError(f"endpoint {url} is unreachable ({last}) after {self.max_retries + 1} tries.",
                           fix="start the server or correct --base-url.")
        return Completion("", error=f"{last} after {self.max_retries + 1} tries", seconds=time.perf_counter() - t0)

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        if self.concurrency == 1 or len(requests) <= 1:
            return [self.complete(r) for r in requests]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self.complete, requests))

    def close(self) -> None:
        self._client.close()
