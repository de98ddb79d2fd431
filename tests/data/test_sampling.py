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


# -- duplicate keys and no-duplicates sampling ---------------------------------------------------------------------
def _collection(rows, name="c"):
    import datasets

    from drmix.data.collections import Collection

    ds = datasets.Dataset.from_dict({"query": [r[0] for r in rows], "positives": [r[1] for r in rows],
                                     "negatives": [r[2] for r in rows]})
    return Collection(name=name, dataset=ds)


SHARED = [("q0", ["p"], ["n0"]), ("q1", ["p"], ["n1"]), ("q2", ["x"], ["p"]), ("q0", ["y"], ["n3"]),
          ("q4", ["z"], ["n4"]), ("q5", ["w"], ["n5"])]


def test_builder_keys_are_equal_exactly_for_equal_texts():
    from drmix.data.sampling import BatchBuilder

    b = BatchBuilder([_collection(SHARED)], 1, seed=0, keys=True)
    batch = b.build([(0, r) for r in range(6)])
    k = batch.keys
    assert k.positives[0] == k.positives[1] == k.negatives[2][0]          # "p" three times
    assert k.queries[0] == k.queries[3] and len(set(k.queries.tolist())) == 5
    assert len({*k.positives.tolist(), *[int(n[0]) for n in k.negatives]}) == 10   # 12 texts, "p" thrice
    assert BatchBuilder([_collection(SHARED)], 1, seed=0).build([(0, 0)]).keys is None   # only when asked


def test_keys_do_not_change_the_draws():
    from drmix.data.sampling import BatchBuilder

    rows = [(f"q{i}", [f"p{i}", f"pp{i}"], [f"n{i}{j}" for j in range(4)]) for i in range(8)]
    plain = BatchBuilder([_collection(rows)], 2, seed=3).build([(0, r) for r in range(8)])
    keyed = BatchBuilder([_collection(rows)], 2, seed=3, keys=True).build([(0, r) for r in range(8)])
    assert plain.positives == keyed.positives and plain.negatives == keyed.negatives


def test_slices_keep_the_global_keys_and_their_offset():
    from drmix.data.sampling import BatchBuilder

    batch = BatchBuilder([_collection(SHARED)], 1, seed=0, keys=True).build([(0, r) for r in range(6)])
    part = batch.slice(2, 4).slice(1, 2)
    assert part.keys is batch.keys and part.offset == 3 and part.queries == ["q0"]


def _keys_of(builder, pairs):
    return [builder.row_keys(c, [r])[0] for c, r in pairs]


def test_no_duplicates_batches_share_no_text():
    from drmix.data.sampling import BatchBuilder

    # 40 rows; rows i and i+20 share their positive
    rows = [(f"q{i}", [f"p{i % 20}"], [f"n{i}"]) for i in range(40)]
    builder = BatchBuilder([_collection(rows)], 1, seed=0)
    s = MixtureSampler([40], batch_size=8, seed=0, no_duplicates=True, row_keys=builder.row_keys)
    drawn = []
    for _ in range(20):
        pairs = s.next_indices(np.ones(1))
        keys = _keys_of(builder, pairs)
        assert len(pairs) == 8 and sum(len(k) for k in keys) == len(frozenset().union(*keys))
        drawn += [r for _, r in pairs]
    plain = MixtureSampler([40], batch_size=8, seed=0)
    sizes = [len(frozenset().union(*_keys_of(builder, plain.next_indices(np.ones(1))))) for _ in range(20)]
    assert min(sizes) < 24                                                # without it, batches repeat texts
    assert set(drawn) == set(range(40))                                   # every row is still drawn


def test_no_duplicates_resumes_exactly():
    from drmix.data.sampling import BatchBuilder

    rows = [(f"q{i % 7}", [f"p{i % 5}"], []) for i in range(30)]
    builder = BatchBuilder([_collection(rows)], 0, seed=0)
    a = MixtureSampler([30], batch_size=3, seed=1, no_duplicates=True, row_keys=builder.row_keys)
    for _ in range(4):
        a.next_indices(np.ones(1))
    state = a.state_dict()
    assert "deferred" in state
    b = MixtureSampler([30], batch_size=3, seed=1, no_duplicates=True, row_keys=builder.row_keys)
    b.load_state_dict(state)
    assert [a.next_indices(np.ones(1)) for _ in range(6)] == [b.next_indices(np.ones(1)) for _ in range(6)]


def test_no_duplicates_fills_a_batch_it_cannot_keep_distinct(caplog):
    from drmix.data.sampling import BatchBuilder

    rows = [(f"q{i}", ["same"], []) for i in range(6)]       # every row shares its positive
    builder = BatchBuilder([_collection(rows)], 0, seed=0)
    s = MixtureSampler([6], batch_size=4, seed=0, no_duplicates=True, row_keys=builder.row_keys)
    with caplog.at_level("WARNING"):
        pairs = s.next_indices(np.ones(1))
    assert len(pairs) == 4 and "could not fill" in caplog.text


def test_weights_whose_sum_overflows_are_scaled_first():
    from drmix.data.sampling import normalise_weights

    assert normalise_weights(np.array([1e308, 1e308, 0.0])).tolist() == [0.5, 0.5, 0.0]
    assert normalise_weights(np.array([3.0, 1.0])).tolist() == [0.75, 0.25]
    s = MixtureSampler([3, 3], batch_size=4, mode="mixed")
    assert s.counts(np.array([1.5e308, 1.5e308])).tolist() == [2, 2]
    with pytest.raises(ValueError):
        normalise_weights(np.array([np.inf, 1.0]))


def test_the_built_in_builders_are_row_builders():
    from drmix.data.sampling import BatchBuilder, RowBuilder
    from drmix.pretrain.coco import SpanBuilder

    batch, span = BatchBuilder([], 1, keys=True), SpanBuilder([])
    assert isinstance(batch, RowBuilder) and isinstance(span, RowBuilder)
    assert (batch.keys, batch.scores, batch.row_keys == batch.row_keys) == (True, False, True)
    assert (span.keys, span.scores, span.row_keys) == (False, False, None)
    assert not isinstance(object(), RowBuilder)
