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
    # clusters 0, 1 present with opposite gradients, cluster 2 absent; previous weights almost all on 0
    cos = np.array([[1, -1, 0], [-1, 1, 0], [0, 0, 0.0]])
    h_prev = np.array([1 - 2e-30, 1e-30, 1e-30])
    # l^0.25 = sqrt2, 1 -> r = [[2, -sqrt2], [-sqrt2, 1]]; means (2-sqrt2)/2, (1-sqrt2)/2; absent: 0
    e = np.array([0.05 * (2 - math.sqrt(2)) / 2, 0.05 * (1 - math.sqrt(2)) / 2, 0.0])
    e = e - e.max()                                            # [0, -0.025, -0.0146447]
    h, expo = idro_update(h_prev, np.array([4.0, 1.0, 99.0]), np.array([True, True, False]), cos)
    assert expo == pytest.approx(e, abs=1e-9)
    raw = np.array([1.0, 1e-3, 1e-3]) * np.exp(e)              # h^0.1 = 1, 1e-3, 1e-3
    raw = raw / raw.sum()                                      # [0.998043, 0.000975, 0.000985]
    assert h == pytest.approx([raw[0], 0.01, 0.01], abs=1e-9)  # floored, not renormalised (authors' code)


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

    full = Trainer(cfg(tmp_path / "full"))
    full.train()
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
