"""The figure of ``drmix adapt``'s report (:mod:`drmix.recipes.adapt.figure`): the candidates' synthetic dev
against their labelled score, a PNG beside report.html when labels are given and none otherwise."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from drmix.recipes.adapt.figure import FIGURE, labelled_dev_scores, plot_candidates
from drmix.recipes.adapt.report import _figures

PNG = b"\x89PNG\r\n\x1a\n"
DEV = {"uniform": 0.50, "uniform+synthetic": 0.55, "infdds+synthetic": 0.60}
LAB = {"uniform": 0.30, "uniform+synthetic": 0.32, "infdds+synthetic": 0.31}


def _result(labelled: bool):
    scores = {lb: {"scifact": {"ndcg@10": v}} for lb, v in LAB.items()}
    return SimpleNamespace(labelled=SimpleNamespace(results=scores) if labelled else None, candidates=dict(LAB),
                           selected="infdds+synthetic", kendall={"tau": 1 / 3, "p": 1.0, "candidates": 3})


def test_the_plot_is_a_png_beside_the_report_when_labels_are_given(tmp_path):
    figures = _figures(tmp_path, _result(True), DEV, {}, "test")
    assert [f["file"] for f in figures] == [FIGURE] and "infdds+synthetic" in figures[0]["caption"]
    assert (tmp_path / FIGURE).read_bytes()[:8] == PNG


def test_no_plot_without_labels_and_an_earlier_one_is_removed(tmp_path):
    (tmp_path / FIGURE).write_bytes(PNG)          # an earlier run's, with labels
    assert _figures(tmp_path, _result(False), DEV, {}, "test") == []
    assert not (tmp_path / FIGURE).exists()


def test_fewer_than_two_candidates_draw_nothing(tmp_path):
    assert plot_candidates({"uniform": 0.5}, {"uniform": 0.3}, "uniform", tmp_path / "x.png") is None
    assert not (tmp_path / "x.png").exists()
    # the candidates scored on both sets only: one here
    assert plot_candidates(DEV, {"uniform": 0.3, "other": 0.1}, "uniform", tmp_path / "x.png") is None


def test_labelled_dev_scores_are_read_from_the_summary_when_present(tmp_path):
    assert labelled_dev_scores({}) is None and labelled_dev_scores({"dev_labels": None}) is None
    assert labelled_dev_scores({"dev_labels": {"labelled_dev_average": {}}}) is None
    assert labelled_dev_scores({"dev_labels": {"labelled_dev_average": {"uniform": 0.4, "x": "n/a"}}}) == {
        "uniform": 0.4}
    assert labelled_dev_scores({"dev_labels": {"labelled_dev_average": {"uniform": 1}}}) == {"uniform": 1.0}
    made = plot_candidates(DEV, LAB, "uniform", tmp_path / "c.png",
                           labelled_dev={"uniform": 0.2, "infdds+synthetic": 0.3})
    assert made == tmp_path / "c.png" and Path(made).read_bytes()[:8] == PNG
