"""report.html: one self-contained page per run / pipeline, built from the files the run wrote."""
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from drmix.report.html import render_report, sub_runs, write_report


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: dict[str, int] = {}
        self.refs: list[str] = []  # every src= / href=
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.refs += [v for k, v in attrs if k in ("src", "href") and v is not None]

    def handle_data(self, data):
        self.text.append(data)


def _jsonl(path: Path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_run(root: Path, *, steps: int = 20, strategy: bool = True) -> Path:
    root.mkdir(parents=True)
    (root / "config.yaml").write_text("model: /models/base\nmax_steps: 20\nstrategy: tdro\n")
    rows = []
    for s in range(2, steps + 1, 2):
        rows.append({"step": s, "loss": 2.0 / s, "raw_loss": 2.1 / s, "lr": 1e-5 * s / steps, "samples_per_s": 50.0,
                     "collection_losses": {"alpha": 1.0 / s, "beta": 3.0 / s}})
        if s % 10 == 0:
            rows.append({"step": s, "eval": {"scifact/ndcg@10": 0.3 + s / 100, "avg/ndcg@10": 0.3 + s / 100}})
    _jsonl(root / "metrics.jsonl", rows)
    if strategy:
        _jsonl(root / "weights.jsonl", [{"step": s, "weights": {"alpha": 0.5 - s / 100, "beta": 0.5 + s / 100}}
                                        for s in range(1, steps + 1)])
        (root / "weights.json").write_text(json.dumps({"strategy": "tdro", "collections": ["alpha", "beta"],
                                                       "weights": [0.3, 0.7]}))
    (root / "eval.md").write_text("| dataset | ndcg@10 |\n|---|---:|\n| scifact | 0.6123 |\n")
    (root / "model").mkdir()
    (root / "model" / "modules.json").write_text("[]")
    (root / "checkpoints" / "step-20").mkdir(parents=True)
    return root


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def test_run_report_is_self_contained_and_shows_every_section(tmp_path):
    run = make_run(tmp_path / "run")
    path = write_report(run)
    assert path == run / "report.html"
    page = _parse(path.read_text(encoding="utf-8"))
    text = " ".join(page.text)
    # figures are inline SVG: loss/lr/throughput, per-collection losses, evaluation, weights
    assert page.tags.get("svg", 0) == 4 and page.tags.get("img", 0) == 0 and page.tags.get("script", 0) == 0
    assert not [r for r in page.refs if "://" in r or r.startswith("//")]  # nothing from the network
    for heading in ("Configuration", "Training curves", "Evaluation during training", "Mixture weights", "Results",
                    "Files"):
        assert heading in text
    assert "strategy: tdro" in text  # the configuration
    assert "0.6123" in text  # eval.md rendered as a table
    assert "0.7000" in text  # final weight of beta
    # links to every artefact, relative, and each resolves
    for name in ("config.yaml", "metrics.jsonl", "weights.json", "weights.jsonl", "eval.md", "model/",
                 "model/modules.json", "checkpoints/step-20/"):
        assert name in page.refs, name
    for ref in page.refs:
        if not ref.startswith("#"):
            assert (run / ref).exists(), ref


def test_sections_follow_the_records(tmp_path):
    run = make_run(tmp_path / "run", strategy=False)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    _jsonl(run / "metrics.jsonl", [{k: v for k, v in r.items() if k != "collection_losses"} for r in lines
                                   if "eval" not in r])
    text = render_report(run)
    assert "Mixture weights" not in text and "Evaluation during training" not in text
    assert "per-collection" not in text
    assert _parse(text).tags.get("svg", 0) == 1


def test_pipeline_report_holds_each_stage(tmp_path):
    root = tmp_path / "pipe"
    root.mkdir()
    (root / "pipeline.yaml").write_text("strategy: tdro\n")
    (root / "summary.md").write_text("| model | avg |\n|---|---:|\n| uniform | 0.41 |\n| top:0.7 | 0.44 |\n")
    for stage in ("stage0-reference", "stage1-tdro", "stage2-top0.7"):
        make_run(root / stage)
    write_report(root / "stage1-tdro")
    assert [p.name for p in sub_runs(root)] == ["stage0-reference", "stage1-tdro", "stage2-top0.7"]
    page = _parse(write_report(root).read_text(encoding="utf-8"))
    text = " ".join(page.text)
    assert "pipeline.yaml" in text and "0.44" in text
    assert "stage1-tdro/report.html" in page.refs  # a stage's own report is linked when it exists
    assert page.tags.get("svg", 0) == 3 * 4


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path):
    """Screenshot at 1280 px in a real browser (Debian's chromium); every figure has a size on the page."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    run = make_run(tmp_path / "run")
    path = write_report(run)
    shot = tmp_path / "report.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2400"]
    subprocess.run([*common, f"--screenshot={shot}", path.as_uri()], check=True, capture_output=True, timeout=120)
    from PIL import Image

    img = Image.open(shot)
    assert img.size == (1280, 2400)
    colours = img.convert("L").getextrema()
    assert colours[0] < 80 and colours[1] > 200  # dark text and curves on a light page, not a blank frame
    # the DOM after layout: the SVGs are there and nothing failed to load
    dom = subprocess.run([*common, "--dump-dom", path.as_uri()], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    assert dom.count("<svg") == 4 and "<img" not in dom
    if os.environ.get("DRMIX_SCREENSHOT"):  # a copy for a person to look at
        shutil.copy(shot, os.environ["DRMIX_SCREENSHOT"])


def test_weights_over_clusters_are_plotted_by_their_own_names(tmp_path):
    # iDRO's trajectory holds cluster weights while weights.json names the collections: plot the clusters
    run = make_run(tmp_path / "run", strategy=False)
    _jsonl(run / "weights.jsonl", [{"step": s, "weights": {"cluster0": 0.01, "cluster1": 0.99}} for s in (1, 2)])
    (run / "weights.json").write_text(json.dumps({"strategy": "idro", "collections": ["alpha", "beta"],
                                                  "weights": [0.5, 0.5]}))
    text = render_report(run)
    assert "<!-- cluster1 -->" in text and "<!-- cluster0 -->" in text  # matplotlib writes each label as a comment


def test_a_summary_headline_and_its_png_figures_open_the_page(tmp_path):
    """A recipe's summary.json ``headline`` (escaped) and ``figures`` (PNG files of the folder, embedded as data
    URIs) come first; a figure that is no plain PNG file of the folder is left out."""
    import base64

    root = tmp_path / "adapt"
    root.mkdir()
    png = b"\x89PNG\r\n\x1a\n" + b"0" * 16
    (root / "candidates.png").write_bytes(png)
    (root / "summary.json").write_text(json.dumps({
        "headline": "The adapted model <b>wins</b> by +0.018.",
        "figures": [{"file": "candidates.png", "caption": "dev against test"}, {"file": "../x.png"},
                    {"file": "missing.png"}, {"file": "summary.json"}]}))
    text = render_report(root)
    assert "<p class='headline'>The adapted model &lt;b&gt;wins&lt;/b&gt; by +0.018.</p>" in text
    assert text.count("<img ") == 1 and f"data:image/png;base64,{base64.b64encode(png).decode()}" in text
    assert text.index("headline") < text.index("id='config'") and "dev against test (candidates.png)" in text
    (root / "summary.json").write_text("[1, 2]")                       # not a recipe's summary: nothing added
    assert "class='headline'" not in render_report(root) and "<img " not in render_report(root)


@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 390])
def test_a_recipes_headline_and_png_figure_render_in_headless_chromium(tmp_path, width):
    """The sentence and the embedded PNG at a desktop and a phone width: the image is decoded and scaled to fit
    the page (no horizontal overflow)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from drmix.recipes.adapt.figure import plot_candidates

    root = tmp_path / "adapt"
    root.mkdir()
    plot_candidates({"uniform": 0.5, "size": 0.6, "infdds+synthetic": 0.55},
                    {"uniform": 0.3, "size": 0.34, "infdds+synthetic": 0.31}, "size", root / "candidates.png")
    (root / "summary.json").write_text(json.dumps({"headline": "The adapted model (size) beats uniform fine-tuning "
                                                               "by +0.040 nDCG@10.",
                                                   "figures": [{"file": "candidates.png", "caption": "dev vs test"}]}))
    path = write_report(root)
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--window-size={width},1600"]
    probe = ("<script>document.title=[document.querySelector('img').naturalWidth,"
             "document.querySelector('img').getBoundingClientRect().right<=innerWidth,"
             "document.documentElement.scrollWidth<=innerWidth].join(',')</script>")
    page = tmp_path / "probe.html"
    page.write_text(path.read_text().replace("</main>", "</main>" + probe))
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    natural, fits, no_overflow = dom.split("<title>")[1].split("</title>")[0].split(",")
    assert int(natural) > 300 and fits == "true" and no_overflow == "true"
    assert "beats uniform fine-tuning by +0.040" in dom
