"""Run by tests/test_ddp.py under torchrun (or directly for one process): train a few steps, dump results."""
import json
import sys

import torch

from drmix.config import TrainConfig
from drmix.train.trainer import Trainer

model, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = TrainConfig(model=model, data=[data], output_dir=out, max_steps=steps, batch_size=8, learning_rate=1e-3,
                  warmup_ratio=0.0, log_every=1, save_every=1000, show_progress=False, device="cpu",
                  num_negatives=1, seed=3)
trainer = Trainer(cfg)
trainer.train()
if trainer.is_main:
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    losses = [json.loads(line)["loss"] for line in open(f"{out}/metrics.jsonl") if '"loss"' in line]
    json.dump({"losses": losses, "param_sum": params.double().sum().item(), "param_head": params[:50].tolist(),
               "world": trainer.world}, open(f"{out}/result.json", "w"))
