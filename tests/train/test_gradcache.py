"""GradCache: parameter gradients equal those of the uncached batch (hard + in-batch negatives, strategies)."""
import numpy as np
import pytest
import torch

from drmix.model.losses import contrastive_losses
from drmix.train.gradcache import GradCache, chunk_sizes, split_features


def grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_grads(a, b):
    assert a.keys() == b.keys() and len(a) > 10
    for n in a:
        torch.testing.assert_close(a[n], b[n], atol=1e-5, rtol=1e-4, msg=n)


def test_chunking_helpers():
    assert chunk_sizes(10, 3) == [4, 3, 3]
    parts = split_features({"x": torch.arange(10), "name": "kept"}, [4, 3, 3])
    assert [p["x"].tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]] and parts[2]["name"] == "kept"


@pytest.mark.parametrize("chunk", [1, 3, 16])
def test_gradients_equal_the_uncached_batch_with_hard_and_in_batch_negatives(tiny_model_path, chunk):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.train()
    B, H = 7, 2
    queries = [f"query {i} alpha beta" + " gamma" * i for i in range(B)]
    docs = [f"positive {i} delta" for i in range(B)] + [f"negative {j} of {i}" for i in range(B) for j in range(H)]
    q, d = model.preprocess(queries), model.preprocess(docs)
    mask = torch.ones(B, H, dtype=torch.bool)
    mask[3, 1] = False  # an example with one hard negative only
    weights = torch.linspace(0.5, 2.0, B)  # a strategy's per-example weighting

    def forward(qf, df):
        return model(dict(qf))["sentence_embedding"], model(dict(df))["sentence_embedding"]

    kept = {}

    def loss_fn(qe, de):
        negs = de[B:].reshape(B, H, -1)
        kept["losses"] = contrastive_losses(qe, de[:B], negs, mask, temperature=0.05, in_batch=True, gather=True)
        return (kept["losses"] * weights).sum() / weights.sum()

    model.zero_grad()
    full_loss = loss_fn(*forward(q, d))
    full_loss.backward()
    full_losses = kept["losses"].detach().clone()
    expected = grads(model)

    model.zero_grad()
    loss = GradCache(forward, chunk).step((q, d), loss_fn)
    assert loss.item() == pytest.approx(full_loss.item(), abs=1e-6)
    torch.testing.assert_close(kept["losses"].detach(), full_losses, atol=1e-6, rtol=1e-6)
    assert_same_grads(grads(model), expected)


def test_trainer_grad_cache_matches_plain_step(tiny_model_path, tmp_path):
    from train_helpers import config, make_collections

    from drmix.train.trainer import Trainer

    data = make_collections(tmp_path / "data", n=16)
    runs = []
    for chunk in (0, 3):
        t = Trainer(config(tiny_model_path, data, tmp_path / f"r{chunk}", max_steps=1, num_negatives=1,
                           grad_cache_chunk=chunk))
        batch, (local, q, d, mask) = t.inputs.next(np.array([0.5, 0.5]))
        t.optimizer.zero_grad()
        loss, losses = t._forward_backward(q, d, mask, local, t.context())
        runs.append((loss.item(), losses.detach(), grads(t.model)))
        t.inputs.close()
    assert runs[1][0] == pytest.approx(runs[0][0], abs=1e-6)
    torch.testing.assert_close(runs[1][1], runs[0][1], atol=1e-6, rtol=1e-6)
    assert_same_grads(runs[1][2], runs[0][2])
