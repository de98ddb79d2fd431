"""``pretrain coco`` on a decoder backbone: bidirectional, mean-pooled (DRAMA's encoder form), LoRA by default."""
from __future__ import annotations

from test_runner import cfg, corpus  # noqa: F401 - the corpus fixture
from tiny_decoder import build_tiny_decoder

from drmix.pretrain.runner import pretrain_coco


def test_coco_on_a_bidirectional_decoder(corpus, tmp_path):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    lm = build_tiny_decoder(tmp_path / "lm", arch="llama")
    res = pretrain_coco(cfg(str(lm), corpus, tmp_path / "run", bidirectional=True, pooling="mean",
                            gradient_checkpointing=True))
    model = SentenceTransformer(str(res.model_dir), device="cpu")
    assert model[0].auto_model.config.use_bidirectional_attention  # the exact Gemma rewrite, saved
    assert model[1].pooling_mode == "mean" and (tmp_path / "run" / "adapter").exists()
