"""Retrievers on decoder-LM backbones, built the way the LLM-retrieval papers build them.

tDRO ("Task-level Distributionally Robust Optimization for Large Language Model-based Dense Retrieval",
AAAI 2025, arXiv:2408.10613; seeds/000, Settings and Table 6) fine-tunes Qwen1.5 / Mistral / Llama-3 with
**last-token pooling** (the hidden state of an appended EOS token), contrastive temperature 0.002, LoRA
r 8 / alpha 32 / dropout 0.1, bf16 weights, flash attention 2 and activation checkpointing. DRAMA ("DRAMA:
Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", arXiv:2502.18460; seeds/004,
Table 4 and Sec. 6.3) compares bi- vs uni-directional attention and mean vs EOS pooling on (pruned) decoders:
bidirectional + mean wins. Tevatron exposes the same choices as ``--pooling eos|mean|cls``,
``--append_eos_token`` and ``--normalize``.

:func:`load_retriever` turns *any* model -- a SentenceTransformer folder, a bare transformers folder, a hub
id or a ``.gguf`` file -- into a ``SentenceTransformer`` made only of sentence-transformers' own modules
(``Transformer`` -> ``Pooling`` -> ``Normalize``), so the saved folder loads with a plain
``SentenceTransformer(path)`` and encodes exactly as training did:

* **pooling** -- ``lasttoken`` | ``mean`` | ``cls``; default: the folder's ``Pooling`` module, or
  ``lasttoken`` for a bare decoder (``mean`` for a bare encoder). sentence-transformers' ``lasttoken`` mode
  takes the last position whose attention mask is 1, so it is correct under left *and* right padding.
  drmix keeps the tokenizer's padding side: with right padding and default position ids a causal model's
  last-token state equals that of the unpadded text exactly (left padding shifts positions).
* **append_eos** -- default on for last-token pooling: the EOS token is appended by the *tokenizer itself*
  (a ``TemplateProcessing`` step after the fast tokenizer's own post-processor, saved in
  tokenizer.json), so every tokenisation path -- training, ``encode``, pre-tokenised data, a plain
  sentence-transformers load of the saved folder -- appends it, exactly once, and truncation keeps it.
  A tokenizer that already ends every text with EOS is left alone.
* **normalize** -- default on: a ``Normalize`` module is added when missing, so InfoNCE scores are cosines
  divided by the temperature, and the folder's ``similarity_fn_name`` is ``cosine``. With ``normalize=False``
  training scores raw dot products and the folder is saved with ``similarity_fn_name = "dot"``. A folder
  whose similarity cannot match training (a ``Normalize`` module under ``normalize=False``, an explicit
  cosine similarity without normalisation, euclidean/manhattan) is refused with the fix.
* **bidirectional** -- DRAMA's non-causal decoder. transformers runs a Llama-family decoder without the
  causal mask only through Gemma's ``use_bidirectional_attention`` (a Llama model's attention modules keep
  ``is_causal=True`` whenever no padding mask is materialised), so the model is rewritten *exactly* as a
  Gemma model with :func:`drmix.model.prune.prune_decoder` keeping every layer (verified numerically by
  :func:`drmix.model.prune.check_equivalence`). Models with attention biases (Qwen2) cannot be rewritten and
  are refused with the fix.
* **torch_dtype** / **attn_implementation** -- passed to ``from_pretrained`` (bf16 weights halve memory; the
  tDRO paper trains in BF16 with flash attention 2). **gradient_checkpointing** -- transformers' activation
  checkpointing on the backbone (non-reentrant, so it composes with LoRA and frozen embeddings).

Hand-written glue only: every module is sentence-transformers', the rewrite is transformers' Gemma.
"""
from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, ModelError

log = logging.getLogger(__name__)

POOLINGS = ("lasttoken", "mean", "cls")
DTYPES = ("bf16", "fp16", "fp32")
ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "eager")
# model types of decoder-only LMs (used when a config names no *ForCausalLM architecture)
_DECODER_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
                  "gemma3_text", "phi", "phi3", "smollm3", "gpt2", "gpt_neox", "falcon", "olmo", "olmo2", "starcoder2",
                  "stablelm", "cohere", "granite", "internlm2", "deepseek_v2", "deepseek_v3", "opt", "bloom"}
# tDRO's LoRA setting (Table 6), the default for decoders when no LoRA rank is given
DECODER_LORA_R = 8


@dataclass(frozen=True)
class BackboneOptions:
    """How to build the retriever (``None`` = the folder's choice or the default described above)."""

    pooling: str | None = None
    append_eos: bool | None = None
    normalize: bool = True
    bidirectional: bool = False
    torch_dtype: str | None = None
    attn_implementation: str | None = None
    gradient_checkpointing: bool = False

    @classmethod
    def from_config(cls, config: Any) -> BackboneOptions:
        return cls(**{f: getattr(config, f) for f in cls.__dataclass_fields__ if getattr(config, f, None) is not None})

    def model_kwargs(self) -> dict[str, Any]:
        """``from_pretrained`` keyword arguments (dtype, attention implementation)."""
        import torch

        out: dict[str, Any] = {}
        if self.torch_dtype is not None:
            if self.torch_dtype not in DTYPES:
                raise ConfigError(f"unknown torch_dtype {self.torch_dtype!r}.", fix=f"use one of {', '.join(DTYPES)}.")
            out["dtype"] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.torch_dtype]
        if self.attn_implementation is not None:
            if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
                raise ConfigError(f"unknown attn_implementation {self.attn_implementation!r}.",
                                  fix=f"use one of {', '.join(ATTN_IMPLEMENTATIONS)}.")
            out["attn_implementation"] = self.attn_implementation
        return out


def is_decoder_config(config: Any) -> bool:
    """Whether a transformers config describes a decoder-only LM."""
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    return getattr(config, "model_type", "") in _DECODER_TYPES


def is_decoder_model(model: Any) -> bool:
    """Whether a SentenceTransformer's backbone is a decoder-only LM."""
    try:
        return is_decoder_config(model[0].auto_model.config)
    except (AttributeError, IndexError, KeyError, TypeError):
        return False


def default_lora_r(lora_r: int | None, model: Any) -> int:
    """The LoRA rank to use: the given one, else tDRO's 8 for a decoder backbone and 0 (no LoRA) otherwise."""
    if lora_r is not None:
        return lora_r
    return DECODER_LORA_R if is_decoder_model(model) else 0


# -- EOS ------------------------------------------------------------------------------------------------
def appends_eos(tokenizer: Any) -> bool:
    """Whether the tokenizer ends a text with exactly one EOS token (checked on a sample)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        return False
    ids = tokenizer("a b", add_special_tokens=True)["input_ids"]
    return bool(ids) and ids[-1] == eos and ids.count(eos) == 1


def ensure_eos(tokenizer: Any) -> bool:
    """Make ``tokenizer`` append EOS to every text, once. Returns True when it had to be changed.

    Wraps the fast tokenizer's post-processor with ``TemplateProcessing("$A <eos>")`` (saved in
    tokenizer.json), after whatever it already does (a BOS prefix stays). Not the ``add_eos_token`` switch some
    tokenizer classes have: rebuilding their post-processor from the switches drops a BOS that tokenizer.json
    adds (Llama-3).
    """
    if appends_eos(tokenizer):
        return False
    if tokenizer.eos_token is None:
        raise ModelError("the tokenizer has no EOS token to append.",
                         fix="set eos_token in tokenizer_config.json, or pass --no-append-eos (or another --pooling).")
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ModelError("appending EOS needs a fast (Rust) tokenizer.",
                         fix="use a model with tokenizer.json, or pass --no-append-eos.")
    eos, eos_id = tokenizer.eos_token, tokenizer.eos_token_id
    state = json.loads(backend.to_str())
    pp = state.get("post_processor")
    templates = [pp] if pp and pp.get("type") == "TemplateProcessing" else \
        [p for p in (pp or {}).get("processors", []) if p.get("type") == "TemplateProcessing"]
    if templates:  # extend the existing template: a Sequence of two templates mangles the first's tokens
        tmpl = templates[-1]
        piece = {"SpecialToken": {"id": eos, "type_id": 0}}
        tmpl["single"] = tmpl["single"] + [piece]
        pair, out, seen_a = tmpl["pair"], [], False
        for item in pair:
            if seen_a and "Sequence" in item and item["Sequence"]["id"] == "B":
                out.append({"SpecialToken": {"id": eos, "type_id": item["Sequence"]["type_id"]}})
            out.append(item)
            seen_a = seen_a or ("Sequence" in item and item["Sequence"]["id"] == "A")
        tmpl["pair"] = out + [{"SpecialToken": {"id": eos, "type_id": 1}}]
        tmpl["special_tokens"][eos] = {"id": eos, "ids": [eos_id], "tokens": [eos]}
    else:
        tail = {"type": "TemplateProcessing",
                "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": eos, "type_id": 1}}],
                "special_tokens": {eos: {"id": eos, "ids": [eos_id], "tokens": [eos]}}}
        state["post_processor"] = tail if pp is None else {"type": "Sequence", "processors": [pp, tail]}
    from tokenizers import Tokenizer

    tokenizer._tokenizer = Tokenizer.from_str(json.dumps(state))
    if not appends_eos(tokenizer):
        raise ModelError("could not make the tokenizer append EOS.", fix="pass --no-append-eos.")
    return True


# -- building ---------------------------------------------------------------------------------------------
def _is_st_folder(path: str) -> bool:
    p = Path(path)
    if p.exists():
        return (p / "modules.json").exists()
    try:
        from sentence_transformers.util.file_io import is_sentence_transformer_model

        return is_sentence_transformer_model(path)
    except Exception:  # noqa: BLE001 - offline or unknown: treat as a bare transformers model
        return False


def _bidirectional_folder(source: Any, tmp: Path) -> Path:
    """Save the exact Gemma rewrite (every layer, bidirectional) of a Llama-family model in ``tmp``."""
    import torch

    from drmix.model.prune import check_equivalence, prune_decoder

    layers = list(range(source.config.num_hidden_layers))
    gemma = prune_decoder(source, layers, bidirectional=True).to(next(source.parameters()).dtype)
    if sum(p.numel() for p in source.parameters()) <= 1e9 and next(source.parameters()).dtype == torch.float32:
        check_equivalence(source, gemma, layers)  # exact by construction; checked where a second copy is cheap
    gemma.save_pretrained(tmp)
    return tmp


def _bare_folder(path: str, opts: BackboneOptions, tmp: Path, trust_remote_code: bool) -> tuple[str, bool]:
    """(folder or hub id for ``Transformer``, is_decoder) of a bare model; GGUF files and the bidirectional
    rewrite are materialised in ``tmp``."""
    from transformers import AutoConfig

    src = path
    if path.endswith(".gguf"):
        from drmix.llm.local import gguf_folder

        src = str(gguf_folder(path))  # dequantised once and cached as a folder
    try:
        config = AutoConfig.from_pretrained(src, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"cannot read the model's config ({type(e).__name__}: {str(e).splitlines()[0][:160]}).",
                         path=src, fix="pass a SentenceTransformer folder, a transformers model folder, a hub id "
                                       "reachable from here, or a .gguf file.") from None
    decoder = is_decoder_config(config)
    if opts.bidirectional and decoder and config.model_type != "gemma":  # encoders already attend both ways
        from transformers import AutoModel, AutoTokenizer

        base = AutoModel.from_pretrained(src, trust_remote_code=trust_remote_code,
                                         **{k: v for k, v in opts.model_kwargs().items() if k == "dtype"})
        _check_rewritable(base.config)
        out = _bidirectional_folder(base, tmp / "bidirectional")
        AutoTokenizer.from_pretrained(src, trust_remote_code=trust_remote_code).save_pretrained(out)
        src = str(out)
    return src, decoder


def _check_rewritable(config: Any) -> None:
    from drmix.model.prune import LLAMA_LIKE

    if config.model_type not in LLAMA_LIKE or getattr(config, "attention_bias", False) \
            or getattr(config, "mlp_bias", False) or config.model_type == "qwen2":
        raise ModelError(f"transformers cannot run a {config.model_type!r} model with bidirectional attention.",
                         fix="use a Llama-family decoder without attention biases (Llama, Mistral, SmolLM2), "
                             "or train without --bidirectional.")


def load_sentence_transformer(path: str, *, device: str | None = None, trust_remote_code: bool = False,
                              max_seq_length: int | None = None, model_kwargs: dict | None = None) -> Any:
    """A SentenceTransformer folder or hub id, loaded exactly as saved; any failure is one :class:`ModelError`
    naming the fix (``model_kwargs`` go to ``from_pretrained``)."""
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(path, device=device, trust_remote_code=trust_remote_code,
                                    model_kwargs=model_kwargs or None)
    except Exception as e:  # noqa: BLE001 - turn any loading failure into one clear message
        hint = ("the Hugging Face Hub is not reachable or the id is wrong; pass a local folder"
                if not Path(path).exists() else "check that the folder holds a SentenceTransformer or transformers model")
        if not trust_remote_code and "trust_remote_code" in str(e):
            hint = ("this model runs its own code; if you trust its source, pass --trust-remote-code "
                    "(trust_remote_code: true in a config)")
        raise ModelError(f"cannot load model ({type(e).__name__}: {str(e).splitlines()[0][:200]}).",
                         path=path, fix=hint + ".") from e
    if max_seq_length is not None:
        model.max_seq_length = max_seq_length
    return model


def load_retriever(name_or_path: str | None, options: BackboneOptions | None = None, *, device: str | None = None,
                   trust_remote_code: bool = False, max_seq_length: int | None = None) -> Any:
    """A ``SentenceTransformer`` retriever for any model, built as the module docstring says."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    from drmix.model.paths import resolve_model_path

    opts = options or BackboneOptions()
    if opts.pooling is not None and opts.pooling not in POOLINGS:
        raise ConfigError(f"unknown pooling {opts.pooling!r}.", fix=f"use one of {', '.join(POOLINGS)}.")
    path = resolve_model_path(name_or_path)
    kwargs = opts.model_kwargs()
    if _is_st_folder(path):
        model = load_sentence_transformer(path, device=device, trust_remote_code=trust_remote_code,
                                          max_seq_length=max_seq_length, model_kwargs=kwargs)
        if opts.bidirectional:
            _make_bidirectional(model)
    else:
        with tempfile.TemporaryDirectory(prefix="drmix-backbone-") as tmp:
            src, decoder = _bare_folder(path, opts, Path(tmp), trust_remote_code)
            # a Gemma model (ours, or a pruned one) turns bidirectional through its own config switch
            bidir = ({"use_bidirectional_attention": True, "is_causal": False}
                     if opts.bidirectional and decoder else {})
            try:
                tr = Transformer(src, model_kwargs={"trust_remote_code": trust_remote_code, **kwargs},
                                 processor_kwargs={"trust_remote_code": trust_remote_code},
                                 config_kwargs={"trust_remote_code": trust_remote_code, **bidir},
                                 max_seq_length=max_seq_length)
            except Exception as e:  # noqa: BLE001
                raise ModelError(f"cannot load the model ({type(e).__name__}: {str(e).splitlines()[0][:200]}).",
                                 path=path, fix="pass a SentenceTransformer folder, a transformers model folder, "
                                                "a hub id reachable from here, or a .gguf file.") from None
            mode = opts.pooling or ("lasttoken" if decoder else "mean")
            model = SentenceTransformer(modules=[tr, Pooling(tr.get_embedding_dimension(), mode)], device=device)
    tok = model.tokenizer
    if tok is not None and tok.pad_token is None and tok.eos_token is not None:
        tok.pad_token = tok.eos_token  # decoders ship without a pad token; the attention mask hides it
    pooling = _pooling_module(model)
    if opts.pooling is not None and pooling.pooling_mode != opts.pooling:
        log.info("pooling: %s (the folder said %s)", opts.pooling, pooling.pooling_mode)
        pooling.pooling_mode = opts.pooling
    append = opts.append_eos if opts.append_eos is not None else pooling.pooling_mode == "lasttoken"
    if append and tok is not None and ensure_eos(tok):
        log.info("the tokenizer now appends %s to every text (last-token pooling)", tok.eos_token)
    _agree_similarity(model, opts.normalize, path, Normalize)
    if opts.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def _pooling_module(model: Any) -> Any:
    from sentence_transformers.sentence_transformer.modules import Pooling

    for m in model:
        if isinstance(m, Pooling):
            return m
    raise ModelError("the model has no Pooling module, so its pooling cannot be chosen.",
                     fix="use a SentenceTransformer folder with a Pooling module, or a bare transformers model.")


def _make_bidirectional(model: Any) -> None:
    """Rewrite a SentenceTransformer's Llama-family backbone as an exact bidirectional Gemma (in place)."""
    tr = model[0]
    config = tr.auto_model.config
    if not is_decoder_config(config):
        return  # an encoder attends both ways already
    if config.model_type == "gemma":  # Gemma's own switch (exact; saved in config.json)
        config.use_bidirectional_attention = True
        config.is_causal = False
        for layer in tr.auto_model.layers:
            layer.self_attn.is_causal = False
        return
    _check_rewritable(config)
    from drmix.model.prune import check_equivalence, prune_decoder

    layers = list(range(config.num_hidden_layers))
    gemma = prune_decoder(tr.auto_model, layers, bidirectional=True)
    check_equivalence(tr.auto_model, gemma, layers)
    tr.model = gemma.to(next(tr.auto_model.parameters()).device)


def _agree_similarity(model: Any, normalize: bool, path: str, normalize_cls: type) -> None:
    """Make the saved similarity function equal the one training optimises (see the module docstring)."""
    has_norm = any(isinstance(m, normalize_cls) for m in model)
    declared = model._similarity_fn_name  # None when the folder does not say
    declared = getattr(declared, "value", declared)
    if declared in ("euclidean", "manhattan"):
        raise ModelError(f"the model scores with {declared} distance, but training optimises dot products of "
                         "(normalised) embeddings.", path=path,
                         fix='set "similarity_fn_name": "cosine" in config_sentence_transformers.json.')
    if normalize:
        if not has_norm:
            model.append(normalize_cls())
            log.info("added a Normalize module: training scores cosines, as eval and index do")
        model.similarity_fn_name = "cosine"
        return
    if has_norm:
        raise ModelError("--no-normalize was asked, but the model ends with a Normalize module.", path=path,
                         fix="drop --no-normalize, or remove the Normalize entry from the folder's modules.json.")
    if declared == "cosine":
        raise ModelError("the model scores with cosine similarity, but --no-normalize trains raw dot products.",
                         path=path, fix='drop --no-normalize, or set "similarity_fn_name": "dot" in '
                                        "config_sentence_transformers.json.")
    model.similarity_fn_name = "dot"


def enable_gradient_checkpointing(model: Any) -> None:
    """transformers' activation checkpointing on the backbone (non-reentrant, works with frozen inputs)."""
    auto = model[0].auto_model
    if not getattr(auto, "supports_gradient_checkpointing", False):
        raise ModelError(f"{type(auto).__name__} does not support activation checkpointing.",
                         fix="train without --gradient-checkpointing.")
    enable = getattr(auto, "activation_checkpointing_enable", None)  # transformers >= 5.2x name
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # pragma: no cover - older transformers
        auto.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(auto.config, "use_cache"):
        auto.config.use_cache = False
