"""The figure of ``drmix adapt``'s report: every candidate's synthetic-dev score against its labelled score
(``candidates.png`` beside ``report.html``, embedded in it), drawn only when labels were given.

One point per candidate, named; the adapted model (the synthetic dev's choice) is ringed; the dashed line is
the best linear fit, and the title states Kendall's tau between the two rankings. When the summary holds each
candidate's score on a labelled dev set (``--dev-labels``), those are drawn against the labelled test too, as
squares, so a reader sees which dev set ranks the candidates the way the test does.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FIGURE = "candidates.png"
#: where summary.json holds each candidate's labelled-dev average (``--dev-labels``): ``dev_labels``'s
#: ``labelled_dev_average``
LABELLED_DEV = ("dev_labels", "labelled_dev_average")


def labelled_dev_scores(summary: Mapping[str, Any]) -> dict[str, float] | None:
    """Each candidate's labelled-dev average from a summary, when it holds one."""
    v: Any = summary
    for key in LABELLED_DEV:
        v = v.get(key) if isinstance(v, Mapping) else None
    if not isinstance(v, Mapping):
        return None
    out = {str(k): float(x) for k, x in v.items() if isinstance(x, (int, float)) and not isinstance(x, bool)}
    return out or None


def plot_candidates(dev: Mapping[str, float], labelled: Mapping[str, float], selected: str, path: Path, *,
                    kendall: Mapping[str, float] | None = None, labelled_dev: Mapping[str, float] | None = None,
                    split: str = "test") -> Path | None:
    """Write the figure to ``path`` (PNG, atomically); None (nothing written) without two candidates scored on
    both sets."""
    from drmix.report.plots import _colours, new_figure, save_figure

    names = [n for n in dev if n in labelled]
    if len(names) < 2:
        return None
    fig, (ax,) = new_figure(6.4, 4.6)
    colours = _colours(len(names))
    xs, ys = [dev[n] for n in names], [labelled[n] for n in names]
    for i, n in enumerate(names):
        ax.scatter([dev[n]], [labelled[n]], s=46, color=colours[i], zorder=3,
                   label=n + (" (adapted)" if n == selected else ""))
        if n == selected:
            ax.scatter([dev[n]], [labelled[n]], s=230, facecolors="none", edgecolors="black", linewidths=1.6,
                       zorder=4)
        ax.annotate(n, (dev[n], labelled[n]), textcoords="offset points", xytext=(6, 5), fontsize=8)
    if labelled_dev:
        shown = [n for n in names if n in labelled_dev]
        for i, n in enumerate(names):
            if n in labelled_dev:
                ax.scatter([labelled_dev[n]], [labelled[n]], s=40, marker="s", color=colours[i], alpha=0.7,
                           zorder=3)
        if shown:
            ax.scatter([], [], marker="s", color="grey", label="labelled dev (squares)")
    if len(set(xs)) > 1:
        import numpy as np

        slope, intercept = np.polyfit(xs, ys, 1)
        lo, hi = min(xs), max(xs)
        ax.plot([lo, hi], [slope * lo + intercept, slope * hi + intercept], "--", color="grey", linewidth=1,
                zorder=1)
    tau = (kendall or {}).get("tau")
    title = "Candidates: synthetic dev against labelled " + split
    if tau is not None and math.isfinite(tau):
        title += f"\nKendall's tau {tau:+.2f} (p {kendall['p']:.2g}, {kendall['candidates']} candidates)"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("synthetic dev nDCG@10" + (" (circles); labelled dev (squares)" if labelled_dev else ""))
    ax.set_ylabel(f"labelled {split} nDCG@10")
    ax.margins(0.18)        # room for the names beside the points
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")
    return save_figure(fig, path)
