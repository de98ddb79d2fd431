"""One smoke test with the real all-MiniLM-L6-v2 weights (bundled; loads offline in a fraction of a second)."""
import json

import numpy as np

from drmix.config import TrainConfig
from drmix.model.encoder import load_encoder
from drmix.api import train

ROWS = [{"query": "sort a list", "positive": "sorted() returns a sorted list"},
        {"query": "read a file", "positive": "open(path).read() returns the text"},
        {"query": "join strings", "positive": "' '.join(parts) concatenates strings"},
        {"query": "length of a list", "positive": "len(x) gives the number of items"}]


def infonce(model) -> float:
    """The in-batch InfoNCE loss of the four rows (temperature 0.05, normalised embeddings), by hand."""
    q = model.encode([r["query"] for r in ROWS], normalize_embeddings=True)
    d = model.encode([r["positive"] for r in ROWS], normalize_embeddings=True)
    s = (q @ d.T).astype(np.float64) / 0.05
    return float(np.mean(np.log(np.exp(s).sum(axis=1)) - np.diag(s)))


def test_default_model_ranks_and_trains(tmp_path):
    model = load_encoder(None, device="cpu")
    q = model.encode(["how do I sort a list in python"], normalize_embeddings=True)
    d = model.encode(["sorted(iterable) returns a new sorted list", "the capital of France is Paris"],
                     normalize_embeddings=True)
    scores = (q @ d.T)[0]
    assert scores[0] > scores[1] + 0.2  # real weights, not random ones

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    result = train(TrainConfig(data=[str(data)], output_dir=str(tmp_path / "run"), max_steps=2, batch_size=4,
                               learning_rate=1e-4, warmup_ratio=0.0, show_progress=False, device="cpu",
                               doc_max_length=32, query_max_length=16))
    trained = load_encoder(str(tmp_path / "run"), device="cpu")  # a run directory resolves to run/model
    emb = trained.encode(["sort a list"])
    assert emb.shape == (1, 384) and np.isfinite(emb).all()
    assert result.steps == 2
    # the weights moved, and in the direction of the training objective: the loss of the batch it trained on fell
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    moved = [n for n, p in trained.named_parameters() if not np.allclose(p.detach().numpy(), before[n].numpy())]
    assert len(moved) > len(before) // 2
    assert infonce(trained) < 0.5 * infonce(model)
