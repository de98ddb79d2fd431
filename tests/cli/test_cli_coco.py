"""The COCO commands: ``drmix pretrain coco``, ``drmix analyze shift``, ``drmix pipeline coco`` end to end."""
from __future__ import annotations

import json

import pytest

from cli_helpers import run
from drmix.evaluation.compare import paired_test
from drmix.recipes.coco import CocoPipelineConfig, comparison_table, run_coco_pipeline


WORDS = ["cat", "dog", "horse", "sheep", "goat", "mouse", "tiger", "lion", "zebra", "camel", "otter", "eagle"]


def beir(root, name="target"):
    d = root / name
    (d / "qrels").mkdir(parents=True)
    docs = {f"d{i}": f"The {w} lives on a farm. The {w} eats grass every day. People like the {w} a lot."
            for i, w in enumerate(WORDS)}
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                            for k, v in docs.items()))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"what does the {w} eat"}) + "\n"
                                             for i, w in enumerate(WORDS)))
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                          + "".join(f"q{i}\td{i}\t1\n" for i in range(len(WORDS))))
    return d


def collection(root):
    f = root / "train.jsonl"
    f.write_text("".join(json.dumps({"query": f"about {w}", "positive": f"a text on the {w}"}) + "\n" for w in WORDS))
    return f


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    short = tmp_path / "short.jsonl"
    short.write_text('{"text": "One sentence."}\n{"text": "Two."}\n')
    code, _, err = run(["-q", "pretrain", "coco", "--corpus", str(short), "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 2 and "2 with one chunk" in err and "Traceback" not in err
    code, _, err = run(["-q", "analyze", "shift", "--source", str(tmp_path / "nope"), "--target", str(short)], capsys)
    assert code == 2 and "Traceback" not in err


def test_analyze_shift_command(tmp_path, capsys):
    t = beir(tmp_path)
    code, out, _ = run(["-q", "analyze", "shift", "--source", str(collection(tmp_path)), "--target", str(t),
                        "--output-dir", str(tmp_path / "shift")], capsys)
    assert code in (0, None)
    data = json.loads((tmp_path / "shift" / "shift.json").read_text())
    assert data["names"] == ["train", "target"] and data["query_types"]["target"]["what"] == 1.0
    assert (tmp_path / "shift" / "jaccard.png").exists() and (tmp_path / "shift" / "query_types.png").exists()


def test_paired_test_and_table_by_hand():
    a = {"x": {"q1": 0.0, "q2": 0.5, "q3": 1.0}}
    b = {"x": {"q1": 0.5, "q2": 0.5, "q3": 1.0}}
    t = paired_test(a, b)
    # differences 0.5, 0, 0: mean 1/6, sd 0.2887, t = 1, two-sided p with 2 df = 0.4226
    assert t["n"] == 3 and t["mean"] == pytest.approx(1 / 6) and t["p"] == pytest.approx(0.42265, abs=1e-4)
    assert "| x | 0.5000 | 0.6667 | +0.1667 |" in comparison_table({"A": a, "B": b}, "A", "B")


def test_pipeline_end_to_end_and_rerun_skips(tiny_model_path, tmp_path):
    t = beir(tmp_path)
    cfg = CocoPipelineConfig(model=tiny_model_path, corpus=[str(t)], data=[str(collection(tmp_path))],
                             test_data=[str(t)], output_dir=str(tmp_path / "p"), max_steps=2, batch_size=4,
                             show_progress=False, device="cpu", coco={"max_steps": 2, "span_max_tokens": 8})
    res = run_coco_pipeline(cfg)
    assert set(res.models) == {"no COCO + uniform", "COCO + uniform"}
    assert (tmp_path / "p" / "coco" / "model" / "modules.json").exists()
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["paired"]["n"] == len(WORDS)
    mtime = (tmp_path / "p" / "coco" / "model" / "modules.json").stat().st_mtime
    again = run_coco_pipeline(cfg)
    assert again.table == res.table
    assert (tmp_path / "p" / "coco" / "model" / "modules.json").stat().st_mtime == mtime
    # another COCO setting: refused before anything is written; with --resume-with-changes COCO and the
    # fine-tuning of its model run again, the fine-tuning without COCO is reused
    from drmix.train.resume_check import ResumeMismatchError

    changed = cfg.replace(**{"coco": {"max_steps": 3, "span_max_tokens": 8}})
    base_stamp = (tmp_path / "p" / "finetune-base-uniform" / "model" / "modules.json").stat().st_mtime
    with pytest.raises(ResumeMismatchError, match="COCO: max_steps 2 -> 3"):
        run_coco_pipeline(changed)
    run_coco_pipeline(changed.replace(**{"resume_with_changes": True}))
    assert [json.loads(r)["step"] for r in (tmp_path / "p" / "coco" / "metrics.jsonl").read_text().splitlines()
            if '"loss"' in r] == [3]
    assert (tmp_path / "p" / "finetune-base-uniform" / "model" / "modules.json").stat().st_mtime == base_stamp
    assert (tmp_path / "p" / "coco" / "model" / "modules.json").stat().st_mtime != mtime
    # what the CLI adds at the end: one report for the pipeline, a section per stage that trained
    from drmix.cli.report import after_run

    after_run(tmp_path / "p", cfg, pipeline=True)
    html = (tmp_path / "p" / "report.html").read_text(encoding="utf-8")
    stages = [p.name for p in (tmp_path / "p").iterdir() if (p / "metrics.jsonl").is_file()]
    assert len(stages) >= 2 and all(f"{name}/report.html" in html for name in stages)
    assert "summary.md" in html and html.count("<svg") >= len(stages)
