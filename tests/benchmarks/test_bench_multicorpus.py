"""benchmarks/bench_multicorpus.py: presets fine-tune the full encoder with `drmix train`; the bar's statistics."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from drmix.config import TrainConfig
from drmix.evaluation.multi import LABEL_FREE_ROW, SweepResult

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_multicorpus as bm  # noqa: E402


def test_cpu_preset_fine_tunes_with_drmix_train_three_seeds_one_thread():
    a = bm.parse_args([])
    assert (a.steps, a.batch_size, a.learning_rate, a.query_max_length, a.doc_max_length, a.threads) == \
        (50, 32, 5e-5, 32, 48, 1)
    assert a.seed_list == [0, 1, 2] and a.model is None
    g = bm.parse_args(["--preset", "gpu", "--steps", "7"])
    assert (g.steps, g.batch_size, g.seed_list) == (7, 128, [0, 1, 2, 3, 4])
    with pytest.raises(SystemExit):          # the frozen-encoder adapter is gone
        bm.parse_args(["--finetune", "adapter"])


def test_train_command_is_the_users_drmix_train_line(tmp_path):
    a = bm.parse_args(["--steps", "150"])
    cmd = bm.train_command(Path("t/walmart.jsonl"), Path("m/run"), 2, a)
    assert cmd == ["drmix", "train", "--data", "t/walmart.jsonl", "--output-dir", "m/run", "--max-steps", "150",
                   "--batch-size", "32", "--learning-rate", "5e-05", "--num-negatives", "0",
                   "--query-max-length", "32", "--doc-max-length", "48", "--seed", "2", "--save-every", "150",
                   "--keep-checkpoints", "1", "--no-show-progress"]
    b = bm.parse_args(["--model", "base/st"])
    assert bm.train_command(Path("x.jsonl"), Path("o"), 0, b)[2:4] == ["--model", "base/st"]


def test_finetune_runs_drmix_train_on_every_weight_and_reuses_the_model(tiny_model_path, tmp_path, monkeypatch):
    import torch

    from drmix.cli import main

    data = tmp_path / "known.jsonl"
    data.write_text("".join(json.dumps({"query": f"title {i}", "positive": f"brand: b{i}; price: {i}"}) + "\n"
                            for i in range(8)))
    calls = []

    def run_in_process(cmd, check, env):      # the subprocess, run in this process: same argv, same CLI
        calls.append((cmd, env))
        assert cmd[1:4] == ["-m", "drmix", "train"] and check
        with pytest.raises(SystemExit) as e:
            main(cmd[3:])
        assert e.value.code == 0

    monkeypatch.setattr(bm.subprocess, "run", run_in_process)
    args = bm.parse_args(["--model", tiny_model_path, "--steps", "2", "--batch-size", "4"])
    model, took = bm.finetune(data, tmp_path / "run", 1, args)
    assert model == tmp_path / "run" / "model" and (model / "config.json").exists() and took is not None
    assert calls[0][1]["OMP_NUM_THREADS"] == "1"
    saved = TrainConfig.flatten(yaml.safe_load((tmp_path / "run" / "config.yaml").read_text()))
    assert (saved["model"], saved["max_steps"], saved["batch_size"], saved["learning_rate"], saved["seed"],
            saved["num_negatives"], saved["query_max_length"], saved["doc_max_length"]) == \
        (tiny_model_path, 2, 4, 5e-5, 1, 0, 32, 48)
    # every encoder weight moved (full fine-tuning, not a layer on a frozen encoder)
    from safetensors.torch import load_file

    def weights(folder):
        f = next(Path(folder).rglob("model.safetensors"))
        return load_file(str(f))

    before, after = weights(tiny_model_path), weights(model)
    moved = [k for k in before if k in after and not torch.equal(before[k], after[k])]
    assert any("encoder.layer.0" in k for k in moved) and any("embeddings" in k for k in moved)
    assert bm.finetune(data, tmp_path / "run", 1, args) == (model, None) and len(calls) == 1


def _run(recalls: dict[str, float], chosen: str) -> SweepResult:
    r = SweepResult("s", 10)
    for lab, v in recalls.items():
        r.rows[lab] = {"pc_recall@10": v, "pc_mrr@10": 0.0, "spec": lab}
    r.chosen = {"label-free": chosen}
    return r


def test_compare_reports_the_bar_and_the_papers_comparison():
    labs = ["naive", "fixed:0.0", "fixed:0.5", "fixed:1", "fixed (dev-tuned)", LABEL_FREE_ROW, "oracle", "equal"]
    runs = [_run(dict(zip(labs, [0.30, 0.20, 0.50, 0.40, 0.50, 0.46, 0.60, 0.50])), "calibrated"),
            _run(dict(zip(labs, [0.32, 0.20, 0.48, 0.52, 0.48, 0.50, 0.64, 0.48])), "zscore")]
    runs[0].rows[LABEL_FREE_ROW]["pc_mrr@10"] = 0.1   # MRR: label-free 0.05 above equal on average
    # per-query credit: two queries per seed; label-free - fixed:0.5 per query (mean over seeds): -0.25, +0.25
    pq = [{lab: {"q1": 0.5, "q2": 0.5} for lab in labs} for _ in runs]
    pq[0][LABEL_FREE_ROW] = {"q1": 0.0, "q2": 1.0}
    pq[1][LABEL_FREE_ROW] = {"q1": 0.5, "q2": 0.5}
    s = bm.compare(runs, pq, 10)
    # fixed:0.5 and fixed:1 both average 0.49 (x100 = 49): the tie goes to the earlier listed fraction
    assert s["best_fixed_on_test"] == "fixed:0.5"
    d = s["labelfree_minus_best_fixed_on_test"]
    assert d["per_seed"] == pytest.approx([-4.0, 2.0]) and d["mean"] == pytest.approx(-1.0)
    assert d["ci95"] == pytest.approx(12.706204736174704 * math.sqrt(18) / math.sqrt(2))
    assert d["wilcoxon_p"] == pytest.approx(1.0)     # +-0.25: symmetric
    assert s["bar_met"] is False
    assert s["equal_minus_naive"]["mean"] == pytest.approx(18.0)
    assert s["oracle_gap_closed"] == pytest.approx(-1.0 / 13.0)     # (-1) / (62 - 49)
    assert s["labelfree_minus_equal_mrr"]["mean"] == pytest.approx(0.05) and s["mrr_not_below_equal"]
    assert s["oracle_minus_best_fixed"]["per_seed"] == pytest.approx([10.0, 16.0])
    assert s["rows"]["oracle"]["mean"] == pytest.approx(62.0)
    runs[0].rows[LABEL_FREE_ROW]["pc_recall@10"] = 0.52     # mean 0.51 >= 0.49
    assert bm.compare(runs, pq, 10)["bar_met"] is True


def test_simplex_specs_cover_every_split_of_three_corpora():
    specs = bm.simplex_specs(["naive", "fixed:0.0..1.0", "confidence:0.1", "equal", "oracle"], 3)
    fixed = [s for s in specs if s.startswith("fixed:")]
    assert len(fixed) == 66 and "fixed:1,0,0" in fixed and "fixed:0.3,0.3,0.4" in fixed
    assert specs[0] == "naive" and specs[-2:] == ["equal", "oracle"] and "confidence:0.1" not in specs


def _row(recall, mrr):
    return {"pc_recall@10": recall, "pc_mrr@10": mrr}


def test_page_table_prints_the_federated_table_in_the_pages_layout(tmp_path):
    """docs/multicorpus.md's table is what --page-table prints from a run's results.json."""
    from drmix.evaluation.multi import load_sweep_json, write_sweep

    a = SweepResult("W-A, walmart known", 10, {
        "naive": _row(0.5142, 0.282), "fixed:0.4": _row(0.59, 0.29), "fixed:0.5": _row(0.5973, 0.295),
        "equal": _row(0.5973, 0.295), "coverage": _row(0.62114, 0.3731), "fixed (dev-tuned)": _row(0.5961, 0.293),
        LABEL_FREE_ROW: _row(0.62108, 0.3729), "oracle": _row(0.6687, 0.297)},
        chosen={"fixed": "fixed:0.4/fixed:0.5/fixed:0.4", "label-free": "coverage/coverage/coverage"})
    b = SweepResult("three corpora", 10, {"naive": _row(0.3589, 0.241), "oracle": _row(0.3927, 0.245)})
    expected = (
        "| policy | W-A, walmart known | three corpora |\n"
        "| --- | --- | --- |\n"
        "| naive | 51.42 / 0.282 | **35.89** / 0.241 |\n"
        "| equal (= fixed 0.5 for two) | 59.73 / 0.295 | – |\n"
        "| coverage | **62.11** / 0.373 | – |\n"
        "| best fixed on test (chosen with test labels) | 59.73 / 0.295 (0.5) | – |\n"
        "| fixed, dev-tuned | 59.61 / 0.293 (0.4, 0.5, 0.4) | – |\n"
        "| label-free, dev-chosen | **62.11** / 0.373 (coverage ×3) | – |\n"
        "| oracle | 66.87 / 0.297 | 39.27 / 0.245 |\n")
    assert bm.page_table([a, b]) == expected
    write_sweep([a, b], tmp_path / "results", plot_top=0)
    assert bm.page_table(load_sweep_json(tmp_path / "results" / "results.json")) == expected


def test_page_table_option_reads_an_earlier_runs_results(tmp_path, capsys):
    from drmix.evaluation.multi import write_sweep

    r = SweepResult("A-G, google known", 10, {"naive": _row(0.1614, 0.077), "oracle": _row(0.1947, 0.08)})
    write_sweep([r], tmp_path / "results", plot_top=0)
    assert bm.main(["--out", str(tmp_path), "--page-table"]) == 0
    assert capsys.readouterr().out == bm.page_table([r])


def test_candidates_are_made_again_for_a_corpus_changed_in_place(tmp_path, monkeypatch):
    import argparse

    import numpy as np

    import drmix.model.encoder as encoder
    from drmix.retrieval.multi import CandidateSet, CorpusCandidates

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    made = []

    class Retriever:
        indexes = {}

        @classmethod
        def from_dirs(cls, model, dirs, **kw):
            made.append(dict(dirs))
            return cls()

        def candidates(self, queries, k):
            return CandidateSet(["a"], {q: {"a": CorpusCandidates(["d1"], np.array([0.5]))} for q in queries})

    monkeypatch.setattr(bm, "MultiCorpusRetriever", Retriever)
    monkeypatch.setattr(encoder, "load_encoder", lambda path: object())
    corpus = tmp_path / "a"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n')
    man = {"corpus_dirs": {"a": str(corpus)}}
    queries = {"test": {"q1": "x"}, "dev": {"q2": "y"}}
    args = argparse.Namespace(depth=10, k=10, doc_max_length=48, encode_batch_size=8)
    cache = tmp_path / "cset.json"
    first, _ = bm.candidates(None, man, queries, args, cache)
    again, enc = bm.candidates(None, man, queries, args, cache)
    assert len(made) == 1 and enc is None and list(again["test"].by_query) == ["q1"]
    (corpus / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n{"_id": "d2", "text": "z"}\n')
    bm.candidates(None, man, queries, args, cache)
    assert len(made) == 2
    bm.candidates(None, man, queries, argparse.Namespace(depth=20, k=10, doc_max_length=48, encode_batch_size=8),
                  cache)
    assert len(made) == 3


FIXTURES = Path(__file__).parent / "fixtures"
AG_FIXTURE = FIXTURES / "multicorpus-amazon-google-untrained-results.json"
WA3_FIXTURE = FIXTURES / "multicorpus-walmart-three-untrained-results.json"
FT_FIXTURES = [FIXTURES / f"multicorpus-finetuned-{n}-results.json" for n in ("google-walmart-known", "amazon-known")]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "multicorpus.md"


def page_table_of(fixture: Path, out: Path, capsys) -> str:
    """What ``--page-table`` prints from a stored ``results.json``."""
    import shutil

    (out / "results").mkdir(parents=True)
    shutil.copy(fixture, out / "results" / "results.json")
    assert bm.main(["--out", str(out), "--page-table"]) == 0
    return capsys.readouterr().out


def test_the_untrained_amazon_google_table_of_the_docs_is_what_page_table_prints(tmp_path, capsys):
    """docs/multicorpus.md's re-printed Amazon-Google table is --page-table's output from the stored results."""
    printed = page_table_of(AG_FIXTURE, tmp_path, capsys)
    assert printed.count("\n") == 15 and "| crcs | 13.04 / 0.056 | 13.09 / 0.056 |" in printed
    assert printed in DOCS.read_text(encoding="utf-8")


def test_the_untrained_walmart_and_three_corpus_tables_of_the_docs_are_what_page_table_prints(tmp_path, capsys):
    """docs/multicorpus.md's re-printed Walmart-Amazon and three-corpus table is --page-table's output from the
    stored results."""
    printed = page_table_of(WA3_FIXTURE, tmp_path, capsys)
    assert printed.count("\n") == 15 and "| zscore | 41.70 / 0.231 | 41.70 / 0.231 | 27.88 / 0.169 |" in printed
    assert printed in DOCS.read_text(encoding="utf-8")


def test_the_fine_tuned_tables_of_the_docs_are_what_page_table_prints(tmp_path, capsys):
    """docs/multicorpus.md's two re-printed fine-tuned tables are --page-table's output from the stored results."""
    docs = DOCS.read_text(encoding="utf-8")
    for i, fixture in enumerate(FT_FIXTURES):
        printed = page_table_of(fixture, tmp_path / str(i), capsys)
        assert printed.count("\n") == 15 and "fine-tuned (3 seeds)" in printed.splitlines()[0]
        assert printed in docs
