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


def _beir(root: Path, split_queries: dict[str, list[str]]) -> None:
    """A tiny BEIR folder: four documents, each query judging the document of its number."""
    import json

    root.mkdir(parents=True)
    docs = ["cells divide by mitosis", "vitamin d and bone health", "statins lower cholesterol",
            "sleep and memory consolidation"]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                                               for i, t in enumerate(docs)), encoding="utf-8")
    rows, qrels = [], root / "qrels"
    qrels.mkdir()
    for split, texts in split_queries.items():
        lines = ["query-id\tcorpus-id\tscore"]
        for i, text in enumerate(texts):
            rows.append(json.dumps({"_id": f"{split}{i}", "text": text}))
            lines.append(f"{split}{i}\td{i}\t1")
        (qrels / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "queries.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_the_in_domain_collections_are_the_targets_train_splits_only(tmp_path):
    for t in ba.TARGETS:
        _beir(tmp_path / "data" / t, {"train": ["how do cells divide", "is vitamin d good for bones"],
                                      "test": ["do statins lower cholesterol", "does sleep help memory"]})
    paths = ba.build_target_train(tmp_path / "data", tmp_path / "c")
    assert [Path(p).name for p in paths] == ["scifact-train.jsonl", "nfcorpus-train.jsonl"]
    import json

    rows = [json.loads(x) for x in Path(paths[0]).read_text(encoding="utf-8").splitlines()]
    assert sorted(r["query"] for r in rows) == ["how do cells divide", "is vitamin d good for bones"]
    assert {r["query"]: r["positive"] for r in rows}["how do cells divide"] == ["cells divide by mitosis"]


def test_in_domain_arm_adds_the_train_collections_and_the_llm_arm_the_packaged_llm(tmp_path):
    args = SimpleNamespace(data=tmp_path / "data", out=tmp_path / "out")
    p = ba.PRESETS["cpu"]
    plain = ba.config_for(args, p, 1, None, ["a.jsonl"])
    dom = ba.config_for(args, p, 1, None, ["a.jsonl", "scifact-train.jsonl"], "in-domain")
    llm = ba.config_for(args, p, 1, None, ["a.jsonl"], "llm")
    assert plain.run.output_dir == str(tmp_path / "out" / "seed1")
    assert dom.run.output_dir == str(tmp_path / "out" / "in-domain" / "seed1")
    assert llm.run.output_dir == str(tmp_path / "out" / "llm" / "seed1")
    assert dom.data.collections == ["a.jsonl", "scifact-train.jsonl"]
    assert (plain.synthetic.llm, llm.synthetic.llm) == (None, "smollm2")
    assert dom.optim.max_steps == plain.optim.max_steps == llm.optim.max_steps == 40
    # the cpu preset asks the LLM for 16 documents a corpus; the gpu preset keeps the recipe's 200
    assert llm.synthetic.generate_max_docs == 16
    assert ba.config_for(args, ba.PRESETS["gpu"], 1, None, ["a.jsonl"], "llm").synthetic.generate_max_docs == 200


def _runs(gains: list[float], per_target: int = 2) -> list[dict]:
    """Per seed, per target, per query: 0.2 plus the seed's gain (one number a seed)."""
    return [{d: {f"q{i}": 0.2 + g for i in range(per_target)} for d in ba.TARGETS} for g in gains]


def test_share_of_gain_by_hand():
    b, m, c = ({"q0": 0.2, "q1": 0.2}, {"q0": 0.3, "q1": 0.5}, {"q0": 0.4, "q1": 0.6})
    g = ba.gain_bootstrap([b], [m], [c])
    # adapted - base: +0.1 / +0.3 (mean 0.2); in-domain - base: +0.2 / +0.4 (mean 0.3): share 2/3. A resample of two
    # queries is (q0, q0) 1/2, (q1, q1) 3/4 or one of each 2/3: the interval's ends are 50% and 75%
    assert g["share"] == pytest.approx(2 / 3)
    assert g["interval"] == pytest.approx((0.5, 0.75))
    assert g["ceiling_interval"] == pytest.approx((0.2, 0.4))
    assert ba._share_cell(g) == "67% [50%, 75%]"
    # constant gains: 0.1 of 0.2 in every query and seed
    g = ba.gain_bootstrap([b, b], [{"q0": 0.3, "q1": 0.3}] * 2, [{"q0": 0.4, "q1": 0.4}] * 2)
    assert (g["share"], g["seeds"]) == (pytest.approx(0.5), 2)
    assert g["interval"] == pytest.approx((0.5, 0.5))


def test_share_of_gain_resamples_seeds_too():
    b = {"q0": 0.2}
    # one query: the spread is the seeds' (shares 1/4 and 3/4 of a 0.4 ceiling gain; the pair's mean is 1/2)
    g = ba.gain_bootstrap([b, b], [{"q0": 0.3}, {"q0": 0.5}], [{"q0": 0.6}, {"q0": 0.6}])
    assert g["share"] == pytest.approx(0.5)
    assert g["interval"] == pytest.approx((0.25, 0.75))


def test_share_of_gain_is_na_when_there_is_no_gain_to_recover():
    b, m = {"q0": 0.2, "q1": 0.2}, {"q0": 0.3, "q1": 0.3}
    g = ba.gain_bootstrap([b], [m], [b])
    assert g["share"] is None
    assert ba._share_cell(g) == "n/a (the ceiling is not above the base model)"
    # in-domain +0.3 / -0.1: a mean gain of +0.1 whose interval reaches -0.1
    g = ba.gain_bootstrap([b], [m], [{"q0": 0.5, "q1": 0.1}])
    assert g["share"] is None and g["ceiling_gain"] == pytest.approx(0.1)
    assert ba._share_cell(g) == "n/a (the ceiling's gain has an interval reaching 0: no gain to recover)"


def _arm(per_query: dict, chosen: str, synthetic: dict | None = None) -> dict:
    return {"per_query": per_query, "selected": chosen, "synthetic": synthetic or {}}


def test_arms_report_rows_by_hand():
    base, plain, dom, dom_adapt = _runs([0.0, 0.0]), _runs([0.05, 0.15]), _runs([0.2, 0.2]), _runs([0.25, 0.3])
    arms = {"adapt": {s: _arm({ba.BASE: base[s], "adapted (uniform+synthetic)": plain[s]}, "uniform+synthetic")
                      for s in (0, 1)},
            "in-domain": {s: _arm({ba.UNIFORM: dom[s], "adapted (infdds+synthetic)": dom_adapt[s]}, "infdds+synthetic")
                          for s in (0, 1)}}
    lines = ba.arms_report([0, 1, 2], arms).splitlines()
    assert lines[1].startswith("In-domain ceiling, seeds [0, 1]:")
    assert "| in-domain fine-tuning | 0.4000 | 0.4000 | 0.4000 | 0.4000 / 0.4000 |" in lines
    assert "| in-domain + adapt's stages | 0.4750 | 0.4750 | 0.4750 | 0.4500 / 0.5000 |" in lines
    # adapted gains +0.05 / +0.15 of +0.2 (shares 25% / 75%, mean 50%); a seed resample of (0, 0) gives 25%
    row = next(x for x in lines if x.startswith(f"| {ba.IN_DOMAIN} | pooled |"))
    assert row.endswith("| 4 | +0.1000 | +0.2000 [+0.2000, +0.2000] | 50% [25%, 75%] | 25% / 75% |")
    assert next(x for x in lines if x.startswith(f"| {ba.IN_DOMAIN} | scifact |")).endswith(
        "| scifact | 2 | +0.1000 | +0.2000 [+0.2000, +0.2000] | 50% [25%, 75%] | 25% / 75% |")
    # against in-domain + adapt (+0.25 / +0.3): shares 20% / 50%, 0.1 / 0.275 = 36% pooled over the seeds
    row = next(x for x in lines if x.startswith(f"| {ba.IN_DOMAIN_ADAPT} | pooled |"))
    assert row.endswith("| 4 | +0.1000 | +0.2750 [+0.2500, +0.3000] | 36% [20%, 50%] | 20% / 50% |")
    row = next(x for x in lines if x.startswith("| in-domain + adapt's stages vs in-domain fine-tuning |"))
    assert row.startswith("| in-domain + adapt's stages vs in-domain fine-tuning | 4 | +0.0750 | ")
    assert "| +0.0500 / +0.1000 |" in row
    assert not any(x.startswith("LLM queries") for x in lines)
    assert ba.arms_report([0], {"adapt": arms["adapt"]}) == ""


def test_llm_rows_and_cost_by_hand():
    plain, llm = _runs([0.1]), _runs([0.13])
    st = {"scifact": {"generated": {"crop": 10, "generate": 180}, "kept": {"crop": 8, "generate": 90},
                      "llm": {"documents": 200, "answered": 200, "kept": 180, "llm_seconds": 50.0,
                              "failures": {"timeout": 2, "unparsable": 1}}}}
    arms = {"adapt": {0: _arm({"adapted (uniform)": plain[0]}, "uniform")},
            "llm": {0: _arm({"adapted (uniform+synthetic)": llm[0]}, "uniform+synthetic", st)}}
    lines = ba.arms_report([0], arms).splitlines()
    row = next(x for x in lines if x.startswith(f"| {ba.LLM} vs cropped sentences only |"))
    assert row.startswith(f"| {ba.LLM} vs cropped sentences only | 4 | +0.0300 | [+0.0300, +0.0300] | ")
    assert "| 0 | uniform | uniform+synthetic | 0.3000 / 0.3300 |" in lines
    assert "| 0 | scifact | 200 | 50.0 | 0.25 | 3 | 180 of 200 (90%) | 90 of 180 (50%) | 8 of 10 (80%) |" in lines


FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("adapt-*-results.json"))


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


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_the_docs_table_is_what_report_only_prints_from_its_stored_results(tmp_path, capsys, fixture):
    """The stored results of each of docs/adapt.md's measured runs (per arm and seed: the summary fields and
    the per-query labelled nDCG@10 of the report's models; written by --store): --report-only prints the docs'
    block byte for byte."""
    import json

    stored = json.loads(fixture.read_text(encoding="utf-8"))
    seeds = sorted(stored["seeds"], key=int)
    assert seeds
    for s in seeds:
        _seed_folders(tmp_path, s, stored["seeds"][s])
    for arm, by_seed in stored.get("arms", {}).items():
        for s, r in by_seed.items():
            _seed_folders(tmp_path / arm, s, r)
    assert ba.main(["--report-only", "--preset", stored["preset"], "--out", str(tmp_path), "--seeds", *seeds]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"Preset `{stored['preset']}`, seeds [{', '.join(seeds)}];")
    assert printed.count("| adapted vs uniform fine-tuning | ") == 1
    docs = (Path(__file__).resolve().parents[2] / "docs" / "adapt.md").read_text(encoding="utf-8")
    assert printed.rstrip("\n") in docs
    for arm in stored.get("arms", {}):
        assert {"in-domain": "In-domain ceiling, seeds", "llm": "LLM queries, seeds"}[arm] in printed
