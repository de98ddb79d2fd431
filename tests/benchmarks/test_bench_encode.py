"""benchmarks/bench_encode.py: its tables from hand-made figures, the CPU table in docs/benchmarks.md is the one
the stored run prints, and the GPU preset states an estimate that fits one 10-minute command."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_encode as be  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "encode-cpu-results.json"


def hand_results() -> dict:
    return {"tokenize": {"texts": 1000, "max_length": 256, "rows": [
        {"method": "transformers tokenizer, in process", "workers": 0, "start_s": 0.0, "texts_per_s": [100.0, 300.0, 200.0],
         "cut": 0},
        {"method": "drmix worker pool, 2 processes", "workers": 2, "start_s": 0.5, "texts_per_s": [500.0, 400.0, 450.0],
         "cut": 12}]},
        "end_to_end": {"n": 100, "batch_size": 64, "max_length": 256, "device": "cpu", "rounds": 2,
                       "names": ["drmix fp32, tokenised in process", "st"],
                       "wall": {"drmix fp32, tokenised in process": [10.0, 20.0], "st": [20.0, 20.0]},
                       "cpu": {"drmix fp32, tokenised in process": [5.0, 5.0], "st": [4.0, 5.0]}, "max_diff": {}}}


def test_tables_by_hand():
    lines = be.render(hand_results()).splitlines()
    # medians 200 and 450 texts/s: 2.25x the in-process tokenizer
    assert "| transformers tokenizer, in process | 200 (100, 300, 200) | 1.00x | 0.00 | 0 |" in lines
    assert "| drmix worker pool, 2 processes | 450 (500, 400, 450) | 2.25x | 0.50 | 12 |" in lines
    # 100 passages in 10 s and 20 s: 10 and 5 passages/s (median 7.5); ST 20 s twice: ratios 2.0 and 1.0
    assert ("| drmix encode_texts, fp32, tokenised in process | 7.5 (10.0, 5.0) | 20.0 (20.0, 20.0) | "
            "1.500 (2.000, 1.000) |") in lines
    assert "| SentenceTransformer.encode | 5.0 (5.0, 5.0) | 22.5 (25.0, 20.0) | 1.000 (1.000, 1.000) |" in lines


def test_worker_counts_expand_all_and_drop_repeats():
    from drmix.retrieval.tokenize_pool import available_cpus

    assert be.worker_counts("1, 2,all,2") == list(dict.fromkeys([1, 2, available_cpus()]))


def test_docs_hold_the_stored_cpu_run():
    results = json.loads(FIXTURE.read_text())
    table = be.render(results)
    assert table in (ROOT / "docs" / "benchmarks.md").read_text()
    assert results["end_to_end"]["max_diff"] and max(results["end_to_end"]["max_diff"].values()) == 0.0


def test_gpu_preset_estimate_fits_one_ten_minute_command():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_encode.py"), "--preset", "gpu",
                          "--estimate"], capture_output=True, text=True, check=True).stdout
    assert "estimated device time of this command" in out and "fits one 10-minute command" in out
    minutes = float(out.split(": ", 1)[1].split(" min", 1)[0])
    assert 1 < minutes < 10
