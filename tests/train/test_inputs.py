"""The training input pipeline: prefetched batches equal the synchronous ones, resume is exact, padding to 8."""
import numpy as np
import pytest
import torch
from datasets import Dataset

from drmix.data.collections import Collection
from drmix.data.sampling import BatchBuilder, MixtureSampler
from drmix.device import pin_memory_available
from drmix.train.inputs import Featurizer, InputPipeline


def collections():
    out = []
    for c, n in enumerate((7, 11, 5)):
        rows = {"query": [f"q{c}-{i}" for i in range(n)],
                "positives": [[f"p{c}-{i}", f"pp{c}-{i}"] for i in range(n)],
                "negatives": [[f"n{c}-{i}-{j}" for j in range(3)] for i in range(n)]}
        out.append(Collection(f"c{c}", Dataset.from_dict(rows)))
    return out


def make(mode, prefetch, seed=3):
    cols = collections()
    sampler = MixtureSampler([len(c) for c in cols], 4, mode=mode, seed=seed)
    builder = BatchBuilder(cols, 2, seed=seed)
    # "prepare" stands for tokenisation: any function of the batch
    return InputPipeline(sampler, builder, lambda b: (list(b.queries), list(b.positives)), prefetch=prefetch)


def weight_schedule(step):
    """Weights that change now and then (as a DRO strategy's do), sometimes only slightly."""
    w = np.array([1.0, 1.0, 1.0])
    if step >= 5:
        w = np.array([0.2, 0.5, 0.3])
    if step >= 9:
        w = np.array([0.2, 0.5 + 1e-9, 0.3])  # changes the weights but (almost surely) not the draw
    if step >= 14:
        w = np.array([0.0, 0.0, 1.0])
    return w


def draw(pipe, steps, start=0):
    out = []
    for t in range(start, start + steps):
        batch, prepared = pipe.next(weight_schedule(t))
        out.append((batch.queries, batch.positives, batch.negatives, batch.collection_ids.tolist(), prepared))
    return out


@pytest.mark.parametrize("mode", ["homogeneous", "mixed"])
def test_prefetched_batches_equal_the_synchronous_ones(mode):
    sync = draw(make(mode, 0), 20)
    pipe = make(mode, 3)
    ahead = draw(pipe, 20)
    pipe.close()
    assert ahead == sync
    assert pipe.redraws > 0  # the weight changes did invalidate drawn-ahead batches, and they were redrawn
    # the last batches came from collection 2 only
    assert all(c == 2 for c in sync[-1][3])


def test_resume_from_state_dict_draws_what_the_uninterrupted_run_draws():
    full = draw(make("mixed", 0), 20)
    first = make("mixed", 3)
    draw(first, 8)
    state = first.state_dict()  # taken while batches 8.. are already drawn ahead
    first.close()
    resumed = make("mixed", 2, seed=3)
    resumed.load_state_dict(state)
    assert draw(resumed, 12, start=8) == full[8:]
    resumed.close()


def test_featurizer_pads_to_multiple_of_8_and_keeps_embeddings(tiny_model_path):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    texts = ["alpha beta", "gamma", "delta epsilon zeta eta theta"]
    feats = Featurizer(model, pad_multiple=8)
    f = feats(texts, 16)
    assert f["input_ids"].shape == (3, 8) and f["input_ids"].dtype == torch.int64
    assert f["attention_mask"].sum(1).tolist() == [4, 3, 7]  # [CLS] words [SEP]
    ref = model.preprocess(texts)
    assert torch.equal(f["input_ids"][:, :7], ref["input_ids"]) and (f["input_ids"][:, 7:] == 0).all()
    assert feats.threadable
    # a second call (the fast path, as on a worker thread) gives the same tensors
    f2 = feats(texts, 16)
    assert all(torch.equal(f[k], f2[k]) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():
        a = model(dict(f))["sentence_embedding"]
        b = model(dict(ref))["sentence_embedding"]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # truncation to the length given
    assert feats(["a b c d e f g h i j k l"], 5)["attention_mask"].sum().item() == 5
    assert not pin_memory_available("cpu")
