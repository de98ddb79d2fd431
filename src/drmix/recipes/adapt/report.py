"""The outputs of ``drmix adapt``: ``summary.md`` / ``summary.json``, ``output_dir/model`` (a copy of the selected
candidate) and its model card."""
from __future__ import annotations

import html
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import ConfigError
from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.plan import AdaptPlan
from drmix.recipes.adapt.selection import UNIFORM, AdaptResult, _average
from drmix.recipes.stages import write_summary


def _md(text: Any) -> str:
    """A name as it may appear in the Markdown (and so the HTML) of the report: escaped, no table breaks."""
    return html.escape(str(text), quote=False).replace("|", "\\|")


def _escaped(results: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {_md(lb): {_md(d): v for d, v in by.items()} for lb, by in results.items()}


def _weights_of(folder: Path) -> dict[str, float]:
    try:
        w = json.loads((folder / "weights.json").read_text(encoding="utf-8"))
        return {str(n): float(v) for n, v in zip(w["collections"], w["weights"])}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


#: the file that marks ``output_dir/model`` as the recipe's copy (and says which candidate it is)
ADAPTED_MARKER = "drmix_adapt.json"


def _check_model_target(dst: Path) -> None:
    if (dst.exists() or dst.is_symlink()) and not (dst / ADAPTED_MARKER).is_file():
        raise ConfigError("output_dir/model exists and is not the adapted model drmix adapt wrote.", path=dst,
                          fix="move it away or choose another --output-dir.")


def _copy_model(src: Path, dst: Path, candidate: str) -> None:
    """``dst`` := a copy of the model folder ``src`` (hard links where the file system allows), atomically, with
    :data:`ADAPTED_MARKER`; a ``dst`` that is not such a copy is refused (it is not the recipe's to replace)."""
    from drmix.io.atomic import atomic_dir, atomic_write_json

    _check_model_target(dst)

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    with atomic_dir(dst) as tmp:
        shutil.copytree(src.resolve(), tmp, dirs_exist_ok=True, copy_function=link)
        atomic_write_json(tmp / ADAPTED_MARKER, {"candidate": candidate, "copied_from": str(src)})



def _synthetic_table(stats: Mapping[str, Any]) -> str:
    lines = ["| corpus | documents | sampled | generated | failed the round trip | kept | train / dev / test queries |",
             "|---|---:|---:|---|---|---|---|"]

    def kinds(d: Mapping[str, int]) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in d.items()) or "0"

    for name, s in stats.items():
        q = s["queries"]
        lines.append(f"| {_md(name)} | {s['documents']:,} | {s['sampled']:,} | {kinds(s['generated'])} | "
                     f"{kinds(s['filtered'])} | {kinds(s['kept'])} | {q['train']:,} / {q['dev']:,} / {q['test']:,} |")
    return "\n".join(lines) + "\n"


def _weights_md(weights: Mapping[str, Mapping[str, float]]) -> str:
    cols = list(weights)
    names = list(dict.fromkeys(n for w in weights.values() for n in w))
    lines = ["| collection | " + " | ".join(_md(c) for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    for n in names:
        lines.append(f"| {_md(n)} | " + " | ".join(f"{weights[c][n]:.4f}" if n in weights[c] else ""
                                                   for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _summary(config: AdaptConfig, plan: AdaptPlan, result: AdaptResult, dev_avg: dict[str, float]) -> str:
    from drmix.evaluation.suite import results_table

    t = config.synthetic
    parts = [f"# drmix adapt: {_md(', '.join(plan.corpora))}", "",
             f"Adapted model: **{_md(result.selected)}** (chosen on {_chosen_on(result)}; `model/` holds it with "
             "its card). Every choice was made on " + ("synthetic data built from the corpora alone"
                                                       if result.dev_labels is None else "synthetic data built from the "
                                                       "corpora and the --dev-labels queries")
             + (f"; the labelled {_md(config.eval.eval_split)} split of "
                f"{_md(', '.join(Path(d).name for d in config.eval.eval_data))} was read only for the tables below."
                if config.eval.eval_data else "; no labelled data was given."), "",
             "## Synthetic set", "",
             f"Pseudo-queries (cropped sentences{'; LLM-generated queries by ' + _md(t.llm) if t.llm else ''}) kept "
             f"when the teacher ({_md(t.teacher or 'all-MiniLM-L6-v2')}) retrieves their source passage in its top "
             f"{t.filter_k}; split by passage, no passage in two splits.", "", _synthetic_table(result.synthetic),
             "## Selection on the synthetic dev split (nDCG@10)", "",
             results_table(_escaped(result.selection)), ""]
    st = result.synthetic_test
    parts += ["## Synthetic test split (nDCG@10, delta vs the base model)", "",
              results_table(_escaped(st.results)), ""]
    for name, comp in result.comparisons.items():
        if name.startswith("synthetic test"):
            parts += [f"### Paired tests, {_md(name)}", "", _escaped_comparison(comp), ""]
    if result.labelled is not None:
        lab = {lb: result.labelled.results[lb] for lb in result.models}
        parts += [f"## Labelled {_md(config.eval.eval_split)} split (nDCG@10, delta vs the base model)", "",
                  results_table(_escaped(lab)), ""]
        for name, comp in result.comparisons.items():
            if not name.startswith("synthetic test"):
                parts += [f"### Paired tests, {_md(name)}", "", _escaped_comparison(comp), ""]
        lab_avg = {lb: _average(result.labelled.results[lb]) for lb in result.candidates}
        parts += ["## Candidates: synthetic dev against labelled", "",
                  f"| candidate | synthetic dev nDCG@10 | labelled {_md(config.eval.eval_split)} nDCG@10 |",
                  "|---|---:|---:|"]
        parts += [f"| {_md(lb)} | {dev_avg[lb]:.4f} | {lab_avg[lb]:.4f} |" for lb in result.candidates]
        if result.kendall is not None:
            k = result.kendall
            parts += ["", f"Kendall's tau between the two rankings of the {k['candidates']} candidates: "
                          + (f"**{k['tau']:+.3f}** (p {k['p']:.3g}; scipy.stats.kendalltau)." if np.isfinite(k["tau"])
                             else "undefined (one of the rankings is a tie of every candidate).")]
        parts.append("")
    parts += _dev_labels_md(config, result, dev_avg)
    if result.weights:
        parts += ["## Mixture weights (weights.json of each candidate)", "", _weights_md(result.weights), ""]
    parts += ["Models: " + ", ".join(f"{_md(k)}: `{_md(v)}`" for k, v in result.models.items()), ""]
    text = "\n".join(parts)
    write_summary(result.output_dir, text, {
        "selected": result.selected, "models": result.models,
        "candidates": {k: str(v) for k, v in result.candidates.items()},
        "synthetic": result.synthetic, "selection": result.selection, "selection_average": dev_avg,
        "synthetic_test": st.results,
        "labelled": None if result.labelled is None else result.labelled.results,
        "eval_split": config.eval.eval_split,
        "comparisons": {k: v.to_json() for k, v in result.comparisons.items()},
        "kendall": result.kendall, "weights": result.weights, "dev_labels": _dev_labels_json(config, result)})
    return text


def _at_a_glance(config: AdaptConfig, plan: AdaptPlan, result: AdaptResult, dev_avg: dict[str, float]) -> str:
    """What ``summary.md`` / ``summary.json`` (written by :func:`_summary`) open and close with, added to both:
    the sentence on what won and where the gain came from (:mod:`drmix.recipes.adapt.headline`) under the title,
    the index the run ends with (``--index``) before the models' list, and the figures (``candidates.png`` with
    labels; ``report.html`` embeds what ``figures`` names). Returns the new ``summary.md``."""
    from drmix.recipes.adapt.headline import report_headline

    head, head_data = report_headline(result, config.eval.eval_split)
    text = (plan.root / "summary.md").read_text(encoding="utf-8")
    title, _, rest = text.partition("\n\n")
    index = "\n".join(_index_section(result.index, plan.root))
    at = rest.rfind("\nModels: ")
    rest = rest[:at + 1] + index + ("\n" if index else "") + rest[at + 1:] if at >= 0 else rest + "\n" + index
    text = f"{title}\n\n**{_md(head)}**\n\n{rest}"
    data = json.loads((plan.root / "summary.json").read_text(encoding="utf-8"))
    data.update(headline=head, headline_from=head_data, index=result.index)
    data["figures"] = _figures(plan.root, result, dev_avg, data, config.eval.eval_split)
    write_summary(result.output_dir, text, data)
    return text


def _index_section(record: dict[str, Any] | None, root: Path) -> list[str]:
    """The report's section on the index the run ends with (none with --no-index)."""
    from drmix.recipes.adapt.index import index_lines, search_command

    if not record:
        return []
    command = search_command(record, root)
    return ["## Index (drmix search)", "", *index_lines(record),
            *([f"Search it: `{command}`", ""] if command else [])]


def _figures(root: Path, result: AdaptResult, dev_avg: Mapping[str, float], data: Mapping[str, Any],
             split: str) -> list[dict[str, str]]:
    """The report's figures, written beside report.html (which embeds them): with labels, the candidates'
    synthetic dev against labelled (``candidates.png``; also the labelled dev when the summary holds it). A
    figure of an earlier run that no longer applies is removed (it is the recipe's own)."""
    from drmix.recipes.adapt.figure import FIGURE, labelled_dev_scores, plot_candidates

    path = root / FIGURE
    made = None
    if result.labelled is not None:
        lab = {lb: _average(result.labelled.results[lb]) for lb in result.candidates}
        made = plot_candidates(dev_avg, lab, result.selected, path, kendall=result.kendall,
                               labelled_dev=labelled_dev_scores(data), split=split)
    if made is None:
        path.unlink(missing_ok=True)
        return []
    return [{"file": FIGURE, "caption": f"Every candidate's synthetic-dev nDCG@10 against its labelled {split} "
                                        f"nDCG@10; the adapted model ({result.selected}) ringed; dashed: the "
                                        "least-squares line."}]


def _escaped_comparison(comp: Any) -> str:
    import copy as _copy

    c = _copy.copy(comp)
    c.baseline = _md(comp.baseline)
    c.rows = {_md(lb): [_copy.copy(d) for d in rows] for lb, rows in comp.rows.items()}
    for rows in c.rows.values():
        for d in rows:
            d.dataset = _md(d.dataset)
    return c.to_markdown()


def _write_card(config: AdaptConfig, plan: AdaptPlan, result: AdaptResult) -> None:
    """The adapted model's card: the selected candidate's card with a section on how it was adapted."""
    from drmix.io.atomic import atomic_write_text
    from drmix.report.card import _insert

    card_path = plan.root / "model" / "README.md"
    try:
        card = card_path.read_text(encoding="utf-8")
    except OSError:
        card = "# Adapted retriever\n"
    lines = ["### Adapted with drmix adapt", "",
             f"Adapted to {', '.join(plan.corpora)} "
             f"{'without labels' if result.dev_labels is None else 'with labels for the choice only'}: COCO continuous contrastive pretraining on the "
             f"corpora (COCO-DR, arXiv:2210.15212), then fine-tuning on {len(config.data.collections)} training "
             f"collection(s) under the mixture **{result.selected}**, chosen among "
             f"{', '.join(result.candidates)} on {_chosen_on(result)}.", ""]
    for name, suite in (("synthetic test", result.synthetic_test), (config.eval.eval_split, result.labelled)):
        if suite is None:
            continue
        adapted = next(lb for lb in result.models if lb.startswith("adapted"))
        lines.append(f"nDCG@10 on the {name} split: " + ", ".join(
            f"{d} {v['ndcg@10']:.4f} (uniform fine-tuning {suite.results[UNIFORM][d]['ndcg@10']:.4f})"
            for d, v in suite.results[adapted].items()) + ".")
    if result.index:
        from drmix.recipes.adapt.index import index_lines

        lines += ["", *index_lines(result.index)]
    lines += ["", "The full report: `summary.md` and `report.html` in the run folder.", ""]
    atomic_write_text(card_path, _insert(card, "\n".join(lines)))


# ---------------------------------------------------------------------------------------------- --dev-labels
_SYNTHETIC_DEV = ("a synthetic dev split built from the corpora (cropped-sentence pseudo-queries, DRAMA "
                  "arXiv:2502.18460, kept by a round-trip filter)")


def _chosen_on(result: AdaptResult) -> str:
    """Which dev the adapted model was chosen on, in words (the summary's first line and the model card)."""
    lab = result.dev_labels
    if lab is None or result.select_on == "synthetic":
        return _SYNTHETIC_DEV if lab is None else "the synthetic dev split (--select-on synthetic)"
    n = ", ".join(f"{k} {v}" for k, v in lab.queries.items())
    if result.select_on == "labels":
        return f"the user's labelled dev queries (--dev-labels: {n})"
    return f"the mean of the synthetic dev and the user's labelled dev queries (--dev-labels: {n}) nDCG@10"


def _test_average(result: AdaptResult, label: str) -> float | None:
    if result.labelled is None or label not in result.labelled.results:
        return None
    return _average(result.labelled.results[label])


def _dev_labels_md(config: AdaptConfig, result: AdaptResult, dev_avg: Mapping[str, float]) -> list[str]:
    """The two choices: every candidate on the synthetic dev and on the labelled dev, the candidate each picks
    and, with --eval-data, the labelled test score of each and the paired test between them."""
    lab = result.dev_labels
    if lab is None:
        return []
    split = _md(config.eval.eval_split)
    test = result.labelled is not None
    parts = ["## The two choices: synthetic dev and labelled dev (nDCG@10)", "",
             f"Labelled dev queries (--dev-labels, split {_md(config.labels.dev_labels_split)}): "
             + ", ".join(f"{_md(k)} {v}" for k, v in lab.queries.items()) + f"; chosen on: "
             f"**{_md(result.select_on)}** (--select-on).", "",
             "| candidate | synthetic dev | labelled dev |" + (f" labelled {split} |" if test else ""),
             "|---|---:|---:|" + ("---:|" if test else "")]
    for c in result.candidates:
        t = _test_average(result, c)
        parts.append(f"| {_md(c)} | {dev_avg[c]:.4f} | {lab.average[c]:.4f} |" + (f" {t:.4f} |" if test else ""))
    parts += ["", "| choice | candidate |" + (f" labelled {split} nDCG@10 |" if test else ""),
              "|---|---|" + ("---:|" if test else "")]
    for name, c in (("synthetic dev", result.synthetic_choice), ("labelled dev", lab.selected),
                    (f"adapted model (--select-on {result.select_on})", result.selected)):
        t = _test_average(result, c)
        parts.append(f"| {name} | {_md(c)} |" + (f" {t:.4f} |" if test else ""))
    parts.append("")
    tau = _labelled_dev_tau(result)
    if tau is not None and np.isfinite(tau["tau"]):
        parts += [f"Kendall's tau between the labelled-dev and the labelled {split} rankings of the "
                  f"{tau['candidates']} candidates: **{tau['tau']:+.3f}** (p {tau['p']:.3g}).", ""]
    if result.synthetic_choice == lab.selected:
        parts += ["Both devs chose the same candidate.", ""]
    if result.choice_test is not None:
        parts += [f"### Paired test on the labelled {split} split: labelled-dev choice against synthetic-dev choice",
                  "", _escaped_comparison(result.choice_test), ""]
    return parts


def _labelled_dev_tau(result: AdaptResult) -> dict[str, float] | None:
    """Kendall's tau between the candidates' labelled-dev and labelled test averages (None without both)."""
    from drmix.recipes.adapt.selection import kendall_tau

    if result.dev_labels is None or result.labelled is None or len(result.candidates) < 2:
        return None
    return kendall_tau(result.dev_labels.average, {c: _test_average(result, c) for c in result.candidates})


def _dev_labels_json(config: AdaptConfig, result: AdaptResult) -> dict[str, Any] | None:
    """summary.json's ``dev_labels``: the labelled-dev scores, both choices and their labelled test averages."""
    lab = result.dev_labels
    if lab is None:
        return None
    choices = {"synthetic dev": result.synthetic_choice, "labelled dev": lab.selected, "adapted": result.selected}
    return {"select_on": result.select_on, "split": config.labels.dev_labels_split, "queries": lab.queries,
            "labelled_dev": lab.results, "labelled_dev_average": lab.average, "choices": choices,
            "choices_test_average": {k: _test_average(result, c) for k, c in choices.items()},
            "choice_test": None if result.choice_test is None else result.choice_test.to_json(),
            "kendall_labelled_dev": _labelled_dev_tau(result)}
