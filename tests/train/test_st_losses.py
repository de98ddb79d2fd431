"""sentence-transformers losses over drmix's embeddings (--loss mnrl / cached_mnrl, loss objects), and refusals."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.model.losses import info_nce
from drmix.train.objective import objective_from_config
from drmix.train.st_losses import SentenceTransformersLoss, objective_from_loss


def _embeddings(B=4, H=2, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, D, generator=g), dim=-1)
    d = F.normalize(torch.randn(B + B * H, D, generator=g), dim=-1)
    return q, d, torch.ones(B, H, dtype=torch.bool)


def test_mnrl_is_the_mean_of_drmix_infonce_at_scale_one_over_temperature():
    obj = objective_from_config(TrainConfig(loss="mnrl", num_negatives=2, temperature=0.05))
    q, d, mask = _embeddings()
    B, H = mask.shape
    losses = obj.losses(q, d, mask, gather=False)
    # drmix's per-example InfoNCE over the same candidates (cosines of unit vectors) at temperature 0.05
    negs = d[B:].reshape(B, H, -1)
    # sentence-transformers orders candidates column by column: every positive, then every first negative, ...
    ref = info_nce(q, d[:B], negs, temperature=0.05).mean()
    assert losses.shape == (B,) and torch.allclose(losses, ref.expand(B), atol=1e-5)
    assert obj.card()["loss_tag"] == "MultipleNegativesRankingLoss" and obj.loss.scale == pytest.approx(20.0)


def test_negative_columns_an_example_lacks_are_left_out():
    obj = objective_from_config(TrainConfig(loss="mnrl", num_negatives=2))
    q, d, mask = _embeddings()
    mask[1, 1] = False                 # example 1 has one hard negative: column 1 is left out
    B = 4
    d = torch.cat([d[:B], d[B:][mask.reshape(-1)]])
    full = torch.zeros(B, 2, d.size(-1))
    full[mask] = d[B:]
    ref = info_nce(q, d[:B], full[:, :1], temperature=0.05).mean()
    assert torch.allclose(obj.losses(q, d, mask, gather=False), ref.expand(B), atol=1e-5)


def test_margin_mse_object_takes_the_teacher_margins_of_the_batch(tiny_model_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MarginMSELoss

    obj = objective_from_loss(MarginMSELoss(SentenceTransformer(tiny_model_path, device="cpu")),
                              TrainConfig(num_negatives=1))
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.5, 0.0], [0.0, 1.0]])  # positives, then one negative each
    batch = SimpleNamespace(positive_scores=np.array([0.9, 0.2]), negative_scores=[[0.4], [0.7]])
    # student margins: 1 - 0.5 = 0.5 and 0.5 - 1 = -0.5; teacher margins 0.5 and -0.5, then 0 error ...
    assert obj.losses(q, d, torch.ones(2, 1, dtype=torch.bool), gather=False, batch=batch).tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    batch.negative_scores = [[0.9], [0.2]]     # ... teacher margins 0 and 0: mean of 0.5^2 and 0.5^2
    assert obj.losses(q, d, torch.ones(2, 1, dtype=torch.bool), gather=False, batch=batch).tolist() == \
        pytest.approx([0.25, 0.25])


@pytest.mark.parametrize("fields, match", [
    (dict(loss="mnrl", strategy="groupdro", batching="mixed"), "one loss per batch"),
    (dict(loss="gist"), "guide model"),
    (dict(loss="mnrl", matryoshka_dims=[4]), "--matryoshka-dims"),
    (dict(loss="mnrl", in_batch_negatives=False), "--no-in-batch-negatives"),
])
def test_refusals_say_why(fields, match):
    with pytest.raises(ConfigError, match=match):
        objective_from_config(TrainConfig(**fields))


def test_cached_mnrl_chunk_defaults_to_the_loss_mini_batch_size_and_keeps_a_given_one():
    assert TrainConfig(loss="cached_mnrl").contrastive.grad_cache_chunk == 32
    assert TrainConfig(loss="cached-mnrl", grad_cache_chunk=8).contrastive.grad_cache_chunk == 8
    assert TrainConfig(loss="mnrl").contrastive.grad_cache_chunk == 0
    cfg = TrainConfig(loss="cached_mnrl")
    assert TrainConfig.model_validate(cfg.model_dump()).contrastive.grad_cache_chunk == 32   # as config.yaml reloads


def test_cached_mnrl_with_grad_cache_chunk_and_loss_objects_without_embeddings_api(tiny_model_path):
    obj = objective_from_config(TrainConfig(loss="cached_mnrl", grad_cache_chunk=2))
    assert obj.name == "CachedMultipleNegativesRankingLoss"
    with pytest.raises(ConfigError, match="computes its embeddings itself"):
        SentenceTransformersLoss(torch.nn.Linear(2, 2), num_negatives=0)
    with pytest.raises(ConfigError, match="--strategy groupdro"):
        objective_from_loss(torch.nn.Linear(2, 2), TrainConfig(strategy="groupdro"))


def _gist(guide_q, guide_p):
    from drmix.train.st_losses import GISTEmbed

    guides = {"q": torch.tensor(guide_q), "p": torch.tensor(guide_p)}
    guide = SimpleNamespace(encode=lambda texts, **kw: guides[texts[0][0]])
    loss = SimpleNamespace(guide=guide, temperature=1.0, margin_strategy="absolute", margin=0.0,
                           contrast_anchors=False, contrast_positives=False,
                           sim_matrix=lambda a, b: F.cosine_similarity(a.unsqueeze(1), b.unsqueeze(0), dim=-1))
    return GISTEmbed(loss, num_negatives=0)


def test_gist_masks_what_the_guide_scores_above_the_positive():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[0.6, 0.8], [0.8, 0.6]])        # the model prefers the other example's positive
    batch = SimpleNamespace(queries=["q1", "q2"], positives=["p1", "p2"], negatives=[[], []])
    mask = torch.zeros(2, 0, dtype=torch.bool)
    # the guide agrees with the labels: nothing masked, log(1 + e^(0.8 - 0.6)) per row
    kept = _gist([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]).losses(q, d, mask, gather=False, batch=batch)
    assert kept.tolist() == pytest.approx([0.798139] * 2, abs=1e-6)
    # the guide scores each other positive above the example's own: both masked as false negatives, loss 0
    masked = _gist([[1.0, 0.0], [0.0, 1.0]], [[0.6, 0.8], [1.0, 0.0]]).losses(q, d, mask, gather=False, batch=batch)
    assert masked.tolist() == pytest.approx([0.0, 0.0], abs=1e-7)


def test_gist_object_trains_under_drmix(tiny_model_path, tmp_path):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss

    import drmix

    model = SentenceTransformer(tiny_model_path, device="cpu")
    guide = SentenceTransformer(tiny_model_path, device="cpu")
    rows = {"anchor": [f"q {i}" for i in range(8)], "positive": [f"p {i}" for i in range(8)],
            "negative": [f"n {i}" for i in range(8)]}
    cfg = TrainConfig(output_dir=str(tmp_path / "run"), max_steps=2, batch_size=4, num_negatives=1, device="cpu",
                      show_progress=False)
    result = drmix.train(cfg, model=model, train_dataset=Dataset.from_dict(rows),
                         loss=GISTEmbedLoss(model, guide))
    assert result.steps == 2 and result.details["loss"] == "GISTEmbedLoss"
    assert "loss:GISTEmbedLoss" in (result.model_dir / "README.md").read_text()
