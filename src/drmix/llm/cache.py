"""A prompt-hash cache of LLM calls in a JSONL file, so an interrupted run resumes without paying twice.

Each successful completion is appended as one line ``{"key", "model", "text"}`` the moment it arrives (the
backends report each answer through ``on_result``, not per chunk of requests), written in one ``write`` and
flushed at once, so a killed process (``kill -9``) loses only the requests in flight; the file is fsynced at
most once a second and on close (a power cut loses at most the last second; an fsync per answer would be the
bottleneck of a fast endpoint). The key is
:meth:`ChatRequest.key` (the digest of model id, messages and sampling parameters), so a changed prompt template,
model or temperature is a cache miss; identical requests in one call are asked once. Failed requests are not
cached (they are retried on the next run). An answer's lone surrogates (``"\ud800"`` in the endpoint's JSON: no
Unicode text, and no UTF-8 file can hold it) are replaced by U+FFFD before it is stored or used
(:func:`drmix.llm.base.clean_answer`; an answer with nothing else is an ``unparsable`` failure), counted and
logged once when the cache closes.

A kill during a write can leave a torn last line (no newline). Loading ignores it (it is never an answer),
and the first append of the next run cuts it off (a complete record that only lacks its newline is kept and
the newline added), so the new line is readable and no bad line accumulates. Hand-written: no library offers
an append-only resumable call cache.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from drmix.io.text import clean_text
from drmix.llm.base import ChatRequest, Completion, LLMBackend, OnResult, clean_answer

log = logging.getLogger(__name__)


def _record(line: bytes) -> tuple[str, str] | None:
    """``(key, text)`` of one cache line, or None when it is not a complete record."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("key"), str) or not isinstance(obj.get("text"), str):
        return None
    return obj["key"], clean_text(obj["text"])


class CachedBackend(LLMBackend):
    """Wrap a backend with a JSONL cache at ``path``; ``hits``/``misses`` count this run's lookups."""

    def __init__(self, backend: LLMBackend, path: str | Path) -> None:
        self.backend = backend
        self.model_id = backend.model_id
        self.path = Path(path)
        self.hits = 0
        self.misses = 0
        self.surrogates = 0  # lone surrogates replaced in this run's answers
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._synced = 0.0  # time.monotonic() of the last fsync
        self._entries: dict[str, str] = self._load()

    def _load(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if not self.path.exists():
            return out
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        torn = lines.pop()  # b"" when the file ends with a newline
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            rec = _record(line)
            if rec is None:
                log.warning("%s:%d: unreadable cache line ignored", self.path, lineno)
            else:
                out[rec[0]] = rec[1]
        if torn.strip():
            rec = _record(torn)
            if rec is None:
                log.warning("%s:%d: torn last line (%d bytes, an interrupted write) ignored; the next answer "
                            "replaces it", self.path, len(lines) + 1, len(torn))
            else:
                out[rec[0]] = rec[1]
        log.info("LLM cache %s: %d entries", self.path, len(out))
        return out

    def __len__(self) -> int:
        return len(self._entries)

    def _open(self) -> BinaryIO:
        """The cache opened for appending, a torn last line cut off first (see the module docstring)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "ab")
        size = f.seek(0, os.SEEK_END)
        if size:
            with open(self.path, "rb") as r:
                r.seek(max(0, size - 65536))
                tail = r.read()
            if not tail.endswith(b"\n"):
                nl = tail.rfind(b"\n")
                if nl < 0 and size > len(tail):  # a torn line longer than the window: find its start
                    data = self.path.read_bytes()
                    cut = data.rfind(b"\n") + 1
                    torn = data[cut:]
                else:
                    cut = size - len(tail) + nl + 1
                    torn = tail[nl + 1:]
                if _record(torn) is not None:
                    f.write(b"\n")
                else:
                    os.ftruncate(f.fileno(), cut)
                    log.warning("%s: cut a torn last line of %d bytes", self.path, len(torn))
                f.flush()
        return f

    def _store(self, key: str, text: str) -> None:
        line = json.dumps({"key": key, "model": self.model_id, "text": text}, ensure_ascii=False) + "\n"
        with self._lock:
            self._entries[key] = text
            if self._file is None:
                self._file = self._open()
            self._file.write(line.encode("utf-8"))
            self._file.flush()
            now = time.monotonic()
            if now - self._synced >= 1.0:
                os.fsync(self._file.fileno())
                self._synced = now

    def complete(self, request: ChatRequest) -> Completion:
        return self.complete_many([request])[0]

    def complete_many(self, requests: Sequence[ChatRequest], on_result: OnResult | None = None) -> list[Completion]:
        keys = [r.key(self.model_id) for r in requests]
        out: list[Completion | None] = [None] * len(requests)
        asked: dict[str, list[int]] = {}  # key -> the positions waiting for it (identical requests asked once)
        for i, key in enumerate(keys):
            if key in self._entries:
                out[i] = Completion(self._entries[key], cached=True)
                self.hits += 1
                if on_result is not None:
                    on_result(i, out[i])
            else:
                asked.setdefault(key, []).append(i)
        self.misses += sum(len(v) for v in asked.values())
        if asked:
            order = list(asked)

            def arrived(j: int, comp: Completion) -> None:
                key = order[j]
                comp, n = clean_answer(comp)
                self.surrogates += n
                if comp.ok:
                    self._store(key, comp.text)
                for i in asked[key]:
                    out[i] = comp
                    if on_result is not None:
                        on_result(i, comp)

            fresh = self.backend.complete_many([requests[asked[k][0]] for k in order], on_result=arrived)
            for j, comp in enumerate(fresh):  # a backend that did not report some answer as it arrived
                if out[asked[order[j]][0]] is None:
                    arrived(j, comp)
        return out  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def close(self) -> None:
        if self.surrogates:
            log.warning("%s: %d lone surrogate(s) in the LLM's answers replaced by U+FFFD", self.path,
                        self.surrogates)
            self.surrogates = 0
        with self._lock:
            if self._file is not None:
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
        self.backend.close()
