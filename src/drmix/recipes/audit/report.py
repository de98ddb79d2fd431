"""What the audit writes at the top of its folder: ``summary.md`` (the verdicts, the signals against
leave-one-out, the learned methods refused, the dev score of every run), ``summary.json`` (the same as data,
with the headline), ``weights.json`` (the recommended weights, in the format ``drmix train --mixture file
--weights-file`` and ``--transfer`` read), ``audit.png`` (the values with their intervals) and ``report.html``.
Every collection name reaching Markdown or HTML is escaped (:func:`drmix.markdown.md_cell`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from drmix.markdown import md_cell, md_code
from drmix.recipes.audit.agreement import LABELS
from drmix.recipes.audit.analysis import Analysis
from drmix.recipes.audit.verdict import DOWN_WEIGHT, DROP, KEEP

FIGURE = "audit.png"
WEIGHTS = "weights.json"
COLOURS = {KEEP: "#2da44e", DOWN_WEIGHT: "#d4a72c", DROP: "#cf222e"}


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.2g}"


def _signed(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:+.4f}"


def _interval(v: Any) -> str:
    return f"{_signed(v.mean)} [{_signed(v.low)}, {_signed(v.high)}]"


def _list(names: list[str], cell=md_cell) -> str:
    names = [cell(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def headline(a: Analysis, cell=str) -> str:
    """One sentence: what to drop and down-weight, how sure, and the cheap signal that agreed best (``cell``:
    how a collection name is written: as it is for summary.json and the HTML page, which escapes it;
    :func:`~drmix.markdown.md_cell` for Markdown)."""
    drop = [n for n in a.names if a.verdicts[n] == DROP]
    down = [n for n in a.names if a.verdicts[n] == DOWN_WEIGHT]
    keep = [n for n in a.names if a.verdicts[n] == KEEP]
    parts = []
    if drop:
        parts.append("Drop " + "; ".join(f"{cell(n)} (removing it raised the dev nDCG@10 by "
                                         f"{-a.loo[n].mean:+.4f}, 95% interval [{-a.loo[n].high:+.4f}, "
                                         f"{-a.loo[n].low:+.4f}], p {_p(a.loo[n].p)})" for n in drop))
    if down:
        it = "it" if len(down) == 1 else "each"
        parts.append("down-weight " + _list(down, cell) + f" (removing {it} helped within noise and the agreeing cheap "
                                                          f"signals mark {it} harmful)")
    if drop or down:
        text = "; ".join(parts) + f"; keep the other {len(keep)}."
        text = text[0].upper() + text[1:]
    else:
        text = (f"Keep all {len(a.names)} collections: removing none of them raised the dev nDCG@10 beyond the "
                "spread of the queries.")
    if a.all_dropped:
        text += " Every collection was dropped: the weights stay uniform; check the dev sets and the budget."
    ranked = [s for s in a.signals if math.isfinite(a.agreement[s.name]["tau"])]
    if ranked:
        best = max(ranked, key=lambda s: a.agreement[s.name]["tau"])
        t = a.agreement[best.name]
        text += (f" Of the cheap signals, {LABELS[best.name]} ranked the collections most like leave-one-out "
                 f"(Kendall's tau {t['tau']:+.2f}, p {_p(t['p'])}).")
    if a.refused:
        text += " Not recommended here: " + ", ".join(f"{m}'s weights (they up-weight {_list(c, cell)})"
                                                      for m, c in a.refused.items()) + "."
    return text


def verdict_table(a: Analysis) -> list[str]:
    head = "| collection | leave-one-out: dev nDCG@10 with it − without [95% interval] | p | per seed | "
    head += "add-one-in: alone − start [95% interval] | " if a.aoi else ""
    head += "agreeing signals marking it harmful | verdict | recommended weight |"
    lines = [head, "|---|---|---:|---|" + ("---|" if a.aoi else "") + "---|---|---:|"]
    for n in a.names:
        v = a.loo[n]
        cells = [md_cell(n), _interval(v), _p(v.p), " / ".join(_signed(x) for x in v.per_seed)]
        if a.aoi:
            cells.append(_interval(a.aoi[n]))
        marks = a.votes.get(n, [])
        cells += [f"{len(marks)} of {len(a.votes[''])}" + (f" ({', '.join(marks)})" if marks else ""),
                  f"**{a.verdicts[n]}**", f"{a.weights[n]:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def signal_tables(a: Analysis) -> list[str]:
    if not a.signals:
        return ["No cheap signal was asked for (--signals)."]
    lines = ["| signal | Kendall's tau vs leave-one-out | p | " + ("tau vs add-one-in | " if a.aoi else "")
             + "collections | votes |", "|---|---:|---:|" + ("---:|" if a.aoi else "") + "---:|---|"]
    voters = set(a.votes.get("", []))
    for s in a.signals:
        t = a.agreement[s.name]
        cells = [LABELS[s.name], _signed(t["tau"]).replace("+0.0000", "0"), _p(t["p"])]
        if a.aoi:
            cells.append(_signed(a.agreement_aoi[s.name]["tau"]))
        cells += [str(t["n"]), "yes" if s.name in voters else "no (tau ≤ 0)"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| collection | leave-one-out | " + " | ".join(LABELS[s.name] for s in a.signals) + " |",
              "|---|---:|" + "---:|" * len(a.signals)]
    for n in sorted(a.names, key=lambda x: -a.loo[x].mean):
        cells = [md_cell(n), _signed(a.loo[n].mean)]
        for s in a.signals:
            v = s.values.get(n, float("nan"))
            cells.append(("–" if not math.isfinite(v) else f"{v:.4g}") + (" ↓" if v < s.zero else ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "↓: below the signal's zero point (its method would take weight from it: influence or gradient "
                  "alignment below 0, a learned weight below uniform, an excess loss below the mean)."]
    return lines


def learned_lines(a: Analysis) -> list[str]:
    if not a.learned:
        return []
    lines = ["## Learned weights and where they are refused", "",
             "| collection | verdict | " + " | ".join(md_cell(m) for m in a.learned) + " |",
             "|---|---|" + "---:|" * len(a.learned)]
    k = len(a.names)
    for n in a.names:
        lines.append(f"| {md_cell(n)} | {a.verdicts[n]} | " + " | ".join(
            f"{w[n]:.4f}" + (" ↑" if w[n] > 1 / k else "") for w in a.learned.values()) + " |")
    lines.append("")
    if a.refused:
        for m, cols in a.refused.items():
            lines.append(f"- **{md_cell(m)}: not recommended for this mixture** -- its weights put more than the "
                         f"uniform share (1/{k}) on {_list(cols)}, which the audit "
                         f"{'drops' if all(a.verdicts[c] == DROP for c in cols) else 'drops or down-weights'}.")
    else:
        lines.append("No learned method up-weights a collection the audit drops or down-weights.")
    return lines + [""]


def summary_markdown(a: Analysis, root: Path, config: Any) -> str:
    seeds = len(next(iter(a.loo.values())).per_seed)
    parts = ["# Mixture audit", "", headline(a, md_cell), "",
             f"Every run: {config.audit.budget_steps} steps, the uniform mixture, {seeds} seed(s); dev: "
             + ", ".join(md_cell(Path(d).name) for d in config.mixture.dev)
             + f" ({md_cell(config.mixture.dev_split)} split, {next(iter(a.loo.values())).queries} queries pooled).",
             "", "## Verdicts", "", *verdict_table(a), "",
             "Leave-one-out value: the dev nDCG@10 of the whole mixture minus that of the mixture without the "
             "collection, paired over the dev queries (each averaged over the seeds); positive: it helps. Drop: "
             "the whole interval below 0. Down-weight: below 0 within noise and more than half of the agreeing "
             "cheap signals mark it harmful. Keep: everything else (docs/mixture.md, \"Auditing a mixture\").", "",
             "## Cheap signals against leave-one-out", "", *signal_tables(a), "", *learned_lines(a),
             "## Train with the recommended weights", "",
             md_code(f"drmix train --data ... --mixture file --weights-file {root / WEIGHTS}"), "",
             "## Dev nDCG@10 of every run", "", "| run | dev nDCG@10 |", "|---|---:|"]
    parts += [f"| {md_cell(label)} | {v:.4f} |" for label, v in a.dev.items()]
    return "\n".join(parts) + "\n"


def summary_data(a: Analysis, config: Any) -> dict[str, Any]:
    return {"recipe": "mixture audit", "headline": headline(a),
            "figures": [{"file": FIGURE, "caption": "Each collection's leave-one-out value (dev nDCG@10 with it "
                                                    "minus without) with its 95% interval, coloured by verdict"}],
            "collections": a.names, "verdicts": a.verdicts, "weights": a.weights, "all_dropped": a.all_dropped,
            "leave_one_out": {n: v.to_json() for n, v in a.loo.items()},
            "add_one_in": {n: v.to_json() for n, v in a.aoi.items()},
            "signals": {s.name: {"values": s.values, "zero": s.zero, "low": s.low, "high": s.high} for s in a.signals},
            "agreement": a.agreement, "agreement_add_one_in": a.agreement_aoi,
            "votes": {n: v for n, v in a.votes.items() if n}, "voters": a.votes.get("", []),
            "learned": a.learned, "refused": a.refused, "dev": a.dev,
            "budget_steps": config.audit.budget_steps, "dev_sets": list(config.mixture.dev),
            "dev_split": config.mixture.dev_split}


def weights_file(a: Analysis) -> dict[str, Any]:
    """The recommended weights as ``drmix train --weights-file`` reads them (``collections`` / ``weights``)."""
    return {"collections": a.names, "weights": [a.weights[n] for n in a.names], "strategy": "audit",
            "verdicts": a.verdicts, "final": dict(a.weights)}


def plot(a: Analysis, path: Path) -> Path:
    """``audit.png``: every collection's leave-one-out value with its 95% interval (and add-one-in beside it),
    coloured by verdict, the collections in the order of their value."""
    from drmix.report.plots import new_figure, save_figure

    panels = [("leave-one-out: with − without", a.loo)] + ([("add-one-in: alone − start", a.aoi)] if a.aoi else [])
    fig, axes = new_figure(5.2 * len(panels) + 1.5, 0.42 * len(a.names) + 1.6, ncols=len(panels))
    order = sorted(a.names, key=lambda n: a.loo[n].mean)
    for ax, (title, values) in zip(axes, panels):
        ys = range(len(order))
        means = [values[n].mean for n in order]
        err = [[values[n].mean - values[n].low for n in order], [values[n].high - values[n].mean for n in order]]
        ax.barh(list(ys), means, xerr=err, color=[COLOURS[a.verdicts[n]] for n in order], alpha=0.85,
                error_kw={"ecolor": "black", "capsize": 3, "linewidth": 1})
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(order if ax is axes[0] else [""] * len(order), fontsize=8)
        ax.set_title(title + " (dev nDCG@10)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    axes[0].legend(handles=[Patch(color=c, label=v) for v, c in COLOURS.items()], fontsize="x-small", loc="best")
    return save_figure(fig, path)
