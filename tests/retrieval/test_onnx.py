"""ONNX Runtime encoding: the exported graph reproduces torch, int8 stays close, exports are cached."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from drmix.errors import ConfigError  # noqa: E402
from drmix.retrieval.encode import encode_texts  # noqa: E402

TEXTS = [f"{w} number {i} of the onnx test texts" for i, w in enumerate("alpha beta gamma delta epsilon zeta".split())]
TEXTS.append("a much longer text that pads the others " * 3)


@pytest.fixture()
def tiny(tiny_model_path, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    return SentenceTransformer(tiny_model_path, device="cpu")


def test_onnx_fp32_equals_torch_and_int8_is_close(tiny, tmp_path):
    import drmix.retrieval.onnx as onnx

    ref = encode_texts(tiny, TEXTS, batch_size=3, precision="fp32")
    fp32 = encode_texts(tiny, TEXTS, batch_size=3, precision="onnx")
    np.testing.assert_allclose(fp32, ref, atol=1e-5)  # same graph, same padding and pooling
    q = encode_texts(tiny, TEXTS, batch_size=3, precision="onnx-int8")
    cos = (q * ref).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.99 and not np.array_equal(q, ref)
    folders = list((tmp_path / "cache" / "onnx").iterdir())
    assert len(folders) == 1 and sorted(p.name for p in folders[0].iterdir()) == ["model-int8.onnx", "model.onnx"]
    import onnx as onnx_lib

    ops = {f: {n.op_type for n in onnx_lib.load(str(folders[0] / f)).graph.node}
           for f in ("model.onnx", "model-int8.onnx")}
    assert "Attention" in ops["model.onnx"]               # ONNX Runtime fused each layer's attention
    assert {"QAttention", "MatMulInteger"} <= ops["model-int8.onnx"]  # and quantised it
    # the model itself still runs in torch, untouched
    assert type(tiny[0].auto_model).__name__ == "BertModel"
    np.testing.assert_array_equal(encode_texts(tiny, TEXTS, batch_size=3, precision="fp32"), ref)
    # a second call reuses the session; changed weights give a new export
    onnx._sessions.clear()
    np.testing.assert_allclose(encode_texts(tiny, TEXTS, batch_size=3, precision="onnx"), ref, atol=1e-5)
    assert len(list((tmp_path / "cache" / "onnx").iterdir())) == 1  # served from the cache folder
    import torch

    with torch.no_grad():
        tiny[0].auto_model.embeddings.word_embeddings.weight.mul_(1.5)
    changed = encode_texts(tiny, TEXTS, batch_size=3, precision="onnx")
    np.testing.assert_allclose(changed, encode_texts(tiny, TEXTS, batch_size=3, precision="fp32"), atol=1e-5)
    assert len(list((tmp_path / "cache" / "onnx").iterdir())) == 2


def test_onnx_refuses_a_gpu_and_a_model_without_a_transformer(tiny):
    import torch

    from drmix.retrieval.accel import inference_setup
    from drmix.retrieval.onnx import onnx_model

    class OnGpu(torch.nn.Module):
        device = torch.device("cuda")

    with pytest.raises(ConfigError, match="CPU only"):
        inference_setup(OnGpu(), "onnx-int8")
    with pytest.raises(ConfigError, match="Hugging Face transformer"):
        onnx_model(torch.nn.Sequential(torch.nn.Linear(2, 2)), "onnx")


def test_int8_quantises_once_per_weights(tiny):
    from drmix.retrieval.accel import quantize_int8

    a = quantize_int8(tiny)
    assert quantize_int8(tiny) is a
    import torch

    with torch.no_grad():
        tiny[0].auto_model.embeddings.word_embeddings.weight.add_(0.01)
    assert quantize_int8(tiny) is not a
