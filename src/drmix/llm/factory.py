"""Build a backend from :class:`LLMConfig` (the ``--llm-*`` options), wrapped in the JSONL cache."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from drmix.llm.base import LLMBackend
from drmix.llm.cache import CachedBackend


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: Literal["transformers", "openai"] = Field(
        "transformers", description="transformers: a local causal LM; openai: an OpenAI-compatible endpoint.")
    model: str | None = Field(None, description="Local: model folder, hub id or .gguf file (default: the packaged "
                                                "SmolLM2-135M-Instruct). Endpoint: the served model name.")
    base_url: str | None = Field(None, description="Endpoint root, e.g. http://localhost:8000/v1 (backend openai).")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the endpoint's API key.")
    timeout: float = Field(60.0, gt=0, description="Seconds each request attempt may take in total (connect, send, the "
                                                "whole answer) before it counts as a timeout.")
    max_retries: int = Field(3, ge=0, description="Retries of a timed-out or overloaded (429/5xx) request, after the "
                                                   "server's Retry-After when it sends one.")
    concurrency: int = Field(4, ge=1, description="Requests in flight at once (endpoint).")
    batch_size: int = Field(8, ge=1, description="Prompts per generate call (local).")
    device: str | None = Field(None, description="Device of the local model (default cpu).")


def build_backend(config: LLMConfig, *, cache_path: str | Path | None = None) -> LLMBackend:
    """The configured backend; with ``cache_path`` every call goes through a :class:`CachedBackend`."""
    from drmix.llm.base import LLMError

    backend: LLMBackend
    if config.backend == "openai":
        from drmix.llm.http import OpenAIBackend

        if not config.base_url or not config.model:
            raise LLMError("the openai backend needs an endpoint and a model name.",
                           fix="pass --base-url http://HOST:PORT/v1 and --llm-model NAME.")
        backend = OpenAIBackend(config.base_url, config.model, api_key_env=config.api_key_env,
                                timeout=config.timeout, max_retries=config.max_retries,
                                concurrency=config.concurrency)
    else:
        from drmix.llm.local import TransformersBackend

        backend = TransformersBackend(config.model, device=config.device, batch_size=config.batch_size)
    return CachedBackend(backend, cache_path) if cache_path is not None else backend
