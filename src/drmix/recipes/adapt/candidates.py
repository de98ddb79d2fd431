"""The candidate mixtures of ``drmix adapt``: their names, their folders, the order they are trained in."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

SYNTHETIC = "+synthetic"
STATIC_SCHEMES = ("uniform", "size", "temperature")
#: the schemes whose weights are learned by a stage of their own or while they train (tDRO's take a transfer)
LEARNED_SCHEMES = ("infdds", "audit")
#: the candidate always trained (COCO -> uniform), and the one that separates the synthetic train set's part of
#: the gain from the mixture's (the report's first sentence parts the gain by it)
COCO_UNIFORM_CANDIDATE = "uniform"
UNIFORM_SYNTHETIC = COCO_UNIFORM_CANDIDATE + SYNTHETIC


@dataclass(frozen=True)
class Candidate:
    """One candidate mixture: ``scheme`` (uniform | size | temperature | tdro | infdds | audit), tDRO's
    ``transfer``, and whether the synthetic train collections are part of its data."""

    scheme: str
    transfer: str | None = None
    synthetic: bool = False

    @property
    def label(self) -> str:
        base = f"tdro:{self.transfer}" if self.scheme == "tdro" else self.scheme
        return base + (SYNTHETIC if self.synthetic else "")

    @property
    def folder(self) -> str:
        return "coco-" + re.sub(r"[^A-Za-z0-9._-]+", "-", self.label).strip("-")

    @property
    def reference(self) -> "Candidate":
        """The uniform candidate on the same data: tDRO's reference model (its stage 0)."""
        return Candidate("uniform", None, self.synthetic)


def parse_candidate(text: str) -> Candidate:
    """``uniform``, ``size``, ``temperature``, ``tdro:TRANSFER`` (top:K, reweight, loss), ``infdds`` or ``audit``
    (the weights ``drmix mixture audit`` recommends), each optionally followed by ``+synthetic``."""
    s = str(text).strip().lower().replace(" ", "")
    synthetic = s.endswith(SYNTHETIC)
    base = s[:-len(SYNTHETIC)] if synthetic else s
    if base in STATIC_SCHEMES or base in LEARNED_SCHEMES:
        return Candidate(base, None, synthetic)
    if base.startswith("tdro:"):
        transfer = base[len("tdro:"):]
        if transfer.startswith("top"):
            from drmix.mixture.transfer import parse_top_fraction

            parse_top_fraction(transfer)
        elif transfer not in ("reweight", "loss"):
            raise ValueError(f"unknown tDRO transfer {transfer!r} in candidate {text!r} (use top:K, reweight or loss)")
        return Candidate("tdro", transfer, synthetic)
    raise ValueError(f"unknown candidate {text!r}: use uniform, size, temperature, tdro:TRANSFER, infdds or audit, "
                     f"optionally with {SYNTHETIC}")


def candidate_plan(specs: list[str]) -> list[Candidate]:
    """The candidates trained, in order: ``uniform`` first (always: it is COCO -> uniform), each tDRO
    candidate's reference before it, no duplicates."""
    out: list[Candidate] = [Candidate("uniform")]
    for spec in specs:
        c = parse_candidate(spec)
        if c.scheme == "tdro" and c.reference not in out:
            log.info("candidate %s: its reference %s is trained as a candidate too", c.label, c.reference.label)
            out.append(c.reference)
        if c not in out:
            out.append(c)
    return out

