"""Decoder-LM retrievers (drmix.model.backbone) on tiny random Llama / Qwen2 models built here."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_decoder import build_tiny_decoder

from drmix.errors import ModelError
from drmix.model.backbone import BackboneOptions, default_lora_r, ensure_eos, load_retriever

TEXTS = ["the cat sat on the mat", "a protein", "dense retrieval with decoder language models"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return str(build_tiny_decoder(tmp_path_factory.mktemp("llama") / "lm", arch="llama", bos=True))


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    return str(build_tiny_decoder(tmp_path_factory.mktemp("qwen2") / "lm", arch="qwen2"))


def _token_states(model, texts):
    features = model.preprocess(texts)
    with torch.no_grad():
        out = model[0](dict(features))
    return features, out["token_embeddings"]


@pytest.mark.parametrize("side", ["right", "left"])
def test_lasttoken_pooling_takes_the_appended_eos_state_under_either_padding(llama, side):
    model = load_retriever(llama, BackboneOptions(normalize=False), device="cpu")
    assert model[1].pooling_mode == "lasttoken"
    eos = model.tokenizer.eos_token_id
    model.tokenizer.padding_side = side
    features, states = _token_states(model, TEXTS)
    ids, mask = features["input_ids"], features["attention_mask"]
    with torch.no_grad():
        pooled = model(dict(features))["sentence_embedding"]
    width = ids.shape[1]
    for i in range(len(TEXTS)):
        n = int(mask[i].sum())
        pos = n - 1 if side == "right" else width - 1  # by hand: the last real token is the EOS
        assert int(ids[i, pos]) == eos
        assert torch.equal(pooled[i], states[i, pos])
    assert int(mask[1].sum()) < width  # the short text really was padded


def test_right_padding_keeps_the_unpadded_eos_state(llama):
    model = load_retriever(llama, BackboneOptions(normalize=False), device="cpu")
    batch = model.encode(TEXTS, convert_to_tensor=True)
    alone = torch.stack([model.encode([t], convert_to_tensor=True)[0] for t in TEXTS])
    torch.testing.assert_close(batch, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_eos_is_appended_exactly_once_and_survives_truncation_and_reload(arch, llama, qwen2, tmp_path):
    from sentence_transformers import SentenceTransformer

    path = llama if arch == "llama" else qwen2
    model = load_retriever(path, device="cpu")
    tok = model.tokenizer
    eos = tok.eos_token_id
    ids = tok("the cat")["input_ids"]
    assert ids[-1] == eos and ids.count(eos) == 1
    if arch == "llama":
        assert ids[0] == tok.bos_token_id  # the tokenizer's own BOS prefix is kept
    assert ensure_eos(tok) is False  # already appended: nothing changes
    assert tok("the cat")["input_ids"] == ids
    model.max_seq_length = 4
    cut = model.preprocess(["the cat sat on the mat on the mat"])["input_ids"][0].tolist()
    assert len(cut) == 4 and cut[-1] == eos
    model.save(str(tmp_path / "st"))
    again = SentenceTransformer(str(tmp_path / "st"), device="cpu").tokenizer("the cat")["input_ids"]
    assert again == ids


def test_no_eos_for_mean_pooling_unless_asked(llama):
    tok = load_retriever(llama, BackboneOptions(pooling="mean"), device="cpu").tokenizer
    assert tok("the cat")["input_ids"][-1] != tok.eos_token_id
    tok = load_retriever(llama, BackboneOptions(pooling="mean", append_eos=True), device="cpu").tokenizer
    assert tok("the cat")["input_ids"][-1] == tok.eos_token_id


def test_normalisation_and_the_saved_similarity_agree(llama, tmp_path):
    from sentence_transformers import SentenceTransformer

    on = load_retriever(llama, device="cpu")
    assert on.similarity_fn_name == "cosine"
    np.testing.assert_allclose(np.linalg.norm(on.encode(TEXTS), axis=1), 1.0, atol=1e-5)
    off = load_retriever(llama, BackboneOptions(normalize=False), device="cpu")
    assert off.similarity_fn_name == "dot"
    assert np.all(np.abs(np.linalg.norm(off.encode(TEXTS), axis=1) - 1.0) > 0.1)  # raw states
    off.save(str(tmp_path / "dot"))
    assert SentenceTransformer(str(tmp_path / "dot"), device="cpu").similarity_fn_name == "dot"
    on.save(str(tmp_path / "cos"))
    with pytest.raises(ModelError, match="Normalize"):  # normalised folder, unnormalised training
        load_retriever(str(tmp_path / "cos"), BackboneOptions(normalize=False), device="cpu")
    # a folder without Normalize that declares cosine: refused under --no-normalize, completed by default
    cfg = tmp_path / "dot" / "config_sentence_transformers.json"
    data = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**data, "similarity_fn_name": "cosine"}))
    with pytest.raises(ModelError, match="dot"):
        load_retriever(str(tmp_path / "dot"), BackboneOptions(normalize=False), device="cpu")
    fixed = load_retriever(str(tmp_path / "dot"), device="cpu")
    assert type(fixed[-1]).__name__ == "Normalize" and fixed.similarity_fn_name == "cosine"
    cfg.write_text(json.dumps({**data, "similarity_fn_name": "euclidean"}))
    with pytest.raises(ModelError, match="euclidean"):
        load_retriever(str(tmp_path / "dot"), device="cpu")


def test_bidirectional_attention_lets_a_later_token_change_an_earlier_state(llama, qwen2, tmp_path):
    from sentence_transformers import SentenceTransformer

    a, b = "the cat sat on the mat", "the cat sat on the cat"
    for bidirectional in (False, True):
        model = load_retriever(llama, BackboneOptions(bidirectional=bidirectional, pooling="mean",
                                                      append_eos=False), device="cpu")
        _, sa = _token_states(model, [a])
        _, sb = _token_states(model, [b])
        assert sa.shape == sb.shape
        changed = (sa[0, 1] - sb[0, 1]).abs().max().item()  # position 1 ("the"; 0 is BOS) precedes the change
        assert (changed > 1e-4) == bidirectional
    model.save(str(tmp_path / "bi"))
    reloaded = SentenceTransformer(str(tmp_path / "bi"), device="cpu")
    assert reloaded[0].auto_model.config.use_bidirectional_attention
    np.testing.assert_allclose(reloaded.encode([a, b]), model.encode([a, b]), atol=1e-6)
    with pytest.raises(ModelError, match="bidirectional"):
        load_retriever(qwen2, BackboneOptions(bidirectional=True), device="cpu")


def test_causal_rewrite_is_exact(llama):
    """The bidirectional model is the same network: run causally, it gives the causal model's embeddings."""
    causal = load_retriever(llama, BackboneOptions(pooling="mean"), device="cpu")
    bi = load_retriever(llama, BackboneOptions(pooling="mean", bidirectional=True), device="cpu")
    attn = bi[0].auto_model
    attn.config.use_bidirectional_attention = False
    attn.config.is_causal = True
    for layer in attn.layers:
        layer.self_attn.is_causal = True
    np.testing.assert_allclose(bi.encode(TEXTS), causal.encode(TEXTS), atol=1e-5)


def test_activation_checkpointing_gives_the_same_gradients(llama):
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = load_retriever(llama, BackboneOptions(gradient_checkpointing=ckpt), device="cpu")
        auto = model[0].auto_model
        assert getattr(auto, "is_activation_checkpointing", None) == ckpt
        model.train()
        emb = model(dict(model.preprocess(TEXTS)))["sentence_embedding"]
        loss = (emb @ emb.T).logsumexp(dim=1).sum()
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 5
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], atol=1e-6, rtol=1e-5)


def test_bf16_weights_and_attention_implementation(llama):
    model = load_retriever(llama, BackboneOptions(torch_dtype="bf16", attn_implementation="eager"), device="cpu")
    auto = model[0].auto_model
    assert {p.dtype for p in auto.parameters()} == {torch.bfloat16}
    assert auto.config._attn_implementation == "eager"
    full = load_retriever(llama, device="cpu")
    assert {p.dtype for p in full[0].auto_model.parameters()} == {torch.float32}
    np.testing.assert_allclose(model.encode(TEXTS).astype(np.float32), full.encode(TEXTS), atol=5e-2)


def test_lora_defaults_to_the_tdro_rank_for_decoders_only(llama, tiny_model_path):
    assert default_lora_r(None, load_retriever(llama, device="cpu")) == 8
    assert default_lora_r(None, load_retriever(tiny_model_path, device="cpu")) == 0
    assert default_lora_r(0, load_retriever(llama, device="cpu")) == 0


def test_trained_folder_reloads_and_encodes_as_training_did(llama, tmp_path):
    from sentence_transformers import SentenceTransformer
    from train_helpers import config, make_collections

    from drmix.train.trainer import Trainer

    data = make_collections(tmp_path / "data", n=16)
    trainer = Trainer(config(llama, data, tmp_path / "run", max_steps=2, query_max_length=64, doc_max_length=64))
    assert trainer.lora_r == 8  # tDRO's LoRA, chosen because the backbone is a decoder
    result = trainer.train()
    adapter = json.loads((tmp_path / "run" / "adapter" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (8, 32, 0.1)
    batch = trainer.builder.build([(0, 0), (0, 1), (1, 2)])
    q, d, _ = trainer.encoder.device_inputs(trainer.model, batch, 0)
    trainer.model.eval()
    with torch.no_grad():  # the training path: the trainer's own tokenisation and forward
        trained = trainer.model(q)["sentence_embedding"].numpy()
    plain = SentenceTransformer(str(result.model_dir), device="cpu")
    assert plain[1].pooling_mode == "lasttoken" and plain.similarity_fn_name == "cosine"
    np.testing.assert_allclose(plain.encode([trainer.encoder.q_prompt + t for t in batch.queries]), trained, atol=1e-5)
