"""Shared by the trainer's tests: two small learnable collections and a fast TrainConfig."""
import json
import random
from pathlib import Path

import torch

from drmix.config import TrainConfig

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
         "upsilon phi chi psi omega").split()


def make_collections(folder: Path, n: int = 40, seed: int = 0) -> Path:
    """Two collections where the positive repeats the query's words (learnable), negatives do not."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("greek", "letters"):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                q = rng.sample(WORDS, 3)
                rest = [w for w in WORDS if w not in q]
                f.write(json.dumps({"query": " ".join(q), "positive": " ".join(q + rng.sample(rest, 3)),
                                    "negatives": [" ".join(rng.sample(rest, 6))]}) + "\n")
    return folder


def config(model, data, out, **kw):
    base = dict(model=model, data=[str(data)], output_dir=str(out), batch_size=8, learning_rate=1e-3,
                warmup_ratio=0.0, log_every=1, save_every=1000, show_progress=False, device="cpu", seed=0)
    base.update(kw)
    return TrainConfig(**base)


def read_metrics(out):
    return [json.loads(line) for line in open(Path(out) / "metrics.jsonl") if '"loss"' in line]


def params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def stopped_copy(run: Path, copy: Path) -> Path:
    """A copy of a finished run without what only its end writes (``model/``, ``adapter/``, ``weights.json``,
    ``weights.png`` and the root ``modules.json`` / ``config_sentence_transformers.json``), as a run killed before
    its last step leaves it: a run resumed in the copy must write them again, never find the finished run's."""
    import shutil

    shutil.copytree(run, copy)
    for name in ("model", "adapter"):
        shutil.rmtree(copy / name, ignore_errors=True)
    for name in ("weights.json", "weights.png", "modules.json", "config_sentence_transformers.json"):
        (copy / name).unlink(missing_ok=True)
    return copy
