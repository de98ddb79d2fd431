"""iDRO: one weight update on three clusters by hand, the floor, k-means refresh, a run through the trainer."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.mixture.idro import IDROConfig, IDROStrategy, idro_update, kmeans, last_layer_parameters
from drmix.mixture.registry import build_strategy


def test_one_update_on_three_clusters_by_hand():
    # gradients g1=(1,0), g2=(0,1), g3=(1,1)/sqrt2 -> cosines 0, 1/sqrt2, 1/sqrt2
    s = 1 / math.sqrt(2)
    cos = np.array([[1, 0, s], [0, 1, s], [s, s, 1]])
    losses = np.array([1.0, 16.0, 1.0])                       # l^0.25 = 1, 2, 1
    # r = [[1, 0, s], [0, 4, 2s], [s, 2s, 1]]; row means (1+s)/3, (4+2s)/3, (1+3s)/3
    e = 0.05 * np.array([(1 + s) / 3, (4 + 2 * s) / 3, (1 + 3 * s) / 3])
    assert e == pytest.approx([0.0284518, 0.0902369, 0.0520220], abs=1e-6)
    e = e - e.max()                                            # [-0.0617851, 0, -0.0382149]
    w = np.exp(e) / np.exp(e).sum()                           # uniform h^0.1 cancels
    h, expo = idro_update(np.full(3, 1 / 3), losses, np.ones(3, bool), cos)
    assert expo == pytest.approx([-0.0617851, 0.0, -0.0382149], abs=1e-6)
    assert h == pytest.approx([0.3238778, 0.3445198, 0.3316024], abs=1e-6)
    assert h == pytest.approx(w, abs=1e-12)


def test_absent_cluster_and_floor_by_hand():
    # the authors' rule (ANCE/model/dro_loss.py, iDROLoss.forward): clusters 0, 1 present with opposite
    # gradients, cluster 2 absent (g = 0, l^beta = 0); previous weights almost all on 0
    cos = np.array([[1, -1, 0], [-1, 1, 0], [0, 0, 0.0]])
    h_prev = np.array([1 - 2e-30, 1e-30, 1e-30])
    # l^0.25 = sqrt2, 1, 0 -> r = [[2, -sqrt2, 0], [-sqrt2, 1, 0], [0, 0, 0]]; means over all K = 3 clusters
    e = 0.05 * np.array([(2 - math.sqrt(2)) / 3, (1 - math.sqrt(2)) / 3, 0.0])
    e = e - e.max()                                            # [0, -0.0166667, -0.0097631]
    h, expo = idro_update(h_prev, np.array([4.0, 1.0, 99.0]), np.array([True, True, False]), cos)
    assert expo == pytest.approx(e, abs=1e-9)
    raw = np.array([1.0, 1e-3 * math.exp(-0.05 / 3), 0.0])      # h^0.1 = 1, 1e-3, (1e-3) * 0: absent
    raw = raw / raw.sum()                                      # [0.9990175, 0.0009825, 0]
    assert h == pytest.approx([raw[0], 0.01, 0.01], abs=1e-9)  # floored, not renormalised
    assert raw[0] == pytest.approx(0.9990175, abs=1e-7)


def test_present_rule_kept_as_an_option_by_hand():
    # rule "present" (drmix's earlier rule): mean over the clusters present, the absent one keeps h^0.1
    cos = np.array([[1, -1, 0], [-1, 1, 0], [0, 0, 0.0]])
    h_prev = np.array([1 - 2e-30, 1e-30, 1e-30])
    e = np.array([0.05 * (2 - math.sqrt(2)) / 2, 0.05 * (1 - math.sqrt(2)) / 2, 0.0])
    e = e - e.max()                                            # [0, -0.025, -0.0146447]
    h, expo = idro_update(h_prev, np.array([4.0, 1.0, 99.0]), np.array([True, True, False]), cos, rule="present")
    assert expo == pytest.approx(e, abs=1e-9)
    raw = np.array([1.0, 1e-3, 1e-3]) * np.exp(e)
    raw = raw / raw.sum()                                      # [0.998043, 0.000975, 0.000985]
    assert h == pytest.approx([raw[0], 0.01, 0.01], abs=1e-9)
    assert IDROStrategy(IDROConfig(rule="present", clusters=4)).h.tolist() == [0.25] * 4
    assert IDROStrategy(IDROConfig(clusters=4)).h.tolist() == [1.0] * 4      # the authors start at 1


def _authors_idro_step(h_fun, all_grads, gdro_losses_agg, gdro_counts_agg, alpha=0.25, rho=0.05, ema=0.1, eps=0.01):
    """iDROLoss.forward of github.com/OpenMatch/COCO-DR, ANCE/model/dro_loss.py, from ``all_grads`` on (the
    per-cluster gradients, zeros for absent clusters as ``_get_grad`` fills them), written out plainly."""
    gdro_loss_mask = (gdro_counts_agg > 0).float()
    grad_norm = torch.linalg.norm(all_grads, dim=-1, keepdim=True)
    all_grads = all_grads / (1e-12 + grad_norm)
    RTG = torch.matmul(all_grads, all_grads.T)
    _gl = torch.pow(gdro_losses_agg.unsqueeze(-1), alpha)
    RTG = torch.mm(_gl, _gl.t()) * RTG
    _exp = rho * torch.mean(RTG, dim=0)
    _exp = _exp * gdro_loss_mask
    _exp -= _exp.max()
    weight = torch.exp(_exp)
    h_fun = torch.pow(h_fun, ema) * weight * (gdro_counts_agg != 0).float()
    h_fun = h_fun / h_fun.sum()
    return torch.clamp(h_fun, min=eps)


def test_update_matches_the_authors_idro_loss_over_many_steps():
    """K = 12 clusters, 2-7 present per batch (K > |P|), 40 steps: the same weights as the authors' code."""
    rng = np.random.default_rng(4)
    K, D = 12, 9
    theirs = torch.ones(K, dtype=torch.float64)
    ours = IDROStrategy(IDROConfig(clusters=K)).h
    for _ in range(40):
        present = np.zeros(K, bool)
        present[rng.choice(K, size=int(rng.integers(2, 8)), replace=False)] = True
        counts = torch.as_tensor(present * rng.integers(1, 5, size=K), dtype=torch.float64)
        losses = rng.uniform(0.05, 6.0, size=K) * present
        grads = rng.normal(size=(K, D)) * present[:, None]
        grads[present] += rng.normal(size=D)                  # correlated clusters: cosines not all ~0
        theirs = _authors_idro_step(theirs, torch.as_tensor(grads), torch.as_tensor(losses), counts)
        g = grads / (1e-12 + np.linalg.norm(grads, axis=1, keepdims=True))
        ours, _ = idro_update(ours, losses, present, g @ g.T)
        assert ours == pytest.approx(theirs.numpy(), rel=1e-9, abs=1e-12)
    assert ours.max() / ours.min() > 5      # the weights moved (absent clusters sit at the 0.01 floor)


def test_kmeans_finds_separated_groups_and_rejects_k_above_n():
    rng = np.random.default_rng(0)
    a = rng.normal([5, 0, 0], 0.05, size=(20, 3))
    b = rng.normal([0, 5, 0], 0.05, size=(20, 3))
    x = np.concatenate([a, b])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cent = kmeans(x, 2, seed=1)
    labels = (x @ cent.T).argmax(1)
    assert len(set(labels[:20])) == 1 and len(set(labels[20:])) == 1 and labels[0] != labels[20]
    with pytest.raises(ConfigError, match="at least K=50"):
        kmeans(x, 50)


def test_registry_builds_idro_and_checks_options():
    cfg = TrainConfig(strategy="idro", idro={"clusters": 7})
    s = build_strategy(cfg, ["a"])
    assert isinstance(s, IDROStrategy) and s.config.clusters == 7 and s.config.beta == 0.25
    with pytest.raises(ConfigError, match="idro option"):
        build_strategy(TrainConfig(strategy="idro", idro={"clusterz": 7}), ["a"])


def test_last_layer_parameters_picks_the_last_blocks(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(tiny_model_path, device="cpu")
    layers = m[0].auto_model.encoder.layer
    got = last_layer_parameters(m, 1)
    assert {id(p) for p in got} == {id(p) for p in layers[-1].parameters()}
    assert len(last_layer_parameters(m, 3)) == len(list(layers.parameters()))   # only 2 layers exist


def _data(folder, n=24):
    """Two collections of word-overlap pairs (as in test_trainer)."""
    import random

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("greek", "letters"):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                q = rng.sample(words, 3)
                f.write(json.dumps({"query": " ".join(q), "positive": " ".join(q + rng.sample(words, 2))}) + "\n")
    return folder


def test_idro_run_refreshes_clusters_writes_weights_and_resumes(tiny_model_path, tmp_path):
    from drmix.train.trainer import Trainer

    data = _data(tmp_path / "data")

    def cfg(out, **kw):
        return TrainConfig(model=tiny_model_path, data=[str(data)], output_dir=str(out), batch_size=8, max_steps=4,
                           learning_rate=1e-3, warmup_ratio=0.0, log_every=1, save_every=2, show_progress=False,
                           device="cpu", seed=0, strategy="idro",
                           idro={"clusters": 3, "refresh_every": 2, "kmeans_iterations": 5}, **kw)

    from drmix.api import default_listeners

    full = Trainer(cfg(tmp_path / "full"), listeners=default_listeners(cfg(tmp_path / "full")))
    full.train()                           # with the default listeners: the report draws weights.png
    out = tmp_path / "full"
    traj = [json.loads(line) for line in (out / "weights.jsonl").read_text().splitlines()]
    assert len(traj) == 4 and set(traj[0]["weights"]) == {"cluster0", "cluster1", "cluster2"}
    assert all(min(t["weights"].values()) >= 0.01 for t in traj)
    refreshes = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "idro_refresh" in line]
    assert [r["idro_refresh"] for r in refreshes] == [1, 2, 3]          # at start, after steps 2 and 4
    assert sum(refreshes[0]["cluster_sizes"]) == 48
    assert (out / "weights.png").exists()
    final = json.loads((out / "weights.json").read_text())
    assert final["strategy"] == "idro" and len(final["cluster_weights"]) == 3

    class Killed(Exception):
        pass

    def kill(ctx):
        if ctx.step == 3:
            raise Killed

    with pytest.raises(Killed):
        Trainer(cfg(tmp_path / "cut"), callbacks=[kill]).train()
    resumed = Trainer(cfg(tmp_path / "cut", resume=True))
    resumed.train()
    a = torch.cat([p.detach().flatten() for p in full.model.parameters()])
    b = torch.cat([p.detach().flatten() for p in resumed.model.parameters()])
    assert torch.equal(a, b)
    assert resumed.strategy.h.tolist() == full.strategy.h.tolist()


def test_idro_rejects_more_clusters_than_queries(tiny_model_path, tmp_path):
    from drmix.train.trainer import Trainer

    data = _data(tmp_path / "data")
    cfg = TrainConfig(model=tiny_model_path, data=[str(data)], output_dir=str(tmp_path / "o"), batch_size=8,
                      max_steps=1, show_progress=False, device="cpu", strategy="idro", idro={"clusters": 500})
    with pytest.raises(ConfigError, match="K=500"):
        Trainer(cfg).train()


def test_idro_config_defaults_are_the_authors():
    c = IDROConfig()
    assert (c.clusters, c.layers, c.beta, c.rho, c.power, c.floor) == (50, 3, 0.25, 0.05, 0.1, 0.01)
    # ANCE/drivers/run_ann_data_gen.py: faiss.Kmeans(dim, K, nredo=5, niter=500), L2
    assert (c.rule, c.kmeans, c.kmeans_restarts, c.kmeans_iterations) == ("authors", "l2", 5, 500)


def _grad_cache_run(tiny_model_path, data, out, chunk):
    from drmix.train.trainer import Trainer

    t = Trainer(TrainConfig(model=tiny_model_path, data=[str(data)], output_dir=str(out), batch_size=8, max_steps=2,
                            learning_rate=1e-3, warmup_ratio=0.0, log_every=1, save_every=100, show_progress=False,
                            device="cpu", seed=0, strategy="idro", grad_cache_chunk=chunk,
                            idro={"clusters": 3, "refresh_every": 0, "kmeans_iterations": 5}))
    t.dropout = False            # the same forward with and without chunks (no dropout masks to replay)
    cos = []
    real = t.strategy._update

    def spy(flats, reached, idx, cl_loss, present, ctx):
        real(flats, reached, idx, cl_loss, present, ctx)
        cos.append(t.strategy.last_cos.copy())

    t.strategy._update = spy
    t.train()
    return t, cos


def test_grad_cache_gives_the_per_cluster_gradients_of_the_uncached_batch(tiny_model_path, tmp_path):
    """--grad-cache-chunk: the per-cluster gradients come from the cached representation gradients and equal
    the uncached ones (cosines to 1e-5), so the weights move exactly as without GradCache."""
    data = _data(tmp_path / "data")
    plain, cos_plain = _grad_cache_run(tiny_model_path, data, tmp_path / "plain", 0)
    cached, cos_cached = _grad_cache_run(tiny_model_path, data, tmp_path / "cached", 3)
    assert len(cos_plain) == len(cos_cached) == 2
    for a, b in zip(cos_plain, cos_cached):
        off = a[~np.eye(3, dtype=bool)]
        assert np.abs(off).max() > 1e-3                     # a real signal, not the zeros of a lost graph
        assert np.allclose(a, b, atol=1e-5, rtol=0)
    assert np.allclose(plain.strategy.h, cached.strategy.h, atol=1e-6, rtol=0)
    assert len(set(np.round(plain.strategy.h, 8))) > 1      # and the weights moved


def test_no_gradient_signal_is_refused():
    s = IDROStrategy(IDROConfig(clusters=2))
    with pytest.raises(ConfigError, match="no gradient signal"):
        s._update([torch.zeros(4), torch.zeros(4)], False, np.array([0, 1]), np.array([1.0, 2.0]),
                  np.array([True, True]), None)


class _Layered(torch.nn.Module):
    """Four linear blocks in an ``encoder.layer`` list (what :func:`last_layer_parameters` looks for)."""

    def __init__(self, d: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.encoder = torch.nn.Module()
        self.encoder.layer = torch.nn.ModuleList([torch.nn.Linear(d, d).double() for _ in range(4)])

    def forward(self, x):
        for blk in self.encoder.layer:
            x = torch.tanh(blk(x))
        return x


def _authors_forward(model, h_fun, losses, g, n_groups, alpha=0.25, rho=0.05, ema=0.1, eps=0.01):
    """``iDROLoss.forward`` of github.com/OpenMatch/COCO-DR (``ANCE/model/dro_loss.py``) on one process, with
    ``_params`` = the last 3 blocks and ``_get_grad``, written out plainly: returns (robust loss, new h_fun)."""
    zero_vec = losses.new_zeros(n_groups)
    gdro_sum_losses = zero_vec.scatter_add(0, g, losses)
    gdro_counts_agg = zero_vec.scatter_add(0, g, losses.new_ones(losses.size(0)))
    gdro_losses_agg = gdro_sum_losses.div(gdro_counts_agg + (gdro_counts_agg == 0).double())
    robust_loss = (gdro_losses_agg * h_fun).sum()
    gdro_loss_mask = (gdro_counts_agg > 0).detach().double()
    params = [p for blk in list(model.encoder.layer)[-3:] for p in blk.parameters()]
    all_grads = [None] * n_groups
    for li in range(n_groups):
        if gdro_counts_agg[li] > 0:
            grad = torch.autograd.grad(gdro_losses_agg[li], params, retain_graph=True)
            all_grads[li] = torch.cat([x.view(-1) for x in grad])
            dim = all_grads[li].shape[0]
    all_grads = torch.cat([x if x is not None else torch.zeros(dim, dtype=losses.dtype) for x in all_grads])
    all_grads = all_grads.reshape(n_groups, -1).detach()
    all_grads = all_grads / (1e-12 + torch.linalg.norm(all_grads, dim=-1, keepdim=True))
    RTG = torch.matmul(all_grads, all_grads.T)
    _gl = torch.pow(gdro_losses_agg.detach().unsqueeze(-1), alpha)
    RTG = torch.mm(_gl, _gl.t()) * RTG
    _exp = rho * torch.mean(RTG, dim=0) * gdro_loss_mask
    _exp -= _exp.max()
    h_fun = torch.pow(h_fun, ema) * torch.exp(_exp) * (gdro_counts_agg != 0).double()
    h_fun = h_fun / h_fun.sum()
    return robust_loss, torch.clamp(h_fun, min=eps)


def test_loss_and_update_match_the_authors_forward_step_by_step():
    """The whole of IDROStrategy.loss (cluster assignment, per-cluster means, gradients on the last 3 blocks,
    their normalisation, the update, the loss weighted by the *previous* weights) against iDROLoss.forward:
    the same loss value, the same parameter gradient and the same weights after each of 6 steps."""
    from drmix.data.batch import Batch
    from drmix.mixture.base import StepContext

    K, n = 5, 7
    model = _Layered()
    rng = np.random.default_rng(0)
    centroids = rng.normal(size=(K, 2)).astype(np.float32) * 4
    s = IDROStrategy(IDROConfig(clusters=K, refresh_every=0))
    s.centroids = centroids
    theirs = torch.ones(K, dtype=torch.float64)
    moved = False
    for step in range(6):
        cluster = rng.integers(0, K - 1, size=n)            # the last cluster never occurs: it stays at the floor
        where = {f"q{step}-{i}": centroids[c] + 0.01 for i, c in enumerate(cluster)}
        x = torch.as_tensor(rng.normal(size=(n, 3)))
        ctx = StepContext(step=step, model=model, optimizer=None, scheduler=None, collection_names=["a"],
                          collection_sizes=[n], compute_losses=lambda b: None,
                          encode_queries=lambda texts, batch_size=128: np.stack([where[t] for t in texts]))
        batch = Batch(list(where), ["p"] * n, [[]] * n, np.zeros(n, dtype=np.int64))
        losses = (model(x) ** 2).sum(-1) * torch.as_tensor(1.0 + np.arange(n) / n)
        ours = s.loss(losses, batch, ctx)
        robust, theirs_next = _authors_forward(model, theirs, losses, torch.as_tensor(cluster), K)
        assert ours.item() == pytest.approx(robust.item(), rel=1e-7)
        g_ours = torch.autograd.grad(ours, list(model.parameters()), retain_graph=True)
        g_theirs = torch.autograd.grad(robust, list(model.parameters()))
        for a, b in zip(g_ours, g_theirs):
            assert torch.allclose(a, b, rtol=1e-7, atol=1e-12)
        theirs = theirs_next
        # (drmix flattens the per-cluster gradients in float32: 1e-7 relative)
        assert s.h == pytest.approx(theirs.numpy(), rel=1e-6, abs=1e-12)
        moved = moved or len(set(np.round(s.h[:K - 1], 9))) > 1
        with torch.no_grad():                                # a training step, so the gradients change
            for p_, gr in zip(model.parameters(), g_ours):
                p_ -= 0.5 * gr
    assert moved and s.h[K - 1] == 0.01


def _cluster_ctx(log=None, n_per=4, encode=True, queries=True):
    """12 queries in three tight groups around (5, 0), (0, 5) and (-5, -5)."""
    from drmix.mixture.base import StepContext

    centres = {"x": (5.0, 0.0), "y": (0.0, 5.0), "z": (-5.0, -5.0)}
    texts = [f"{k}{i}" for k in centres for i in range(n_per)]

    def enc(batch, batch_size=128):
        return np.array([[centres[t[0]][0] + 0.01 * int(t[1:]), centres[t[0]][1]] for t in batch], np.float32)

    return StepContext(step=0, model=None, optimizer=None, scheduler=None, collection_names=["a"],
                       collection_sizes=[len(texts)], compute_losses=lambda b: None,
                       encode_queries=enc if encode else None,
                       training_queries=(lambda: texts) if queries else None,
                       log=(log.append if log is not None else (lambda r: None)))


def test_refresh_assign_schedule_state_and_outputs_without_a_trainer():
    records = []
    s = IDROStrategy(IDROConfig(clusters=3, refresh_every=2, kmeans_iterations=10, kmeans_restarts=2), seed=1)
    s.setup(["a"], [12])
    ctx = _cluster_ctx(records)
    s.refresh(ctx)
    assert s.refreshes == 1 and sorted(s.cluster_sizes.tolist()) == [4, 4, 4]
    assert records[-1]["idro_refresh"] == 1 and records[-1]["queries"] == 12
    assert sorted(records[-1]["cluster_sizes"]) == [4, 4, 4]
    groups = s.assign(ctx.encode_queries(["x0", "x3", "y1", "z2"]))
    assert groups[0] == groups[1] and len({groups[0], groups[2], groups[3]}) == 3
    # the authors' L2 assignment: a far point goes to the nearest centroid, not the largest dot product
    cent = s.centroids
    far = np.array([[100.0, 0.0]], np.float32)
    assert s.assign(far)[0] == int(np.argmin(((cent - far) ** 2).sum(1)))
    # refresh every 2 steps after a step; 0 = never
    for step, expected in ((1, 1), (2, 2), (3, 2), (4, 3)):
        ctx.step = step
        s.after_step(ctx)
        assert s.refreshes == expected
    never = IDROStrategy(IDROConfig(clusters=3, refresh_every=0, kmeans_iterations=5))
    never.centroids = cent
    ctx.step = 1000
    never.after_step(ctx)
    assert never.refreshes == 0
    # outputs and exact state
    s.h = np.array([0.5, 0.25, 0.01])
    s.last = {"present": 2}
    rec = s.trajectory_record(4)
    assert rec == {"weights": {"cluster0": 0.5, "cluster1": 0.25, "cluster2": 0.01}, "present": 2}
    fw = s.final_weights()
    assert fw["strategy"] == "idro" and fw["cluster_weights"] == [0.5, 0.25, 0.01] and fw["clusters"] == 3
    assert fw["refreshes"] == 3 and sorted(fw["cluster_sizes"]) == [4, 4, 4] and fw["options"]["refresh_every"] == 2
    copy = IDROStrategy(IDROConfig(clusters=3))
    copy.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert copy.h.tolist() == s.h.tolist() and copy.refreshes == 3
    assert np.array_equal(copy.centroids, s.centroids) and copy.cluster_sizes.tolist() == s.cluster_sizes.tolist()
    assert copy.centroids.dtype == s.centroids.dtype      # so the resumed assignment computes as the uninterrupted one
    untouched = IDROStrategy(IDROConfig(clusters=3))
    untouched.load_state_dict({})
    assert untouched.centroids is None and untouched.h.tolist() == [1.0, 1.0, 1.0]
    assert untouched.weight_names == ["cluster0", "cluster1", "cluster2"]


def test_refresh_samples_at_most_max_queries_and_spherical_assignment():
    records = []
    s = IDROStrategy(IDROConfig(clusters=3, max_queries=6, kmeans="spherical", kmeans_iterations=10), seed=2)
    ctx = _cluster_ctx(records)
    s.refresh(ctx)
    assert records[-1]["queries"] == 6 and s.cluster_sizes.sum() == 6
    x = np.array([[3.0, 0.1]], np.float32)
    assert s.assign(x)[0] == int(np.argmax(s.centroids @ x[0]))        # spherical: the largest dot product


def test_refresh_needs_queries_an_encoder_and_enough_queries():
    with pytest.raises(ConfigError, match="training queries"):
        IDROStrategy(IDROConfig(clusters=3)).refresh(_cluster_ctx(queries=False))
    with pytest.raises(ConfigError, match="embed queries"):
        IDROStrategy(IDROConfig(clusters=3)).refresh(_cluster_ctx(encode=False))
    with pytest.raises(ConfigError, match="K=13"):
        IDROStrategy(IDROConfig(clusters=13)).refresh(_cluster_ctx())


# ------------------------------------------------------------------ DDP scopes, GradCache, options (unit level)

def _ctx(model, where, step=0, **kw):
    from drmix.mixture.base import StepContext

    return StepContext(step=step, model=model, optimizer=None, scheduler=None, collection_names=["a"],
                       collection_sizes=[len(where)], compute_losses=lambda b: None,
                       encode_queries=lambda texts, batch_size=128: np.stack([where[t] for t in texts]), **kw)


def _batch(queries):
    from drmix.data.batch import Batch

    return Batch(list(queries), ["p"] * len(queries), [[]] * len(queries), np.zeros(len(queries), dtype=np.int64))


_CORNERS = np.array([[0, 0], [10, 0], [0, 10], [10, 10]], np.float32)


class _OtherRank:
    """all_reduce over two processes, the other one's contributions given: its cluster counts, its cluster loss
    sums and its per-cluster gradients (in the order the globally present clusters are differentiated)."""

    def __init__(self, counts, sums, flats):
        self.counts, self.sums, self.flats = counts, sums, list(flats)
        self.k_calls = 0

    def __call__(self, x, op="sum"):
        assert op == "sum"
        if x.dtype == torch.float64 and x.shape == (len(self.counts),):
            other = (self.counts, self.sums)[self.k_calls]
            self.k_calls += 1
            return x + torch.as_tensor(other, dtype=x.dtype)
        return x + self.flats.pop(0)


def _last_blocks_grad(model, objective):
    params = [p for blk in list(model.encoder.layer)[-3:] for p in blk.parameters()]
    g = torch.autograd.grad(objective, params, retain_graph=True)
    return torch.cat([x.reshape(-1) for x in g]).float()


@pytest.mark.parametrize("scope", [None, "rank", "global"])
def test_two_processes_rank_and_global_scope_by_hand(scope):
    """Module docstring, DDP: ``rank`` keeps this process's counts, cluster losses and weights and sums only the
    per-cluster gradients; ``global`` all-reduces counts and loss sums too and back-propagates
    ``world * sum_i h_i (local sum_i / global n_i)``. This process holds clusters 0 (2 queries) and 1 (1); the
    other one clusters 1 (2 queries, loss sum 5) and 2 (1 query, loss 3); cluster 3 is nowhere. Without a ``scope``
    the strategy is the authors' (``rank``)."""
    K = 4
    model = _Layered()
    s = IDROStrategy(IDROConfig(clusters=K, refresh_every=0, **({} if scope is None else {"scope": scope})))
    per_rank = scope != "global"
    s.centroids = _CORNERS.copy()
    where = {"a": _CORNERS[0], "b": _CORNERS[0], "c": _CORNERS[1]}
    x = torch.as_tensor(np.random.default_rng(3).normal(size=(3, 3)))
    losses = (model(x) ** 2).sum(-1) * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    a, b, c = losses.tolist()
    rng = np.random.default_rng(5)
    other = [torch.zeros(36), torch.as_tensor(rng.normal(size=36), dtype=torch.float32),
             torch.as_tensor(rng.normal(size=36), dtype=torch.float32)]        # clusters 0 (absent there), 1, 2
    reduce = _OtherRank([0.0, 2.0, 1.0, 0.0], [0.0, 5.0, 3.0, 0.0], other)
    out = s.loss(losses, _batch(where), _ctx(model, where, world_size=2, all_reduce=reduce))
    if per_rank:
        n = [2, 1, 1, 1]                                           # this process's counts (at least 1)
        assert out.item() == pytest.approx((a + b) / 2 + c, rel=1e-12)
        cl_loss, present = np.array([(a + b) / 2, c, 0, 0]), np.array([True, True, False, False])
    else:
        n = [2, 3, 1, 1]                                           # the global counts
        assert out.item() == pytest.approx(2 * ((a + b) / 2 + c / 3), rel=1e-12)
        cl_loss, present = np.array([(a + b) / 2, (c + 5) / 3, 3.0, 0]), np.array([True, True, True, False])
    local = [(losses[0] + losses[1]) / n[0], losses[2] / n[1]]
    g = [_last_blocks_grad(model, local[0]) + other[0], _last_blocks_grad(model, local[1]) + other[1], other[2]]
    G = torch.stack([v / v.norm() for v in g]).double().numpy()
    cos = np.zeros((K, K))
    cos[:3, :3] = G @ G.T
    want, _ = idro_update(np.ones(K), cl_loss, present, cos)
    assert s.h == pytest.approx(want, rel=1e-6, abs=1e-12)
    # rank: cluster 2, seen only by the other process, drops to the floor here; global: it is weighted
    assert (s.h[2] == 0.01) == per_rank and s.h[3] == 0.01
    assert s.trajectory_record(0)["present"] == int(present.sum())


def test_grad_cache_per_cluster_gradients_equal_the_uncached_ones_without_a_trainer():
    """GradCache (module docstring, step 3): the loss sees detached embeddings, each cluster's representation
    gradient is projected through the chunks' re-forward; the weights come out as without the cache. The
    documents' embeddings are not used by this (query-only) loss, which must not break the projection."""
    from drmix.train.gradcache import GradCache

    K = 3
    cluster = [0, 0, 1, 1, 2, 0, 1]
    where = {f"q{i}": _CORNERS[c] for i, c in enumerate(cluster)}
    rng = np.random.default_rng(1)
    xq, xd = torch.as_tensor(rng.normal(size=(7, 3))), torch.as_tensor(rng.normal(size=(7, 3)))
    scale = torch.as_tensor(1.0 + np.arange(7) / 3)

    def fresh():
        s = IDROStrategy(IDROConfig(clusters=K, refresh_every=0))
        s.centroids = _CORNERS[:K].copy()
        return s

    model = _Layered()
    plain = fresh()
    want = plain.loss((model(xq) ** 2).sum(-1) * scale, _batch(where), _ctx(model, where))
    cached = fresh()
    ctx = _ctx(model, where)
    cache = GradCache(lambda q, d: (model(q), model(d)), chunk_size=3)

    def loss_fn(q, d):
        ctx.embeddings, ctx.grad_cache = (q, d), cache
        return cached.loss((q ** 2).sum(-1) * scale, _batch(where), ctx)

    got = cache.step([xq, xd], loss_fn)
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    assert cached.h == pytest.approx(plain.h, rel=1e-6, abs=1e-12)
    assert len(set(np.round(plain.h, 9))) == K                  # the weights moved


def test_losses_that_miss_the_last_layers_are_refused():
    """Per-cluster gradients that reach none of the last 3 blocks: a ConfigError, not uniform weights."""
    model = _Layered()
    s = IDROStrategy(IDROConfig(clusters=2, refresh_every=0))
    s.centroids = _CORNERS[:2].copy()
    where = {"a": _CORNERS[0], "b": _CORNERS[1]}
    x = torch.as_tensor(np.ones((2, 3)))
    losses = (model.encoder.layer[0](x) ** 2).sum(-1)             # only the first block
    with pytest.raises(ConfigError, match="no gradient signal"):
        s.loss(losses, _batch(where), _ctx(model, where))


@pytest.mark.parametrize("rule", ["authors", "present"])
def test_update_uses_the_configured_options_and_normalises_small_gradients(rule):
    """beta, rho, power, floor and rule reach the update; per-cluster gradients far below norm 1 are
    normalised all the same (their dot products are cosines)."""
    opts = dict(beta=0.5, rho=3.0, power=0.5, floor=0.05, rule=rule)
    s = IDROStrategy(IDROConfig(clusters=4, **opts))
    s.h = np.array([0.4, 0.3, 0.2, 0.1])
    flats = [torch.tensor([3e-4, 0, 0]), torch.tensor([0, 2e-4, 0]), torch.tensor([1e-4, 1e-4, 0])]
    r = 1 / math.sqrt(2)
    cos = np.array([[1, 0, r, 0], [0, 1, r, 0], [r, r, 1, 0], [0, 0, 0, 0]])
    cl_loss, present = np.array([1.0, 4.0, 9.0, 0.0]), np.array([True, True, True, False])
    want, _ = idro_update(s.h, cl_loss, present, cos, **opts)
    s._update(flats, True, np.array([0, 1, 2]), cl_loss, present, _ctx(None, {}))
    assert s.h == pytest.approx(want, rel=1e-6)
    assert not np.allclose(want, idro_update([0.4, 0.3, 0.2, 0.1], cl_loss, present, cos)[0])   # options matter


def test_a_fresh_strategy_clusters_before_its_first_loss_and_keeps_the_training_dtype():
    records = []
    ctx = _cluster_ctx(records)
    model = _Layered().float()
    ctx.model = model
    s = IDROStrategy(IDROConfig(clusters=3, kmeans_iterations=10))
    assert s.trajectory_record(0) == {"weights": {"cluster0": 1.0, "cluster1": 1.0, "cluster2": 1.0}}
    queries = ["x0", "x1", "y2", "z0", "z1"]
    losses = (model(torch.ones(5, 3)) ** 2).sum(-1) * torch.arange(1.0, 6.0)
    out = s.loss(losses, _batch(queries), ctx)
    assert s.refreshes == 1 and records[-1]["idro_refresh"] == 1 and s.centroids is not None
    assert out.dtype == torch.float32                              # the robust loss stays float32
    assert s.trajectory_record(1)["present"] == 3
    out.backward()


def test_outputs_and_state_before_the_first_refresh():
    """weights.json, weights.jsonl and the checkpoint of a strategy that has not clustered yet (a run cut
    before its first step): integer cluster sizes, no centroids, and a resume that still clusters first."""
    s = IDROStrategy(IDROConfig(clusters=3))
    s.setup(["a"], [5])
    fw = json.loads(json.dumps(s.final_weights()))
    assert fw["cluster_sizes"] == [0, 0, 0] and json.dumps(fw["cluster_sizes"]) == "[0, 0, 0]"
    assert set(fw) == {"strategy", "collections", "weights", "cluster_weights", "clusters", "cluster_sizes",
                       "refreshes", "options"} and fw["strategy"] == "idro"
    state = json.loads(json.dumps(s.state_dict()))
    assert state["centroids"] is None and state["refreshes"] == 0
    resumed = IDROStrategy(IDROConfig(clusters=3))
    resumed.load_state_dict(state)
    assert resumed.centroids is None and resumed.h.tolist() == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------ refresh: the options, DDP, the log

def test_refresh_passes_its_options_and_a_per_refresh_seed_to_kmeans(monkeypatch):
    import drmix.mixture.idro as idro

    calls = []
    real = idro.kmeans

    def spy(x, k, **kw):
        calls.append(kw)
        return real(x, k, **kw)

    monkeypatch.setattr(idro, "kmeans", spy)
    s = IDROStrategy(IDROConfig(clusters=3, kmeans_iterations=7, kmeans_restarts=2, kmeans="spherical"), seed=11)
    ctx = _cluster_ctx()
    s.refresh(ctx)
    s.refresh(ctx)
    assert calls == [dict(iterations=7, restarts=2, spherical=True, seed=11),
                     dict(iterations=7, restarts=2, spherical=True, seed=12)]
    assert np.linalg.norm(s.centroids, axis=1) == pytest.approx([1, 1, 1], abs=1e-5)   # spherical centroids


def test_refresh_log_line_and_encoder_batch_size():
    records, sizes = [], []
    ctx = _cluster_ctx(records)
    enc = ctx.encode_queries

    def spy(texts, batch_size=128):
        sizes.append(batch_size)
        return enc(texts)

    ctx.encode_queries = spy
    ctx.step = 40
    s = IDROStrategy(IDROConfig(clusters=3, encode_batch_size=5, kmeans_iterations=5))
    s.refresh(ctx)
    assert sizes == [5]
    assert records[-1]["step"] == 40 and records[-1]["queries"] == 12


def test_refresh_allows_as_many_clusters_as_queries():
    s = IDROStrategy(IDROConfig(clusters=12, kmeans_iterations=5, kmeans_restarts=1))
    s.refresh(_cluster_ctx())
    assert s.cluster_sizes.tolist() == [1] * 12


def test_cluster_sizes_count_every_cluster_even_an_empty_one():
    """Duplicate queries (one embedding for many texts): more clusters than distinct points, so some
    centroid gets no query; the sizes still have one entry per cluster."""
    from drmix.mixture.base import StepContext

    texts = [f"t{i}" for i in range(8)]
    pts = {t: ([0.0, 0.0] if i < 6 else [9.0, 9.0]) for i, t in enumerate(texts)}
    ctx = StepContext(step=0, model=None, optimizer=None, scheduler=None, collection_names=["a"],
                      collection_sizes=[8], compute_losses=lambda b: None, training_queries=lambda: texts,
                      encode_queries=lambda b, batch_size=128: np.array([pts[t] for t in b], np.float32))
    s = IDROStrategy(IDROConfig(clusters=4, kmeans_iterations=5, kmeans_restarts=1), seed=3)
    s.setup(["a"], [8])
    s.refresh(ctx)                                                 # (seed 3: the last clusters are the empty ones)
    assert len(s.cluster_sizes) == 4 and sorted(s.cluster_sizes.tolist()) == [0, 0, 2, 6]
    assert json.loads(json.dumps(s.final_weights()))["cluster_sizes"] == s.cluster_sizes.tolist()


def test_refresh_sample_is_distinct_seeded_and_changes_per_refresh():
    seen = []
    ctx = _cluster_ctx()
    enc = ctx.encode_queries

    def spy(texts, batch_size=128):
        seen.append(list(texts))
        return enc(texts)

    ctx.encode_queries = spy
    a = IDROStrategy(IDROConfig(clusters=3, max_queries=11, kmeans_iterations=5), seed=3)
    a.refresh(ctx)
    a.refresh(ctx)
    IDROStrategy(IDROConfig(clusters=3, max_queries=11, kmeans_iterations=5), seed=3).refresh(ctx)
    assert all(len(set(q)) == 11 for q in seen)                    # without replacement
    assert seen[2] == seen[0] and seen[1] != seen[0]               # the same seed, the same sample


def test_refresh_under_several_processes_takes_rank_zeros_centroids(monkeypatch):
    import drmix.mixture.idro as idro

    got = []
    rank0 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

    def fake_broadcast(value, src=0):
        got.append((value.shape, value.device, src))
        return rank0.clone()

    monkeypatch.setattr(idro, "broadcast", fake_broadcast)
    ctx = _cluster_ctx()
    s = IDROStrategy(IDROConfig(clusters=3, kmeans_iterations=5))
    s.refresh(ctx)                                                 # one process: nothing to broadcast
    assert got == []
    ctx.world_size, ctx.device = 2, torch.device("meta")
    s.refresh(ctx)
    assert got == [((3, 2), torch.device("meta"), 0)]
    assert np.array_equal(s.centroids, rank0.numpy())


# ------------------------------------------------------------------ k-means, the nearest centroid, the layers

def _blobs(n=200, seed=0):
    return np.random.default_rng(seed).uniform(size=(n, 2)).astype(np.float32)


def _inertia(x, cent):
    return float(((x[:, None, :] - cent[None]) ** 2).sum(-1).min(1).sum())


def test_kmeans_iterations_restarts_and_seed_take_effect(capfd):
    x = _blobs()
    assert not np.allclose(kmeans(x, 8, iterations=1, restarts=1), kmeans(x, 8, iterations=60, restarts=1))
    one = kmeans(x, 8, iterations=20, restarts=1, seed=4)
    best = kmeans(x, 8, iterations=20, restarts=6, seed=4)
    assert _inertia(x, best) < _inertia(x, one)                   # the best of 6 restarts
    assert np.array_equal(kmeans(x, 8, iterations=20, restarts=1, seed=4), one)
    assert not np.allclose(kmeans(x, 8, iterations=20, restarts=1, seed=5), one)
    # a run seed past 2**31 (seed + refreshes) wraps instead of failing
    assert np.array_equal(kmeans(x, 8, iterations=20, restarts=1, seed=2**31 + 4), one)
    assert capfd.readouterr() == ("", "")                          # quiet


def test_kmeans_is_l2_by_default_quiet_on_few_points_and_uses_every_point(capfd):
    x = _blobs(12) * 10 + 5
    cent = kmeans(x, 3, iterations=10)
    assert np.linalg.norm(cent, axis=1).min() > 2                  # L2 centroids, not unit vectors
    assert len(kmeans(x[:3], 3, iterations=5)) == 3                # K = n is allowed
    many = _blobs(600, seed=2)
    assert kmeans(many, 1, iterations=3, restarts=1) == pytest.approx(many.mean(0, keepdims=True), abs=1e-5)
    assert capfd.readouterr() == ("", "")                          # no faiss warnings (too few / too many)


def test_assign_is_the_nearest_centroid_in_l2():
    s = IDROStrategy(IDROConfig(clusters=2))
    s.centroids = np.array([[0.0, 0.0], [4.0, 0.0]], np.float32)
    assert s.assign(np.array([[1.5, 0.0], [2.5, 0.0]])).tolist() == [0, 1]


class _Named(torch.nn.Module):
    def __init__(self, name, n, extra=None):
        super().__init__()
        setattr(self, name, torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(n)]))
        if extra:
            setattr(self, extra[0], torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(extra[1])]))


@pytest.mark.parametrize("name", ["layer", "layers", "h", "block", "blocks"])
def test_last_layer_parameters_finds_each_layer_list_name(name):
    m = _Named(name, 4)
    assert {id(p) for p in last_layer_parameters(m, 2)} == {id(p) for p in getattr(m, name)[2:].parameters()}


def test_last_layer_parameters_skips_other_lists_keeps_the_first_of_equals_and_refuses_none():
    m = _Named("layer", 3, extra=("heads", 6))                    # a longer list that is not transformer layers
    assert {id(p) for p in last_layer_parameters(m, 1)} == {id(p) for p in m.layer[2].parameters()}
    encdec = torch.nn.Module()
    encdec.encoder, encdec.decoder = _Named("block", 2), _Named("block", 2)
    assert {id(p) for p in last_layer_parameters(encdec, 1)} == {id(p) for p in encdec.encoder.block[1].parameters()}
    one = _Named("layer", 1)
    assert len(last_layer_parameters(one, 3)) == 2
    with pytest.raises(ConfigError, match="cannot find the transformer layers"):
        last_layer_parameters(torch.nn.Linear(2, 2), 3)
