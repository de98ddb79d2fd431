"""The LLM backend interface shared by the HTTP and the local backends, and the errors they raise.

A backend turns chat requests (a list of ``{"role", "content"}`` messages plus sampling parameters) into
completions. :meth:`LLMBackend.complete_many` is what augmentation calls; backends that can overlap
requests (HTTP) override it, the others run the requests one after the other. A failed request is
reported as a :class:`Completion` with ``error`` set, so one bad request never stops a run: augmentation
counts it and drops it. Errors that make *every* request fail (an unreachable endpoint, a model that cannot
be loaded) raise :class:`LLMError` at the first request instead of being counted thousands of times.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from drmix.errors import DrmixError

Message = dict[str, str]


class LLMError(DrmixError):
    """An LLM backend that cannot serve requests (unreachable endpoint, bad model, timeouts on every try)."""


@dataclass(frozen=True)
class GenerationParams:
    """Sampling parameters; the defaults are DRAMA's query-generation settings (temperature 0.8, top_p 0.9,
    256 new tokens). ``seed`` makes local sampling reproducible and is forwarded to endpoints that accept it."""

    temperature: float = 0.8
    top_p: float = 0.9
    max_new_tokens: int = 256
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[tuple[str, str], ...]
    params: GenerationParams = field(default_factory=GenerationParams)
    completion: bool = False  # True: send the concatenated contents as a raw prompt (base models, no chat template)

    @classmethod
    def of(cls, messages: Sequence[Message], params: GenerationParams | None = None, *,
           completion: bool = False) -> "ChatRequest":
        return cls(tuple((m["role"], m["content"]) for m in messages), params or GenerationParams(), completion)

    def message_dicts(self) -> list[Message]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def completion_prompt(self) -> str:
        """The raw prompt of a ``completion`` request: the turns' contents joined by a blank line.

        Every backend sends this same text, so a local and a served model see identical prompts.
        """
        return "\n\n".join(c for _, c in self.messages)

    def key(self, model_id: str) -> str:
        """The digest of the model id, the messages and the parameters: the cache key of this request."""
        from drmix.fingerprint import config_digest

        return config_digest({"model": model_id, "messages": self.messages, "params": self.params.as_dict(),
                              "completion": self.completion})


#: Why a request failed, as counted in ``stats.json`` (``failures``): the HTTP status class (``http_4xx``,
#: ``http_5xx``; ``http_429`` apart), ``timeout`` (no complete answer within ``--timeout``), ``unparsable`` (a
#: body that is not a completion), ``empty`` (a completion with no text), ``connection`` (refused, reset),
#: ``generation`` (a local model that raised) and ``other``.
FAILURE_CAUSES = ("http_4xx", "http_429", "http_5xx", "timeout", "unparsable", "empty", "connection",
                  "generation", "other")


@dataclass
class Completion:
    text: str
    error: str | None = None
    cached: bool = False
    seconds: float = 0.0
    cause: str | None = None  # one of FAILURE_CAUSES when ``error`` is set

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def failure_cause(self) -> str | None:
        """``None`` for a success, else :attr:`cause` (``"other"`` when the backend did not say)."""
        return None if self.error is None else (self.cause or "other")


def clean_answer(comp: Completion) -> tuple[Completion, int]:
    """``comp`` with the lone surrogates of its text replaced by U+FFFD (:func:`drmix.io.text.clean_text`, the one
    rule for text entering drmix) and how many were; an answer left with no other character is a failure
    counted as ``unparsable``."""
    from drmix.io.text import counted_clean_text, REPLACEMENT

    if comp.error is not None:
        return comp, 0
    text, n = counted_clean_text(comp.text)
    if not n:
        return comp, 0
    if not text.replace(REPLACEMENT, "").strip():
        return Completion("", error=f"the answer holds only {n} lone surrogate(s), no text", cached=comp.cached,
                          seconds=comp.seconds, cause="unparsable"), n
    return Completion(text, cached=comp.cached, seconds=comp.seconds), n


def describe_failures(failures: Mapping[str, int]) -> str:
    """``"timeout 7, http_5xx 3"``: failure counts by cause, most frequent first (``"none"`` when empty)."""
    items = sorted(((c, n) for c, n in failures.items() if n), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{c} {n}" for c, n in items) or "none"


#: ``on_result(index, completion)``: called once per request as its completion arrives (any order).
OnResult = Callable[[int, Completion], None]


class LLMBackend(ABC):
    """Base class: subclasses implement :meth:`complete` (one request) and set :attr:`model_id`."""

    model_id: str = "llm"

    @abstractmethod
    def complete(self, request: ChatRequest) -> Completion:
        """One request's completion (errors are returned in :attr:`Completion.error`, not raised)."""

    def complete_many(self, requests: Sequence[ChatRequest], on_result: OnResult | None = None) -> list[Completion]:
        """Completions in request order; the default runs them one after the other.

        ``on_result(i, completion)`` is called as each completion arrives (before the others are done), so a
        cache can persist each answer at once."""
        out = []
        for i, r in enumerate(requests):
            out.append(self.complete(r))
            if on_result is not None:
                on_result(i, out[-1])
        return out

    def describe(self) -> dict[str, Any]:
        """What provenance fields record about this backend."""
        return {"backend": type(self).__name__, "model": self.model_id}

    def close(self) -> None:
        """Release connections or memory; a closed backend may not be used again."""
