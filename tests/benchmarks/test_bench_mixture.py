"""benchmarks/bench_mixture.py: the mined-negatives cache and the arm-vs-same-arm comparison (mined vs TF-IDF)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from drmix.augment import mine as mine_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_mixture as bm  # noqa: E402

# texts -> hand-made unit vectors, so every cosine is known exactly
_VEC = {
    "q1": [1.0, 0.0], "q2": [0.0, 1.0],
    "p1": [1.0, 0.0],                        # q1's positive, cos 1.0
    "p2": [0.6, 0.8],                        # q2's positive, cos 0.8
    "n_a": [0.98, 0.198997487],              # cos(q1)=0.98 (> 0.95 x 1.0: filtered for q1); cos(q2)=0.199
    "n_b": [0.8, 0.6],                       # cos(q1)=0.8, cos(q2)=0.6
    "n_c": [0.0, -1.0],                      # cos(q1)=0,   cos(q2)=-1
}


@pytest.fixture
def hand_embed(monkeypatch):
    calls = []

    def fake_embed(model, queries, docs, **kw):
        calls.append(len(queries))
        as_arr = lambda xs: np.array([_VEC[x] for x in xs], np.float32)  # noqa: E731
        return as_arr(queries), as_arr(docs)

    monkeypatch.setattr(mine_mod, "embed", fake_embed)
    return calls


def _write(path: Path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_mined_collections_replaces_negatives_and_caches(tmp_path, hand_embed):
    src = tmp_path / "collections"
    src.mkdir()
    _write(src / "c.jsonl", [{"query": "q1", "positive": "p1", "negatives": ["n_c"]},
                             {"query": "q2", "positive": "p2", "negatives": ["n_a"]}])
    cache = tmp_path / "mined"
    meta = bm.mined_collections(src, ["c"], cache, load_model=lambda: object())
    rows = [json.loads(x) for x in (cache / "c.jsonl").read_text().splitlines()]
    # the pool is the file's texts: p1, n_c, p2, n_a (the TF-IDF negatives are documents of the collection)
    # q1: p1 removed; n_a (0.98 > 0.95 x 1.0) filtered; next is q2's positive p2 (0.6), then n_c (0).
    # q2: p2 removed; limit 0.95 x 0.8 = 0.76; best remaining is n_a (0.199), above p1 (0) and n_c (-1).
    assert [r["negatives"] for r in rows] == [["p2"], ["n_a"]]
    assert rows[0]["mined"]["model"] == "all-MiniLM-L6-v2" and rows[0]["mined"]["ranks"] == "1:30"
    assert meta["c"]["queries"] == 2 and meta["c"]["filtered"] == 1 and meta["c"]["negatives"] == 2
    assert not (cache / "c.lock").exists()

    # cached: no model is loaded, nothing is embedded again
    def no_model():
        raise AssertionError("the cache should have been used")

    n_calls = len(hand_embed)
    again = bm.mined_collections(src, ["c"], cache, load_model=no_model)
    assert again["c"]["source_digest"] == meta["c"]["source_digest"] and len(hand_embed) == n_calls
    # a changed source is mined again
    _write(src / "c.jsonl", [{"query": "q1", "positive": "p1", "negatives": ["n_c"]}])
    third = bm.mined_collections(src, ["c"], cache, load_model=lambda: object())
    assert third["c"]["queries"] == 1 and len(hand_embed) == n_calls + 1


def test_lock_of_a_live_process_is_respected_and_a_dead_ones_taken_over(tmp_path):
    """The work-item lock is drmix's one lock (drmix.lock): pid and host, stale ones taken over."""
    import socket

    lock = tmp_path / "x.lock"
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    with pytest.raises(bm.Busy) as held:
        with bm._locked(tmp_path / "x"):                   # x.lock is held (by this process)
            pass
    assert held.value.owner["pid"] == os.getpid() and lock.exists()      # not released: it is not ours
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    with bm._locked(tmp_path / "x"):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def _arm(scores_by_seed):
    return {"arms": {"uniform": scores_by_seed, "x": scores_by_seed}, "weights": {}, "seconds": {}}


def test_versus_pairs_the_same_arm_over_common_seeds():
    # mined and tfidf share seeds 42, 43 (tfidf's 44 is ignored); seed-averaged per-query differences
    # are +0.1, +0.2, +0.3
    mined = {"a": _arm({"42": {"q1": 0.5, "q2": 0.6, "q3": 0.7}, "43": {"q1": 0.7, "q2": 0.8, "q3": 0.9}})}
    tfidf = {"a": _arm({"42": {"q1": 0.5, "q2": 0.5, "q3": 0.5}, "43": {"q1": 0.5, "q2": 0.5, "q3": 0.5},
                        "44": {"q1": 0.0, "q2": 0.0, "q3": 0.0}})}
    vs = bm.versus(mined, tfidf, ["x"], label="mined", other_label="tfidf")
    r = vs["arms"]["x"]["a"]
    assert r["seeds"] == 2 and r["queries"] == 3
    assert r["mean"] == pytest.approx(0.7) and r["other_mean"] == pytest.approx(0.5)
    assert r["delta"] == pytest.approx(0.2)
    # t = 0.2 / (0.1 / sqrt 3) = sqrt 12 with 2 df: p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(6/7)
    assert r["t_p"] == pytest.approx(1 - math.sqrt(6 / 7), rel=1e-6)
    # 8 sign patterns enumerated; only all-plus and all-minus reach |0.6|: p = 2/8
    assert r["fisher_p"] == pytest.approx(0.25)
    text = bm.versus_report(vs)
    assert "+0.2000" in text and "0.7000 / 0.5000 (n=2)" in text


def test_versus_report_sets_learned_weights_side_by_side():
    mined, tfidf = {"a": _arm({"42": {"q": 1.0}})}, {"a": _arm({"42": {"q": 0.5}})}
    mined["a"]["weights"] = {"tdro": {"weights": {"c1": 0.7, "c2": 0.3}, "top70": ["c1"]}}
    tfidf["a"]["weights"] = {"tdro": {"weights": {"c1": 0.4, "c2": 0.6}, "top70": ["c2"]}}
    text = bm.versus_report(bm.versus(mined, tfidf, ["x"]))
    assert "| c1 | 0.7000* | 0.4000 |" in text and "| c2 | 0.3000 | 0.6000* |" in text


def test_merge_keeps_existing_seeds_and_load_refuses_other_negatives(tmp_path):
    into = {"a": _arm({"42": {"q": 1.0}})}
    bm.merge_results(into, {"a": _arm({"42": {"q": 0.0}, "43": {"q": 0.5}})})
    assert into["a"]["arms"]["x"] == {"42": {"q": 1.0}, "43": {"q": 0.5}}
    (tmp_path / "results.json").write_text(json.dumps({"results": {}}))      # older runs: TF-IDF
    assert bm.load_results(tmp_path, "tfidf")["negatives"] == "tfidf"
    with pytest.raises(SystemExit, match="tfidf negatives"):
        bm.load_results(tmp_path, "mined")


def test_device_time_estimate_counts_each_model_once(capsys, tmp_path):
    """Hand count: seeds 42/43, steps 10 x batch 4 = 40 examples a model; stage 0 (the seed-42 uniform model,
    also tDRO's reference) once; stage 1 tdro 5 x 6 examples x 4/3 (reference forward); tdro:dev trains both
    transfers with seed 42 and one with seed 43; uniform seed 43; every scored model encodes the 3,633-document
    NFCorpus test corpus, plus two dev scorings (the dev corpus is the same 3,633 documents)."""
    import argparse

    from _lease import ENCODE_PASSAGES_PER_S, RUN_OVERHEAD_S, START_S

    args = argparse.Namespace(targets=["nfcorpus"], arms=["uniform", "tdro:dev"], seeds=[42, 43], stage1_seed=42,
                              steps=10, batch_size=4, stage1_steps=5, stage1_batch_size=6, test_docs=None,
                              coco={"max_steps": 1, "batch_size": 1})
    est = bm.estimate(args)
    samples = 40 + 5 * 6 * 4 / 3 + 40 * 3 + 40
    assert est.samples == pytest.approx(samples)
    assert est.runs == 6  # stage 0, stage 1, top:0.7 s42, reweight s42, top:0.7 s43, uniform s43
    assert est.passages == 3633 * 4 + 2 * 3633  # uniform s42, s43, the chosen tdro s42, s43; two dev scorings
    assert est.seconds(1000.0) == pytest.approx(START_S + samples / 1000 + est.passages / ENCODE_PASSAGES_PER_S
                                                + 6 * RUN_OVERHEAD_S)
    assert bm.main(["--preset", "gpu", "--estimate", "--targets", "nfcorpus", "--arms", "uniform",
                    "--work", str(tmp_path)]) == 0
    assert "estimated device time" in capsys.readouterr().out
    assert not (tmp_path / "results.json").exists()


def test_a_slice_without_uniform_reports_its_arms_and_merges_into_deltas(tmp_path):
    # an effect-suite slice such as `--arms size doremi:reweight` holds no uniform run: its table lists the arms
    # (per-seed means 0.4 and 0.6 -> 0.5) without a delta; merged with the uniform slice the delta appears
    size = {"t": {"arms": {"size": {"42": {"q1": 0.4, "q2": 0.4}, "43": {"q1": 0.6, "q2": 0.6}}},
                  "weights": {}, "seconds": {}}}
    alone = bm.summarise(size, ["uniform", "size"])
    assert alone["targets"] == ["t"] and "uniform" not in alone["arms"]
    assert alone["arms"]["size"]["t"]["mean"] == pytest.approx(0.5) and "delta" not in alone["arms"]["size"]["t"]
    assert "| size | 0.5000" in bm.report(alone, size)
    bm.merge_results(size, {"t": {"arms": {"uniform": {"42": {"q1": 0.3, "q2": 0.4}, "43": {"q1": 0.5, "q2": 0.6}}}}})
    merged = bm.summarise(size, ["uniform", "size"])["arms"]["size"]["t"]
    # seed-averaged per query: size 0.5, 0.5; uniform 0.4, 0.5 -> delta (0.1 + 0.0) / 2
    assert merged["delta"] == pytest.approx(0.05)
    with pytest.raises(SystemExit, match="holds no finished run"):
        bm.load_results(tmp_path / "absent", None)


def test_a_cached_score_is_reused_only_for_the_same_model_set_and_length(tmp_path, tiny_model_path, monkeypatch):
    import argparse
    import shutil

    import drmix.evaluation.evaluate as ev
    from drmix.data.beir import load_beir, write_beir
    from drmix.evaluation.evaluate import subsample

    words = ["cat", "dog", "bread", "rice", "saw", "axe"]
    root = write_beir(tmp_path / "beir", {f"d{i}": {"title": "", "text": f"the {w}"} for i, w in enumerate(words)},
                      {f"q{i}": w for i, w in enumerate(words)}, {"test": {f"q{i}": {f"d{i}": 1} for i in range(6)}})
    calls = []
    real = ev.evaluate_dataset
    monkeypatch.setattr(ev, "evaluate_dataset", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    model = tmp_path / "arm-s42" / "model"
    shutil.copytree(tiny_model_path, model)
    cache = model.parent / "test-nfcorpus.json"
    args = argparse.Namespace(doc_len=16)
    full = load_beir(root, "test")
    first = bm.evaluate(args, model, full, cache)
    assert set(first) == {f"q{i}" for i in range(6)} and len(calls) == 1
    assert bm.evaluate(args, model, full, cache) == first and len(calls) == 1       # the same: reused
    capped = subsample(full, max_queries=3, seed=0)
    assert len(bm.evaluate(args, model, capped, cache)) == 3 and len(calls) == 2   # another test cap
    bm.evaluate(argparse.Namespace(doc_len=8), model, capped, cache)
    assert len(calls) == 3                                                          # another length
    os.utime(model / "modules.json", ns=(1, 1))                   # touched, the same content: still reused
    bm.evaluate(argparse.Namespace(doc_len=8), model, capped, cache)
    assert len(calls) == 3
    (model / "README.md").write_text("saved again")                                 # the model saved again
    bm.evaluate(argparse.Namespace(doc_len=8), model, capped, cache)
    assert len(calls) == 4


def test_results_of_a_work_folder_are_reused_and_merged_only_under_the_same_settings(tmp_path):
    stored = {"args": {"steps": "300", "lr": "5e-05", "coco": "{'max_steps': 100}", "stage1_steps": "100"},
              "negatives": "tfidf", "results": {"nfcorpus": _arm({"42": {"q": 0.5}})}}
    (tmp_path / "results.json").write_text(json.dumps(stored))
    with pytest.raises(SystemExit, match=r"--steps 300 -> 8"):
        bm.main(["--preset", "medium", "--work", str(tmp_path), "--steps", "8", "--data", str(tmp_path)])
    # merging: settings the stored arms depend on must agree; a coco setting matters only to the coco arm
    other = tmp_path / "w2"
    other.mkdir()
    (other / "results.json").write_text(json.dumps({**stored, "args": {**stored["args"], "coco": "{'max_steps': 2}"}}))
    bm.main(["--report-only", "--work", str(tmp_path), "--merge", str(other), "--arms", "x"])
    (other / "results.json").write_text(json.dumps({**stored, "args": {**stored["args"], "lr": "0.001"}}))
    with pytest.raises(SystemExit, match=r"--lr 5e-05 / 0.001"):
        bm.main(["--report-only", "--work", str(tmp_path), "--merge", str(other), "--arms", "x"])
    assert bm.settings_of(["coco"])[-1] == "coco" and "stage1_steps" in bm.settings_of(["tdro:reweight"])


MEDIUM_ARMS = ["uniform", "tdro:top:0.7", "tdro:reweight", "tdro:dev", "infdds", "coco"]
FIXTURE = Path(__file__).parent / "fixtures" / "mixture-medium-results.json"


def test_the_medium_table_of_the_docs_is_what_report_only_prints_from_its_stored_results(tmp_path, capsys):
    """The stored results of docs/benchmarks.md's medium run (both workers' results.json, merged): the report
    printed from them holds the docs' table, per-seed line and stage-1 weights line byte for byte."""
    import shutil

    shutil.copy(FIXTURE, tmp_path / "results.json")
    bm.main(["--report-only", "--preset", "medium", "--work", str(tmp_path), "--arms", *MEDIUM_ARMS])
    printed = capsys.readouterr().out
    block = printed[printed.index("| model | nDCG@10 (95% CI over seeds) |"):].rstrip("\n")
    assert block.count("\n") == 11 and "| the 1-layer starting model, not fine-tuned | 0.2181 | | | |" in block
    docs = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert block in docs
    results = json.loads(FIXTURE.read_text())["results"]
    assert bm.seed_table(bm.summarise(results, MEDIUM_ARMS), results, "nfcorpus",
                         "the 1-layer starting model, not fine-tuned") == block



AUTHORS_ARMS = ["uniform", "tdro:top:0.7", "tdro:reweight", "tdro:dev", "tdro@prev:top:0.7", "tdro@prev:reweight",
                "tdro@prev:dev", "tdro:dev-temperature"]
AUTHORS_PAIRS = ["tdro:top:0.7=tdro@prev:top:0.7", "tdro:reweight=tdro@prev:reweight", "tdro:dev=tdro@prev:dev",
                 "tdro:dev-temperature=tdro@prev:dev"]
AUTHORS_FIXTURE = Path(__file__).parent / "fixtures" / "mixture-medium-authors-results.json"


def test_the_authors_stage1_medium_tables_of_the_docs_are_what_report_only_prints(tmp_path, capsys):
    """The stored results of docs/benchmarks.md's medium run with tDRO's stage 1 in the authors' setting (both
    workers' results.json, merged): the report printed from them holds the docs' stage-1 weights and selections,
    and the seed table, per-seed line, weights line and paired table, byte for byte."""
    import shutil

    shutil.copy(AUTHORS_FIXTURE, tmp_path / "results.json")
    bm.main(["--report-only", "--preset", "medium", "--work", str(tmp_path), "--arms", *AUTHORS_ARMS,
             "--pair", *AUTHORS_PAIRS])
    printed = capsys.readouterr().out
    weights = printed[printed.index("| collection | tDRO | tDRO@prev | tDRO@t05 |"):
                      printed.index("LOO nfcorpus, every arm against uniform:")].rstrip("\n")
    block = printed[printed.index("| model | nDCG@10 (95% CI over seeds) |"):].rstrip("\n")
    assert weights.count("\n") == 22 and block.count("\n") == 22
    assert "| tdro:top:0.7 | tdro@prev:top:0.7 | nfcorpus | 150 | 3 |" in block
    docs = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert weights in docs and block in docs
    results = json.loads(AUTHORS_FIXTURE.read_text())["results"]
    assert all(len(results["nfcorpus"]["arms"][a]) == 3 for a in AUTHORS_ARMS)     # every arm, 3 seeds
    assert bm.seed_table(bm.summarise(results, AUTHORS_ARMS), results, "nfcorpus",
                         "the 1-layer starting model, not fine-tuned") in block

def test_stage1_settings_and_the_pair_report():
    """``tdro@prev`` is drmix's earlier stage 1 (1 negative at 0.05, random fill), bare ``tdro`` the authors'
    (no overrides: stage1_config's 7 mined negatives at 0.002); --pair A=B pairs two arms over queries."""
    assert bm.stage1_setting("tdro") == ("tdro", {}, "mine")
    assert bm.stage1_setting("tdro@prev") == ("tdro", {"num_negatives": 1, "temperature": 0.05}, "random")
    assert bm.stage1_setting("tdro@t05") == ("tdro", {"temperature": 0.05}, "mine")
    with pytest.raises(SystemExit):
        bm.stage1_setting("tdro@bogus")
    # arm a beats arm b on every query by 0.1 (seed means); seed 44 only in a: left out
    qs = {f"q{i}": 0.1 * (i % 5) for i in range(20)}
    results = {"nfcorpus": {"arms": {
        "a": {"42": {q: v + 0.15 for q, v in qs.items()}, "43": {q: v + 0.05 for q, v in qs.items()},
              "44": {q: 9.0 for q in qs}},
        "b": {"42": dict(qs), "43": dict(qs)}}, "weights": {}, "seconds": {}}}
    text = bm.pair_report(results, ["a=b"])
    row = next(line for line in text.splitlines() if line.startswith("| a | b | nfcorpus |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:5] == ["20", "2"]                      # queries, seeds both ran
    assert float(cells[5]) == pytest.approx(0.3, abs=1e-4) and float(cells[6]) == pytest.approx(0.2, abs=1e-4)
    assert cells[7].startswith("+0.1000")


GPU_ARMS = ["uniform", "tdro:dev", "groupdro:reweight", "tdro:top:0.7", "tdro@prev:top:0.7"]
GPU_FIXTURE = Path(__file__).parent / "fixtures" / "mixture-gpu-nfcorpus-results.json"


def test_the_gpu_suite_tables_of_the_docs_are_what_report_only_prints(tmp_path, capsys):
    """The stored results of docs/benchmarks.md's `--preset gpu` run on one H200 (suite 1 and the two top-70%
    arms): the stage-1 weights and the seed table, per-seed line and paired table printed from them are the
    docs' byte for byte, and every arm has its three seeds over NFCorpus's 323 test queries."""
    import shutil

    shutil.copy(GPU_FIXTURE, tmp_path / "results.json")
    bm.main(["--report-only", "--preset", "gpu", "--targets", "nfcorpus", "--work", str(tmp_path),
             "--arms", *GPU_ARMS, "--pair", "tdro:top:0.7=tdro@prev:top:0.7"])
    printed = capsys.readouterr().out
    weights = printed[printed.index("| collection | tDRO | tDRO@prev | GroupDRO |"):
                      printed.index("LOO nfcorpus, every arm against uniform:")].rstrip("\n")
    block = printed[printed.index("| model | nDCG@10 (95% CI over seeds) |"):].rstrip("\n")
    assert weights.count("\n") == 18 and "| tdro:top:0.7 | tdro@prev:top:0.7 | nfcorpus | 323 | 3 |" in block
    docs = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert weights in docs and block in docs
    results = json.loads(GPU_FIXTURE.read_text())["results"]
    assert all(len(results["nfcorpus"]["arms"][a]) == 3 for a in GPU_ARMS)
    assert all(len(scores) == 323 for a in GPU_ARMS for scores in results["nfcorpus"]["arms"][a].values())
