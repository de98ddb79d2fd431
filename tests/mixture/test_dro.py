"""DRO strategy family (tDRO ratio, DoReMi difference, GroupDRO raw) against hand-computed updates."""
from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch

from drmix.data.batch import Batch
from drmix.mixture.base import StepContext
from drmix.mixture.dro import DROConfig, DROStrategy, measure, top_k_selection, update_log_weights
from dro_helpers import IDS, NAMES, PROXY, REF, make


def ctx_for(ref: np.ndarray | None) -> StepContext:
    ref_fn = None if ref is None else (lambda batch: torch.tensor(ref, dtype=torch.float32))
    return StepContext(step=0, model=None, optimizer=None, scheduler=None, collection_names=NAMES,
                       collection_sizes=[10, 20, 30], compute_losses=lambda b: None, reference_losses=ref_fn)


def batch_of(ids: np.ndarray) -> Batch:
    n = len(ids)
    return Batch(["q"] * n, ["p"] * n, [["n"]] * n, np.asarray(ids))


def test_tdro_one_step_matches_hand_computation():
    # Reference L1-normalised over the batch (the authors'): sum(REF) = 7, r~ = REF / 7.
    # Per-example ratio l_i / r~_i = PROXY * 7 / REF:
    #   a: 7, 21 -> M_a = 14;  b: 7, 7 -> M_b = 7;  c: 14, 7 -> M_c = 10.5
    # M = 3.5 * [4, 2, 3]; clipped at norm 1 (norm 3.5 sqrt(29) >> 1) -> g = [4, 2, 3] / sqrt(29) (to 1e-7).
    # log w = log(1/3) + 0.02 * g, softmax: w_i = exp(0.02 c_i / sqrt(29)) / sum_j exp(0.02 c_j / sqrt(29))
    #   exp = [1.0149663, 1.0074552, 1.0112037] -> w = [0.334572, 0.332096, 0.333332]
    s = make("tdro")
    losses = torch.tensor(PROXY, dtype=torch.float64)
    out = s.loss(losses, batch_of(IDS), ctx_for(REF))
    np.testing.assert_allclose(s.last.measurement, [14, 7, 10.5], rtol=1e-12)
    np.testing.assert_allclose(s.weights, [0.334572, 0.332096, 0.333332], atol=1e-6)
    # Weighted loss with the JUST-updated weights: sum_i w_g(i) l_i / sum_i w_g(i)
    #   = (w_a * (1+3) + w_b * (2+2) + w_c * (1+0.5)) / (2 * (w_a + w_b + w_c)) = 1.583335
    assert out.item() == pytest.approx(1.5833352, abs=1e-6)


def test_tdro_mean_guard_below_relative_reference_contributes_zero():
    # reference_guard="mean" (the earlier rule): REF2 = [0.01, 1, 1, 1] -> mean 0.7525, sum 3.01,
    # r_i / mean = [0.0133, 1.329, 1.329, 1.329]; the first example is under 0.2 of the batch mean: it counts
    # for collection a but contributes 0, so M_a = (0 + 1/(1/3.01))/2 (terms on the authors' L1 scale).
    ids = np.array([0, 0, 1, 1])
    proxy, ref = np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.01, 1.0, 1.0, 1.0])
    m = measure(proxy, ref, ids, 2, "ratio", min_relative_reference=0.2, reference_guard="mean")
    total = 3.01
    np.testing.assert_allclose(m.measurement, [0.5 * total, total], rtol=1e-12)
    # Plain ratio (guard off): a = mean(1/(0.01/sum), 1/(1/sum)) = sum * (100 + 1) / 2
    m = measure(proxy, ref, ids, 2, "ratio", min_relative_reference=0.0)
    np.testing.assert_allclose(m.measurement, [total * 101 / 2, total], rtol=1e-12)


def test_tdro_sum_guard_is_relative_to_the_batch_sum_at_two_batch_sizes():
    # The authors' guard: r_i / sum_j r_j < 1e-4 -> normaliser 1, i.e. the term is l_i.
    # Batch 4, REF = [0.01, 1, 1, 1]: 0.01 / 3.01 = 3.3e-3 >= 1e-4 -> NOT guarded (the mean rule guarded it):
    #   M_a = mean(1 / (0.01/sum), 1 / (1/sum)) = sum * 101 / 2 with sum = 3.01.
    ids = np.array([0, 0, 1, 1])
    m = measure(np.ones(4), np.array([0.01, 1.0, 1.0, 1.0]), ids, 2, "ratio")
    total = 3.01
    np.testing.assert_allclose(m.measurement, [total * 101 / 2, total], rtol=1e-12)
    # Batch 4, REF = [1e-5, 1, 1, 1]: 1e-5 / 3.00001 = 3.3e-6 < 1e-4 -> guarded: term = l = 2.
    #   M_a = (2 + 1 / (1/sum)) / 2, sum = 3.00001; M_b = sum.
    m = measure(np.array([2.0, 1.0, 1.0, 1.0]), np.array([1e-5, 1.0, 1.0, 1.0]), ids, 2, "ratio")
    total = 3.00001
    np.testing.assert_allclose(m.measurement, [(2 + total) / 2, total], rtol=1e-12)
    # Batch 5000 (the rule scales with B): 4999 examples of reference 1 (1 / 4999.3 = 2e-4: kept) and one
    # of 0.3 (a): 0.3 / 4999.3 = 6e-5 < 1e-4 -> guarded although it is 0.3 of the batch mean: M_a = 3.
    n = 5000
    ref = np.ones(n)
    ref[0] = 0.3
    proxy = np.ones(n)
    proxy[0] = 3.0
    ids = np.ones(n, dtype=np.int64)
    ids[0] = 0
    m = measure(proxy, ref, ids, 2, "ratio")
    np.testing.assert_allclose(m.measurement[0], 3.0, rtol=1e-12)
    np.testing.assert_allclose(m.measurement[1], n - 0.7, rtol=1e-12)   # 1 / (1 / sum), sum = 4999.3


def test_tdro_default_guard_is_the_authors():
    cfg = DROConfig().resolved("tdro")
    assert (cfg.reference_guard, cfg.min_relative_reference) == ("sum", 1e-4)
    assert DROConfig(reference_guard="mean").resolved("tdro").min_relative_reference == 0.2


def test_accumulation_measures_each_micro_batch_as_the_authors():
    # tDRO (DROTrainer.training_step_for_dromodelv2): 2 micro-batches of 6, each with its own reference
    # normaliser; their M are added, divided by 2 and clipped at norm 1 -- by hand for one step:
    rng = np.random.default_rng(3)
    proxy, ref = rng.exponential(1.0, 12), rng.exponential(1.0, 12) + 0.1
    ids = np.tile(IDS, 2)
    acc = make("tdro")
    for micro in range(2):
        sl = slice(6 * micro, 6 * micro + 6)
        c = ctx_for(ref[sl])
        c.micro_step, c.accumulation_steps = micro, 2
        acc.loss(torch.tensor(proxy[sl]), batch_of(ids[sl]), c)
    grad = np.zeros(3)
    for sl in (slice(0, 6), slice(6, 12)):
        ratio = proxy[sl] / (ref[sl] / ref[sl].sum())
        grad += np.array([ratio[ids[sl] == g].mean() for g in range(3)])
    grad = grad / 2
    grad = grad / (np.linalg.norm(grad) + 1e-6)
    e = np.exp(0.02 * grad)
    assert acc.n_steps == 1
    np.testing.assert_allclose(acc.weights, e / e.sum(), rtol=1e-9)    # losses pass through float32
    # ... which is not where one batch of the 12 examples (one normaliser) takes them
    big = make("tdro")
    big.loss(torch.tensor(proxy), batch_of(ids), ctx_for(ref))
    assert not np.allclose(acc.weights, big.weights, rtol=1e-9)


def test_joined_accumulation_gives_the_weights_of_one_big_batch():
    # accumulation: joined (DoReMi's trainer; an option for tDRO): the micro-batches are measured together.
    rng = np.random.default_rng(3)
    proxy, ref = rng.exponential(1.0, 12), rng.exponential(1.0, 12) + 0.1
    ids = np.tile(IDS, 2)
    for strategy, kw in (("tdro", {"accumulation": "joined"}), ("doremi", {})):
        big, acc = make(strategy, **kw), make(strategy, **kw)
        for step in range(3):
            big.loss(torch.tensor(proxy * (step + 1)), batch_of(ids), ctx_for(ref))
            for micro in range(2):
                sl = slice(6 * micro, 6 * micro + 6)
                c = ctx_for(ref[sl])
                c.micro_step, c.accumulation_steps = micro, 2
                acc.loss(torch.tensor(proxy[sl] * (step + 1)), batch_of(ids[sl]), c)
        assert acc.n_steps == big.n_steps == 3
        np.testing.assert_allclose(acc.weights, big.weights, rtol=1e-12)
        assert not np.allclose(acc.weights, 1 / 3)


def test_nan_batch_is_not_back_propagated():
    s = make("tdro")
    w = torch.nn.Parameter(torch.tensor(1.0))
    losses = w * torch.tensor([1.0, float("nan"), 1.0, 1.0, 1.0, 1.0])
    out = s.loss(losses, batch_of(IDS), ctx_for(REF))
    out.backward()
    assert out.item() == 0.0
    assert w.grad is None            # the NaN never reaches the parameter
    assert s.n_skipped == 1
    np.testing.assert_array_equal(s.weights, np.full(3, 1 / 3))
    # The next finite batch updates as the first step would have.
    fresh = make("tdro")
    s.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(REF))
    fresh.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(REF))
    np.testing.assert_allclose(s.weights, fresh.weights, rtol=1e-15)


def test_doremi_one_step_matches_hand_computation():
    # Excess loss max(l - r, 0): a: [0, 2] -> 1; b: [0, 0] -> 0; c: [0.5, 0] -> 0.25.
    # log w = log(1/3) + 1.0 * [1, 0, 0.25]; softmax: [e, 1, e^0.25] / 5.0023075 = [0.543405, 0.199908, 0.256687]
    # smoothed with uniform, c = 1e-3: 0.999 * w + 0.001 / 3 = [0.543196, 0.200041, 0.256763]
    s = make("doremi")
    s.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(REF))
    np.testing.assert_allclose(s.last.measurement, [1.0, 0.0, 0.25])
    np.testing.assert_allclose(s.weights, [0.543196, 0.200041, 0.256763], atol=1e-6)
    # Output is the average over steps as DoReMi's trainer keeps it (update_counter starts at 1, so the initial
    # weights w0 are the average's first term): avg <- (avg * (c - 1) + w) / c with c = 2 after one step.
    w0 = np.full(3, 1 / 3)
    fw = s.final_weights()
    assert fw["output"] == "mean"
    np.testing.assert_allclose(fw["weights"], (w0 + s.weights) / 2, rtol=1e-12)
    # Second step with the same losses: w2 = 0.999 * softmax(log w1 + [1, 0, .25]) + 0.001/3; mean = (w0+w1+w2)/3
    w1 = s.weights.copy()
    s.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(REF))
    e = w1 * np.exp([1.0, 0.0, 0.25])
    w2 = 0.999 * e / e.sum() + 0.001 / 3
    np.testing.assert_allclose(s.weights, w2, rtol=1e-12)
    np.testing.assert_allclose(s.final_weights()["weights"], (w0 + w1 + w2) / 3, rtol=1e-12)
    # tDRO's train_domain_weights_mean starts at the first update (its counter starts at 0): after two steps
    # the mean is (w1 + w2) / 2 -- and so is DoReMi's with mean_counts_initial off.
    off = make("doremi", mean_counts_initial=False)
    for _ in range(2):
        off.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(REF))
    np.testing.assert_allclose(off.mean_weights, (w1 + w2) / 2, rtol=1e-12)


def test_groupdro_one_step_matches_hand_computation():
    # Raw group loss: a: (1+3)/2 = 2; b: 2; c: (1+0.5)/2 = 0.75
    # q_i = exp(0.01 * L_i) / sum: exp(0.02) = 1.0202013, exp(0.0075) = 1.0075282, sum = 3.0479309
    # -> [0.334719, 0.334719, 0.330561]; no reference model is needed.
    s = make("groupdro")
    s.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(None))
    np.testing.assert_allclose(s.weights, [0.334719, 0.334719, 0.330561], atol=1e-6)


def test_groupdro_overweights_the_highest_loss_collection():
    # Constant losses 3 > 1 > 0.5 for 200 steps: q_a / q_b = exp(0.01 * 200 * (3 - 1)) = e^4.
    s = make("groupdro")
    proxy = np.array([3.0, 3.0, 1.0, 1.0, 0.5, 0.5])
    for _ in range(200):
        s.step_weights(proxy, None, IDS)
    w = s.weights
    assert w.argmax() == 0
    assert w[0] / w[1] == pytest.approx(math.exp(4.0), rel=1e-9)


def test_weights_after_two_steps_match_hand_computation():
    # GroupDRO (eta 0.01, raw losses): step 1 losses a=2, b=2, c=0.75 (means of PROXY), step 2 a=1, b=3, c=2.
    # log w_i = log(1/3) + 0.01 * (L1_i + L2_i) renormalised: exponents 0.03, 0.05, 0.0275.
    s = make("groupdro")
    s.step_weights(PROXY, None, IDS)
    s.step_weights(np.array([1.0, 1.0, 3.0, 3.0, 2.0, 2.0]), None, IDS)
    e = np.exp([0.03, 0.05, 0.0275])
    np.testing.assert_allclose(s.weights, e / e.sum(), rtol=1e-12)
    # DoReMi (eta 1, excess loss max(l - r, 0), smoothing 1e-3), one step: excess a = mean(0, 2) = 1,
    # b = 0, c = mean(0.5, 0) = 0.25 -> w ∝ exp([1, 0, 0.25]), then 0.999 w + 0.001 / 3.
    d = make("doremi")
    d.step_weights(PROXY, REF, IDS)
    e = np.exp([1.0, 0.0, 0.25])
    np.testing.assert_allclose(d.weights, 0.999 * e / e.sum() + 0.001 / 3, rtol=1e-12)


def test_absent_collection_keeps_its_weight():
    # absent: keep (DoReMi's default, an option for the others). Start from weights [0.5, 0.3, 0.2]; a batch
    # with only a and b: c stays 0.2 exactly, a and b share 0.8.
    # GroupDRO losses a = 2, b = 1: a, b ∝ 0.5 e^0.02, 0.3 e^0.01, scaled to total 0.8.
    s = make("groupdro", absent="keep")
    s.log_weights = np.log(np.array([0.5, 0.3, 0.2]))
    s.step_weights(np.array([2.0, 1.0]), None, np.array([0, 1]))
    ea, eb = 0.5 * math.exp(0.02), 0.3 * math.exp(0.01)
    np.testing.assert_allclose(s.weights, [0.8 * ea / (ea + eb), 0.8 * eb / (ea + eb), 0.2], rtol=1e-12)
    assert s.trajectory_record(1)["measurement"]["c"] is None
    # absent: renormalise (GroupDRO's and tDRO's own rule, their default): q * exp(eta * loss) / Z over all,
    # with loss 0 for c.
    r = make("groupdro")
    r.log_weights = np.log(np.array([0.5, 0.3, 0.2]))
    r.step_weights(np.array([2.0, 1.0]), None, np.array([0, 1]))
    q = np.array([0.5 * math.exp(0.02), 0.3 * math.exp(0.01), 0.2])
    np.testing.assert_allclose(r.weights, q / q.sum(), rtol=1e-12)


def test_nan_and_zero_reference_skip_the_update(caplog):
    s = make("tdro")
    s.step_weights(PROXY, REF, IDS)
    before = s.log_weights.copy()
    with caplog.at_level(logging.WARNING, logger="drmix.mixture.dro"):
        s.step_weights(np.array([1.0, np.nan, 1, 1, 1, 1]), REF, IDS)
        s.step_weights(PROXY, np.zeros(6), IDS)
        s.step_weights(PROXY, np.array([1.0, np.inf, 1, 1, 1, 1]), IDS)
    np.testing.assert_array_equal(s.log_weights, before)
    assert s.n_skipped == 3
    assert sum("skipped the weight update" in r.message for r in caplog.records) == 3
    assert s.trajectory_record(5)["skipped"] is True


def test_huge_losses_keep_weights_finite_and_positive():
    # tDRO: the unit-norm gradient bounds each step to 0.02 in log space whatever the scale.
    s = make("tdro")
    s.step_weights(np.array([1e30, 1e30, 1.0, 1.0, 1.0, 1.0]), np.ones(6), IDS)
    assert abs(s.log_weights - math.log(1 / 3)).max() <= 0.02 + 1e-12
    # GroupDRO: 0.01 * 1e6 = 1e4 in log space; the others would underflow to 0 -> clamped at 1e-300.
    g = make("groupdro")
    g.step_weights(np.array([1e6, 1e6, 1.0, 1.0, 1.0, 1.0]), None, IDS)
    w = g.weights
    assert (w > 0).all() and w.sum() == pytest.approx(1.0) and w[0] == pytest.approx(1.0)
    assert np.isfinite(g.log_weights).all()


def test_update_rule_unit_norm_and_no_floor():
    # Exponentiated gradient with lr 2e-2 on a gradient clipped at norm 1 ([3, 4] / (5 + 1e-6), the factor of
    # clip_grad_norm_): many steps push b up and a down without any floor: after 1000 steps
    # log(w_a / w_b) = 1000 * 0.02 * (3 - 4) / (5 + 1e-6).
    lw = np.log([0.5, 0.5])
    for _ in range(1000):
        lw = update_log_weights(lw, np.array([3.0, 4.0]), np.array([True, True]), lr=0.02,
                                normalize_gradient=True, smoothing=0.0)
    assert lw[0] - lw[1] == pytest.approx(-20.0 / (5 + 1e-6), abs=1e-9)
    # a gradient already under norm 1 is not rescaled (clipping, not normalisation)
    lw = update_log_weights(np.log([0.5, 0.5]), np.array([0.3, 0.4]), np.array([True, True]), lr=0.02,
                            normalize_gradient=True, smoothing=0.0)
    assert lw[0] - lw[1] == pytest.approx(0.02 * (0.3 - 0.4), abs=1e-12)


def test_final_weights_and_top_k():
    s = make("groupdro", top_percents=[10, 30, 70, 90])
    s.log_weights = np.log(np.array([0.2, 0.5, 0.3]))
    fw = s.final_weights()
    assert fw["collections"] == NAMES
    # floor(3 * K / 100), at least 1: 10% -> 1, 30% -> 0 -> 1, 70% -> 2, 90% -> 2
    assert fw["top"] == {"10": ["b"], "30": ["b"], "70": ["b", "c"], "90": ["b", "c"]}
    assert set(fw) >= {"final", "mean", "ema", "weights", "top", "steps"}
    assert top_k_selection(["x", "y", "z", "w"], np.array([0.25, 0.25, 0.25, 0.25]), 50) == ["x", "y"]


def test_ema_and_mean_tracking():
    # Two GroupDRO steps: mean = (w1 + w2) / 2; ema = 0.9 * (0.9 * u + 0.1 * w1) + 0.1 * w2 with u = 1/3.
    s = make("groupdro")
    s.step_weights(PROXY, None, IDS)
    w1 = s.weights.copy()
    s.step_weights(PROXY, None, IDS)
    w2 = s.weights.copy()
    np.testing.assert_allclose(s.mean_weights, (w1 + w2) / 2, rtol=1e-12)
    np.testing.assert_allclose(s.ema_weights, 0.9 * (0.9 / 3 + 0.1 * w1) + 0.1 * w2, rtol=1e-12)


@pytest.mark.parametrize("strategy", ["tdro", "doremi", "groupdro"])
def test_state_dict_round_trip_resumes_exactly(strategy):
    rng = np.random.default_rng(1)
    steps = [(rng.exponential(2.0, 6), rng.exponential(1.0, 6) + 0.1) for _ in range(6)]
    a = make(strategy)
    for p, r in steps[:3]:
        a.step_weights(p, r, IDS)
    state = json.loads(json.dumps(a.state_dict()))   # what a checkpoint stores
    b = make(strategy)
    b.load_state_dict(state)
    for p, r in steps[3:]:
        a.step_weights(p, r, IDS)
        b.step_weights(p, r, IDS)
    np.testing.assert_array_equal(a.log_weights, b.log_weights)
    assert a.final_weights() == b.final_weights()


def test_resume_with_other_collections_is_an_error():
    from drmix.errors import CheckpointError

    a = make("tdro")
    b = DROStrategy(DROConfig(), strategy="tdro")
    b.setup(["a", "b", "x"], [1, 1, 1])
    with pytest.raises(CheckpointError):
        b.load_state_dict(a.state_dict())


def test_config_defaults_follow_the_papers():
    assert DROConfig().resolved("tdro").model_dump(include={"measurement", "lr", "normalize_gradient", "smoothing"}) \
        == {"measurement": "ratio", "lr": 0.02, "normalize_gradient": True, "smoothing": 0.0}
    d = DROConfig().resolved("doremi")
    assert (d.measurement, d.lr, d.normalize_gradient, d.smoothing, d.output) == \
        ("difference", 1.0, False, 1e-3, "mean")
    g = DROConfig().resolved("groupdro")
    assert (g.measurement, g.lr, g.normalize_gradient) == ("raw", 0.01, False)
    # The paper's ablation: tDRO machinery with another measurement.
    assert DROConfig(measurement="raw").resolved("tdro").measurement == "raw"
    # sampling stays uniform: the weights act on the loss in stage 1
    np.testing.assert_allclose(make("tdro").sampling_weights(), [1 / 3] * 3)


def test_reference_needed_for_ratio():
    s = make("tdro")
    with pytest.raises(RuntimeError, match="reference"):
        s.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(None))


def _ddp_worker(rank: int, world: int, port: int, queue) -> None:
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        s = make("tdro")
        half = slice(rank * 3, rank * 3 + 3)
        # rank 0 holds [a, a, b], rank 1 [b, c, c]: the update must equal the single-process one.
        losses = torch.tensor(PROXY[half], requires_grad=True)
        s.step_weights(PROXY[half], REF[half], IDS[half])
        out = s.weighted_loss(losses, IDS[half], world_size=world)
        queue.put((rank, s.weights.tolist(), out.item()))
    finally:
        dist.destroy_process_group()


def test_ddp_ranks_make_the_global_update():
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_ddp_worker, args=(2, port, queue), nprocs=2, join=True)
    results = sorted(queue.get() for _ in range(2))
    single = make("tdro")
    single.step_weights(PROXY, REF, IDS)
    for _, w, _ in results:
        np.testing.assert_allclose(w, single.weights, rtol=1e-12)
    # DDP averages the two ranks' gradients: mean of the returned losses = the global weighted loss.
    w = single.weights[IDS]
    assert (results[0][2] + results[1][2]) / 2 == pytest.approx(float((w * PROXY).sum() / w.sum()), rel=1e-9)


class _TwoRanks:
    """Two threads standing in for two processes: ``all_reduce`` sums what both hand in (numpy or torch)."""

    def __init__(self):
        import threading

        self.barrier = threading.Barrier(2)
        self.slots: dict = {}
        self.local = threading.local()

    def all_reduce(self, x, op="sum"):
        self.slots[self.local.rank] = x.copy() if isinstance(x, np.ndarray) else x.clone()
        self.barrier.wait()
        total = self.slots[0] + self.slots[1]
        self.barrier.wait()
        if op == "mean":
            total = total / 2
        if isinstance(x, np.ndarray):
            return total
        x.copy_(total)
        return x


@pytest.mark.parametrize("strategy", ["tdro", "doremi", "groupdro"])
def test_two_processes_make_the_single_process_update_and_loss(monkeypatch, strategy):
    """Under DDP each process measures its half of the batch; the all-reduced measurement gives the weights of
    the whole batch on one process, and the two processes' losses average (as DDP averages gradients) to the
    single-process loss -- including a collection absent from one half (GroupDRO's per-group means are global)."""
    import threading

    import drmix.mixture.dro as dro_mod

    rng = np.random.default_rng(7)
    ids = np.array([0, 0, 1, 2, 2, 1, 0, 2])                  # rank 0: [0, 0, 1, 2], rank 1: [2, 1, 0, 2]
    ids[4:] = [2, 2, 0, 2]                                    # collection 1 only on rank 0
    proxy = rng.uniform(0.2, 3.0, size=8)
    ref = rng.uniform(0.2, 3.0, size=8)
    single = make(strategy)
    out_single = [single.loss(torch.tensor(proxy), batch_of(ids), ctx_for(None if strategy == "groupdro" else ref))
                  for _ in range(3)]
    pair = _TwoRanks()
    monkeypatch.setattr(dro_mod, "all_reduce", pair.all_reduce)
    results: dict = {}

    def run(rank):
        pair.local.rank = rank
        s = make(strategy)
        part = slice(4 * rank, 4 * rank + 4)
        r = None if strategy == "groupdro" else ref[part]
        ctx = ctx_for(r)
        ctx.world_size, ctx.rank = 2, rank
        results[rank] = ([s.loss(torch.tensor(proxy[part]), batch_of(ids[part]), ctx) for _ in range(3)], s)

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rank in (0, 1):
        np.testing.assert_allclose(results[rank][1].weights, single.weights, rtol=1e-12)
    for step in range(3):
        ddp = (results[0][0][step] + results[1][0][step]) / 2
        assert ddp.item() == pytest.approx(out_single[step].item(), rel=1e-12)


def test_trajectory_record_and_final_weights_exactly():
    """weights.jsonl's line and weights.json, key by key: an absent collection's measurement is null, a
    collection without a reference loss has null reference losses."""
    s = make("tdro")
    assert s.trajectory_record(0) is None                         # nothing measured yet
    ids = np.array([0, 0, 1, 1])                                  # c absent
    s.loss(torch.tensor(PROXY[:4]), batch_of(ids), ctx_for(REF[:4]))
    rec = s.trajectory_record(7)
    m = s.last
    assert rec == {
        "step": 7, "weights": dict(zip(NAMES, s.weights.tolist())),
        "proxy_loss": {"a": 2.0, "b": 2.0, "c": None}, "reference_loss": {"a": 1.0, "b": 2.0, "c": None},
        "measurement": {"a": float(m.measurement[0]), "b": float(m.measurement[1]), "c": None},
        "counts": {"a": 2, "b": 2, "c": 0}, "skipped": False}
    g = make("groupdro")
    g.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(None))
    rec = g.trajectory_record(1)
    assert rec["reference_loss"] == {"a": None, "b": None, "c": None} and rec["measurement"] == {
        "a": 2.0, "b": 2.0, "c": 0.75}
    fw = s.final_weights()
    named = dict(zip(NAMES, s.weights.tolist()))
    assert fw == {"collections": NAMES, "weights": s.weights.tolist(), "strategy": "tdro", "measurement": "ratio",
                  "output": "final", "steps": 1, "skipped_steps": 0, "final": named,
                  "mean": dict(zip(NAMES, s.mean_weights.tolist())), "ema": dict(zip(NAMES, s.ema_weights.tolist())),
                  "top": {str(k): top_k_selection(NAMES, s.weights, k) for k in range(10, 100, 10)}}
    ema = make("tdro", output="ema")
    ema.loss(torch.tensor(PROXY), batch_of(IDS), ctx_for(REF))
    assert ema.final_weights()["weights"] == ema.ema_weights.tolist() and ema.output_weights() is ema.ema_weights


def test_every_option_resolves_to_its_measurements_default():
    t = DROConfig().resolved("tdro")
    assert (t.absent, t.accumulation, t.objective, t.mean_counts_initial, t.min_relative_reference, t.output) == (
        "renormalise", "micro", "examples", False, 1e-4, "final")
    d = DROConfig().resolved("doremi")
    assert (d.absent, d.accumulation, d.objective, d.mean_counts_initial) == ("previous", "joined", "examples", True)
    g = DROConfig().resolved("groupdro")
    assert (g.absent, g.accumulation, g.objective, g.mean_counts_initial, g.output) == (
        "renormalise", "joined", "groups", False, "final")
    assert DROConfig(reference_guard="mean").resolved("tdro").min_relative_reference == 0.2
    given = DROConfig(lr=0.5, normalize_gradient=False, smoothing=0.2, output="ema", absent="keep",
                      accumulation="joined", objective="groups", mean_counts_initial=True,
                      min_relative_reference=0.0).resolved("tdro")
    assert (given.lr, given.normalize_gradient, given.smoothing, given.output, given.absent, given.accumulation,
            given.objective, given.mean_counts_initial, given.min_relative_reference) == (
        0.5, False, 0.2, "ema", "keep", "joined", "groups", True, 0.0)
    assert DROConfig(normalize_gradient=False).resolved("tdro").normalize_gradient is False


def test_registry_builds_each_dro_strategy_with_its_options():
    from drmix.config import TrainConfig
    from drmix.errors import ConfigError
    from drmix.mixture.dro import build_dro_strategy
    from drmix.mixture.registry import build_strategy

    for name, measurement in (("tdro", "ratio"), ("doremi", "difference"), ("groupdro", "raw")):
        s = build_strategy(TrainConfig(data=["x"], strategy=name, tdro={"lr": 0.3}), NAMES)
        assert isinstance(s, DROStrategy) and s.name == name and s.config.measurement == measurement
        assert s.config.lr == 0.3
    s = build_strategy(TrainConfig(data=["x"], strategy="TDRO"), NAMES)
    assert s.name == "tdro"
    assert build_strategy(TrainConfig(data=["x"], strategy="groupdro", tdro={"lr": 0.7}), NAMES).config.lr == 0.7
    assert build_strategy(TrainConfig(data=["x"], strategy="tdro"), NAMES).config.lr == 0.02
    with pytest.raises(ConfigError, match="unknown DRO strategy"):
        build_dro_strategy("static")
