"""A prompt-hash cache of LLM calls in a JSONL file, so an interrupted run resumes without paying twice.

Each successful completion is appended as one line ``{"key", "model", "text"}`` and flushed at once; a run
killed mid-way loses at most the request in flight. The key is :meth:`ChatRequest.key` (SHA-256 of model id,
messages and sampling parameters), so a changed prompt template, model or temperature is a cache miss.
Failed requests are not cached (they are retried on the next run). A truncated last line (a kill during a
write) is ignored with a warning. Hand-written: no library offers an append-only resumable call cache.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drmix.llm.base import ChatRequest, Completion, LLMBackend

log = logging.getLogger(__name__)


class CachedBackend(LLMBackend):
    """Wrap a backend with a JSONL cache at ``path``; ``hits``/``misses`` count this run's lookups."""

    def __init__(self, backend: LLMBackend, path: str | Path) -> None:
        self.backend = backend
        self.model_id = backend.model_id
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._entries: dict[str, str] = self._load()

    def _load(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if not self.path.exists():
            return out
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    out[obj["key"]] = obj["text"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    log.warning("%s:%d: unreadable cache line ignored (an interrupted write?)", self.path, lineno)
        log.info("LLM cache %s: %d entries", self.path, len(out))
        return out

    def __len__(self) -> int:
        return len(self._entries)

    def _store(self, key: str, text: str) -> None:
        with self._lock:
            self._entries[key] = text
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "model": self.model_id, "text": text}, ensure_ascii=False) + "\n")
                f.flush()

    def complete(self, request: ChatRequest) -> Completion:
        return self.complete_many([request])[0]

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        keys = [r.key(self.model_id) for r in requests]
        out: list[Completion | None] = [None] * len(requests)
        todo: list[int] = []
        for i, key in enumerate(keys):
            if key in self._entries:
                out[i] = Completion(self._entries[key], cached=True)
                self.hits += 1
            else:
                todo.append(i)
        self.misses += len(todo)
        if todo:
            fresh = self.backend.complete_many([requests[i] for i in todo])
            for i, comp in zip(todo, fresh):
                if comp.ok:
                    self._store(keys[i], comp.text)
                out[i] = comp
        return out  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def close(self) -> None:
        self.backend.close()
