"""benchmarks/bench_adapt.py: the report's figures from hand-made per-query scores."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_adapt as ba  # noqa: E402


def _seed(adapted_gain: float, coco_gain: float, chosen: str) -> dict:
    base = {"scifact": {"a": 0.5, "b": 0.3}, "nfcorpus": {"c": 0.2, "d": 0.4}}

    def plus(g: float) -> dict:
        return {d: {q: v + g for q, v in qs.items()} for d, qs in base.items()}

    return {"per_query": {ba.BASE: plus(-0.1), ba.UNIFORM: plus(0.0), ba.COCO_UNIFORM: plus(coco_gain),
                          f"adapted ({chosen})": plus(adapted_gain)},
            "selected": chosen, "kendall": {"tau": 0.5, "p": 0.3, "candidates": 3},
            "selection_average": {"uniform": 0.6, "uniform+synthetic": 0.7, "infdds+synthetic": 0.65},
            "labelled": {c: {"scifact": {"ndcg@10": 0.4}, "nfcorpus": {"ndcg@10": 0.3}}
                         for c in ("uniform", "uniform+synthetic", "infdds+synthetic")},
            "synthetic": {"scifact": {"generated": {"crop": 10}, "filtered": {"crop": 2}, "kept": {"crop": 8},
                                      "queries": {"train": 4, "dev": 2, "test": 2}}}}


def test_report_rows_by_hand():
    results = {0: _seed(0.02, 0.01, "uniform+synthetic"), 1: _seed(0.04, 0.01, "infdds+synthetic")}
    text = ba.report(SimpleNamespace(preset="medium"), [0, 1], results)
    lines = text.splitlines()
    row = next(x for x in lines if x.startswith("| adapted vs uniform fine-tuning |"))
    # every query gains 0.02 (seed 0) and 0.04 (seed 1): +0.03 averaged over seeds, (almost) no spread
    assert row.startswith("| adapted vs uniform fine-tuning | 4 | +0.0300 | [+0.0300, +0.0300] | ")
    assert "| +0.0200 / +0.0400 |" in row
    row = next(x for x in lines if x.startswith("| adapted vs COCO → uniform |"))
    assert "| +0.0200 |" in row
    uniform = next(x for x in lines if x.startswith("| uniform fine-tuning |"))
    assert uniform.startswith("| uniform fine-tuning | 0.4000 | 0.3000 | 0.3500 | 0.3500 / 0.3500 |")
    assert "| 1 | infdds+synthetic | +0.500 (p 0.3, 3) | 0.6500 / 0.6000 |" in lines
    assert "| uniform+synthetic | 0.7000 | 0.3500 |" in lines
    assert "| scifact | 10 | 2 | 8 | 4 / 2 / 2 |" in lines
    assert text == ba.report(SimpleNamespace(preset="medium"), [0, 1], results)       # deterministic


def test_no_target_training_collection_is_built(tmp_path, shared_data):
    paths = ba.build_sources(shared_data, tmp_path / "c", max_per_collection=20)
    assert [Path(p).stem for p in paths] == list(ba.SOURCES)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(f"{s}.jsonl" for s in ba.SOURCES)
    with pytest.raises(StopIteration):
        next(p for p in paths if "scifact" in p or "nfcorpus" in p)


FIXTURE = Path(__file__).parent / "fixtures" / "adapt-cpu-results.json"


def _seed_folders(out: Path, seed: str, stored: dict) -> None:
    """A finished seed as seed_result reads it: summary.json (the model paths under ``out``) and each report
    model's eval-test.json beside its model folder (the base model's in eval/base)."""
    import json

    root = out / f"seed{seed}"
    models = {}
    for i, label in enumerate(stored["summary"]["models"]):
        folder = root / "eval" / "base" if label == ba.BASE else root / f"m{i}"
        models[label] = str(folder / "model")
        folder.mkdir(parents=True)
        (folder / "eval-test.json").write_text(json.dumps({"per_query": stored["eval_test"][label]}),
                                               encoding="utf-8")
    (root / "summary.json").write_text(json.dumps({**stored["summary"], "models": models}), encoding="utf-8")


def test_the_docs_table_is_what_report_only_prints_from_its_stored_results(tmp_path, capsys):
    """The stored results of docs/adapt.md's measured run (per seed: the summary fields and the per-query
    labelled nDCG@10 of the report's models): --report-only prints the docs' block byte for byte."""
    import json

    stored = json.loads(FIXTURE.read_text(encoding="utf-8"))
    seeds = sorted(stored["seeds"], key=int)
    assert len(seeds) >= 3
    for s in seeds:
        _seed_folders(tmp_path, s, stored["seeds"][s])
    assert ba.main(["--report-only", "--preset", stored["preset"], "--out", str(tmp_path), "--seeds", *seeds]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"Preset `{stored['preset']}`, seeds [{', '.join(seeds)}];")
    assert printed.count("| adapted vs uniform fine-tuning | ") == 1
    docs = (Path(__file__).resolve().parents[2] / "docs" / "adapt.md").read_text(encoding="utf-8")
    assert printed.rstrip("\n") in docs
