"""benchmarks/bench_compile.py: its GPU preset prints its device-time estimate and fits one 10-minute command."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_compile.py"


def test_gpu_preset_estimate_fits_one_ten_minute_command():
    out = subprocess.run([sys.executable, str(BENCH), "--preset", "gpu", "--estimate"], capture_output=True,
                         text=True, check=True).stdout
    assert "estimated device time of this command" in out and "includes 240 s for compiling" in out
    minutes = float(out.split(": ", 1)[1].split(" min", 1)[0])
    assert 4 < minutes < 10 and "fits one 10-minute command" in out
