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
