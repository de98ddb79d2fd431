"""LLM backends behind one interface (:class:`~drmix.llm.base.LLMBackend`), with a prompt-hash cache.

* :mod:`drmix.llm.http` -- any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server, Ollama);
* :mod:`drmix.llm.local` -- a transformers causal LM from a folder, a hub id or a GGUF file (the packaged
  SmolLM2-135M-Instruct by default);
* :mod:`drmix.llm.cache` -- every call cached by prompt hash in a JSONL file next to the outputs.
"""
