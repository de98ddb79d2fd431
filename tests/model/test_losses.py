"""InfoNCE per-example losses against values computed by hand."""
import math

import pytest
import torch

from drmix.model.losses import contrastive_losses, false_negative_mask, info_nce

# Two queries in 2-d, tau = 1:
#   q1 = (1, 0), q2 = (0, 1); p1 = (1, 0), p2 = (0.6, 0.8); hard negatives n1 = (0, 1), n2 = (1, 0).
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
P = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
N = torch.tensor([[[0.0, 1.0]], [[1.0, 0.0]]])


def test_in_batch_and_hard_negatives_by_hand():
    # candidates for every query: p1, p2, n1, n2
    # q1 scores: 1, 0.6, 0, 1  -> l1 = -1 + log(e^1 + e^0.6 + e^0 + e^1) = 1.1112651
    # q2 scores: 0, 0.8, 1, 0  -> l2 = -0.8 + log(e^0 + e^0.8 + e^1 + e^0) = 1.1378525
    losses = info_nce(Q, P, N, temperature=1.0)
    assert losses.tolist() == pytest.approx([1.1112651, 1.1378525], abs=1e-6)


def test_hard_negative_only_by_hand():
    # q1: positive 1, own negative 0 -> log(1 + e^-1) = 0.3132617
    # q2: positive 0.8, own negative 0 -> log(1 + e^-0.8) = 0.3711007
    losses = info_nce(Q, P, N, temperature=1.0, in_batch=False)
    assert losses.tolist() == pytest.approx([0.3132617, 0.3711007], abs=1e-6)


def test_temperature_scales_scores():
    # tau = 0.5 doubles every score: l1 = -2 + log(e^2 + e^1.2 + 1 + e^2) = 0.9495956
    losses = info_nce(Q, P, N, temperature=0.5)
    assert losses.tolist() == pytest.approx([0.9495956, 1.0631985], abs=1e-6)


def test_masked_negative_is_left_out():
    # n2 marked missing: q1 sees p1, p2, n1 -> -1 + log(e + e^0.6 + 1) = 0.7120668
    mask = torch.tensor([[True], [False]])
    losses = info_nce(Q, P, N, mask, temperature=1.0)
    assert losses.tolist() == pytest.approx([0.7120668, 0.9823525], abs=1e-6)


def test_in_batch_only_without_hard_negatives():
    # q1: p1 1, p2 0.6 -> -1 + log(e + e^0.6); q2: p1 0, p2 0.8 -> -0.8 + log(1 + e^0.8)
    losses = info_nce(Q, P, temperature=1.0)
    expected = [-1 + math.log(math.e + math.exp(0.6)), -0.8 + math.log(1 + math.exp(0.8))]
    assert losses.tolist() == pytest.approx(expected, abs=1e-6)


def test_gradient_flows_to_queries_and_documents():
    q = Q.clone().requires_grad_()
    p = P.clone().requires_grad_()
    info_nce(q, p, N, temperature=1.0).sum().backward()
    assert q.grad.abs().sum() > 0 and p.grad.abs().sum() > 0


def test_matryoshka_averages_full_and_truncated():
    q = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    p = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    full = info_nce(q, p, temperature=1.0)
    trunc = info_nce(torch.nn.functional.normalize(q[:, :2], dim=-1), torch.nn.functional.normalize(p[:, :2], dim=-1),
                     temperature=1.0)
    got = contrastive_losses(q, p, None, None, temperature=1.0, in_batch=True, gather=False, matryoshka_dims=[2])
    assert got.tolist() == pytest.approx(((full + trunc) / 2).tolist(), abs=1e-6)


def _tdro_compute_loss_only_hn(q_reps, p_reps, temperature):
    """tDRO's ``DROModelv2.compute_loss_only_hn`` (``modeling_group_dro_v2.py``) with ``score_function cos_sim``
    and per-example reduction: each query against its own ``n_psg`` passages (positive first), target 0."""
    n_psg = p_reps.shape[0] // q_reps.shape[0]
    q = torch.nn.functional.normalize(q_reps, dim=-1).unsqueeze(1)
    p = torch.nn.functional.normalize(p_reps, dim=-1).view(q_reps.shape[0], n_psg, p_reps.shape[-1])
    scores = (q * p).sum(-1) / temperature
    return torch.nn.functional.cross_entropy(scores, torch.zeros(scores.shape[0], dtype=torch.long), reduction="none")


def _tevatron_compute_loss(q_reps, p_reps, temperature):
    """The in-batch loss of tDRO's / Tevatron's ``EncoderModel.compute_loss``: every query against every passage of
    the batch (``[pos, negs...]`` per query), target ``arange(B) * n_psg``."""
    n_psg = p_reps.shape[0] // q_reps.shape[0]
    scores = q_reps @ p_reps.T / temperature
    target = torch.arange(q_reps.shape[0]) * n_psg
    return torch.nn.functional.cross_entropy(scores, target, reduction="none")


def test_hard_negative_only_losses_are_the_tdro_authors_at_their_temperature():
    """Stage 1's per-example losses (7 hard negatives, temperature 0.002, normalised embeddings) against the
    authors' compute_loss_only_hn: identical, example by example (the ratio measurement is built from them)."""
    gen = torch.Generator().manual_seed(0)
    B, H, d = 5, 7, 16
    q = torch.nn.functional.normalize(torch.randn(B, d, generator=gen, dtype=torch.float64), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(B, d, generator=gen, dtype=torch.float64), dim=-1)
    negs = torch.nn.functional.normalize(torch.randn(B, H, d, generator=gen, dtype=torch.float64), dim=-1)
    # scores close together so the losses at 0.002 are not all 0 or huge: positives near their negatives
    p = torch.nn.functional.normalize(negs[:, 0] + 0.01 * p, dim=-1)
    theirs = _tdro_compute_loss_only_hn(q, torch.cat([p.unsqueeze(1), negs], 1).reshape(B * (H + 1), d), 0.002)
    ours = info_nce(q, p, negs, temperature=0.002, in_batch=False)
    assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    assert (theirs > 1e-3).sum() >= 2                                   # a non-degenerate comparison


def test_in_batch_losses_are_tevatrons():
    """Fine-tuning's losses (in-batch plus hard negatives) against EncoderModel.compute_loss, per example; a
    missing hard negative (mask) is a candidate left out."""
    gen = torch.Generator().manual_seed(1)
    B, H, d = 4, 2, 8
    q, p = torch.randn(B, d, generator=gen, dtype=torch.float64), torch.randn(B, d, generator=gen, dtype=torch.float64)
    negs = torch.randn(B, H, d, generator=gen, dtype=torch.float64)
    theirs = _tevatron_compute_loss(q, torch.cat([p.unsqueeze(1), negs], 1).reshape(B * (H + 1), d), 0.05)
    assert torch.allclose(info_nce(q, p, negs, temperature=0.05), theirs, rtol=1e-10, atol=1e-12)
    mask = torch.ones(B, H, dtype=torch.bool)
    mask[2, 1] = False                                                  # example 2 has one negative only
    keep = [i for i in range(B * (H + 1)) if i != 2 * (H + 1) + 2]
    p_all = torch.cat([p.unsqueeze(1), negs], 1).reshape(B * (H + 1), d)[keep]
    scores = q @ p_all.T / 0.05
    target = torch.tensor([0, 3, 6, 8])                                  # positions of the positives after removal
    theirs = torch.nn.functional.cross_entropy(scores, target, reduction="none")
    assert torch.allclose(info_nce(q, p, negs, mask, temperature=0.05), theirs, rtol=1e-10, atol=1e-12)


def _matryoshka_reference(q, p, negs, mask, dims, temperature, in_batch):
    """DRAMA's Matryoshka loss written out: the loss at full size and at each dim < d of the embeddings cut to
    their first dims and re-normalised, averaged; each loss is Tevatron's (in-batch) or tDRO's (own passages)."""
    def one(qq, pp, nn):
        B, H = nn.shape[:2]
        if in_batch:
            docs = torch.cat([pp, nn.reshape(B * H, -1)])
            valid = torch.cat([torch.ones(B, dtype=torch.bool), mask.reshape(-1)])
            scores = (qq @ docs.T).masked_fill(~valid, float("-inf")) / temperature
            return torch.nn.functional.cross_entropy(scores, torch.arange(B), reduction="none")
        scores = torch.cat([(qq * pp).sum(-1, keepdim=True), torch.einsum("bd,bhd->bh", qq, nn)], 1)
        scores = scores.masked_fill(torch.cat([torch.ones(B, 1, dtype=torch.bool), mask], 1).logical_not(),
                                    float("-inf")) / temperature
        return torch.nn.functional.cross_entropy(scores, torch.zeros(B, dtype=torch.long), reduction="none")

    n = torch.nn.functional.normalize
    parts = [one(q, p, negs)] + [one(n(q[:, :k], dim=-1), n(p[:, :k], dim=-1), n(negs[..., :k], dim=-1))
                                 for k in dims if k < q.shape[-1]]
    return sum(parts) / len(parts)


@pytest.mark.parametrize("in_batch", [True, False])
def test_matryoshka_with_hard_negatives_and_a_mask_against_the_reference(in_batch):
    gen = torch.Generator().manual_seed(3)
    B, H, d = 3, 2, 6
    q, p = torch.randn(B, d, generator=gen, dtype=torch.float64), torch.randn(B, d, generator=gen, dtype=torch.float64)
    negs = torch.randn(B, H, d, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False], [False, True]])
    dims = [2, 4, 6, 8]                                           # 6 is the full size, 8 above it: both left out
    ours = contrastive_losses(q, p, negs, mask, temperature=0.07, in_batch=in_batch, gather=False,
                              matryoshka_dims=dims)
    theirs = _matryoshka_reference(q, p, negs, mask, dims, 0.07, in_batch)
    assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    # the truncated terms count: without them the loss differs
    assert not torch.allclose(ours, _matryoshka_reference(q, p, negs, mask, [], 0.07, in_batch), atol=1e-6)


def test_negatives_without_a_mask_and_an_empty_negative_list():
    losses_all = info_nce(Q, P, N, temperature=1.0, in_batch=False)
    assert torch.equal(losses_all, info_nce(Q, P, N, torch.ones(2, 1, dtype=torch.bool), temperature=1.0,
                                            in_batch=False))
    empty = torch.zeros(2, 0, 2)
    assert torch.equal(info_nce(Q, P, empty, temperature=1.0), info_nce(Q, P, temperature=1.0))
    # hard-negative-only with no negative at all: the positive is the only candidate, loss exactly 0
    assert info_nce(Q, P, None, temperature=1.0, in_batch=False).tolist() == [0.0, 0.0]


def _fake_world(monkeypatch, other_p, other_n=None, other_mask=None):
    """Process 1 of 2: all_gather returns process 0's tensors (given) and ours; dist_info says (2, 1)."""
    import torch.distributed.nn.functional as dist_fn

    import drmix.model.losses as losses_mod

    def all_gather(t):
        if t.dtype == torch.uint8:                       # the hard negatives' mask
            return [other_mask.reshape(-1).to(torch.uint8), t]
        if t.shape[0] == other_p.shape[0]:               # the positives (B rows)
            return [other_p, t]
        return [other_n.reshape(-1, t.shape[-1]), t]     # the flattened hard negatives (B x H rows)

    monkeypatch.setattr(dist_fn, "all_gather", all_gather)
    monkeypatch.setattr(losses_mod, "dist_info", lambda: (2, 1))


def test_cross_device_negatives_take_the_other_process_documents(monkeypatch):
    """gather=True on process 1 of 2: the candidates are both processes' positives (and hard negatives); the
    target of local example i is global row B + i; the losses equal those of the global batch's rows of process 1."""
    from drmix.model.losses import gather_with_grad

    gen = torch.Generator().manual_seed(4)
    B, H, d = 2, 2, 3
    q0, p0, n0 = torch.randn(B, d, generator=gen), torch.randn(B, d, generator=gen), torch.randn(B, H, d, generator=gen)
    q1, p1, n1 = torch.randn(B, d, generator=gen), torch.randn(B, d, generator=gen), torch.randn(B, H, d, generator=gen)
    whole = info_nce(torch.cat([q0, q1]), torch.cat([p0, p1]), torch.cat([n0, n1]), temperature=0.5)
    _fake_world(monkeypatch, p0, n0, torch.ones(B, H, dtype=torch.bool))
    assert torch.equal(gather_with_grad(p1), torch.cat([p0, p1]))
    ours = info_nce(q1, p1, n1, temperature=0.5, gather=True)
    # the whole batch orders documents [p0, p1, n0, n1]; ours [p0, p1, n0, n1] too: the same candidates
    assert torch.allclose(ours, whole[B:], atol=1e-6)
    assert not torch.allclose(info_nce(q1, p1, n1, temperature=0.5, gather=False), whole[B:], atol=1e-4)
    # with the gather off, or in_batch off, nothing of process 0 is used
    assert torch.allclose(contrastive_losses(q1, p1, n1, None, temperature=0.5, in_batch=True, gather=True), ours)
    assert torch.equal(info_nce(q1, p1, n1, temperature=0.5, in_batch=False, gather=True),
                       info_nce(q1, p1, n1, temperature=0.5, in_batch=False))


def test_gather_is_the_identity_on_one_process():
    from drmix.model.losses import gather_with_grad

    t = torch.randn(3, 2)
    assert gather_with_grad(t) is t


# -- false negatives masked (exclude) ------------------------------------------------------------------------------
def test_excluded_candidates_leave_the_denominator_by_hand():
    # candidates p1, p2, n1, n2; q1 excludes n2, q2 excludes p1
    # q1 scores 1, 0.6, 0        -> -1 + log(e + e^0.6 + 1)          = 0.7120668
    # q2 scores 0.8, 1, 0 (p2, n1, n2) -> -0.8 + log(e^0.8 + e + 1)
    exclude = torch.tensor([[False, False, False, True], [True, False, False, False]])
    losses = info_nce(Q, P, N, temperature=1.0, exclude=exclude)
    expected_q2 = -0.8 + math.log(math.exp(0.8) + math.e + 1)
    assert losses.tolist() == pytest.approx([0.7120668, expected_q2], abs=1e-6)


def test_an_excluded_positive_stays_the_target():
    # excluding every candidate of q1 (its own positive included) leaves only the positive: loss 0
    exclude = torch.tensor([[True, True, True, True], [False, False, False, False]])
    losses = info_nce(Q, P, N, temperature=1.0, exclude=exclude)
    assert losses.tolist() == pytest.approx([0.0, 1.1378525], abs=1e-6)


def test_exclude_without_in_batch_masks_own_negatives():
    # q1: positive 1, own negative excluded -> only the positive -> 0; q2 unchanged log(1 + e^-0.8)
    exclude = torch.tensor([[False, True], [False, False]])
    losses = info_nce(Q, P, N, temperature=1.0, in_batch=False, exclude=exclude)
    assert losses.tolist() == pytest.approx([0.0, 0.3711007], abs=1e-6)


def test_no_exclusions_is_the_unmasked_loss_exactly():
    q, p = torch.randn(4, 8), torch.randn(4, 8)
    n = torch.randn(4, 2, 8)
    none = torch.zeros(4, 4 + 8, dtype=torch.bool)
    assert torch.equal(info_nce(q, p, n, temperature=0.05, exclude=none), info_nce(q, p, n, temperature=0.05))
    assert torch.equal(contrastive_losses(q, p, n, None, temperature=0.05, in_batch=True, gather=False,
                                          matryoshka_dims=[4], exclude=None),
                       contrastive_losses(q, p, n, None, temperature=0.05, in_batch=True, gather=False,
                                          matryoshka_dims=[4]))


def test_matryoshka_masks_every_size():
    q = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    p = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    exclude = torch.tensor([[False, True], [True, False]])   # each query's only in-batch negative
    got = contrastive_losses(q, p, None, None, temperature=1.0, in_batch=True, gather=False, matryoshka_dims=[2],
                             exclude=exclude)
    assert got.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


# keys: queries 10, 11, 10; positives 20, 21, 22; one negative each 21, 20, 30
QK = torch.tensor([10, 11, 10])
PK = torch.tensor([20, 21, 22])
NK = torch.tensor([[21], [20], [30]])
NV = torch.ones(3, 1, dtype=torch.bool)


def test_false_negative_mask_in_batch_gathered_by_hand():
    # candidates p0 p1 p2 n0 n1 n2 = 20 21 22 21 20 30
    # row 0 (q 10, p 20): p2 has the same query; n1 is its positive's text
    # row 1 (q 11, p 21): n0 is its positive's text; row 2 (q 10, p 22): p0 has the same query
    got = false_negative_mask(QK, PK, NK, NV, (0, 3), in_batch=True, gathered=True)
    assert got.tolist() == [[False, False, True, False, True, False],
                            [False, False, False, True, False, False],
                            [True, False, False, False, False, False]]
    # a process holding rows 1-2 of the global batch sees the same rows of that mask
    assert false_negative_mask(QK, PK, NK, NV, (1, 3), in_batch=True, gathered=True).tolist() == got[1:].tolist()


def test_false_negative_mask_local_candidates_and_invalid_slots():
    # rows 1-2 without gathering: candidates p1 p2 n1 n2 = 21 22 20 30: nothing repeats row 1's or row 2's
    assert not false_negative_mask(QK, PK, NK, NV, (1, 3), in_batch=True, gathered=False).any()
    # an empty negative slot never counts, whatever its key
    invalid = torch.tensor([[True], [False], [True]])
    got = false_negative_mask(QK, PK, NK, invalid, (0, 3), in_batch=True, gathered=True)
    assert got[0].tolist() == [False, False, True, False, False, False]


def test_false_negative_mask_own_negatives_only():
    nk = torch.tensor([[20], [5], [22]])   # rows 0 and 2 repeat their positive as their negative
    got = false_negative_mask(QK, PK, nk, NV, (0, 3), in_batch=False, gathered=False)
    assert got.tolist() == [[False, True], [False, False], [False, True]]


# -- defaults, devices, dtypes, and the cross-device paths a single process never takes ----------------------------
def test_default_temperature_is_005_and_the_default_never_gathers(monkeypatch):
    """info_nce's defaults: temperature 0.05 (as in fine-tuning), no cross-device gather -- on process 1 of 2 a
    call without ``gather`` computes its local batch only (its targets are its own rows)."""
    gen = torch.Generator().manual_seed(9)
    q, p, n = (0.1 * torch.randn(shape, generator=gen) for shape in ((2, 3), (2, 3), (2, 1, 3)))  # scores ~ tau
    local = info_nce(q, p, n, temperature=0.05)
    assert torch.equal(info_nce(q, p, n), local)
    assert not torch.allclose(info_nce(q, p, n, temperature=1.0), local)
    other_p, other_n = 0.1 * torch.randn(2, 3, generator=gen), 0.1 * torch.randn(2, 1, 3, generator=gen)
    _fake_world(monkeypatch, other_p, other_n, torch.ones(2, 1, dtype=torch.bool))
    assert torch.equal(info_nce(q, p, n), local)
    assert torch.equal(info_nce(q, p, n, gather=False), local)
    assert not torch.allclose(info_nce(q, p, n, gather=True), local, atol=1e-4)


def _duplicating_world(monkeypatch, rank):
    """Process ``rank`` of 2 where the other process holds the same batch: all_gather returns [t, t]."""
    import torch.distributed.nn.functional as dist_fn

    import drmix.model.losses as losses_mod

    monkeypatch.setattr(dist_fn, "all_gather", lambda t: [t, t])
    monkeypatch.setattr(losses_mod, "dist_info", lambda: (2, rank))


@pytest.mark.parametrize("rank", [0, 1])
def test_matryoshka_sizes_use_the_cross_device_negatives_too(monkeypatch, rank):
    """With gather, the truncated sizes score the whole global batch as the full size does: two processes holding
    the same batch compute the losses of one process holding it twice, at every Matryoshka size."""
    gen = torch.Generator().manual_seed(10)
    q, p, n = torch.randn(2, 4, generator=gen), torch.randn(2, 4, generator=gen), torch.randn(2, 1, 4, generator=gen)
    kw = dict(temperature=0.5, in_batch=True, matryoshka_dims=[2])
    whole = contrastive_losses(torch.cat([q, q]), torch.cat([p, p]), torch.cat([n, n]), None, gather=False, **kw)
    local = contrastive_losses(q, p, n, None, gather=False, **kw)
    _duplicating_world(monkeypatch, rank)
    ours = contrastive_losses(q, p, n, None, gather=True, **kw)
    assert torch.allclose(ours, whole[2 * rank:2 * rank + 2], atol=1e-6)
    assert not torch.allclose(ours, local, atol=1e-4)


def test_gather_hides_only_torchs_deprecation_notice(monkeypatch):
    """gather_with_grad concatenates the processes' parts in rank order; the FutureWarning torch's autograd
    all_gather raises is silenced, any other warning still reaches the user."""
    import warnings

    import torch.distributed.nn.functional as dist_fn

    import drmix.model.losses as losses_mod
    from drmix.model.losses import gather_with_grad

    def all_gather(t):
        warnings.warn("deprecated", FutureWarning)
        warnings.warn("something else", UserWarning)
        return [t, t + 1]

    monkeypatch.setattr(dist_fn, "all_gather", all_gather)
    monkeypatch.setattr(losses_mod, "dist_info", lambda: (2, 0))
    t = torch.zeros(2, 3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = gather_with_grad(t)
    assert torch.equal(out, torch.cat([t, t + 1]))
    assert [w.category for w in seen] == [UserWarning]


@pytest.mark.parametrize("in_batch", [True, False])
@pytest.mark.parametrize("with_negs", [True, False])
def test_losses_are_computed_on_the_embeddings_device(in_batch, with_negs):
    """Every tensor info_nce makes (targets, masks) lives on the embeddings' device, and an ``exclude`` built on
    the CPU (from the batch's hashes) is moved there: ``meta`` stands in for an accelerator."""
    q, p = torch.randn(2, 3, device="meta"), torch.randn(2, 3, device="meta")
    negs = torch.randn(2, 1, 3, device="meta") if with_negs else None
    assert info_nce(q, p, negs, in_batch=in_batch).device.type == "meta"
    width = (2 + 2 * with_negs) if in_batch else (1 + with_negs)
    exclude = torch.zeros(2, width, dtype=torch.bool)                       # on the CPU
    assert info_nce(q, p, negs, in_batch=in_batch, exclude=exclude).device.type == "meta"


def test_exclude_as_zeros_and_ones_is_read_as_a_mask():
    """An ``exclude`` of 0/1 integers (e.g. summed or loaded masks) drops the same candidates as the bool mask."""
    exclude = torch.tensor([[False, False, False, True], [True, False, False, False]])
    want = info_nce(Q, P, N, temperature=1.0, exclude=exclude)
    assert torch.equal(info_nce(Q, P, N, temperature=1.0, exclude=exclude.to(torch.uint8)), want)
    own = torch.tensor([[False, True], [False, False]])
    assert torch.equal(info_nce(Q, P, N, temperature=1.0, in_batch=False, exclude=own.long()),
                       info_nce(Q, P, N, temperature=1.0, in_batch=False, exclude=own))


@pytest.mark.parametrize("in_batch", [True, False])
def test_false_negative_mask_is_a_bool_mask(in_batch):
    got = false_negative_mask(QK, PK, NK, NV, (0, 3), in_batch=in_batch, gathered=True)
    assert got.dtype == torch.bool


_FIX = "pass embeddings as tensors: torch.as_tensor(...) or model.encode(..., convert_to_tensor=True)."


@pytest.mark.parametrize("argument, expected", [
    ("q", "a torch.Tensor"), ("p", "a torch.Tensor"), ("negs", "a torch.Tensor or None"),
    ("neg_mask", "a torch.Tensor or None"), ("exclude", "a torch.Tensor or None")])
def test_a_non_tensor_argument_is_named_with_what_it_must_be_and_the_fix(argument, expected):
    from drmix.errors import ArgumentError

    given = {"q": Q, "p": P, "negs": N, "neg_mask": torch.ones(2, 1, dtype=torch.bool),
             "exclude": torch.zeros(2, 4, dtype=torch.bool)}
    given[argument] = given[argument].tolist()              # the same numbers as nested lists
    with pytest.raises(ArgumentError) as e:
        info_nce(**given, temperature=1.0)
    assert e.value.message == f"info_nce({argument}=...) must be {expected}, not list {given[argument]!r}."
    assert e.value.fix == _FIX


def test_the_optional_arguments_take_none():
    # negs, neg_mask and exclude None: the in-batch-only loss (candidates p1, p2);
    # q1 scores 1, 0.6 -> log(1 + e^-0.4) = 0.5130153; q2 scores 0, 0.8 -> log(1 + e^-0.8) = 0.3711007
    losses = info_nce(Q, P, None, None, temperature=1.0, exclude=None)
    assert losses.tolist() == pytest.approx([0.5130153, 0.3711007], abs=1e-6)
