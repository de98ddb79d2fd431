"""Two gloo processes: COCO and iDRO (``scope: global``) give the same losses, weights and model as one process;
iDRO's default ``scope: rank`` keeps one set of weights per process, as the authors' iDROLoss under DDP."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HELPER = Path(__file__).parent.parent / "helpers" / "ddp_coco_idro.py"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()


def _run(args, tmp_path, name, ddp=False, monkeypatch=None):
    """The helper under torchrun (``ddp``), or as one process here: the classes it patches (the trainer's
    ``train``, iDRO's ``loss`` and ``_update``) are given back afterwards by ``monkeypatch``."""
    cmd = [sys.executable, str(HELPER), *args[:2], args[2], str(tmp_path / name), "2"]
    if not ddp:
        import runpy

        from drmix.mixture.idro import IDROStrategy
        from drmix.train.trainer import Trainer

        for cls, attr in ((Trainer, "train"), (IDROStrategy, "loss"), (IDROStrategy, "_update")):
            monkeypatch.setattr(cls, attr, getattr(cls, attr))  # restored, whatever the helper sets
        monkeypatch.setattr(sys, "argv", cmd[1:])
        runpy.run_path(str(HELPER), run_name="__main__")
        return json.loads((tmp_path / name / "result.json").read_text())
    # --standalone: torchrun picks a free port (a fixed one collides with any other run)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *cmd[1:]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((tmp_path / name / "result.json").read_text())


def _idro_data(tmp_path):
    import random

    rng = random.Random(0)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"query": " ".join(q), "positive": " ".join(q + rng.sample(WORDS, 2))})
                            + "\n" for q in (rng.sample(WORDS, 3) for _ in range(24))))
    return data


@pytest.mark.parametrize("mode", ["coco", "idro-global"])
def test_two_processes_match_one(tiny_model_path, tmp_path, mode, monkeypatch):
    import random

    rng = random.Random(0)
    if mode == "coco":
        data = tmp_path / "corpus.jsonl"
        data.write_text("".join(json.dumps({"text": " ".join(
            f"The {w} is word {i} of the list of {rng.choice(WORDS)}." for w in rng.sample(WORDS, 4))}) + "\n"
            for i in range(16)))
    else:
        data = _idro_data(tmp_path)
    one = _run([tiny_model_path, mode, str(data)], tmp_path, "one", monkeypatch=monkeypatch)
    two = _run([tiny_model_path, mode, str(data)], tmp_path, "two", ddp=True)
    assert (one["world"], two["world"]) == (1, 2)
    assert two["losses"] == pytest.approx(one["losses"], abs=1e-5)
    assert two["h"] == pytest.approx(one["h"], abs=1e-6)
    assert two["param_head"] == pytest.approx(one["param_head"], abs=1e-6)


def _authors_h(h_fun, cos, losses, counts, alpha=0.25, rho=0.05, ema=0.1, eps=0.01):
    """The weight half of ``iDROLoss.forward`` (github.com/OpenMatch/COCO-DR, ``ANCE/model/dro_loss.py``) from the
    normalised, all-reduced gradients' cosines ``RTG`` on: ``_gl = l^alpha`` of *this process's* cluster losses,
    ``_exp = rho * mean(_gl _gl^T * RTG, 0) * mask``, ``h = h^ema * exp(_exp - max) * [count != 0]``, normalised,
    clamped at ``eps``."""
    import numpy as np

    gl = np.power(np.asarray(losses), alpha)[:, None]
    rtg = (gl @ gl.T) * np.asarray(cos)
    mask = (np.asarray(counts) > 0).astype(float)
    e = rho * rtg.mean(axis=0) * mask
    e = e - e.max()
    h = np.power(np.asarray(h_fun), ema) * np.exp(e) * mask
    return np.maximum(h / h.sum(), eps)


def test_idro_per_process_weights_as_the_authors_under_ddp(tiny_model_path, tmp_path):
    """scope: rank (the default): each process's weights follow the authors' update from its own cluster losses
    and presence, with cosines of the gradients summed over the processes (the same on both), its loss is
    sum_i h_i l_i of its own slice with the previous weights, and the processes' weights part while the model
    stays one (DDP)."""
    import numpy as np

    data = _idro_data(tmp_path)
    out = tmp_path / "rank"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HELPER),
           tiny_model_path, "idro-rank", str(data), str(out), "3"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((out / f"rank{i}.json").read_text()) for i in (0, 1)]
    assert len(ranks[0]["steps"]) == len(ranks[1]["steps"]) == 3
    differs = False
    for a, b in zip(ranks[0]["steps"], ranks[1]["steps"]):
        assert np.allclose(a["cos"], b["cos"], atol=1e-6)               # gradients all-reduced
        differs = differs or a["present"] != b["present"]
        for rec in (a, b):
            expected = _authors_h(rec["h_before"], rec["cos"], rec["cl_loss"], rec["present"])
            assert np.allclose(rec["h_after"], expected, rtol=1e-9, atol=1e-12)
            assert rec["loss"] == pytest.approx(float(np.dot(rec["h_before"], rec["cl_loss"])), rel=1e-5)
    assert differs                                        # the slices held different clusters at some step ...
    assert ranks[0]["steps"][-1]["h_after"] != pytest.approx(ranks[1]["steps"][-1]["h_after"], abs=1e-6)
    assert ranks[0]["param_head"] == pytest.approx(ranks[1]["param_head"], abs=1e-7)   # ... one model
