"""The sentence at the top of ``drmix adapt``'s ``summary.md`` and ``report.html``: what won, by how much against
uniform fine-tuning and against COCO -> uniform (with the paired tests' p), and which part of the recipe the gain
came from, read from the candidates' own scores.

The parts telescope: the adapted model's gain over uniform fine-tuning is

* **COCO**: COCO -> uniform minus uniform fine-tuning (the same mixture, with and without COCO);
* **the synthetic train set**: uniform+synthetic minus COCO -> uniform (the same mixture, with and without it);
* **the mixture**: the adapted model minus uniform+synthetic (or minus COCO -> uniform when the adapted model
  does not train on the synthetic set),

so they add up to the gain. Without a uniform+synthetic candidate the synthetic set's part and the mixture's
cannot be told apart, and the sentence says so. A part that lost is written with its sign; a difference is
not a test (only the two gains carry a p).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from drmix.recipes.adapt.candidates import COCO_UNIFORM_CANDIDATE, SYNTHETIC, UNIFORM_SYNTHETIC


@dataclass(frozen=True)
class Parts:
    """The gain of the adapted model over uniform fine-tuning and its parts (None: not measurable here)."""

    gain: float
    over_coco_uniform: float
    coco: float
    synthetic: float | None
    mixture: float | None
    synthetic_and_mixture: float | None = None   # when no uniform+synthetic candidate separates them


def gain_parts(scores: Mapping[str, float], selected: str, *, uniform: float) -> Parts:
    """The parts of the gain from the scores of the candidates (by label: ``uniform`` is COCO -> uniform), the
    selected one's label and uniform fine-tuning's score (all on the same evaluation set)."""
    chosen, coco_uniform = scores[selected], scores[COCO_UNIFORM_CANDIDATE]
    coco = coco_uniform - uniform
    if selected == COCO_UNIFORM_CANDIDATE:
        return Parts(chosen - uniform, 0.0, coco, None, None)
    if not selected.endswith(SYNTHETIC):
        return Parts(chosen - uniform, chosen - coco_uniform, coco, None, chosen - coco_uniform)
    if UNIFORM_SYNTHETIC in scores:
        synthetic = scores[UNIFORM_SYNTHETIC] - coco_uniform
        return Parts(chosen - uniform, chosen - coco_uniform, coco, synthetic, chosen - scores[UNIFORM_SYNTHETIC])
    return Parts(chosen - uniform, chosen - coco_uniform, coco, None, None,
                 synthetic_and_mixture=chosen - coco_uniform)


#: a difference smaller than this reads as a tie (scores are printed to three decimals)
TIE = 5e-4


def _signed(x: float) -> str:
    return "0.000" if abs(x) < TIE else f"{x:+.3f}"


def _p(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return ""
    return f"p {p:.2g}" if p >= 1e-4 else f"p {p:.0e}"


def _against(name: str, x: float, metric: str, on: str, p: float | None) -> str:
    """"beats NAME by +0.018 METRIC (p 0.001)ON", "trails NAME by 0.004 METRIC (p 0.2)ON" or "ties with NAME
    (0.000 METRIC, p 0.9)ON" (``metric`` and ``on`` may be empty)."""
    unit = f" {metric}" if metric else ""
    if abs(x) < TIE:
        return f"ties with {name} ({_signed(x)}{unit}{', ' + _p(p) if _p(p) else ''}){on}"
    verb, shown = ("beats", f"{x:+.3f}") if x > 0 else ("trails", f"{-x:.3f}")
    return f"{verb} {name} by {shown}{unit}{' (' + _p(p) + ')' if _p(p) else ''}{on}"


def headline(scores: Mapping[str, float], selected: str, *, uniform: float, where: str,
             p_uniform: float | None = None, p_coco: float | None = None, metric: str = "nDCG@10") -> str:
    """One sentence, e.g. "The adapted model (infdds+synthetic) beats uniform fine-tuning by +0.018 nDCG@10 (p 0.001)
    on the labelled test split; it beats COCO → uniform by +0.004 (p 0.3); by part of the recipe: COCO
    +0.014, the synthetic train set +0.003, the mixture +0.001. Most of the gain came from COCO."
    ``scores``: every candidate's average on the evaluation set ``where`` names; ``p_uniform`` / ``p_coco``: the
    paired tests' p of the adapted model against uniform fine-tuning and against COCO → uniform."""
    parts = gain_parts(scores, selected, uniform=uniform)
    name = "uniform: COCO → uniform" if selected == COCO_UNIFORM_CANDIDATE else selected
    text = f"The adapted model ({name}) " + _against("uniform fine-tuning", parts.gain, metric, f" on {where}",
                                                     p_uniform)
    if selected != COCO_UNIFORM_CANDIDATE:
        text += "; it " + _against("COCO → uniform", parts.over_coco_uniform, "", "", p_coco)
    named = [("COCO", parts.coco), ("the synthetic train set", parts.synthetic), ("the mixture", parts.mixture)]
    pieces = [f"{n} {_signed(v)}" for n, v in named if v is not None]
    if parts.synthetic_and_mixture is not None:
        pieces.append(f"the synthetic train set and the mixture together {_signed(parts.synthetic_and_mixture)} "
                      f"(no {UNIFORM_SYNTHETIC} candidate to part them)")
        named.append(("the synthetic train set and the mixture", parts.synthetic_and_mixture))
    text += "; by part of the recipe: " + ", ".join(pieces) + "."
    known = [(n, v) for n, v in named if v is not None]
    best = max(known, key=lambda kv: kv[1])
    if parts.gain >= TIE and best[1] > parts.gain / 2:
        text += f" Most of the gain came from {best[0]}."
    lost = [n for n, v in known if v <= -TIE]
    if lost:
        text += f" Lowered the score: {', '.join(lost)}."
    return text


def names_and(names: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
