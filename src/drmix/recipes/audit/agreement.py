"""How well each cheap signal ranks the collections against the reference, and which collections it marks
harmful: pure functions of numbers.

A **signal** gives every collection a number, larger meaning the signal's method wants *more* of it, and a
**zero point** below which the method would take weight away from it:

=============  ===================================================================  ==========================
signal         value                                                                zero point
=============  ===================================================================  ==========================
``tdro``       tDRO's stage-1 weight (final), Ma et al., AAAI 2025, arXiv:2408.10613  uniform, ``1/k``
``doremi``     DoReMi's mean excess loss ``max(l - r, 0)`` over stage 1's steps       the mean over collections
               (Xie et al., NeurIPS 2023, arXiv:2305.10429, Alg. 1): its weights are
               the exponentiated sum of these, so one below the mean loses weight
``groupdro``   GroupDRO's stage-1 weight (raw loss; Sagawa et al., ICLR 2020,        uniform, ``1/k``
               arXiv:1911.08731)
``infdds``     Inf-DDS influence ``I_i``: the change of the negative dev loss after   0 (a step on it makes the
               one look-ahead step on a batch of ``i`` (Inf-DDS, Sec. 3.2)            dev loss worse)
``gradalign``  MultiDDS's reward, the cosine of ``i``'s gradient with the summed dev   0 (its gradient points
               gradient (Wang et al., ACL 2020, arXiv:2004.06748)                    away from the dev sets')
=============  ===================================================================  ==========================

Agreement with the reference is Kendall's tau-b between the signal's values and the collections' values
(:func:`drmix.evaluation.significance.kendall_tau`, with its p). A signal **votes** on the verdicts
(:mod:`drmix.recipes.audit.verdict`) only when it ranks the collections the way leave-one-out does in this audit
(tau > 0): a cheap signal earns its place by agreeing with the reference the user trusts.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

LABELS = {"tdro": "tDRO stage-1 weight", "doremi": "DoReMi excess loss", "groupdro": "GroupDRO stage-1 weight",
          "infdds": "Inf-DDS influence on dev", "gradalign": "gradient alignment with dev"}


@dataclass
class Signal:
    """One cheap signal over the collections: ``values`` (larger: the method wants more), the ``zero`` point
    below which it marks a collection harmful, and optional 95% intervals (``low``/``high``)."""

    name: str
    values: dict[str, float]
    zero: float
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name)

    def harmful(self) -> dict[str, bool]:
        """``{collection: value < zero}``: the collections the signal's method would take weight from."""
        return {n: bool(v < self.zero) for n, v in self.values.items()}


def weight_signal(name: str, weights: Mapping[str, float]) -> Signal:
    """A weight-learning method's weights as a signal (zero point: the uniform weight ``1/k``)."""
    return Signal(name, {n: float(w) for n, w in weights.items()}, 1.0 / len(weights))


def mean_signal(name: str, samples: Mapping[str, Sequence[float]], zero: float | None = None) -> Signal:
    """A signal measured repeatedly (per step, per probe): the mean of each collection's measurements with its 95%
    t-interval; ``zero`` None: the mean over the collections (a relative signal)."""
    from drmix.evaluation.significance import t_interval

    values, low, high = {}, {}, {}
    for n, xs in samples.items():
        m, half = t_interval([x for x in xs if np.isfinite(x)])
        values[n], low[n], high[n] = m, m - half, m + half
    return Signal(name, values, float(np.mean(list(values.values()))) if zero is None else zero, low, high)


def kendall(signal: Signal, reference: Mapping[str, float]) -> dict[str, float]:
    """``{"tau", "p", "n"}``: Kendall's tau-b between the signal and the reference over the collections both
    score (finite values)."""
    from drmix.evaluation.significance import kendall_tau

    names = [n for n in reference if n in signal.values and np.isfinite(signal.values[n])]
    tau, p = kendall_tau([signal.values[n] for n in names], [reference[n] for n in names])
    return {"tau": tau, "p": p, "n": len(names)}


def votes(signals: Sequence[Signal], agreement: Mapping[str, Mapping[str, float]]) -> dict[str, list[str]]:
    """``{collection: [signal names that mark it harmful]}`` among the signals that agree with the reference
    (tau > 0), and the key ``""`` listing those voting signals."""
    voting = [s for s in signals if np.isfinite(agreement[s.name]["tau"]) and agreement[s.name]["tau"] > 0]
    out: dict[str, list[str]] = {"": [s.name for s in voting]}
    for s in voting:
        for n, bad in s.harmful().items():
            out.setdefault(n, [])
            if bad:
                out[n].append(s.name)
    return out
