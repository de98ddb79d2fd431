"""benchmarks/gpu_evidence.py: its table from hand-made figures, the parts a budget leaves out, and the whole
command at toy sizes on CPU (every part this machine can run, the adapt part under torchrun), so that the one
command a GPU lease runs cannot rot."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_evidence as ge  # noqa: E402
from _lease import Budget  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "gpu_evidence.py"
FIXTURE = Path(__file__).parent / "fixtures" / "gpu-evidence-cpu-results.json"


def hand_results() -> dict:
    e2e = {"n": 100, "batch_size": 64, "max_length": 256, "device": "cuda", "rounds": 3,
           "names": ["drmix auto, tokenised in process", "drmix auto, 8 tokenising processes", "st"],
           "wall": {"drmix auto, tokenised in process": [2.0, 2.0, 2.0], "drmix auto, 8 tokenising processes":
                    [1.0, 2.0, 1.0], "st": [5.0, 6.0, 4.0]}, "cpu": {}}
    return {"device": "cuda", "machine": "GPU x 1", "tiny": False, "budget_s": 600, "estimated_s": 300.0,
            "took_s": 280.0, "order": ["encode", "train", "adapt", "sharded"], "parts": {
                "encode": {"status": "ran", "figures": {"end_to_end": e2e, "ndcg": None}},
                "train": {"status": "ran", "figures": {"drmix": [[120.0, 1.0], [100.0, 1.0]],
                                                       "st": [[100.0, 1.0], [100.0, 1.0]], "floor": 220.0,
                                                       "precision": "bf16", "batch_size": 128, "max_length": 256}},
                "adapt": {"status": "ran", "figures": {"returncode": 0, "seconds": 95.4, "backend": "gloo",
                                                       "selected": "uniform", "candidates": ["uniform"],
                                                       "passages": 2000, "pairs": 800}},
                "sharded": {"status": "skipped", "why": "skipped: 1 GPU here, the two-GPU sharded encode needs 2"}}}


def test_the_table_by_hand():
    rows = ge.render(hand_results()).splitlines()
    assert rows[0] == "GPU x 1; device cuda; budget 600 s, estimated 300 s, took 280 s"
    # the 8-process variant: ratios 5/1, 6/2, 4/1 = 5, 3, 4 (median 4.0) beat the other's 2.5, 3, 2; its
    # passages/s median of 100, 50, 100 = 100, ST's median of 20, 16.7, 25 = 20; below the 5x goal
    assert rows[4] == ("| encode | `bench_encode.py --preset gpu` | drmix auto, 8 tokenising processes: 100 passages/s, "
                       "SentenceTransformer.encode 20: **4.00x** (rounds 5.00, 3.00, 4.00); 100 passages, batch 64 | "
                       ">= 5.0x `SentenceTransformer.encode` | **no** |")
    # medians 110 and 100: 1.10x; the floor 220 -> 50%
    assert rows[5] == ("| train | `bench_train.py --preset gpu --rounds 2` | drmix train 110.0 samples/s, "
                       "sentence-transformers 100.0: **1.10x** (rounds 1.20, 1.00); bf16, batch 128, 256 tokens; compute "
                       "floor 220.0 samples/s (50% of it) | >= 1.0x the sentence-transformers trainer | yes |")
    # on a GPU the process group must be NCCL: gloo there is not the owed figure
    assert rows[6].endswith("| finishes under the launcher, process group nccl | **no** |")
    assert "exit 0 in 95 s, process group gloo; chose uniform of uniform; 2,000 passages, 800 training pairs" in rows[6]
    assert rows[7] == ("| sharded | `torchrun --nproc-per-node 2 -m drmix index` | skipped: 1 GPU here, the two-GPU "
                       "sharded encode needs 2 | byte-identical to 1 process | — |")


def test_a_part_longer_than_what_is_left_is_skipped_with_a_line():
    now = [100.0]
    budget = Budget(600, clock=lambda: now[0])
    now[0] += 550.0
    assert budget.left() == 50.0 and budget.fits(50.0) and not budget.fits(51.0)
    assert budget.skip_line("adapt", 103.4) == ("adapt: skipped, it needs about 103 s and 50 s are left of the 600 s "
                                                "budget")


def test_the_sharded_part_needs_two_gpus():
    args = ge.parse_args(["--tiny"])
    assert ge.unavailable("sharded", args, 1) == "skipped: 1 GPU here, the two-GPU sharded encode needs 2"
    assert ge.unavailable("sharded", args, 2) is None and ge.unavailable("encode", args, 0) is None


def test_the_estimate_comes_first_and_a_short_budget_skips_every_part(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--device", "cpu", "--tiny",
                           "--parts", "encode", "adapt", "--budget-s", "1"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("estimated device time: ") and "budget 1 s: does NOT fit" in lines[0]
    assert lines[1].startswith("encode: skipped, it needs about ") and lines[1].endswith("of the 1 s budget")
    results = json.loads((tmp_path / "results.json").read_text())
    assert [results["parts"][p]["status"] for p in ("encode", "adapt")] == ["skipped", "skipped"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "summary.md"]  # nothing else made


def test_the_cpu_proof_runs_every_part_this_machine_can(tmp_path, tiny_model_path, shared_data):
    """--device cpu --tiny: encode and train through the benchmarks' own functions, adapt under torchrun with gloo;
    the two-GPU part skipped with its line; summary.md is the table, and --report-only prints it again."""
    out = tmp_path / "evidence"
    done = subprocess.run([sys.executable, str(SCRIPT), "--data", str(shared_data), "--out", str(out), "--device",
                           "cpu", "--tiny", "--model", tiny_model_path], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("estimated device time: ")
    results = json.loads((out / "results.json").read_text())
    parts = results["parts"]
    assert {p: parts[p]["status"] for p in ge.PARTS} == {"encode": "ran", "train": "ran", "adapt": "ran",
                                                        "sharded": "skipped"}
    assert parts["encode"]["figures"]["end_to_end"]["n"] == 48 and len(parts["train"]["figures"]["drmix"]) == 1
    adapt = parts["adapt"]["figures"]
    assert (adapt["returncode"], adapt["backend"], adapt["selected"]) == (0, "gloo", "uniform")
    assert json.loads((out / "adapt" / "summary.json").read_text())["selected"] == "uniform"
    table = ge.render(results)
    assert (out / "summary.md").read_text() == table + "\n" and done.stdout.rstrip().endswith(
        f"wrote {out / 'results.json'} and {out / 'summary.md'}")
    assert "| adapt | `torchrun --nproc-per-node 1 -m drmix adapt`, 2 steps a stage | exit 0 in " in table
    again = subprocess.run([sys.executable, str(SCRIPT), "--report-only", "--out", str(out)], capture_output=True,
                           text=True, check=True).stdout
    assert again == table + "\n"


def test_the_docs_hold_the_stored_cpu_proof(tmp_path):
    (tmp_path / "results.json").write_text(FIXTURE.read_text())
    table = subprocess.run([sys.executable, str(SCRIPT), "--report-only", "--out", str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert table in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    stored = json.loads(FIXTURE.read_text())
    assert stored["tiny"] and stored["parts"]["adapt"]["figures"]["backend"] == "gloo"
