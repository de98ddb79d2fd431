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


# -- the miner's settings and the rules' edges ------------------------------------------------------------------

def _angles(tmp_path):
    """One collection 'a': a0 has no negative; a1 and a2 have one each (the pool: pa0 pa1 na1 pa2 na2)."""
    d = tmp_path / "angles"
    d.mkdir(exist_ok=True)
    rows = [{"query": "a0", "positive": "pa0"},
            {"query": "a1", "positive": "pa1", "negatives": ["na1"]},
            {"query": "a2", "positive": "pa2", "negatives": ["na2"]}]
    (d / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from drmix.data.collections import load_collections

    return load_collections([str(d)])


@pytest.fixture
def angle_miner(monkeypatch):
    """Unit vectors by hand: against the query a0 the pool scores pa0 1.0, pa1 0.97, pa2 0.5, na1 -0.17,
    na2 -0.5; records the model each embedding was asked of, and replaces load_encoder by a recorder."""
    import math

    from drmix.augment import mine as mine_mod
    import drmix.model.encoder as enc_mod

    angle = {"a0": 0.0, "pa0": 0.0, "pa1": math.acos(0.97), "pa2": math.acos(0.5), "na1": math.radians(100),
             "na2": math.radians(120), "a1": 2.0, "a2": 2.5}
    seen = {"embed": [], "load": []}

    def vec(t):
        a = angle.get(t, sum(map(ord, t)) % 7)                   # other texts: anywhere, deterministically
        return np.array([math.cos(a), math.sin(a)], np.float32)

    def fake_embed(model, queries, docs, **kw):
        seen["embed"].append(model)
        return np.stack([vec(t) for t in queries]), np.stack([vec(t) for t in docs])

    def fake_load(path=None, *a, **kw):
        seen["load"].append(path)
        return ("encoder", path)

    monkeypatch.setattr(mine_mod, "embed", fake_embed)
    monkeypatch.setattr(enc_mod, "load_encoder", fake_load)
    return seen


def _negs(cols):
    return cols[0].dataset["negatives"]


def test_mining_defaults_filter_near_positives_and_the_window_and_ratio_given_are_used(tmp_path, angle_miner):
    """drmix mine's defaults: ranks 1-30 and the positive-aware filter at 0.95 (pa1 scores 0.97 of a0's positive:
    filtered, so pa2 is mined); without the filter pa1 (rank 1) is mined; window 3:3 gives the third candidate."""
    cols = _angles(tmp_path)
    report = opt.mine_missing_negatives(cols, 1, model=object())
    assert _negs(cols) == [["pa2"], ["na1"], ["na2"]]
    assert report["a"] == {"examples": 3, "needed": 1, "mined": 1, "short": 0, "pool": 5, "filtered": 1}
    cols = _angles(tmp_path)
    assert opt.mine_missing_negatives(cols, 1, model=object(), max_score_ratio=None)["a"]["filtered"] == 0
    assert _negs(cols)[0] == ["pa1"]
    cols = _angles(tmp_path)
    opt.mine_missing_negatives(cols, 1, model=object(), window="3:3", max_score_ratio=None)
    assert _negs(cols)[0] == ["na1"]
    cols = _angles(tmp_path)
    report = opt.mine_missing_negatives(cols, 1, model=object(), window="1:1")    # only pa1, filtered: short
    assert _negs(cols)[0] == [] and report["a"]["short"] == 1


def test_mined_column_keeps_its_type_when_nothing_could_be_mined(tmp_path, angle_miner):
    """A one-example collection has nothing to mine from: its negatives stay an (empty) list of strings, as the
    other collections' are, not a list of nothing."""
    from drmix.data.collections import load_collections

    d = tmp_path / "solo"
    d.mkdir()
    (d / "solo.jsonl").write_text(json.dumps({"query": "a0", "positive": "pa0"}) + "\n")
    cols = load_collections([str(d)])
    feature = cols[0].dataset.features["negatives"]
    report = opt.mine_missing_negatives(cols, 1, model=object())
    assert report["solo"]["short"] == 1 and cols[0].dataset["negatives"] == [[]]
    assert cols[0].dataset.features["negatives"] == feature


def test_the_miner_named_is_the_one_that_mines_and_is_loaded_only_when_needed(tmp_path, angle_miner):
    from pathlib import Path

    miner = object()
    opt.mine_missing_negatives(_angles(tmp_path), 1, model=miner)
    assert angle_miner["embed"] == [miner] and angle_miner["load"] == []
    opt.mine_missing_negatives(_angles(tmp_path), 1, model=Path("models/m"))
    assert angle_miner["load"] == ["models/m"] and angle_miner["embed"][-1] == ("encoder", "models/m")
    opt.mine_missing_negatives(_angles(tmp_path), 1)                    # drmix mine's default model
    assert angle_miner["load"][-1] is None and angle_miner["embed"][-1] == ("encoder", None)
    angle_miner["load"].clear()
    angle_miner["embed"].clear()
    cols = _angles(tmp_path)
    cols[0].dataset = cols[0].dataset.map(lambda r: {"negatives": r["negatives"] or ["na1"]})
    report = opt.mine_missing_negatives(cols, 1, model="no/such/model")    # every example has one: no load
    assert report["a"] == {"examples": 3, "needed": 0, "mined": 0, "short": 0}
    assert angle_miner["load"] == [] and angle_miner["embed"] == []


def test_optimize_mines_with_the_miner_given(tmp_path, recorded, angle_miner):
    opt.optimize_weights(_config(tmp_path, num_negatives=1), miner="models/miner")
    assert set(angle_miner["load"]) == {"models/miner"}
    assert set(angle_miner["embed"]) == {("encoder", "models/miner")}


def test_one_negative_is_filled_too(tmp_path, recorded, hand_miner):
    """num_negatives 1 (the earlier stage-1 setting) still tops up, by both rules."""
    opt.optimize_weights(_config(tmp_path, num_negatives=1), miner=object())
    assert all(len(n) == 1 for c in recorded["collections"] for n in c.dataset["negatives"])
    opt.optimize_weights(_config(tmp_path, num_negatives=1), fill_negatives="random")
    assert all(len(n) == 1 for c in recorded["collections"] for n in c.dataset["negatives"])


def test_random_rule_draws_with_the_run_seed(tmp_path, recorded):
    from drmix.data.collections import load_collections

    for seed in (1, 7):
        cfg = _config(tmp_path, num_negatives=2, seed=seed)
        opt.optimize_weights(cfg, fill_negatives="random")
        got = next(c for c in recorded["collections"] if c.name == "b").dataset["negatives"]
        want = opt.fill_missing_negatives(load_collections([str(_data(tmp_path))]), 2, seed=seed)
        assert got == next(c for c in want if c.name == "b").dataset["negatives"]


def test_negatives_json_goes_into_a_new_nested_or_an_existing_output_folder(tmp_path, recorded, hand_miner):
    nested = tmp_path / "runs" / "deep" / "out"
    opt.optimize_weights(_config(tmp_path, num_negatives=1, output_dir=str(nested)), miner=object())
    assert json.loads((nested / "negatives.json").read_text())["rule"] == "mine"
    opt.optimize_weights(_config(tmp_path, num_negatives=2, output_dir=str(nested)), miner=object())  # resumed
    assert json.loads((nested / "negatives.json").read_text())["num_negatives"] == 2


def test_a_rank_other_than_0_mines_the_same_negatives_and_writes_no_counts(tmp_path, recorded, hand_miner,
                                                                            monkeypatch):
    """drmix adapt under torchrun: every rank mines (in shards) and trains, rank 0 alone writes negatives.json."""
    from drmix.retrieval import shards

    opt.optimize_weights(_config(tmp_path, num_negatives=3), miner=object())
    main = [list(c.dataset["negatives"]) for c in recorded["collections"]]
    monkeypatch.setattr(shards, "writes_here", lambda: False)
    opt.optimize_weights(_config(tmp_path, num_negatives=3, output_dir=str(tmp_path / "rank1")), miner=object())
    assert [list(c.dataset["negatives"]) for c in recorded["collections"]] == main
    assert (tmp_path / "out" / "negatives.json").exists() and not (tmp_path / "rank1").exists()


def test_mixed_batches_do_not_warn_and_non_bool_rules_are_refused(tmp_path, recorded, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="drmix.recipes.optimize"):
        opt.optimize_weights(_config(tmp_path), fill_negatives="off")
    assert not any("mixed batches" in r.message for r in caplog.records)
    for bad in (1, 0, ["mine"]):                                  # only True/False stand for mine/off
        with pytest.raises(ConfigError, match="negatives rule"):
            opt.optimize_weights(_config(tmp_path), fill_negatives=bad)


def test_fill_edges(tmp_path, caplog):
    """A two-example collection gives each example the other's positive; one negative asked is one given; a
    collection with nothing missing, or a one-example one, is left as it is and nothing is logged for it."""
    import logging

    from drmix.data.collections import load_collections

    d = tmp_path / "edges"
    d.mkdir()
    (d / "two.jsonl").write_text("".join(json.dumps({"query": f"q{i}", "positive": f"p{i}"}) + "\n" for i in range(2)))
    (d / "one.jsonl").write_text(json.dumps({"query": "q", "positive": "p"}) + "\n")
    (d / "full.jsonl").write_text("".join(json.dumps({"query": f"f{i}", "positive": f"fp{i}", "negatives": [f"fn{i}"]})
                                          + "\n" for i in range(3)))
    with caplog.at_level(logging.INFO, logger="drmix.recipes.optimize"):
        out = {c.name: c for c in opt.fill_missing_negatives(load_collections([str(d)]), 1)}
    assert out["two"].dataset["negatives"] == [["p1"], ["p0"]]
    assert out["one"].dataset["negatives"] == [[]]
    assert out["full"].dataset["negatives"] == [["fn0"], ["fn1"], ["fn2"]]
    filled = [r.getMessage() for r in caplog.records if "same-collection" in r.getMessage()]
    assert len(filled) == 1 and filled[0].startswith("stage 1: two:")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="drmix.recipes.optimize"):
        opt.fill_missing_negatives(load_collections([str(d)]), 0)
    assert not any("same-collection" in r.getMessage() for r in caplog.records)


def test_stage1_resumes_unless_told_not_to(tmp_path):
    base = TrainConfig(data=[str(_data(tmp_path))], output_dir=str(tmp_path / "x"))
    assert opt.stage1_config(base, strategy="tdro", reference="r", output_dir=tmp_path / "o").run.resume is True
    assert opt.stage1_config(base, strategy="tdro", reference="r", output_dir=tmp_path / "o",
                             overrides={"resume": False}).run.resume is False


def test_the_cosine_temperature_on_dot_products_is_refused_unless_stage1_has_its_own(tmp_path):
    base = TrainConfig(data=[str(_data(tmp_path))], output_dir=str(tmp_path / "x"), normalize=False)
    with pytest.raises(ConfigError, match=r"normalize is off: it would divide raw dot products by 0\.002.*"
                                          r"--stage1 temperature=0\.05.*--temperature 0\.05"):
        opt.stage1_config(base, strategy="tdro", reference="r", output_dir=tmp_path / "o")
    given = opt.stage1_config(base, strategy="tdro", reference="r", output_dir=tmp_path / "o",
                              overrides={"temperature": 0.05})
    assert given.contrastive.temperature == 0.05 and given.model.normalize is False
    cosine = opt.stage1_config(base.replace(normalize=True), strategy="tdro", reference="r",
                               output_dir=tmp_path / "o")
    assert cosine.contrastive.temperature == opt.STAGE1_TEMPERATURE
