"""The InfoNCE objective with false negatives masked, the objectives' registry, and what a run records at start."""
import json
import math

import numpy as np
import pytest
import torch

from drmix.errors import ConfigError
from drmix.model.losses import contrastive_losses
from drmix.train.objective import OBJECTIVES, InfoNCE, Objective, objective_from_config
from drmix.train.trainer import Trainer

from train_helpers import config, params


def _collection(rows, name="c"):
    import datasets

    from drmix.data.collections import Collection

    ds = datasets.Dataset.from_dict({"query": [r[0] for r in rows], "positives": [r[1] for r in rows],
                                     "negatives": [r[2] for r in rows]})
    return Collection(name=name, dataset=ds)


# rows 0 and 1 share their positive "P", which is also row 2's hard negative
ROWS = [("a", ["P"], ["N0"]), ("b", ["P"], ["N1"]), ("c", ["Q"], ["P"])]
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
# documents: p0 p1 p2, then n0 n1 n2
D = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.8]])
MASK = torch.ones(3, 1, dtype=torch.bool)


def _batch():
    from drmix.data.sampling import BatchBuilder

    return BatchBuilder([_collection(ROWS)], 1, seed=0, keys=True).build([(0, 0), (0, 1), (0, 2)])


def test_duplicates_in_a_batch_are_masked_by_hand():
    e = math.exp
    # row 0: p1 and n2 hold its positive's text -> candidates p0 (1), p2 (0), n0 (0), n1 (1)
    l0 = -1 + math.log(e(1) + e(0) + e(0) + e(1))
    # row 1: p0 and n2 hold its positive's text -> candidates p1 (0.8), p2 (1), n0 (1), n1 (0)
    l1 = -0.8 + math.log(e(0.8) + e(1) + e(1) + e(0))
    # row 2: nothing repeats "Q" -> all six: 1, 0.6, 0, 0, 1, 0.6 (target p2: 0)
    l2 = math.log(e(1) + e(0.6) + e(0) + e(0) + e(1) + e(0.6))
    obj = InfoNCE(temperature=1.0, num_negatives=1, mask_duplicates=True)
    got = obj.losses(Q, D, MASK, gather=False, batch=_batch())
    assert got.tolist() == pytest.approx([l0, l1, l2], abs=1e-6)


def test_masking_off_is_the_plain_loss():
    plain = contrastive_losses(Q, D[:3], D[3:].unsqueeze(1), MASK, temperature=1.0, in_batch=True, gather=False)
    off = InfoNCE(temperature=1.0, num_negatives=1, mask_duplicates=False)
    assert torch.equal(off.losses(Q, D, MASK, gather=False, batch=_batch()), plain)
    on = InfoNCE(temperature=1.0, num_negatives=1, mask_duplicates=True)
    assert torch.equal(on.losses(Q, D, MASK, gather=False, batch=None), plain)   # no keys: nothing masked


def test_the_same_query_twice_masks_the_other_positive():
    from drmix.data.sampling import BatchBuilder

    rows = [("a", ["P0"], []), ("a", ["P1"], []), ("b", ["P2"], [])]
    batch = BatchBuilder([_collection(rows)], 0, seed=0, keys=True).build([(0, 0), (0, 1), (0, 2)])
    q = torch.eye(3)
    d = torch.eye(3)
    got = InfoNCE(temperature=1.0, num_negatives=0, mask_duplicates=True).losses(
        q, d, torch.zeros(3, 0, dtype=torch.bool), gather=False, batch=batch)
    # rows 0 and 1 see only their own positive and row 2's: -1 + log(e + 1); row 2 sees all three
    expected = -1 + math.log(math.e + 1)
    assert got.tolist() == pytest.approx([expected, expected, -1 + math.log(math.e + 2)], abs=1e-6)


def test_objectives_are_registered_by_name():
    assert {"infonce", "margin_mse", "kl"} <= set(OBJECTIVES.all())
    from drmix.config import TrainConfig

    assert isinstance(objective_from_config(TrainConfig()), InfoNCE)
    assert objective_from_config(TrainConfig(loss="Margin-MSE", num_negatives=2)).name == "margin_mse"
    with pytest.raises(ConfigError, match="unknown loss 'cosine'.*infonce"):
        objective_from_config(TrainConfig(loss="cosine"))


class _BeforeMasking(Objective):
    """InfoNCE as drmix trained before duplicates were masked (its ``losses``, transcribed), for the check that
    ``mask_duplicates: false`` reproduces those weights."""

    name = "infonce-before"

    def __init__(self, num_negatives):
        self.num_negatives = num_negatives

    def losses(self, q, d, mask, *, gather, batch=None):
        B, H = mask.shape
        p = d[:B]
        negs = None
        if H:
            negs = d.new_zeros(B, H, d.size(-1))
            negs[mask] = d[B:]
        return contrastive_losses(q.float(), p.float(), None if negs is None else negs.float(), mask if H else None,
                                  temperature=0.05, in_batch=True, gather=gather, matryoshka_dims=[])


@pytest.fixture(scope="module")
def dup_data(tmp_path_factory):
    """Two collections in which every positive is shared by two rows (NFCorpus-like)."""
    folder = tmp_path_factory.mktemp("dups")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    for name, shift in (("one", 0), ("two", 5)):
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for i in range(16):
                pos = " ".join(words[(i // 2 + shift + k) % len(words)] for k in range(4))
                f.write(json.dumps({"query": f"{words[(i + shift) % 12]} {words[(i * 5 + 1) % 12]} {i}",
                                    "positive": pos, "negatives": [f"{words[(i * 7) % 12]} {i}"]}) + "\n")
    return folder


def _train(model, data, out, objective=None, **kw):
    trainer = Trainer(config(model, data, out, max_steps=3, **kw), objective=objective)
    trainer.train()
    return params(trainer.model)


def test_no_mask_duplicates_reproduces_the_earlier_weights(tiny_model_path, dup_data, tmp_path):
    off = _train(tiny_model_path, dup_data, tmp_path / "off", mask_duplicates=False)
    before = _train(tiny_model_path, dup_data, tmp_path / "before", objective=_BeforeMasking(1))
    assert torch.equal(off, before)
    on = _train(tiny_model_path, dup_data, tmp_path / "on")          # the default masks: other weights
    assert not torch.equal(on, off)
    # the start record: the strategy's weights at step 0, before any loss record
    first = json.loads((tmp_path / "on" / "metrics.jsonl").read_text().splitlines()[0])
    assert first == {"step": 0, "event": "start", "strategy": "static", "mixture": "uniform",
                     "weights": {"one": 0.5, "two": 0.5}}


def test_start_record_carries_the_scheme_weights(tiny_model_path, dup_data, tmp_path, caplog):
    with caplog.at_level("INFO", logger="drmix.train.trainer"):
        Trainer(config(tiny_model_path, dup_data, tmp_path / "r", max_steps=1, mixture="file",
                       weights_file=str(_weights(tmp_path)))).train()
    first = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["mixture"] == "file" and first["weights"] == pytest.approx({"one": 0.25, "two": 0.75})
    assert "mixture weights at step 0 (strategy static, file): one 0.2500, two 0.7500" in caplog.text


def _weights(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"one": 1, "two": 3}))
    return path


def test_no_duplicates_sampling_trains_and_keeps_its_state(tiny_model_path, dup_data, tmp_path):
    trainer = Trainer(config(tiny_model_path, dup_data, tmp_path / "nd", max_steps=3, batch_sampler="no_duplicates",
                             input_prefetch=2))
    trainer.train()
    assert trainer.sampler.no_duplicates and trainer.sampler.row_keys == trainer.builder.row_keys
    state = json.loads((tmp_path / "nd" / "checkpoints" / "step-3" / "trainer_state.json").read_text())
    assert "deferred" in state["sampler"]


def test_from_config_uses_the_configured_temperature():
    from drmix.config import TrainConfig

    obj = InfoNCE.from_config(TrainConfig(temperature=0.5, num_negatives=1))
    assert obj.temperature == 0.5
    q = torch.tensor([[1.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0]])            # the positive (score 1), one hard negative (score 0)
    got = obj.losses(q, d, torch.tensor([[True]]), gather=False)
    assert got.tolist() == pytest.approx([-1 / 0.5 + math.log(math.exp(1 / 0.5) + math.exp(0.0))], abs=1e-6)


class _SpanLike(InfoNCE):
    """An objective whose builder has no row keys (COCO's span builder)."""

    def builder(self, collections, *, seed, tokens):
        from drmix.pretrain.coco import SpanBuilder

        return SpanBuilder(collections, seed=seed)


class _Untyped(InfoNCE):
    """An objective whose builder is not a RowBuilder (no keys / scores / row_keys)."""

    def builder(self, collections, *, seed, tokens):
        class Bare:
            def build(self, pairs):
                raise AssertionError

            def state_dict(self):
                return {}

            def load_state_dict(self, state):
                pass

        return Bare()


def test_no_duplicates_with_a_builder_without_row_keys_is_a_config_error(tiny_model_path, dup_data, tmp_path):
    cfg = config(tiny_model_path, dup_data, tmp_path / "s", max_steps=1, batch_sampler="no_duplicates")
    with pytest.raises(ConfigError, match="drop --batch-sampler no_duplicates"):
        Trainer(cfg, objective=_SpanLike(temperature=0.05, num_negatives=0))


def test_a_builder_that_is_not_a_row_builder_is_named(tiny_model_path, dup_data, tmp_path):
    cfg = config(tiny_model_path, dup_data, tmp_path / "u", max_steps=1)
    with pytest.raises(TypeError, match="builder Bare is not a drmix.data.sampling.RowBuilder"):
        Trainer(cfg, objective=_Untyped(temperature=0.05, num_negatives=1))


def test_the_model_card_names_the_loss_and_whether_duplicates_were_masked():
    from drmix.config import TrainConfig

    assert objective_from_config(TrainConfig()).card() == {
        "loss": "InfoNCE (contrastive, in-batch and hard negatives, duplicate texts masked as false negatives)",
        "loss_tag": "InfoNCE"}
    assert objective_from_config(TrainConfig(mask_duplicates=False)).card() == {
        "loss": "InfoNCE (contrastive, in-batch and hard negatives)", "loss_tag": "InfoNCE"}


def test_the_configured_matryoshka_sizes_reach_the_loss():
    from drmix.config import TrainConfig

    assert objective_from_config(TrainConfig(matryoshka_dims=[8, 16])).matryoshka_dims == [8, 16]
    assert objective_from_config(TrainConfig()).matryoshka_dims == []
