"""tDRO, DoReMi and GroupDRO side by side with their authors' update rules, written out plainly.

Each reference below transcribes the authors' code (file and function named in its docstring) in torch,
float64; drmix's :class:`~drmix.mixture.dro.DROStrategy` runs on the same hand-made per-example losses for
tens of steps and must end, step after step, at the same weights.
"""
from __future__ import annotations

import numpy as np
import torch

from drmix.data.batch import Batch
from drmix.mixture.base import StepContext
from drmix.mixture.dro import DROConfig, build_dro_strategy

K = 4
NAMES = ["a", "b", "c", "d"]


def _strategy(name: str, **cfg):
    s = build_dro_strategy(name, DROConfig(**cfg))
    s.setup(NAMES, [10] * K)
    return s


def _ctx(ref, micro=0, accum=1):
    fn = None if ref is None else (lambda batch: torch.tensor(ref, dtype=torch.float64))
    return StepContext(step=0, model=None, optimizer=None, scheduler=None, collection_names=NAMES,
                       collection_sizes=[10] * K, compute_losses=lambda b: None, reference_losses=fn,
                       micro_step=micro, accumulation_steps=accum)


def _batch(ids):
    n = len(ids)
    return Batch(["q"] * n, ["p"] * n, [["n"]] * n, np.asarray(ids))


def _micro_batches(rng, n, size, all_present):
    """Per-example proxy losses, reference losses (one easy collection: small reference losses) and ids."""
    out = []
    for _ in range(n):
        ids = np.tile(np.arange(K), size // K) if all_present else rng.integers(0, K, size)
        rng.shuffle(ids)
        proxy = rng.exponential(1.0, size) + 0.05
        ref = rng.exponential(1.0, size) * np.where(ids == 0, 0.02, 1.0) + 1e-6
        f32 = lambda x: x.astype(np.float32).astype(np.float64)  # noqa: E731 - drmix reads losses as float32
        out.append((f32(proxy), f32(ref), ids))
    return out


class AuthorsTDRO:
    """tDRO's stage 1 weights, from the tDRO repository: ``modeling_group_dro_v2.py`` (``GroupWeights``,
    ``DROModelv2.compute_group_dro_loss`` with ``normalize_group_loss_scale_with_ref_loss`` and
    ``p_norm_of_ref_loss = 1``) and ``DROTrainer.training_step_for_dromodelv2`` (SGD, ``maximize=True``, lr
    2e-2, the gradient divided by the accumulation steps and clipped at norm 1.0)."""

    def __init__(self, accumulation_steps: int, lr: float = 2e-2, max_norm: float = 1.0):
        self.log_w = torch.nn.Parameter(torch.log(torch.ones(K, dtype=torch.float64) / K))
        self.opt = torch.optim.SGD([self.log_w], lr=lr, momentum=0, maximize=True)
        self.val = torch.softmax(self.log_w.detach(), 0)
        self.mean = self.val.clone()
        self.counter = 0
        self.accum, self.max_norm, self.step = accumulation_steps, max_norm, 0

    def micro_batch(self, proxy, ref, ids):
        lm, rf, d = (torch.as_tensor(x) for x in (proxy, ref, ids))
        with torch.no_grad():
            loss_proxy = lm.clone()
            ref_clamped = torch.nn.functional.normalize(rf.clone(), p=1, dim=0)
            ref_clamped[ref_clamped < 1e-4] = 1
            loss_proxy /= ref_clamped
            loss_proxy = torch.clamp(loss_proxy, min=0.0)
            num = torch.zeros(K, dtype=torch.float64).scatter_reduce(0, d, torch.ones_like(loss_proxy), reduce="sum")
            num[num == 0] = 1
            group_loss = torch.zeros(K, dtype=torch.float64).scatter_reduce(0, d, loss_proxy, reduce="sum") / num
        if self.log_w.grad is None:
            self.log_w.grad = group_loss
        else:
            self.log_w.grad += group_loss
        self.step += 1
        if self.step % self.accum == 0:
            self.log_w.grad /= self.accum
            torch.nn.utils.clip_grad_norm_([self.log_w], self.max_norm)
            self.opt.step()
            self.val = torch.softmax(self.log_w.detach(), 0)
            self.mean = (self.mean * self.counter + self.val) / (self.counter + 1)
            self.counter += 1
            self.opt.zero_grad()
        w = self.val[d].clone()
        w /= w.sum()
        return float((lm * w).sum())          # the robust loss the proxy back-propagates


def _run_tdro(accum: int, all_present: bool, seed: int, size: int = 16):
    rng = np.random.default_rng(seed)
    theirs, ours = AuthorsTDRO(accum), _strategy("tdro")
    absent = 0
    for _ in range(30):
        for micro, (proxy, ref, ids) in enumerate(_micro_batches(rng, accum, size, all_present)):
            absent += K - len(set(ids.tolist()))
            robust = theirs.micro_batch(proxy, ref, ids)
            loss = ours.loss(torch.tensor(proxy, dtype=torch.float64), _batch(ids), _ctx(ref, micro, accum))
            np.testing.assert_allclose(float(loss), robust, rtol=1e-9)
        np.testing.assert_allclose(ours.weights, theirs.val.numpy(), rtol=1e-9, atol=0)
    np.testing.assert_allclose(ours.mean_weights, theirs.mean.numpy(), rtol=1e-9)
    assert all_present or absent > 0
    return ours.weights


def test_tdro_without_accumulation_matches_the_authors():
    w = _run_tdro(accum=1, all_present=True, seed=0)
    assert w.max() / w.min() > 1.2          # the weights moved


def test_tdro_under_accumulation_matches_the_authors():
    """4 micro-batches of 16 per step (their recipe is 4 x 512), collections sometimes absent from one."""
    w = _run_tdro(accum=4, all_present=False, seed=1)
    assert w.max() / w.min() > 1.2


def test_tdro_with_collections_absent_from_batches_matches_the_authors():
    """Batches of 5 over 4 collections: most steps miss one; the authors give an absent collection gradient 0
    and renormalise over all (``absent: renormalise``), and weight the loss over the examples present."""
    w = _run_tdro(accum=1, all_present=False, seed=5, size=5)
    assert w.max() / w.min() > 1.2


def test_tdro_accumulation_is_not_one_joined_batch():
    """The departure the earlier rule had: one normaliser over the 4 joined micro-batches ends elsewhere."""
    rng = np.random.default_rng(2)
    theirs, joined = AuthorsTDRO(4), _strategy("tdro", accumulation="joined")
    for _ in range(30):
        for micro, (proxy, ref, ids) in enumerate(_micro_batches(rng, 4, 16, False)):
            theirs.micro_batch(proxy, ref, ids)
            joined.loss(torch.tensor(proxy, dtype=torch.float64), _batch(ids), _ctx(ref, micro, 4))
    assert np.abs(joined.weights - theirs.val.numpy()).max() > 1e-3


def _authors_doremi_update(train_domain_weights, perdomain_scores, scores, domain_ids, eta=1.0, eps=1e-3):
    """DoReMi (github.com/sangmichaelxie/doremi, ``doremi/trainer.py``, ``DoReMiTrainer.update_domain_weights``,
    ``doremiv1``): per-domain mean of the excess losses clipped at 0 (an absent domain keeps its last score),
    log-weights + eta * scores, log-softmax, smoothed with uniform (eps)."""
    new_scores = []
    for domain_id in range(len(train_domain_weights)):
        mask = domain_ids == domain_id
        if mask.sum() > 0:
            new_scores.append(torch.clip(scores[mask], min=0).mean())
        else:
            new_scores.append(perdomain_scores[domain_id])
    perdomain_scores = torch.stack(new_scores)
    log_new = torch.log(train_domain_weights) + eta * perdomain_scores
    log_new = log_new - torch.logsumexp(log_new, dim=0)
    return (1 - eps) * torch.exp(log_new) + eps / len(log_new), perdomain_scores


class AuthorsDoReMiAverage:
    """``DoReMiTrainer.write_weights`` with ``update_counter`` registered as 1 (``doremi/train.py``):
    ``counter += 1; avg = (avg * (counter - 1) + w) / counter`` -- the initial weights are the first term."""

    def __init__(self, w0):
        self.avg, self.counter = w0.clone(), 1

    def write(self, w):
        self.counter += 1
        self.avg = (self.avg * (self.counter - 1) + w) / self.counter


def _run_doremi(rng, all_present: bool, size: int) -> int:
    w, scores = torch.ones(K, dtype=torch.float64) / K, torch.zeros(K, dtype=torch.float64)
    average = AuthorsDoReMiAverage(w)
    ours = _strategy("doremi")
    absent = 0
    for _ in range(40):
        parts = _micro_batches(rng, 2, size, all_present)
        for micro, (proxy, ref, ids) in enumerate(parts):
            ours.loss(torch.tensor(proxy, dtype=torch.float64), _batch(ids), _ctx(ref, micro, 2))
        proxy, ref, ids = (np.concatenate([p[i] for p in parts]) for i in range(3))
        absent += K - len(set(ids.tolist()))
        w, scores = _authors_doremi_update(w, scores, torch.as_tensor(proxy - ref), torch.as_tensor(ids))
        average.write(w)
        np.testing.assert_allclose(ours.weights, w.numpy(), rtol=1e-9)
    np.testing.assert_allclose(ours.mean_weights, average.avg.numpy(), rtol=1e-9)
    np.testing.assert_allclose(ours.final_weights()["weights"], average.avg.numpy(), rtol=1e-9)
    assert ours.config.output == "mean" and w.max() / w.min() > 1.2
    return absent


def test_doremi_matches_the_authors():
    """Every domain present in every batch (mixed batches); DoReMi's trainer measures the micro-batches of an
    optimiser step joined, as drmix's ``difference`` default does (2 micro-batches here); the output is the
    authors' running average, which counts the initial uniform weights."""
    _run_doremi(np.random.default_rng(3), True, 8)


def test_doremi_with_absent_domains_matches_the_authors():
    """Joined batches of 2 x 2 examples over 4 domains: most steps miss a domain, which then scores its previous
    score (``absent: previous``). The one departure: a domain never measured scores 0 here, log |V| in DoReMi
    (no retrieval counterpart) -- the transcription starts at 0 too."""
    assert _run_doremi(np.random.default_rng(6), False, 2) > 20


def test_doremi_absent_rule_keep_departs_from_the_authors():
    """``absent: keep`` (an option) leaves an absent collection's weight as it is: not the authors' update."""
    rng = np.random.default_rng(6)
    w, scores = torch.ones(K, dtype=torch.float64) / K, torch.zeros(K, dtype=torch.float64)
    ours = _strategy("doremi", absent="keep")
    for _ in range(10):
        parts = _micro_batches(rng, 2, 2, False)
        for micro, (proxy, ref, ids) in enumerate(parts):
            ours.loss(torch.tensor(proxy, dtype=torch.float64), _batch(ids), _ctx(ref, micro, 2))
        proxy, ref, ids = (np.concatenate([p[i] for p in parts]) for i in range(3))
        w, scores = _authors_doremi_update(w, scores, torch.as_tensor(proxy - ref), torch.as_tensor(ids))
    assert np.abs(ours.weights - w.numpy()).max() > 1e-3


def _authors_groupdro_update(adv_probs, losses, group_idx, step_size=0.01):
    """GroupDRO (github.com/kohpangwei/group_DRO, ``loss.py``, ``LossComputer.compute_group_avg`` and
    ``compute_robust_loss``, no adjustment, no normalisation): per-group mean loss (0 for an absent group),
    ``adv_probs * exp(step_size * group_loss)``, normalised; the loss ``group_loss @ adv_probs``."""
    group_map = (group_idx == torch.arange(K).unsqueeze(1).long()).double()
    group_count = group_map.sum(1)
    group_denom = group_count + (group_count == 0).double()
    group_loss = (group_map @ losses.view(-1)) / group_denom
    adv_probs = adv_probs * torch.exp(step_size * group_loss.data)
    adv_probs = adv_probs / adv_probs.sum()
    return adv_probs, group_loss @ adv_probs          # the robust loss: absent groups add 0, no renormalisation


def test_groupdro_matches_the_authors_with_absent_groups():
    rng = np.random.default_rng(4)
    q = torch.ones(K, dtype=torch.float64) / K
    ours = _strategy("groupdro")
    absent = 0
    for _ in range(40):
        (proxy, _, ids), = _micro_batches(rng, 1, 6, False)     # 6 examples over 4 groups: some absent
        proxy = (proxy * (1 + ids)).astype(np.float32).astype(np.float64)   # group d the hardest
        loss = ours.loss(torch.tensor(proxy, dtype=torch.float64), _batch(ids), _ctx(None))
        q, robust = _authors_groupdro_update(q, torch.as_tensor(proxy), torch.as_tensor(ids))
        np.testing.assert_allclose(ours.weights, q.numpy(), rtol=1e-10)   # log-space vs products
        np.testing.assert_allclose(float(loss), float(robust), rtol=1e-10)
        absent += K - len(set(ids.tolist()))
    assert absent > 10
    assert ours.weights[3] > 2 * ours.weights[0]            # the harder groups gained weight
