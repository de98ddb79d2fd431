"""A small deterministic LLM backend for tests: answers from a function of the prompt, counts its calls."""
from __future__ import annotations

from collections.abc import Callable

from drmix.llm.base import ChatRequest, Completion, LLMBackend


class FakeBackend(LLMBackend):
    """``answer(last user message) -> str``; a ``None`` answer is reported as a failed request."""

    def __init__(self, answer: Callable[[str], str | None], model_id: str = "fake-llm") -> None:
        self.answer = answer
        self.model_id = model_id
        self.calls: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> Completion:
        self.calls.append(request)
        text = self.answer(request.messages[-1][1])
        return Completion("", error="fake failure") if text is None else Completion(text)
