"""Run by tests/train/test_ddp_coco_idro.py under torchrun (or directly for one process): a few steps of COCO or iDRO."""
import json
import sys

import torch

from drmix.config import TrainConfig

model, mode, data, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
common = dict(model=model, output_dir=out, max_steps=steps, batch_size=8, learning_rate=1e-3, warmup_ratio=0.0,
              log_every=1, save_every=1000, show_progress=False, device="cpu", seed=3)
if mode == "coco":
    from drmix.pretrain.runner import CocoConfig, pretrain_coco
    from drmix.train.trainer import Trainer

    captured = {}
    orig = Trainer.train

    def train(self):
        captured["trainer"] = self
        return orig(self)

    Trainer.train = train
    pretrain_coco(CocoConfig(corpus=[data], span_max_tokens=12, **common))
    trainer = captured["trainer"]
else:
    import numpy as np

    from drmix.mixture.idro import IDROStrategy
    from drmix.train.trainer import Trainer

    scope = "rank" if mode == "idro-rank" else "global"
    record = []
    real_loss, real_update = IDROStrategy.loss, IDROStrategy._update

    def loss(self, losses, batch, ctx):
        h_before = self.h.tolist()
        out = real_loss(self, losses, batch, ctx)
        record[-1].update(h_before=h_before, h_after=self.h.tolist(), loss=float(out.detach()))
        return out

    def update(self, flats, reached, idx, cl_loss, present, ctx):
        record.append({"cl_loss": np.nan_to_num(cl_loss).tolist(), "present": present.tolist()})
        real_update(self, flats, reached, idx, cl_loss, present, ctx)
        record[-1]["cos"] = self.last_cos.tolist()

    IDROStrategy.loss, IDROStrategy._update = loss, update
    trainer = Trainer(TrainConfig(data=[data], strategy="idro", num_negatives=0,
                                  idro={"clusters": 3, "refresh_every": 2, "kmeans_iterations": 5, "scope": scope},
                                  **common))
    trainer.train()
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    json.dump({"steps": record, "param_head": params[:50].tolist(), "rank": trainer.rank},
              open(f"{out}/rank{trainer.rank}.json", "w"))
if trainer.is_main:
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    losses = [json.loads(line)["loss"] for line in open(f"{out}/metrics.jsonl") if '"loss"' in line]
    h = trainer.strategy.h.tolist() if mode.startswith("idro") else []
    json.dump({"losses": losses, "param_head": params[:50].tolist(), "h": h, "world": trainer.world},
              open(f"{out}/result.json", "w"))
