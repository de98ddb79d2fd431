"""Stage 1 on its own (drmix.recipes.optimize): the negatives rules and the checks before training, with the
trainer replaced by a recorder (the training itself is tested in tests/recipes/test_tdro.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.recipes import optimize as opt


def _data(tmp_path):
    d = tmp_path / "train"
    d.mkdir(exist_ok=True)
    rows = {"a": [{"query": f"a{i}", "positive": f"pa{i}", "negatives": [f"na{i}"]} for i in range(5)],
            "b": [{"query": f"b{i}", "positive": f"pb{i}"} for i in range(5)]}
    for name, rs in rows.items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rs))
    return d


@pytest.fixture
def recorded(monkeypatch):
    """drmix.api.train replaced: records the config, the strategy and the collections it gets."""
    import drmix.api as trainer_mod

    calls = {}

    def fake_train(config, *, strategy=None, collections=None, **kw):
        calls.update(config=config, strategy=strategy, collections=collections)
        return "result"

    monkeypatch.setattr(trainer_mod, "train", fake_train)
    return calls


@pytest.fixture
def hand_miner(monkeypatch):
    """Embeddings by hand: every text is a unit vector from its number, so the ranking is deterministic."""
    from drmix.augment import mine as mine_mod

    def vec(text):
        n = int("".join(c for c in text if c.isdigit()) or 0)
        return np.array([np.cos(n / 3), np.sin(n / 3), 0.3], np.float32)

    def fake_embed(model, queries, docs, **kw):
        q = np.stack([vec(t) for t in queries])
        d = np.stack([vec(t) for t in docs])
        return q / np.linalg.norm(q, axis=1, keepdims=True), d / np.linalg.norm(d, axis=1, keepdims=True)

    monkeypatch.setattr(mine_mod, "embed", fake_embed)


def _config(tmp_path, **kw):
    base = TrainConfig(data=[str(_data(tmp_path))], output_dir=str(tmp_path / "out"), seed=1)
    return opt.stage1_config(base, strategy="tdro", reference="ref", output_dir=tmp_path / "out", overrides=kw)


def test_mine_rule_tops_up_and_writes_the_counts(tmp_path, recorded, hand_miner):
    cfg = _config(tmp_path, num_negatives=3)
    assert opt.optimize_weights(cfg, miner=object()) == "result"
    cols = {c.name: c for c in recorded["collections"]}
    assert all(len(n) == 3 for c in cols.values() for n in c.dataset["negatives"])
    assert [n[0] for n in cols["a"].dataset["negatives"]] == [f"na{i}" for i in range(5)]   # own ones kept first
    report = json.loads((tmp_path / "out" / "negatives.json").read_text())
    assert report["num_negatives"] == 3 and report["rule"] == "mine"
    assert report["collections"]["a"]["needed"] == 5 and report["collections"]["a"]["mined"] == 10
    assert report["collections"]["b"]["needed"] == 5 and report["collections"]["b"]["mined"] == 5 * 3
    assert recorded["strategy"].name == "tdro" and recorded["config"].mixture.strategy == "tdro"


def test_random_and_off_rules(tmp_path, recorded):
    cfg = _config(tmp_path, num_negatives=2)
    opt.optimize_weights(cfg, fill_negatives="random")
    b = next(c for c in recorded["collections"] if c.name == "b")
    assert all(len(n) == 2 for n in b.dataset["negatives"])                # from other examples' positives
    a = next(c for c in recorded["collections"] if c.name == "a")
    assert all(len(n) == 1 for n in a.dataset["negatives"])                # had one: random leaves it
    assert not (tmp_path / "out" / "negatives.json").exists()
    for off in ("off", False):
        opt.optimize_weights(cfg, fill_negatives=off)
        b = next(c for c in recorded["collections"] if c.name == "b")
        assert all(n == [] for n in b.dataset["negatives"])


def test_true_means_mine_and_in_batch_runs_leave_the_data(tmp_path, recorded, hand_miner):
    opt.optimize_weights(_config(tmp_path, num_negatives=2), fill_negatives=True, miner=object())
    assert all(len(n) == 2 for c in recorded["collections"] for n in c.dataset["negatives"])
    opt.optimize_weights(_config(tmp_path, num_negatives=2, in_batch_negatives=True), miner=object())
    b = next(c for c in recorded["collections"] if c.name == "b")
    assert all(n == [] for n in b.dataset["negatives"])
    opt.optimize_weights(_config(tmp_path, num_negatives=0), miner=object())      # no hard negatives asked
    b = next(c for c in recorded["collections"] if c.name == "b")
    assert all(n == [] for n in b.dataset["negatives"])


def test_checks_before_training(tmp_path, recorded, caplog):
    with pytest.raises(ConfigError, match="negatives rule"):
        opt.optimize_weights(_config(tmp_path), fill_negatives="bogus")
    with pytest.raises(ConfigError, match="weight-learning strategy"):
        opt.optimize_weights(_config(tmp_path), strategy="static")
    no_ref = _config(tmp_path).replace(reference_model=None)
    with pytest.raises(ConfigError, match="frozen reference"):
        opt.optimize_weights(no_ref)
    assert recorded == {}
    opt.optimize_weights(no_ref, strategy="GroupDRO", fill_negatives="off")     # raw: no reference needed
    assert recorded["config"].mixture.strategy == "groupdro" and recorded["strategy"].config.measurement == "raw"
    import logging

    with caplog.at_level(logging.WARNING, logger="drmix.recipes.optimize"):
        opt.optimize_weights(_config(tmp_path, batching="homogeneous"), fill_negatives="off")
    assert any("mixed batches" in r.message for r in caplog.records)


def test_fill_missing_negatives_by_hand(tmp_path):
    """Examples without negatives get k = min(n, size - 1) distinct first positives of the other examples, drawn
    by the seeded generator ([seed, collection index, 15485863]); the example itself is never drawn."""
    from drmix.data.collections import load_collections

    cols = load_collections([str(_data(tmp_path))])
    out = opt.fill_missing_negatives(cols, 9, seed=4)
    b = next(c for c in out if c.name == "b")
    firsts = [p[0] for p in b.dataset["positives"]]
    rng = np.random.default_rng([4, 1, 15485863])
    for i, negs in enumerate(b.dataset["negatives"]):
        picks = rng.choice(4, size=4, replace=False)
        assert negs == [firsts[j + (j >= i)] for j in picks]
    one = opt.fill_missing_negatives(load_collections([str(_data(tmp_path))]), 0)
    assert all(n == [] for n in next(c for c in one if c.name == "b").dataset["negatives"])
