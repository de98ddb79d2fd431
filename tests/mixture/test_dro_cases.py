"""DRO strategy family: edge cases of the measurement, the update and the strategy state (skipped steps and what
they record, thresholds hit exactly, single-example and empty batches, accumulation, resume, options)."""
from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest
import torch

from drmix.data.batch import Batch
from drmix.mixture.base import StepContext
from drmix.mixture.dro import (DROConfig, DROStrategy, log_softmax, measure,
                               update_log_weights)
from dro_helpers import IDS, NAMES, PROXY, REF, make


def ctx_for(ref, micro: int = 0, accum: int = 1) -> StepContext:
    ref_fn = None if ref is None else (lambda batch: torch.tensor(ref, dtype=torch.float64))
    return StepContext(step=0, model=None, optimizer=None, scheduler=None, collection_names=NAMES,
                       collection_sizes=[10, 20, 30], compute_losses=lambda b: None, reference_losses=ref_fn,
                       micro_step=micro, accumulation_steps=accum)


def batch_of(ids) -> Batch:
    n = len(ids)
    return Batch([f"q{i}" for i in range(n)], ["p"] * n, [["n"]] * n, np.asarray(ids))


def softmax(x) -> np.ndarray:
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


# -- skipped steps: the update is skipped, the warning names why, weights.jsonl still records the batch ----------

def _skip_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipped the weight update" in r.getMessage()]


def _skipped_record(s, caplog, reason: str, counts: dict, step: int = 1) -> dict:
    """The one skipped step of ``s``: the weights still uniform, one warning naming ``reason``, and its
    weights.jsonl record at ``step`` (null measurements, the batch's counts)."""
    assert s.n_skipped == 1 and s.n_steps == 1
    np.testing.assert_array_equal(s.weights, np.full(3, 1 / 3))
    (msg,) = _skip_warnings(caplog)
    assert reason in msg
    rec = s.trajectory_record(step)
    assert rec["skipped"] is True and rec["counts"] == counts
    assert rec["measurement"] == {"a": None, "b": None, "c": None}
    return rec


def test_non_finite_losses_skip_the_step_and_record_the_finite_means(caplog):
    s = make("tdro")
    proxy = np.array([1.0, np.nan, 2.0, 4.0, 1.0, 0.5])
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"):
        s.step_weights(proxy, REF, IDS)
    rec = _skipped_record(s, caplog, "non-finite losses", {"a": 2, "b": 2, "c": 2})
    assert (rec["proxy_loss"]["b"], rec["proxy_loss"]["c"]) == (3.0, 0.75)
    assert rec["reference_loss"] == {"a": 1.0, "b": 2.0, "c": 0.5}


def test_all_zero_reference_skips_the_step_quietly_and_records_the_means(caplog):
    s = make("tdro")
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"), warnings.catch_warnings():
        warnings.simplefilter("error")          # no numpy division warnings: the skip is the one message
        m = s.step_weights(PROXY, np.zeros(6), IDS)
    assert m.reason == "the reference losses of the batch are all zero"
    rec = _skipped_record(s, caplog, m.reason, {"a": 2, "b": 2, "c": 2})
    assert rec == {"step": 1, "weights": {n: 1 / 3 for n in NAMES},
                   "proxy_loss": {"a": 2.0, "b": 2.0, "c": 0.75}, "reference_loss": {"a": 0.0, "b": 0.0, "c": 0.0},
                   "measurement": {"a": None, "b": None, "c": None}, "counts": {"a": 2, "b": 2, "c": 2},
                   "skipped": True}


def test_overflowing_ratio_skips_the_step_and_records_the_means(caplog):
    # 1e308 / (0.5 / 5.5) overflows to inf: the losses are finite but the measurement is not.
    s = make("tdro")
    proxy = np.array([1e308, 1.0, 2.0, 2.0, 1.0, 0.5])
    ref = np.array([0.5, 1.0, 1.0, 1.0, 1.0, 1.0])
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"), np.errstate(over="ignore"):
        m = s.step_weights(proxy, ref, IDS)
    assert not m.ok
    rec = _skipped_record(s, caplog, "non-finite measurement", {"a": 2, "b": 2, "c": 2}, step=2)
    assert rec == {"step": 2, "weights": {n: 1 / 3 for n in NAMES},
                   "proxy_loss": {"a": 5e307, "b": 2.0, "c": 0.75}, "reference_loss": {"a": 0.75, "b": 1.0, "c": 1.0},
                   "measurement": {"a": None, "b": None, "c": None}, "counts": {"a": 2, "b": 2, "c": 2},
                   "skipped": True}
    # GroupDRO: two losses of 1e308 in one collection sum to inf
    g = make("groupdro")
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"), np.errstate(over="ignore"):
        m = g.step_weights(np.array([1e308, 1e308, 1.0, 1.0, 1.0, 1.0]), None, IDS)
    assert not m.ok and m.reason == "non-finite measurement" and g.n_skipped == 1


# -- measurement edge cases -------------------------------------------------------------------------------------

def test_one_example_batch_and_single_example_collections():
    # One example: r~ = r / r = 1, so M = l; the other collection is absent.
    m = measure(np.array([2.0]), np.array([0.5]), np.array([0]), 2, "ratio")
    assert m.ok
    np.testing.assert_array_equal(m.present, [True, False])
    np.testing.assert_allclose(m.measurement, [2.0, 0.0], rtol=1e-15)
    np.testing.assert_array_equal(m.proxy_loss[:1], [2.0])
    np.testing.assert_array_equal(m.reference_loss[:1], [0.5])
    assert np.isnan(m.proxy_loss[1]) and np.isnan(m.reference_loss[1])
    # a collection with one example among others: its means are that example's losses
    m = measure(np.array([3.0, 1.0, 5.0]), np.array([1.5, 1.0, 1.0]), np.array([0, 1, 1]), 2, "difference")
    np.testing.assert_array_equal(m.proxy_loss, [3.0, 3.0])
    np.testing.assert_array_equal(m.reference_loss, [1.5, 1.0])
    np.testing.assert_array_equal(m.measurement, [1.5, 2.0])


def test_empty_batch_is_skipped_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = measure(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), 3, "ratio")
    assert not m.ok
    np.testing.assert_array_equal(m.counts, [0, 0, 0])
    s = make("tdro")
    s.step_weights(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64))
    assert s.n_skipped == 1


def test_reference_exactly_at_the_sum_guard_is_divided():
    # The authors' guard is r / sum(r) < 1e-4: 1 / (1 + 9999) = 1e-4 exactly is divided, not guarded.
    m = measure(np.array([1.0, 1.0]), np.array([1.0, 9999.0]), np.array([0, 1]), 2, "ratio")
    np.testing.assert_allclose(m.measurement, [1e4, 1e4 / 9999], rtol=1e-12)


def test_mean_guard_threshold_is_inclusive_and_relative_to_the_mean():
    # reference_guard: mean, threshold 0.2 of the batch mean (1.0 here). REF [0.2, 1.8]: the first example is at
    # exactly 0.2 of the mean -> divided: r~ = 0.2 / 2 = 0.1, term 1 / 0.1 = 10.
    m = measure(np.array([1.0, 1.0]), np.array([0.2, 1.8]), np.array([0, 1]), 2, "ratio",
                min_relative_reference=0.2, reference_guard="mean")
    np.testing.assert_allclose(m.measurement, [10.0, 2.0 / 1.8], rtol=1e-12)
    # an example at half the mean is above 0.2 of it: divided, r~ = 0.5 / 2 -> term 4
    m = measure(np.array([1.0, 1.0]), np.array([0.5, 1.5]), np.array([0, 1]), 2, "ratio",
                min_relative_reference=0.2, reference_guard="mean")
    np.testing.assert_allclose(m.measurement, [4.0, 2.0 / 1.5], rtol=1e-12)


def test_plain_ratio_leaves_zero_reference_examples_out_of_the_mean():
    # min_relative_reference 0: every example is divided; one with reference 0 is not counted at all.
    # REF [0, 1, 1, 2], sum 4: a = mean over its one counted example = 1 / (1/4) = 4; b = (4 + 2) / 2 = 3.
    m = measure(np.ones(4), np.array([0.0, 1.0, 1.0, 2.0]), np.array([0, 0, 1, 1]), 2, "ratio",
                min_relative_reference=0.0)
    assert m.ok
    np.testing.assert_allclose(m.measurement, [4.0, 3.0], rtol=1e-12)
    np.testing.assert_array_equal(m.counts, [2, 2])


def test_collection_with_zero_losses_is_present_with_measurement_zero():
    # A solved collection (all proxy losses 0) is measured, not absent: its measurement is 0, not null.
    g = make("groupdro")
    g.step_weights(np.array([1.0, 3.0, 2.0, 2.0, 0.0, 0.0]), None, IDS)
    assert g.trajectory_record(1)["measurement"] == {"a": 2.0, "b": 2.0, "c": 0.0}
    d = make("doremi")
    d.step_weights(np.array([1.0, 3.0, 2.0, 2.0, 0.0, 0.0]), REF, IDS)
    assert d.trajectory_record(1)["measurement"] == {"a": 1.0, "b": 0.0, "c": 0.0}


def test_float32_losses_are_measured_in_float64():
    # What DROStrategy.loss passes on: float32 arrays; the result is the float64 computation of their values.
    rng = np.random.default_rng(5)
    proxy = rng.uniform(0.1, 3.0, 64).astype(np.float32)
    ref = rng.uniform(0.1, 3.0, 64).astype(np.float32)
    ids = np.arange(64) % 3
    for measurement in ("ratio", "difference"):
        a = measure(proxy, ref, ids, 3, measurement)
        b = measure(proxy.astype(np.float64), ref.astype(np.float64), ids, 3, measurement)
        np.testing.assert_array_equal(a.measurement, b.measurement)


# -- the update ---------------------------------------------------------------------------------------------------

def test_clipping_norm_counts_only_the_present_collections():
    # absent: keep with tDRO's clipping: the absent collection's measurement neither moves it nor enters the norm.
    lw = np.log([0.5, 0.3, 0.2])
    out = update_log_weights(lw, np.array([3.0, 4.0, 100.0]), np.array([True, True, False]), lr=0.02,
                             normalize_gradient=True, smoothing=0.0)
    g = np.array([3.0, 4.0]) / (5.0 + 1e-6)
    ab = 0.8 * softmax(np.log([0.5, 0.3]) + 0.02 * g)
    np.testing.assert_allclose(np.exp(out), [ab[0], ab[1], 0.2], rtol=1e-12)
    s = make("tdro", absent="keep")
    s.log_weights = lw.copy()
    s.step_weights(np.array([1.0, 1.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0, 1.0]), np.array([0, 0, 1, 1]))
    assert s.weights[2] == pytest.approx(0.2, rel=1e-12)


def test_non_finite_or_zero_gradient_leaves_the_weights_exactly():
    lw = np.log([0.5, 0.3, 0.2])
    for m in ([np.inf, 1.0, 1.0], [np.nan, 1.0, 1.0], [0.0, 0.0, 0.0]):
        out = update_log_weights(lw, np.array(m), np.ones(3, bool), lr=0.02, normalize_gradient=True, smoothing=0.0)
        np.testing.assert_array_equal(out, lw)


def test_update_computes_in_float64_whatever_the_input_dtype():
    lw = np.log([0.5, 0.3, 0.2])
    m = np.array([3.3, 1.1, 7.7])
    for normalize in (True, False):
        ref = update_log_weights(lw.astype(np.float32).astype(np.float64), m.astype(np.float32).astype(np.float64),
                                 np.ones(3, bool), lr=0.3, normalize_gradient=normalize, smoothing=0.0)
        out = update_log_weights(lw.astype(np.float32), m.astype(np.float32), np.ones(3, bool), lr=0.3,
                                 normalize_gradient=normalize, smoothing=0.0)
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, ref)
    x = np.array([0.1, 2.3, -1.7], dtype=np.float32)
    y = log_softmax(x)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, log_softmax(x.astype(np.float64)))


def test_crushed_weight_is_clamped_at_1e_300_exactly():
    # GroupDRO, losses 1e6 on a and b: c's weight underflows and is clamped at 1e-300 -- the documented guard,
    # whatever the (here two-way) split of the rest.
    g = make("groupdro")
    g.step_weights(np.array([1e6, 1e6, 1e6, 1e6, 1.0, 1.0]), None, IDS)
    w = g.weights
    assert w[0] == pytest.approx(0.5) and w[1] == pytest.approx(0.5)
    assert w[2] == pytest.approx(1e-300, rel=1e-9, abs=0)


# -- accumulation --------------------------------------------------------------------------------------------------

def _accumulate(s, parts, refs=None):
    out = None
    for micro, (proxy, ids) in enumerate(parts):
        ref = None if refs is None else refs[micro]
        out = s.loss(torch.tensor(proxy, dtype=torch.float64), batch_of(ids), ctx_for(ref, micro, len(parts)))
    return out


def test_micro_accumulation_records_the_means_of_the_whole_step():
    # Two micro-batches: a twice then once, b once then twice, c never. The recorded means are over the step's
    # examples, the counts summed, c null.
    s = make("tdro")
    parts = [(np.array([1.0, 2.0, 4.0]), np.array([0, 0, 1])), (np.array([6.0, 1.0, 3.0]), np.array([0, 1, 1]))]
    refs = [np.array([0.5, 1.5, 2.0]), np.array([3.0, 1.0, 1.0])]
    _accumulate(s, parts, refs)
    assert s.n_steps == 1
    rec = s.trajectory_record(1)
    assert rec["counts"] == {"a": 3, "b": 3, "c": 0}
    assert rec["proxy_loss"]["c"] is None and rec["reference_loss"]["c"] is None and rec["measurement"]["c"] is None
    assert rec["proxy_loss"]["a"] == pytest.approx(3.0, rel=1e-12)
    assert rec["proxy_loss"]["b"] == pytest.approx(8.0 / 3, rel=1e-12)
    assert rec["reference_loss"]["a"] == pytest.approx(5.0 / 3, rel=1e-12)
    assert rec["reference_loss"]["b"] == pytest.approx(4.0 / 3, rel=1e-12)
    assert rec["skipped"] is False


def test_micro_accumulation_averages_the_gradient_over_the_micro_batches():
    # Without clipping the step is lr * (M_1 + M_2) / 2 (tDRO's trainer divides by the accumulation steps).
    s = make("tdro", normalize_gradient=False, lr=0.1)
    parts = [(np.array([1.0, 2.0, 1.0, 1.0, 1.0, 1.0]), IDS), (np.array([2.0, 2.0, 1.0, 3.0, 1.0, 1.0]), IDS)]
    refs = [np.ones(6), np.ones(6)]
    _accumulate(s, parts, refs)
    # micro 1: r~ = 1/6, M = 6 * [1.5, 1, 1]; micro 2: M = 6 * [2, 2, 1]
    g = (6 * np.array([1.5, 1.0, 1.0]) + 6 * np.array([2.0, 2.0, 1.0])) / 2
    np.testing.assert_allclose(s.weights, softmax(0.1 * g), rtol=1e-12)


def test_micro_accumulation_with_a_bad_micro_batch_skips_the_step(caplog):
    s = make("tdro")
    parts = [(np.array([np.nan, 2.0, 4.0]), np.array([0, 1, 1])), (np.array([6.0, 1.0, 3.0]), np.array([0, 1, 2]))]
    refs = [np.array([0.5, 1.5, 2.5]), np.array([3.0, 1.0, 1.0])]
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"):
        out = _accumulate(s, parts, refs)
    rec = _skipped_record(s, caplog, "non-finite losses", {"a": 2, "b": 3, "c": 1})
    assert rec["proxy_loss"]["b"] == pytest.approx(7.0 / 3, rel=1e-12) and rec["proxy_loss"]["c"] == 3.0
    assert rec["reference_loss"] == pytest.approx({"a": 1.75, "b": 5.0 / 3, "c": 1.0}, rel=1e-12)
    assert torch.isfinite(out)
    # both micro-batches bad: skipped, the reason is the first one's
    s2 = make("tdro")
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"):
        _accumulate(s2, parts, [refs[0], np.zeros(3)])
    assert s2.n_skipped == 1 and s2.last.reason == "non-finite losses"


def test_groupdro_accumulation_gives_the_weights_of_one_big_batch():
    big, acc = make("groupdro"), make("groupdro")
    proxy = np.array([1.0, 3.0, 2.0, 2.0, 1.0, 0.5, 2.5, 0.5, 1.0, 4.0, 0.2, 0.1])
    ids = np.tile(IDS, 2)
    big.loss(torch.tensor(proxy), batch_of(ids), ctx_for(None))
    _accumulate(acc, [(proxy[:6], ids[:6]), (proxy[6:], ids[6:])])
    assert acc.n_steps == 1
    np.testing.assert_allclose(acc.weights, big.weights, rtol=1e-12)


# -- the strategy -----------------------------------------------------------------------------------------------

def test_strategy_defaults_to_tdro():
    s = DROStrategy()
    assert s.name == "tdro" and s.config.measurement == "ratio" and s.config.objective == "examples"
    # an unknown strategy name resolves to the ratio measurement's defaults
    assert DROConfig().resolved("other") == DROConfig().resolved("tdro")


def test_reference_losses_are_those_of_the_batch():
    # the reference model is asked for the losses of the batch being measured
    by_query = {f"q{i}": r for i, r in enumerate(REF)}
    seen = []

    def reference_losses(batch):
        seen.append(batch)
        return torch.tensor([by_query[q] for q in batch.queries], dtype=torch.float64)

    s = make("tdro")
    b = batch_of(IDS)
    ctx = ctx_for(None)
    ctx.reference_losses = reference_losses
    s.loss(torch.tensor(PROXY), b, ctx)
    assert seen == [b]
    np.testing.assert_allclose(s.last.measurement, [14, 7, 10.5], rtol=1e-12)


def test_losses_keep_their_dtype():
    for strategy in ("tdro", "groupdro"):
        s = make(strategy)
        out = s.loss(torch.tensor(PROXY, dtype=torch.float32), batch_of(IDS),
                     ctx_for(None if strategy == "groupdro" else REF))
        assert out.dtype == torch.float32
        bad = s.loss(torch.tensor([np.nan, 1, 1, 1, 1, 1], dtype=torch.float64), batch_of(IDS),
                     ctx_for(None if strategy == "groupdro" else REF))
        assert bad.dtype == torch.float64 and bad.item() == 0.0


def test_weighted_and_group_loss_on_one_process():
    s = make("tdro")
    # one example (weight 1/3): the weighted mean is its loss
    assert s.weighted_loss(torch.tensor([2.0], dtype=torch.float64), np.array([0])).item() == pytest.approx(2.0)
    # groups: sum_g alpha_g mean_g = (2 + 2 + 0.75) / 3
    g = make("groupdro")
    out = g.group_loss(torch.tensor(PROXY), IDS)
    assert out.item() == pytest.approx(4.75 / 3, rel=1e-12)


def test_group_loss_is_made_on_the_losses_device():
    """GroupDRO's per-example scales go to the losses' device (a GPU in training; ``meta`` stands in for it here:
    a scale left on the CPU cannot multiply losses elsewhere)."""
    g = make("groupdro")
    out = g.group_loss(torch.tensor(PROXY, device="meta"), IDS)
    assert out.device.type == "meta" and out.shape == ()


def test_strategy_passes_its_guard_options_to_the_measurement():
    # reference_guard: mean (threshold 0.2 of the batch mean): the numbers of test_dro's mean-guard case.
    s = make("tdro", reference_guard="mean")
    s.step_weights(np.ones(4), np.array([0.01, 1.0, 1.0, 1.0]), np.array([0, 0, 1, 1]))
    np.testing.assert_allclose(s.last.measurement, [0.5 * 3.01, 3.01, 0.0], rtol=1e-12)
    # min_relative_reference 0: zero-reference examples are left out
    s = make("tdro", min_relative_reference=0.0)
    s.step_weights(np.ones(4), np.array([0.0, 1.0, 1.0, 2.0]), np.array([0, 0, 1, 1]))
    np.testing.assert_allclose(s.last.measurement, [4.0, 3.0, 0.0], rtol=1e-12)


def test_max_grad_norm_option_sets_the_clip():
    # M = [14, 7, 10.5] (test_dro's hand computation), clipped at 0.5: g = M * 0.5 / (||M|| + 1e-6)
    s = make("tdro", max_grad_norm=0.5)
    s.step_weights(PROXY, REF, IDS)
    m = np.array([14.0, 7.0, 10.5])
    g = m * 0.5 / (np.linalg.norm(m) + 1e-6)
    np.testing.assert_allclose(s.weights, softmax(0.02 * g), rtol=1e-12)


def _roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


def test_resume_keeps_the_skipped_steps_count():
    a = make("tdro")
    a.step_weights(PROXY, REF, IDS)
    a.step_weights(np.array([np.nan, 1, 1, 1, 1, 1]), REF, IDS)
    b = make("tdro")
    b.load_state_dict(_roundtrip(a.state_dict()))
    for s in (a, b):
        s.step_weights(PROXY * 2, REF, IDS)
    assert b.final_weights() == a.final_weights()
    assert b.final_weights()["skipped_steps"] == 1


def test_doremi_resume_keeps_the_scores_of_absent_collections():
    # DoReMi's absent rule reuses a collection's last score: a resumed run must have it.
    a = make("doremi")
    a.step_weights(PROXY, REF, IDS)
    b = make("doremi")
    b.load_state_dict(_roundtrip(a.state_dict()))
    for s in (a, b):
        s.step_weights(PROXY[:4], REF[:4], IDS[:4])          # c absent: its score 0.25 again
    np.testing.assert_array_equal(b.log_weights, a.log_weights)
    assert b.final_weights() == a.final_weights()


def test_checkpoint_without_the_later_fields_loads():
    # A state written before collections, n_skipped and last_scores were stored: 0 skipped steps, and an absent
    # collection scores 0 in DoReMi's rule (as if never measured).
    a = make("doremi")
    a.step_weights(PROXY, REF, IDS)
    state = {k: v for k, v in _roundtrip(a.state_dict()).items()
             if k not in ("collections", "n_skipped", "last_scores")}
    b = make("doremi")
    b.load_state_dict(state)
    assert b.final_weights()["skipped_steps"] == 0 and b.final_weights()["steps"] == 1
    w1 = b.weights.copy()
    b.step_weights(PROXY[:4], REF[:4], IDS[:4])               # excess a = 1, b = 0; c absent -> 0
    e = w1 * np.exp([1.0, 0.0, 0.0])
    np.testing.assert_allclose(b.weights, 0.999 * e / e.sum() + 0.001 / 3, rtol=1e-12)


def test_reference_is_needed_unless_the_measurement_is_raw():
    from drmix.mixture.dro import _reference_needed
    from drmix.mixture.registry import get_strategy

    # the rule each DRO strategy registers (built at import: checked on the registered specs and as built afresh)
    for name, needed in (("tdro", True), ("doremi", True), ("groupdro", False)):
        rule = _reference_needed(name)
        assert rule(None) is needed and rule(DROConfig()) is needed
        assert rule(DROConfig(measurement="raw")) is False and rule(DROConfig(measurement="difference")) is True

    for name, needed in (("tdro", True), ("doremi", True), ("groupdro", False)):
        spec = get_strategy(name)
        assert spec.reference_needed(None) is needed and spec.needs_reference_with(None) is needed
        assert spec.reference_needed(DROConfig()) is needed
        assert spec.reference_needed(DROConfig(measurement="raw")) is False
        assert spec.reference_needed(DROConfig(measurement="ratio")) is True
