"""Tiny random decoder LMs (Llama, Qwen2) with a decoder-style byte-level BPE tokenizer, built without a download.

The tokenizer is trained here in milliseconds on a few sentences: byte-level (no unknown tokens), an EOS
``</s>`` it does *not* append (like Qwen's and Llama-3's), no pad token, and optionally a BOS prefix
(``<s> $A``, as Llama-3's post-processor does).
"""
from __future__ import annotations

from pathlib import Path

CORPUS = [
    "the cat sat on the mat", "a protein binds the receptor", "dense retrieval with decoder language models",
    "query instruction for scientific claims", "last token pooling and mean pooling", "bidirectional attention",
] * 4


def build_tokenizer(*, bos: bool = False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", tok.token_to_id("<s>"))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def build_tiny_decoder(folder: Path, *, arch: str = "llama", layers: int = 2, hidden: int = 32, seed: int = 0,
                       bos: bool = False) -> Path:
    """Save a random ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` and its tokenizer in ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(bos=bos)
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    common = dict(vocab_size=len(tok) + 16,  # Qwen2Tokenizer adds its own specials
                  hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(arch)
    model.save_pretrained(folder)
    return folder
