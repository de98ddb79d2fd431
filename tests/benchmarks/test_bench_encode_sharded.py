"""benchmarks/bench_encode_sharded.py: the table in docs/benchmarks.md is what it prints for the stored results,
and its GPU preset states a device time that fits one 10-minute command."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_encode_sharded.py"
FIXTURE = Path(__file__).parent / "fixtures" / "encode-sharded-cpu-results.json"


def test_the_docs_table_is_printed_from_the_stored_results(tmp_path):
    (tmp_path / "results.json").write_text(FIXTURE.read_text())
    out = subprocess.run([sys.executable, str(BENCH), "--report-only", "--work", str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    runs = json.loads(FIXTURE.read_text())["runs"]
    assert [r["processes"] for r in runs] == [1, 2] and runs[0]["vectors_sha256"] == runs[1]["vectors_sha256"]
    assert "| 2 |" in out and "| yes |" in out and "**no**" not in out


def test_gpu_preset_estimate_fits_one_ten_minute_command():
    out = subprocess.run([sys.executable, str(BENCH), "--preset", "gpu", "--estimate"], capture_output=True,
                         text=True, check=True).stdout
    # 100,000 passages at 900/s: 60 + 111 s on one GPU, 60 + 56 s + the merge on two
    assert out.startswith("estimated device time of this command: 4.8 min") and "fits one 10-minute command" in out
