"""One optimiser step by hand: the weights after two accumulated, clipped AdamW steps under the linear schedule."""
import pytest
import torch

from drmix.train.trainer import Trainer

from train_helpers import config, make_collections, read_metrics


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"), n=16)


def _adamw(p, grads, lrs, *, weight_decay, betas=(0.9, 0.999), eps=1e-8):
    """torch.optim.AdamW written out (Loshchilov & Hutter, Algorithm 2), one step per gradient."""
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        p = p * (1 - lr * weight_decay)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        p = p - lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)
    return p


def test_weights_after_two_steps_are_adamw_on_the_clipped_accumulated_gradient(tiny_model_path, data, tmp_path):
    # two micro-batches per step; the norm is clipped at 0.05 (below the gradients' norm, so clipping acts);
    # linear decay over 2 steps without warm-up: lr 1e-3 then 5e-4
    trainer = Trainer(config(tiny_model_path, data, tmp_path / "r", max_steps=2, batch_size=4,
                             gradient_accumulation_steps=2, max_grad_norm=0.05, weight_decay=0.1))
    named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
    start = {n: p.detach().clone() for n, p in named}
    seen: dict[str, list[torch.Tensor]] = {n: [] for n, _ in named}   # .grad after each backward
    for n, p in named:
        p.register_post_accumulate_grad_hook(lambda q, n=n: seen[n].append(q.grad.detach().clone()))
    trainer.train()

    # the gradient each step hands the optimiser: the sum over its micro-batches (the last backward's .grad)
    first = {n: g[1] for n, g in seen.items() if len(g) == 4}
    second = {n: g[3] for n, g in seen.items() if len(g) == 4}
    assert len(first) > 10 and all(not seen[n] for n in set(start) - set(first))   # the pooler is unused
    clipped = []
    for grads in (first, second):
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
        assert norm > 0.05                           # clipping acts
        clipped.append({n: g * (0.05 / (norm + 1e-6)) for n, g in grads.items()})
    for n, p in named:
        if n not in first:                           # no gradient: AdamW leaves it alone, decay included
            assert torch.equal(p.detach(), start[n])
            continue
        decay = 0.0 if p.ndim < 2 or "norm" in n.lower() or n.endswith(".bias") else 0.1
        expected = _adamw(start[n], [clipped[0][n], clipped[1][n]], [1e-3, 5e-4], weight_decay=decay)
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-7, msg=n)
    records = read_metrics(tmp_path / "r")
    assert [r["step"] for r in records] == [1, 2]
    assert [r["lr"] for r in records] == pytest.approx([1e-3, 5e-4])
