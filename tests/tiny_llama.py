"""A tiny random-weight Llama causal LM folder (the bundled WordPiece tokenizer), built without a download."""
from __future__ import annotations

from pathlib import Path


def build_tiny_llama(folder: Path, *, layers: int = 3, hidden: int = 32, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from drmix.model.encoder import default_model_path

    folder.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(default_model_path())
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=128, pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id,
                      eos_token_id=tok.sep_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms away from 1 so the 1 + w rewrite is exercised
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(folder)
    return folder
