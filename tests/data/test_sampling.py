"""Batch samplers: empirical frequencies follow the weights; state resumes exactly."""
import numpy as np
import pytest

from drmix.data.sampling import MixtureSampler


def test_homogeneous_batches_follow_weights():
    weights = np.array([0.5, 0.3, 0.2])
    s = MixtureSampler([100, 50, 20], batch_size=4, seed=0)
    draws = 6000
    picks = []
    for _ in range(draws):
        batch = s.next_indices(weights)
        colls = {c for c, _ in batch}
        assert len(colls) == 1  # one collection per global batch
        picks.append(colls.pop())
    freq = np.bincount(picks, minlength=3) / draws
    # binomial sd at p=0.5, n=6000 is 0.0065: 4 sd tolerance
    assert freq == pytest.approx(weights, abs=0.026)


def test_mixed_batches_have_floor_or_ceil_counts_and_exact_mean():
    weights = np.array([0.5, 0.3, 0.2])
    s = MixtureSampler([100, 100, 100], batch_size=7, mode="mixed", seed=1)
    totals = np.zeros(3)
    n = 4000
    for _ in range(n):
        counts = np.bincount([c for c, _ in s.next_indices(weights)], minlength=3)
        assert counts.sum() == 7
        # expected 3.5, 2.1, 1.4 per batch: each count is the floor or the ceiling
        assert counts[0] in (3, 4) and counts[1] in (2, 3) and counts[2] in (1, 2)
        totals += counts
    assert totals / (n * 7) == pytest.approx(weights, abs=0.01)


def test_equal_share_mixed_batch_holds_every_collection():
    s = MixtureSampler([10, 10, 10, 10], batch_size=8, mode="mixed", seed=0)
    counts = np.bincount([c for c, _ in s.next_indices(np.ones(4))], minlength=4)
    assert counts.tolist() == [2, 2, 2, 2]


def test_rows_without_replacement_within_an_epoch():
    s = MixtureSampler([10], batch_size=5, seed=0)
    rows = [r for _ in range(2) for _, r in s.next_indices(np.ones(1))]
    assert sorted(rows) == list(range(10))
    more = [r for _ in range(2) for _, r in s.next_indices(np.ones(1))]
    assert sorted(more) == list(range(10)) and more != rows  # a new permutation for epoch 2


def test_zero_weight_collection_is_never_drawn():
    s = MixtureSampler([10, 10], batch_size=3, seed=0)
    assert all(c == 1 for _ in range(200) for c, _ in s.next_indices(np.array([0.0, 1.0])))


def test_state_dict_resumes_the_same_sequence():
    w = np.array([0.2, 0.8])
    a = MixtureSampler([13, 7], batch_size=4, seed=5)
    for _ in range(9):
        a.next_indices(w)
    state = a.state_dict()
    expected = [a.next_indices(w) for _ in range(6)]
    b = MixtureSampler([13, 7], batch_size=4, seed=5)
    b.load_state_dict(state)
    assert [b.next_indices(w) for _ in range(6)] == expected


def test_invalid_weights_are_rejected():
    s = MixtureSampler([3, 3], batch_size=2)
    with pytest.raises(ValueError):
        s.next_indices(np.array([np.nan, 1.0]))
    with pytest.raises(ValueError):
        s.next_indices(np.array([0.0, 0.0]))
