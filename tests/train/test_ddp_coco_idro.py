"""Two gloo processes give the same COCO losses and the same iDRO weights and model as one process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HELPER = Path(__file__).parent.parent / "helpers" / "ddp_coco_idro.py"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()


def _run(args, tmp_path, name, ddp=False):
    cmd = [sys.executable, str(HELPER), *args[:2], args[2], str(tmp_path / name), "2"]
    if ddp:  # --standalone: torchrun picks a free port (a fixed one collides with any other run)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *cmd[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp_path / name / "result.json").read_text())


@pytest.mark.parametrize("mode", ["coco", "idro"])
def test_two_processes_match_one(tiny_model_path, tmp_path, mode):
    import random

    rng = random.Random(0)
    if mode == "coco":
        data = tmp_path / "corpus.jsonl"
        data.write_text("".join(json.dumps({"text": " ".join(
            f"The {w} is word {i} of the list of {rng.choice(WORDS)}." for w in rng.sample(WORDS, 4))}) + "\n"
            for i in range(16)))
    else:
        data = tmp_path / "train.jsonl"
        data.write_text("".join(json.dumps({"query": " ".join(q), "positive": " ".join(q + rng.sample(WORDS, 2))})
                                + "\n" for q in (rng.sample(WORDS, 3) for _ in range(24))))
    one = _run([tiny_model_path, mode, str(data)], tmp_path, "one")
    two = _run([tiny_model_path, mode, str(data)], tmp_path, "two", ddp=True)
    assert (one["world"], two["world"]) == (1, 2)
    assert two["losses"] == pytest.approx(one["losses"], abs=1e-5)
    assert two["h"] == pytest.approx(one["h"], abs=1e-6)
    assert two["param_head"] == pytest.approx(one["param_head"], abs=1e-6)
