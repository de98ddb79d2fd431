"""Plots of training runs (matplotlib, Agg backend, no global pyplot state), written atomically as PNG.

* :func:`plot_weights` -- collection-weight trajectories from a ``weights.jsonl`` (one line per step with a
  ``weights`` mapping ``{collection: weight}`` or a list) and a bar chart of the final weights, labelled
  with the collection names.

Shared helpers (:func:`read_records`, :func:`new_figure`, :func:`save_figure`) are meant for further plot
functions: each builds a :class:`matplotlib.figure.Figure` without touching ``pyplot`` (safe in threads and
servers) and saves it through :func:`drmix.io.atomic.atomic_write_bytes`.
"""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drmix.errors import DataError
from drmix.io.atomic import atomic_write_bytes
from drmix.io.read import iter_jsonl

log = logging.getLogger(__name__)


def read_records(path: str | Path, *, require: str | None = None) -> list[dict[str, Any]]:
    """All records of a JSONL log; with ``require``, only those holding that key (others are skipped)."""
    records = []
    for _, obj in iter_jsonl(path):
        if require is None or require in obj:
            records.append(obj)
    return records


def new_figure(width: float = 10.0, height: float = 4.0, *, ncols: int = 1):
    """A Figure with ``ncols`` side-by-side axes, rendered by the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def save_figure(fig, png_path: str | Path) -> Path:
    """Render ``fig`` to PNG and write it atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(png_path, buf.getvalue())
    return Path(png_path)


@dataclass
class WeightSeries:
    """What :func:`plot_weights` drew: per collection the (step, weight) trajectory and the final weight."""

    names: list[str]
    steps: list[int]
    trajectories: dict[str, list[float | None]]
    final: dict[str, float]


def _weights_of(record: dict[str, Any], path: Path, names: list[str] | None) -> dict[str, float]:
    w = record["weights"]
    if isinstance(w, dict):
        return {str(k): float(v) for k, v in w.items() if v is not None}
    if isinstance(w, list):
        labels = names if names is not None and len(names) == len(w) else [str(i) for i in range(len(w))]
        return {n: float(v) for n, v in zip(labels, w) if v is not None}
    raise DataError(f"'weights' must be a mapping or a list, got {type(w).__name__}.", path=path,
                    fix="pass a weights.jsonl written by a strategy run.")


def weight_series(weights_jsonl: str | Path, names: list[str] | None = None) -> WeightSeries:
    """Read a ``weights.jsonl`` into per-collection trajectories (``names`` picks and orders collections)."""
    path = Path(weights_jsonl)
    records = read_records(path, require="weights")
    if not records:
        raise DataError("no record with 'weights' in the trajectory file.", path=path,
                        fix="pass the weights.jsonl of a strategy run (tdro, doremi, groupdro, ...).")
    per_step = [_weights_of(r, path, names) for r in records]
    steps = [int(r.get("step", i + 1)) for i, r in enumerate(records)]
    order = list(names) if names is not None else list(dict.fromkeys(n for w in per_step for n in w))
    traj = {n: [w.get(n) for w in per_step] for n in order}
    final = {n: per_step[-1][n] for n in order if n in per_step[-1]}
    return WeightSeries(order, steps, traj, final)


def plot_weights_figure(weights_jsonl: str | Path, names: list[str] | None = None, *,
                        title: str | None = None, series: WeightSeries | None = None):
    """The Figure :func:`plot_weights` saves: trajectories (left) and final weights as labelled bars (right).

    Up to six collections get a legend; with more, the labelled bars (same colours) serve as the legend.
    Bars are sorted by weight so the top-K selection reads off the chart.
    """
    series = series or weight_series(weights_jsonl, names)
    n = len(series.names)
    fig, (ax_t, ax_b) = new_figure(12.0, max(4.0, 0.28 * n + 1.5), ncols=2)
    cmap = _colours(n)
    for i, name in enumerate(series.names):
        pts = [(s, w) for s, w in zip(series.steps, series.trajectories[name]) if w is not None]
        if pts:
            xs, ys = zip(*pts)
            ax_t.plot(xs, ys, color=cmap[i], label=name, linewidth=1.4)
    ax_t.axhline(1.0 / max(n, 1), color="grey", linestyle=":", linewidth=1, label="uniform")
    from matplotlib.ticker import MaxNLocator

    ax_t.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_t.set_xlabel("step")
    ax_t.set_ylabel("weight")
    if n <= 6:
        ax_t.set_title("weight trajectories")
        ax_t.legend(fontsize="small", loc="best")
    else:   # many collections: the bar chart's labels double as the legend (same colours)
        ax_t.set_title("weight trajectories (colours as in the bar chart)")
    ranked = sorted(series.final.items(), key=lambda kv: kv[1])
    ax_b.barh([k for k, _ in ranked], [v for _, v in ranked],
              color=[cmap[series.names.index(k)] for k, _ in ranked])
    for y, (_, v) in enumerate(ranked):
        ax_b.text(v, y, f" {v:.4f}", va="center", fontsize="small")
    ax_b.axvline(1.0 / max(n, 1), color="grey", linestyle=":", linewidth=1)
    ax_b.set_xlabel(f"weight at step {series.steps[-1]}")
    ax_b.set_title("final weights")
    ax_b.margins(x=0.2)
    if title:
        fig.suptitle(title)
    return fig


def plot_weights(weights_jsonl: str | Path, png_path: str | Path, names: list[str] | None = None, *,
                 title: str | None = None) -> WeightSeries:
    """Weight trajectories (left) and final weights as labelled bars (right), saved to ``png_path``.

    Returns the series that were drawn (see :func:`plot_weights_figure`).
    """
    series = weight_series(weights_jsonl, names)
    save_figure(plot_weights_figure(weights_jsonl, names, title=title, series=series), png_path)
    log.info("wrote %s", png_path)
    return series


def _colours(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
