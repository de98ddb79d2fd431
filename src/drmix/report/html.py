"""``report.html``: one self-contained page per run and per pipeline (no network, figures inline as SVG).

A *run* is a folder with ``metrics.jsonl`` (written by the trainer), or the output folder of
sentence-transformers' trainer (``weights.jsonl`` of :mod:`drmix.integrations.sentence_transformers`, or a
``trainer_state.json``: :mod:`drmix.report.trainer_state`); a *pipeline* (tDRO, COCO, DRAMA, the
demo) is a folder whose sub-folders (to two levels) are runs. The page shows, from what the folder holds:

* first, a recipe's ``summary.json`` ``headline`` (one sentence) and ``figures`` (PNG files of the folder,
  embedded as ``data:image/png`` URIs);
* the configuration (``config.yaml`` / ``pipeline.yaml``, ...);
* loss and learning-rate curves, throughput, per-collection losses (``collection_losses`` of
  ``metrics.jsonl``, or a strategy's ``proxy_loss`` in ``weights.jsonl``);
* periodic evaluation curves (``eval`` records of ``metrics.jsonl``);
* mixture-weight trajectories and final weights (``weights.jsonl`` / ``weights.json``);
* the evaluation and comparison tables (``eval.md``, ``compare.md``, ``summary.md``, ``results.md``,
  rendered by :func:`drmix.markdown.render_html`: raw HTML and script links in them stay text), in the
  folder itself and in its sub-folders that ``drmix eval`` or ``drmix compare`` wrote (the layout ``RUN/eval``,
  ``RUN/compare``: ``drmix eval --output RUN`` and ``drmix compare --output RUN`` write there when RUN is a
  training run);
* links (relative) to every artefact of the folder.

Every name that reaches the page (folder and file names, dataset and collection names in tables, the
configuration) is escaped; file links are percent-encoded relative paths (``:`` too), so a file named
``javascript:alert(1)`` is a file, not a script. The page runs no script.

Figures are drawn by matplotlib (Agg canvas, no pyplot state; see :mod:`drmix.report.plots`) as SVG with
text as paths, so the page needs no fonts or files besides itself. The page layout (HTML/CSS) is written
by hand: no library renders this mix of figures, tables and links.
"""
from __future__ import annotations

import datetime as _dt
import html
import io
import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drmix.io.atomic import atomic_write_text
from drmix.io.read import iter_jsonl

log = logging.getLogger(__name__)

REPORT = "report.html"
GENERATOR = "drmix report"
CONFIG_FILES = ("config.yaml", "pipeline.yaml", "adapt.yaml", "audit.yaml", "demo.json", "manifest.json")
TABLE_FILES = ("summary.md", "results.md", "eval.md", "compare.md")
_SKIP_DIRS = {"checkpoints", "model", "adapter", "index", "cache", ".cache", "__pycache__", "tensorboard", "wandb"}
_LIST_ONLY = {"checkpoints", "index", "cache", "tensorboard", "wandb"}  # listed, their insides not

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#1f2328;
background:#f6f8fa;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:16px 24px 48px;background:#fff}
h1{font-size:1.6em;margin:.4em 0 .1em}h2{font-size:1.25em;border-bottom:1px solid #d0d7de;padding-bottom:.2em;
margin-top:1.6em}h3{font-size:1.05em;margin-top:1.2em}
.meta{color:#57606a;font-size:.9em}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;overflow:auto;max-height:420px;
font-size:.85em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #d0d7de;padding:4px 10px;text-align:left}th{background:#f6f8fa}
td:not(:first-child){font-variant-numeric:tabular-nums}
figure{margin:.8em 0}figure svg,figure img{max-width:100%;height:auto;display:block}
.headline{font-size:1.08em;background:#ddf4ff;border-left:4px solid #0969da;padding:8px 12px;margin:.8em 0}
figcaption{color:#57606a;font-size:.85em}
nav a{margin-right:14px}ul.files{columns:2;font-size:.9em}
details summary{cursor:pointer;color:#0969da}
.empty{color:#57606a;font-style:italic}
"""


# -- reading ---------------------------------------------------------------------------------------------
def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    try:
        return [obj for _, obj in iter_jsonl(path)]
    except Exception as e:  # noqa: BLE001 - a torn log still gives a report of what it holds
        log.warning("cannot read %s (%s); its curves are left out", path, e)
        return []


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _series(records: Iterable[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        if _finite(r.get(key)) and "step" in r:
            xs.append(int(r["step"]))
            ys.append(float(r[key]))
    return xs, ys


def _named_series(records: Iterable[dict], key: str) -> dict[str, tuple[list[int], list[float]]]:
    """``{name: (steps, values)}`` from records holding a mapping (or list) under ``key``."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for r in records:
        m = r.get(key)
        if isinstance(m, list):
            m = {str(i): v for i, v in enumerate(m)}
        if not isinstance(m, dict) or "step" not in r:
            continue
        for name, v in m.items():
            if _finite(v):
                xs, ys = out.setdefault(str(name), ([], []))
                xs.append(int(r["step"]))
                ys.append(float(v))
    return out


def _eval_series(records: Iterable[dict]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """metric -> dataset -> (steps, values) from ``{"step", "eval": {"scifact/ndcg@10": v}}`` records."""
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for r in records:
        ev = r.get("eval")
        if not isinstance(ev, dict) or "step" not in r:
            continue
        for key, v in ev.items():
            if not _finite(v):
                continue
            dataset, _, metric = str(key).rpartition("/")
            xs, ys = out.setdefault(metric, {}).setdefault(dataset or "all", ([], []))
            xs.append(int(r["step"]))
            ys.append(float(v))
    for series in out.values():  # the average of one dataset is that dataset
        if len(series) == 2 and "avg" in series:
            del series["avg"]
    return out


# -- figures -----------------------------------------------------------------------------------------------
def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.find("<svg"):]


def _line_figure(panels: list[tuple[str, dict[str, tuple[list[int], list[float]]], str]], *,
                 width: float = 11.0, height: float = 3.4) -> str | None:
    """One row of line plots; each panel is ``(title, {label: (xs, ys)}, ylabel)``. None when all are empty."""
    panels = [p for p in panels if any(xs for xs, _ in p[1].values())]
    if not panels:
        return None
    from matplotlib.ticker import MaxNLocator

    from drmix.report.plots import _colours, new_figure

    fig, axes = new_figure(width, height, ncols=len(panels))
    for ax, (title, lines, ylabel) in zip(axes, panels):
        colours = _colours(len(lines))
        for i, (label, (xs, ys)) in enumerate(lines.items()):
            ax.plot(xs, ys, color=colours[i], linewidth=1.4, label=label, marker="o" if len(xs) <= 12 else None,
                    markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if 1 < len(lines) <= 10:
            ax.legend(fontsize="small", loc="best")
    return _svg(fig)


def _weights_figure(run: Path) -> str | None:
    traj = run / "weights.jsonl"
    if not traj.is_file() or traj.stat().st_size == 0:
        return None
    from drmix.report.plots import plot_weights_figure

    names = _weight_names(run)
    first = next(iter(_records(traj)), {})
    keys = first.get("weights") if isinstance(first, dict) else None
    if names and isinstance(keys, dict) and not set(names) & set(keys):
        names = None  # the trajectory is not over the collections (iDRO's holds cluster weights): plot its own keys
    try:
        fig = plot_weights_figure(traj, names=names)
    except Exception as e:  # noqa: BLE001 - a report of the rest is better than none
        log.warning("cannot plot %s (%s)", traj, e)
        return None
    return _svg(fig)


def _weight_names(run: Path) -> list[str] | None:
    w = _json(run / "weights.json")
    names = w.get("collections") if isinstance(w, dict) else None
    return [str(n) for n in names] if isinstance(names, list) else None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# -- sections ----------------------------------------------------------------------------------------------
def _esc(s: Any) -> str:
    return html.escape(str(s))


def _figure(svg: str | None, caption: str) -> str:
    if not svg:
        return ""
    return f"<figure>{svg}<figcaption>{_esc(caption)}</figcaption></figure>"


def _markdown(text: str) -> str:
    from drmix.markdown import render_html

    return render_html(text)


def _href(rel: Path, folder: bool = False) -> str:
    """A link to a file of the report's folder: relative and percent-encoded (``:`` too), so never read as
    a URL scheme (a file named ``javascript:alert(1)`` links to itself)."""
    from urllib.parse import quote

    return _esc(quote(rel.as_posix()) + ("/" if folder else ""))


def _run_sections(run: Path, base: Path, level: int = 2) -> str:
    h = f"h{level}"
    metrics = _records(run / "metrics.jsonl")
    if not (run / "metrics.jsonl").is_file():  # a sentence-transformers trainer's run: its log_history
        from drmix.report.trainer_state import trainer_records

        metrics = trainer_records(run)
    train = [r for r in metrics if "loss" in r]
    parts: list[str] = []
    loss_fig = _line_figure([
        ("training loss", {"loss": _series(train, "loss"), "raw (per example)": _series(train, "raw_loss")},
         "loss"),
        ("learning rate", {"lr": _series(train, "lr")}, "lr"),
        ("throughput", {"examples/s": _series(train, "samples_per_s")}, "examples / s")])
    parts.append(_figure(loss_fig, "Loss (the strategy's objective and the mean per-example loss, each averaged "
                                   "over the steps since the previous record), learning rate and training "
                                   "throughput per logged step."))
    per_collection = _named_series(train, "collection_losses")
    source = "metrics.jsonl"
    if not per_collection:
        per_collection = _named_series(_records(run / "weights.jsonl"), "proxy_loss")
        source = "weights.jsonl (the strategy's proxy loss)"
    if per_collection:
        parts.append(_figure(_line_figure([("per-collection loss", per_collection, "loss")], height=3.6),
                             f"Mean loss of each collection's examples per logged step ({source})."))
    evals = _eval_series(metrics)
    if evals:
        panels = [(metric, series, metric) for metric, series in sorted(evals.items())]
        rows = [panels[i:i + 4] for i in range(0, len(panels), 4)]
        figs = "".join(_figure(_line_figure(row), "Periodic evaluation during training ("
                               + ", ".join(p[0] for p in row) + ").") for row in rows)
        parts.append(f"<{h}>Evaluation during training</{h}>" + figs)
    wfig = _weights_figure(run)
    final = _json(run / "weights.json")
    if wfig or isinstance(final, dict):
        parts.append(f"<{h}>Mixture weights</{h}>" + _figure(wfig, "Weight trajectories (left) and final "
                                                                    "weights (right) per collection."))
        if isinstance(final, dict):
            parts.append(_weights_table(final))
    body = "".join(parts)
    if not body:
        return ""
    return f"<{h}>Training curves</{h}>" + (body if (loss_fig or per_collection) else
                                             "<p class='empty'>no training records</p>" + body)


def _weights_table(final: dict) -> str:
    cols, w = final.get("collections"), final.get("weights")
    if isinstance(final.get("final"), dict):
        pairs = list(final["final"].items())
    elif isinstance(cols, list) and isinstance(w, list) and len(cols) == len(w):
        pairs = list(zip(cols, w))
    else:
        return ""
    rows = "".join(f"<tr><td>{_esc(n)}</td><td>{v:.4f}</td></tr>" for n, v in pairs if _finite(v))
    strategy = final.get("strategy")
    caption = f" (strategy: {_esc(strategy)})" if strategy else ""
    return f"<table><tr><th>collection</th><th>final weight{caption}</th></tr>{rows}</table>"


def _tables(folder: Path, *, inside: bool = True) -> str:
    """The tables of ``folder`` and (``inside``) of its ``drmix eval`` / ``drmix compare`` sub-folders."""
    out = []
    for name in TABLE_FILES:
        p = folder / name
        if p.is_file():
            out.append(f"<h3>{_esc(name)}</h3>" + _markdown(p.read_text(encoding="utf-8")))
    for p in sorted(folder.glob("eval-*.md")):
        out.append(f"<h3>{_esc(p.name)}</h3>" + _markdown(p.read_text(encoding="utf-8")))
    if inside:
        for child in result_folders(folder):
            for name in ("eval.md", "compare.md"):
                p = child / name
                if p.is_file():
                    label = f"{child.name}/{name}"
                    out.append(f"<h3>{_esc(label)}</h3>" + _markdown(p.read_text(encoding="utf-8")))
    return "".join(out)


def result_folders(folder: Path) -> list[Path]:
    """The sub-folders of ``folder`` that hold what ``drmix eval`` or ``drmix compare`` wrote (``eval/``,
    ``compare/``, or any other name), in name order."""
    from drmix.outputs import is_output_of

    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    return [c for c in children if c.name not in _SKIP_DIRS and not is_run(c)
            and (is_output_of(c, "eval") or is_output_of(c, "compare"))]


def _config(folder: Path) -> str:
    for name in CONFIG_FILES:
        p = folder / name
        if p.is_file():
            text = p.read_text(encoding="utf-8")
            return f"<details open><summary>{_esc(name)}</summary><pre>{_esc(text)}</pre></details>"
    return ""


def _artefacts(folder: Path, out_file: Path) -> str:
    items = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or p == out_file:
            continue
        depth = len(rel.parts)
        inside_skipped = any(part in _LIST_ONLY for part in rel.parts[:-1])
        if inside_skipped and not (rel.parts[0] == "checkpoints" and depth == 2):
            continue
        if depth > 3:
            continue
        label = str(rel) + ("/" if p.is_dir() else "")
        size = "" if p.is_dir() else f" <span class='meta'>({_size(p)})</span>"
        items.append(f"<li><a href='{_href(rel, p.is_dir())}'>{_esc(label)}</a>{size}</li>")
    return "<ul class='files'>" + "".join(items) + "</ul>" if items else "<p class='empty'>no files</p>"


def _size(p: Path) -> str:
    try:
        n = p.stat().st_size
    except OSError:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def is_run(folder: Path) -> bool:
    """A drmix run (``metrics.jsonl``), or a sentence-transformers trainer's (:mod:`drmix.report.trainer_state`)."""
    from drmix.report.trainer_state import is_trainer_run

    return (folder / "metrics.jsonl").is_file() or is_trainer_run(folder)


def sub_runs(folder: Path) -> list[Path]:
    """Runs below ``folder`` (one or two levels: pipeline stages, the demo's ``runs/*``)."""
    found = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if child.name in _SKIP_DIRS:
            continue
        if is_run(child):
            found.append(child)
        else:
            found += [g for g in sorted(child.iterdir()) if g.is_dir() and is_run(g)]
    return found


def render_report(folder: str | Path, *, runs: bool = True) -> str:
    """The HTML text of ``folder``'s report (a run or a pipeline); ``runs`` false: the runs below it are listed
    as links to their own reports, without their curves (a recipe of many short runs: the audit)."""
    folder = Path(folder)
    out_file = folder / REPORT
    title = folder.resolve().name
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    show_runs = runs
    runs = sub_runs(folder) if runs else []
    sections = [f"<h1>drmix report: {_esc(title)}</h1>",
                f"<p class='meta'>{_esc(folder.resolve())} &middot; generated {stamp}</p>"]
    nav = ["<a href='#config'>configuration</a>"]
    if is_run(folder):
        nav.append("<a href='#training'>training</a>")
    if runs:
        nav.append("<a href='#stages'>runs</a>")
    nav += ["<a href='#results'>results</a>", "<a href='#files'>files</a>"]
    sections.append(_at_a_glance(folder))
    sections.append("<nav>" + "".join(nav) + "</nav>")
    cfg = _config(folder)
    sections.append("<h2 id='config'>Configuration</h2>" + (cfg or "<p class='empty'>no configuration file</p>"))
    if is_run(folder):
        sections.append("<div id='training'>" + (_run_sections(folder, folder) or
                                                 "<p class='empty'>no training records yet</p>") + "</div>")
    tables = _tables(folder)
    if runs:
        parts = ["<h2 id='stages'>Runs</h2>"]
        for run in runs:
            rel = run.relative_to(folder).as_posix()
            link = f" <a href='{_href(Path(rel) / REPORT)}'>(its report)</a>" if (run / REPORT).is_file() else ""
            parts.append(f"<h3>{_esc(rel)}{link}</h3>")
            parts.append(_run_sections(run, folder, level=4) or "<p class='empty'>no training records</p>")
            run_tables = _tables(run)
            if run_tables:
                parts.append(run_tables.replace("<h3>", "<h4>").replace("</h3>", "</h4>"))
        sections.append("".join(parts))
    if not show_runs:
        listed = [p.parent for p in sorted(folder.rglob(REPORT)) if p != out_file and "checkpoints" not in p.parts]
        if listed:
            sections.append("<h2 id='runs'>Runs</h2><ul class='files'>" + "".join(
                f"<li><a href='{_href(p.relative_to(folder) / REPORT)}'>{_esc(p.relative_to(folder).as_posix())}</a>"
                "</li>" for p in listed) + "</ul>")
    sections.append("<h2 id='results'>Results</h2>" + (tables or "<p class='empty'>no evaluation or comparison "
                                                                  "tables in this folder or its eval/ and compare/ "
                                                                  "folders yet (drmix eval --output "
                                                                  f"{_esc(folder)}/eval)</p>"))
    sections.append("<h2 id='files'>Files</h2>" + _artefacts(folder, out_file))
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<meta name='generator' content='{GENERATOR}'>"
            f"<title>drmix report: {_esc(title)}</title><style>{_CSS}</style></head>"
            f"<body><main>{''.join(sections)}</main></body></html>\n")


def _at_a_glance(folder: Path) -> str:
    """What a recipe's ``summary.json`` puts at the top of the page: its ``headline`` (one sentence) and its
    ``figures`` (PNG files of the folder, embedded; ``[{"file", "caption"}]``)."""
    import base64

    summary = _json(folder / "summary.json")
    if not isinstance(summary, dict):
        return ""
    out = []
    if isinstance(summary.get("headline"), str):
        out.append(f"<p class='headline'>{_esc(summary['headline'])}</p>")
    for fig in summary.get("figures") or []:
        name = fig.get("file") if isinstance(fig, dict) else None
        p = folder / str(name or "")
        if not name or Path(str(name)).name != name or p.suffix != ".png" or not p.is_file():
            continue
        data = base64.b64encode(p.read_bytes()).decode("ascii")
        out.append(f"<figure><img src='data:image/png;base64,{data}' alt='{_esc(name)}'>"
                   f"<figcaption>{_esc(fig.get('caption', ''))} ({_esc(name)})</figcaption></figure>")
    return "".join(out)


def check_report_target(folder: str | Path, *, overwrite: bool = False) -> None:
    """Refuse to replace a ``report.html`` that drmix did not write (unless ``overwrite``)."""
    from drmix.errors import ConfigError

    path = Path(folder) / REPORT
    if path.is_dir() or (path.exists() and not overwrite and not is_drmix_report(path)):
        raise ConfigError("a report.html is here that drmix did not write.", path=path,
                          fix="move it away, or pass --overwrite to replace it.")


def is_drmix_report(path: str | Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(2048)
    except OSError:
        return False
    return f"content='{GENERATOR}'" in head


def write_report(folder: str | Path, *, runs: bool = True) -> Path:
    """Write ``folder/report.html`` (atomically; ``runs``: see :func:`render_report`); returns its path."""
    folder = Path(folder)
    path = folder / REPORT
    atomic_write_text(path, render_report(folder, runs=runs))
    log.info("report: %s", path)
    return path
