"""Transfer of learned weights into fine-tuning: top-K selection, sample-ratio and loss reweighting."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from drmix.errors import ConfigError
from drmix.data.batch import Batch
from drmix.mixture.base import StepContext
from drmix.mixture.dro import DROConfig, build_dro_strategy
from drmix.mixture.transfer import build_transfer_strategy, parse_top_fraction, read_weights_file

NAMES = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]
# Learned weights (sum 1): j is the heaviest, a the lightest.
LEARNED = [0.01, 0.02, 0.03, 0.05, 0.07, 0.09, 0.11, 0.14, 0.2, 0.28]


@pytest.fixture()
def weights_file(tmp_path):
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({"collections": NAMES, "weights": LEARNED}))
    return str(path)


def setup(strategy, names=NAMES):
    strategy.setup(names, [100] * len(names))
    return strategy


def batch_of(ids):
    n = len(ids)
    return Batch(["q"] * n, ["p"] * n, [[]] * n, np.asarray(ids))


CTX = StepContext(step=0, model=None, optimizer=None, scheduler=None, collection_names=NAMES,
                  collection_sizes=[100] * 10, compute_losses=lambda b: None)


def test_top70_keeps_seven_heaviest_uniformly(weights_file):
    # floor(10 * 0.7) = 7 collections: d..j; each sampled with probability 1/7, a, b, c never.
    s = setup(build_transfer_strategy(weights_file, "top:0.7", NAMES))
    expected = [0, 0, 0] + [1 / 7] * 7
    np.testing.assert_allclose(s.sampling_weights(), expected, rtol=1e-12)
    assert s.final_weights()["kept"] == ["j", "i", "h", "g", "f", "e", "d"]
    # same selection written as a percentage
    s2 = setup(build_transfer_strategy(weights_file, "top:70%", NAMES))
    np.testing.assert_allclose(s2.sampling_weights(), expected, rtol=1e-12)
    # losses are not rescaled
    losses = torch.tensor([1.0, 3.0])
    assert s.loss(losses, batch_of([3, 9]), CTX).item() == pytest.approx(2.0)


def test_top_fraction_rounds_down_but_keeps_one(weights_file):
    # 3 collections (a, i, j renormalised): floor(3 * 0.7) = 2 -> i, j; floor(3 * 0.1) = 0 -> 1 -> j
    s = setup(build_transfer_strategy(weights_file, "top:0.7", ["a", "i", "j"]), ["a", "i", "j"])
    np.testing.assert_allclose(s.sampling_weights(), [0, 0.5, 0.5])
    s = setup(build_transfer_strategy(weights_file, "top:0.1", ["a", "i", "j"]), ["a", "i", "j"])
    np.testing.assert_allclose(s.sampling_weights(), [0, 0, 1])
    assert parse_top_fraction("top:0.35") == 0.35 and parse_top_fraction("top:35") == 0.35


def test_reweight_samples_by_learned_weights(weights_file):
    s = setup(build_transfer_strategy(weights_file, "reweight", NAMES))
    np.testing.assert_allclose(s.sampling_weights(), LEARNED, rtol=1e-12)
    # The trainer's homogeneous sampler draws each batch's collection with these weights: over 20k batches
    # the frequencies are within 0.01 of the weights (the largest standard error is sqrt(.28*.72/20000) = 0.003).
    np.testing.assert_allclose(batch_frequencies(s.sampling_weights(), 20_000), LEARNED, atol=0.01)


def batch_frequencies(weights, n_batches):
    from drmix.data.sampling import MixtureSampler

    sampler = MixtureSampler([50] * len(weights), 2, mode="homogeneous", seed=0)
    first = [sampler.next_indices(weights)[0][0] for _ in range(n_batches)]
    return np.bincount(first, minlength=len(weights)) / n_batches


def test_top70_sampling_frequencies_through_the_sampler(weights_file):
    s = setup(build_transfer_strategy(weights_file, "top:0.7", NAMES))
    freq = batch_frequencies(s.sampling_weights(), 14_000)
    assert (freq[:3] == 0).all()                          # dropped collections are never drawn
    np.testing.assert_allclose(freq[3:], [1 / 7] * 7, atol=0.01)


def test_reweight_renormalises_over_the_trained_subset(weights_file):
    # Training on i and j only: 0.2 / 0.48 and 0.28 / 0.48
    s = setup(build_transfer_strategy(weights_file, "reweight", ["i", "j"]), ["i", "j"])
    np.testing.assert_allclose(s.sampling_weights(), [0.2 / 0.48, 0.28 / 0.48], rtol=1e-12)


def test_loss_reweighting_scales_average_to_one(weights_file):
    s = setup(build_transfer_strategy(weights_file, "loss", NAMES))
    np.testing.assert_allclose(s.sampling_weights(), [0.1] * 10)
    scales = s.loss_scales()
    # s_g = k * alpha_g: a -> 10 * 0.01 = 0.1, j -> 10 * 0.28 = 2.8; mean of the scales = 1
    assert scales[0] == pytest.approx(0.1) and scales[9] == pytest.approx(2.8)
    assert scales.mean() == pytest.approx(1.0)
    # Batch of two a-examples (losses 1, 3) and two j-examples (losses 2, 2):
    # mean(0.1*1, 0.1*3, 2.8*2, 2.8*2) = (0.4 + 11.2) / 4 = 2.9
    loss = s.loss(torch.tensor([1.0, 3.0, 2.0, 2.0]), batch_of([0, 0, 9, 9]), CTX)
    assert loss.item() == pytest.approx(2.9)


def test_transfer_reads_a_dro_run_output(tmp_path):
    # weights.json written by a DRO strategy round-trips into the transfer (DoReMi's 'weights' = mean).
    s = build_dro_strategy("groupdro", DROConfig())
    s.setup(["x", "y"], [1, 1])
    s.step_weights(np.array([2.0, 1.0]), None, np.array([0, 1]))
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(s.final_weights()))
    t = setup(build_transfer_strategy(str(path), "reweight", ["x", "y"]), ["x", "y"])
    np.testing.assert_allclose(t.sampling_weights(), s.weights, rtol=1e-12)
    assert read_weights_file(path, key="final") == pytest.approx(dict(zip(["x", "y"], s.weights)))


def test_plain_mapping_file(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"x": 3, "y": 1}))
    t = setup(build_transfer_strategy(str(path), "reweight", ["x", "y"]), ["x", "y"])
    np.testing.assert_allclose(t.sampling_weights(), [0.75, 0.25])


@pytest.mark.parametrize("content, transfer, match", [
    ({"collections": ["a"], "weights": [1.0]}, "reweight", "no weight for training collection"),
    ({"a": -1, "b": 1}, "reweight", "not a finite number"),
    ({"a": 1, "b": 1}, "top:150", "keeps"),
    ({"a": 1, "b": 1}, "top:x", "cannot read"),
    ({"a": 1, "b": 1}, "sideways", "unknown transfer"),
])
def test_bad_inputs_raise_config_errors(tmp_path, content, transfer, match):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ConfigError, match=match):
        build_transfer_strategy(str(path), transfer, ["a", "b"])


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        build_transfer_strategy(str(tmp_path / "nope.json"), "reweight", ["a"])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON") as e:
        build_transfer_strategy(str(bad), "reweight", ["a"])
    assert str(bad) in str(e.value)


def test_drmix_train_with_transfer_drops_low_weight_collections(tmp_path, tiny_model_path):
    # Two collections, learned weights x = 0.8, y = 0.2; top:0.5 keeps floor(2 * 0.5) = 1 -> only x is sampled.
    from drmix.cli import main

    data = tmp_path / "data"
    data.mkdir()
    for name in ("x", "y"):
        rows = [{"query": f"{name} query {i}", "positive": f"{name} doc {i}"} for i in range(6)]
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    wfile = tmp_path / "weights.json"
    wfile.write_text(json.dumps({"collections": ["x", "y"], "weights": [0.8, 0.2]}))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "--model", tiny_model_path, "--data", str(data), "--weights-file", str(wfile),
              "--transfer", "top:0.5", "--max-steps", "3", "--batch-size", "2", "--log-every", "1",
              "--query-max-length", "8", "--doc-max-length", "8", "--output-dir", str(out), "--no-show-progress",
              "--device", "cpu"])
    assert e.value.code == 0
    counts = [json.loads(x)["collection_counts"] for x in (out / "metrics.jsonl").read_text().splitlines()
              if "collection_counts" in x]
    assert counts == [{"x": 2, "y": 0}] * 3
    assert json.loads((out / "weights.json").read_text())["kept"] == ["x"]


def test_fixed_weights_outputs_and_float64_loss(weights_file):
    """weights.json of a transfer run, key by key; the loss scales keep the losses' dtype (float64 here)."""
    s = setup(build_transfer_strategy(weights_file, "loss", NAMES))
    fw = s.final_weights()
    assert fw["collections"] == NAMES and fw["weights"] == pytest.approx([0.1] * 10)
    assert fw["loss_scales"] == pytest.approx([10 * w for w in LEARNED])
    assert fw["transfer"] == "loss" and fw["weights_file"] == weights_file
    assert fw["learned"] == pytest.approx(dict(zip(NAMES, LEARNED)))
    losses = torch.tensor([1.0, 3.0], dtype=torch.float64)
    out = s.loss(losses, batch_of(np.array([0, 9], dtype=np.int32)), CTX)
    assert out.dtype == torch.float64 and out.item() == pytest.approx((0.1 * 1 + 2.8 * 3) / 2, rel=1e-12)
    top = setup(build_transfer_strategy(weights_file, "top:0.2", NAMES))
    assert top.loss_scales().tolist() == [1.0] * 10 and top.name == "top:0.2"
    assert top.final_weights()["loss_scales"] == [1.0] * 10 and top.final_weights()["kept"] == ["j", "i"]
    rw = setup(build_transfer_strategy(weights_file, "REWEIGHT", NAMES))
    assert rw.name == "reweight" and "kept" not in rw.final_weights()
    from drmix.mixture.transfer import FixedWeightsStrategy

    with pytest.raises(ConfigError, match="cover 2 collections, training has 3"):
        FixedWeightsStrategy(np.array([0.5, 0.5])).setup(["a", "b", "c"], [1, 1, 1])


def test_read_weights_file_keys_and_shapes(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"collections": ["a", "b"], "weights": [0.25, 0.75], "final": {"a": 0.5, "b": 0.5},
                               "mean": {"a": 0.1, "b": 0.9}, "ema": [1, 2]}))
    assert read_weights_file(run) == {"a": 0.25, "b": 0.75}
    assert read_weights_file(run, key="mean") == {"a": 0.1, "b": 0.9}
    with pytest.raises(ConfigError, match="no 'ema' weights"):
        read_weights_file(run, key="ema")
    with pytest.raises(ConfigError, match="no 'other' weights"):
        read_weights_file(run, key="other")
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps({"weights": {"a": 1, "b": 0}}))
    assert read_weights_file(mapping) == {"a": 1.0, "b": 0.0}
    for bad in ({"collections": ["a"], "weights": [1, 2]}, {"weights": 3}, {"collections": "a", "weights": [1]}):
        mapping.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="'weights' must be"):
            read_weights_file(mapping)
    for bad in ({"a": True}, {"a": "1"}, {"a": float("inf")}):
        mapping.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="not a finite number"):
            read_weights_file(mapping)
    for bad in ({}, {"a": 0, "b": 0}):
        mapping.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match="no positive weight"):
            read_weights_file(mapping)
    mapping.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        read_weights_file(mapping)


def test_align_weights_orders_renormalises_and_refuses_zero(caplog):
    import logging

    from drmix.mixture.transfer import align_weights

    with caplog.at_level(logging.WARNING, logger="drmix.mixture.transfer"):
        w = align_weights({"a": 1.0, "b": 3.0, "c": 4.0}, ["b", "a"])
    assert w.tolist() == [0.75, 0.25] and any("['c']" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.transfer"):
        align_weights({"a": 1.0, "b": 3.0}, ["b", "a"])
    assert not caplog.records
    with pytest.raises(ConfigError, match="all have weight 0"):
        align_weights({"a": 0.0, "b": 0.0, "c": 1.0}, ["a", "b"])


@pytest.mark.parametrize("spec, frac", [("top:0.7", 0.7), ("top:70", 0.7), ("top:70%", 0.7), ("top:1", 1.0),
                                        ("top:1.5%", 0.015), ("top: 0.25 ", 0.25), ("top:100", 1.0)])
def test_parse_top_fraction(spec, frac):
    assert parse_top_fraction(spec) == pytest.approx(frac, abs=1e-15)


@pytest.mark.parametrize("spec, match", [("top:1.5", "neither a fraction"), ("top", "cannot read"),
                                         ("top:0", "keeps 0%"), ("top:101", "keeps"), ("top:-0.5", "keeps")])
def test_parse_top_fraction_refuses(spec, match):
    with pytest.raises(ConfigError, match=match):
        parse_top_fraction(spec)


# -- what a user reads: the file named in errors, the weights.json of each transfer, the fraction's forms ---------

def test_a_missing_collection_names_the_weights_file(weights_file):
    with pytest.raises(ConfigError, match="no weight for training collection") as e:
        build_transfer_strategy(weights_file, "reweight", NAMES + ["extra"])
    assert e.value.path == weights_file
    from drmix.mixture.transfer import align_weights

    with pytest.raises(ConfigError) as e:                     # no file behind the mapping: no path shown
        align_weights({"a": 1.0}, ["a", "b"])
    assert e.value.path is None and not e.value.format().startswith("XXXX")


def test_yaml_without_a_position_is_still_a_config_error(tmp_path):
    """A control character stops YAML's reader before any parsing: no line to name, still one clear error."""
    bad = tmp_path / "w.yaml"
    bad.write_text("a: \x01\n")
    with pytest.raises(ConfigError, match="not valid YAML") as e:
        read_weights_file(bad)
    assert e.value.line is None


@pytest.mark.parametrize("spec, frac", [("top:0.5%", 0.005), ("top:1%", 0.01), ("top:2", 0.02)])
def test_small_percentages(spec, frac):
    """A '%' always means a percentage (even below 1); a whole number above 1 is a percentage."""
    assert parse_top_fraction(spec) == pytest.approx(frac, abs=1e-15)


@pytest.mark.parametrize("spec", ["top:0.7:0.5", "top:70X", "top:0.5:"])
def test_a_fraction_with_trailing_text_is_refused(spec):
    with pytest.raises(ConfigError, match="cannot read"):
        parse_top_fraction(spec)


def test_top_fraction_keeps_fractional_percentages(tmp_path):
    """floor(k * K) with K as given: top:0.125 of 16 collections keeps 2, top:0.995 of 2 keeps 1."""
    names = [f"c{i:02d}" for i in range(16)]
    path = tmp_path / "w.json"
    path.write_text(json.dumps({n: i + 1.0 for i, n in enumerate(names)}))
    s = setup(build_transfer_strategy(str(path), "top:0.125", names), names)
    assert s.final_weights()["kept"] == ["c15", "c14"]
    path.write_text(json.dumps({"a": 1.0, "b": 2.0}))
    assert setup(build_transfer_strategy(str(path), "top:0.995", ["a", "b"]), ["a", "b"]).final_weights()["kept"] == ["b"]


def test_each_transfer_records_its_name_and_source(weights_file):
    for spec, name in (("reweight", "reweight"), ("loss", "loss"), ("top:0.7", "top:0.7")):
        s = setup(build_transfer_strategy(weights_file, spec, NAMES))
        fw = s.final_weights()
        assert s.name == name
        assert fw["transfer"] == spec and fw["weights_file"] == weights_file
        assert fw["learned"] == pytest.approx(dict(zip(NAMES, LEARNED)))


def test_loss_scales_follow_the_losses_dtype(weights_file):
    s = setup(build_transfer_strategy(weights_file, "loss", NAMES))
    out = s.loss(torch.tensor([1.0, 3.0]), batch_of([0, 9]), CTX)
    assert out.dtype == torch.float32 and out.item() == pytest.approx((0.1 * 1 + 2.8 * 3) / 2, rel=1e-6)


def test_loss_scales_go_to_the_losses_device(weights_file):
    """Losses on another device than the CPU (the meta device stands for a GPU here; its first use costs ~1.5 s of
    torch's one-time set-up) are scaled there, not met by CPU scales."""
    s = setup(build_transfer_strategy(weights_file, "loss", NAMES))
    assert s.loss(torch.ones(2, device="meta"), batch_of([0, 9]), CTX).device.type == "meta"


def test_weights_files_are_read_as_utf8_whatever_the_locale(tmp_path):
    """A collection named with a non-ASCII letter reads the same under an ASCII locale (as on a bare C locale or
    a Windows code page)."""
    import locale

    path = tmp_path / "w.json"
    path.write_text(json.dumps({"café": 1.0}, ensure_ascii=False), encoding="utf-8")
    old = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")
        assert read_weights_file(path) == {"café": 1.0}
    finally:
        locale.setlocale(locale.LC_CTYPE, old)
