"""What a sweep writes: Table 3 as Markdown (:func:`format_table`), ``results.json`` (read back by
:func:`load_sweep_json`) and one recall-vs-k plot per setting (:func:`plot_recall_vs_k`)."""
from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.evaluation.multi.sweep import SweepResult
from drmix.io.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from drmix.retrieval.multi import parse_policy, policy_info


def _cell(m: Mapping[str, Any] | None, k: int) -> str:
    if not m:
        return "-"
    return f"{100 * m[f'pc_recall@{k}']:.2f}/{m[f'pc_mrr@{k}']:.2f}"


def format_table(results: Sequence[SweepResult], *, bold_best: bool = True) -> str:
    """Markdown table in the shape of the paper's Table 3: policy rows, one column per setting.

    Cells are ``pc_recall@k (x100) / pc_mrr@k``; the best recall of each column (oracle excluded) is bold.
    """
    from drmix.markdown import md_cell

    labels: list[str] = []
    for r in results:
        labels += [lab for lab in r.rows if lab not in labels]
    header = "| Known corpus → | " + " | ".join(f"{md_cell(r.setting)} (k={r.k})" for r in results) + " |"
    lines = [header, "|---|" + "---|" * len(results)]
    best = {}
    for i, r in enumerate(results):
        vals = [m[f"pc_recall@{r.k}"] for lab, m in r.rows.items() if not lab.startswith("oracle")]
        best[i] = max(vals) if vals else None
    for lab in labels:
        cells = []
        for i, r in enumerate(results):
            m = r.rows.get(lab)
            c = _cell(m, r.k)
            if bold_best and m and not lab.startswith("oracle") and best[i] is not None \
                    and math.isclose(m[f"pc_recall@{r.k}"], best[i]):
                c = f"**{c}**"
            cells.append(c)
        lines.append(f"| {md_cell(lab)} | " + " | ".join(cells) + " |")
    chosen = [f"{md_cell(r.setting)}: {', '.join(map(md_cell, r.chosen.values()))}" for r in results if r.chosen]
    if chosen:
        lines += ["", "Chosen on the validation split: " + "; ".join(chosen) + "."]
    return "\n".join(lines) + "\n"


def write_sweep(results: Sequence[SweepResult], out_dir: str | Path, *, plot_top: int = 4) -> dict[str, Path]:
    """Write ``table.md``, ``results.json`` and one ``recall_vs_k-<setting>.png`` per setting."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"table": out / "table.md", "json": out / "results.json"}
    atomic_write_text(paths["table"], format_table(results))
    atomic_write_json(paths["json"], [r.to_json() for r in results])
    for r in results:
        if any(len(c) > 1 for c in r.curves.values()):
            p = out / f"recall_vs_k-{_slug(r.setting)}.png"
            plot_recall_vs_k(r, p, top=plot_top)
            paths[f"plot:{r.setting}"] = p
    return paths


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in text).strip("-") or "setting"


def best_rows(result: SweepResult, top: int = 4) -> list[str]:
    """Rows to plot: naive, oracle, and the best row of each other policy family (at most ``top``).

    Only rows with a curve (more than one k) are candidates. Families are policy names (fixed, confidence,
    zscore, calibrated); a dev-chosen row is its own family, and the grid rows are left out when it is
    plotted; families are ranked by their best pc_recall@k.
    """
    k = result.k
    has_curve = [lab for lab in result.rows if len(result.curves.get(lab, {})) > 1]
    always = [lab for lab in ("naive", "oracle") if lab in has_curve]
    dev_rows = [lab for lab in has_curve if "dev-tuned" in lab or "dev-chosen" in lab]
    best: dict[str, str] = {}
    for lab in has_curve:
        if lab in always:
            continue
        if lab in dev_rows:
            fam = lab
        else:
            fam = parse_policy(result.rows[lab].get("spec", lab)).name
            if any(d.startswith(fam) or (policy_info(fam).label_free and d.startswith("label-free"))
                   for d in dev_rows):
                continue
        if fam not in best or result.rows[lab][f"pc_recall@{k}"] > result.rows[best[fam]][f"pc_recall@{k}"]:
            best[fam] = lab
    ranked = sorted(best.values(), key=lambda lab: -result.rows[lab][f"pc_recall@{k}"])
    return always + ranked[:top]


def plot_recall_vs_k(result: SweepResult, path: str | Path, *, top: int = 4) -> None:
    """Line plot of per-corpus credit recall against k for naive, oracle and the best policies (PNG)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for lab in best_rows(result, top):
        curve = result.curves[lab]
        xs = sorted(curve)
        ax.plot(xs, [100 * curve[x] for x in xs], marker="o", label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("k (retrieval budget)")
    ax.set_ylabel("Recall@k, per-corpus credit (%)")
    ax.set_title(textwrap.fill(result.setting, 60), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def load_sweep_json(path: str | Path) -> list[SweepResult]:
    """Read back ``results.json`` written by :func:`write_sweep`."""
    out = []
    for d in json.loads(Path(path).read_text(encoding="utf-8")):
        r = SweepResult(d["setting"], int(d["k"]), d["rows"],
                        {lab: {int(kk): v for kk, v in c.items()} for lab, c in d["curves"].items()},
                        d.get("chosen_on_dev", {}))
        out.append(r)
    return out
