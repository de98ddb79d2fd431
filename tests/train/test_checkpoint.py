"""drmix.train.checkpoint: a checkpoint is written whole and only the ``keep`` most recent stay."""
from __future__ import annotations

import torch

from drmix.train import checkpoint as ck


def test_only_the_kept_checkpoints_stay_and_latest_names_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(ck, "save_model_folder", lambda model, folder: (folder / "modules.json").write_text("[]"))
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    for step in (1, 2, 3, 10):
        ck.save_checkpoint(tmp_path, step, model=None, optimizer=opt, scheduler=sched, trainer_state={},
                           strategy_state={}, keep=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step-10", "step-3"]
    assert (root / "latest").read_text() == "step-10\n"
    assert ck.latest_checkpoint(tmp_path) == root / "step-10"
    ck.save_checkpoint(tmp_path, 11, model=None, optimizer=opt, scheduler=sched, trainer_state={},
                       strategy_state={}, keep=1)
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step-11"]
