"""The local transformers backend on a tiny random Llama; GGUF files that are not causal LMs."""
from __future__ import annotations

import pytest
from tiny_llama import build_tiny_llama

from drmix.llm.base import ChatRequest, GenerationParams, LLMError


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("llama") / "lm")


def _req(text, **kw):
    return ChatRequest.of([{"role": "user", "content": text}], GenerationParams(max_new_tokens=6, **kw))


def test_generates_reproducibly_and_in_order(tiny_llama):
    from drmix.llm.local import TransformersBackend

    b = TransformersBackend(str(tiny_llama), batch_size=2)
    reqs = [_req("first prompt"), _req("a second, longer prompt here"), _req("third", temperature=0.0)]
    a = b.complete_many(reqs)
    again = b.complete_many(reqs)
    assert all(c.ok for c in a)
    assert [c.text for c in a] == [c.text for c in again]      # seeded sampling, greedy for temperature 0
    assert b.complete(reqs[2]).text == a[2].text               # batch composition does not change greedy output
    assert b.prompt_text(reqs[0]) == "first prompt"            # no chat template: plain prompt


def test_missing_and_non_llm_gguf_files(tmp_path, monkeypatch):
    from drmix.llm.local import load_causal_lm

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    with pytest.raises(LLMError, match="not found"):
        load_causal_lm(tmp_path / "absent.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(LLMError, match="not a readable GGUF"):
        load_causal_lm(junk)
    import gguf

    clip = tmp_path / "vision.gguf"
    w = gguf.GGUFWriter(str(clip), "clip")
    w.add_uint32("clip.dummy", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(LLMError, match="not a causal LM"):
        load_causal_lm(clip)
    assert not (tmp_path / "cache" / "gguf").exists() or not any((tmp_path / "cache" / "gguf").iterdir())
