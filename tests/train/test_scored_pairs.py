"""--loss cosent / angle: sentence-transformers' CoSENTLoss and AnglELoss on scored pairs (sentence1, sentence2,
score) over drmix's embeddings; the pair-score rows read only under them; refusals."""
from __future__ import annotations

import json
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from drmix.config import TrainConfig
from drmix.errors import ConfigError, DataError
from drmix.train.objective import objective_from_config

from train_helpers import WORDS, config


def _hand_cosent(scores, labels, scale):
    """log(1 + sum over pairs with labels[i] > labels[j] of exp(scale * (s_j - s_i)))."""
    terms = [math.exp(scale * (scores[j] - scores[i])) for i in range(len(labels)) for j in range(len(labels))
             if labels[i] > labels[j]]
    return math.log(1 + sum(terms))


def test_cosent_equals_sentence_transformers_and_the_hand_formula_on_a_hand_batch():
    from sentence_transformers.sentence_transformer.losses import AnglELoss, CoSENTLoss

    obj = objective_from_config(TrainConfig(loss="cosent", temperature=0.1))     # scale 10
    assert obj.name == "CoSENTLoss" and obj.loss.scale == pytest.approx(10.0)
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])      # cosines 1, 0, 1/sqrt(2)
    batch = SimpleNamespace(positive_scores=np.array([0.9, 0.1, 0.5]))
    losses = obj.losses(q, d, torch.ones(3, 0, dtype=torch.bool), gather=False, batch=batch)
    assert losses.shape == (3,) and torch.all(losses == losses[0])             # one loss per batch
    # ranked right except nothing: pairs (0 > 2), (0 > 1), (2 > 1): exp(10 (s_j - s_i))
    hand = _hand_cosent([1.0, 0.0, 1 / math.sqrt(2)], [0.9, 0.1, 0.5], 10.0)
    assert losses[0].item() == pytest.approx(hand, rel=1e-5)
    st = CoSENTLoss(None, scale=10.0).compute_loss_from_embeddings([q, d], torch.tensor([0.9, 0.1, 0.5]))
    assert losses[0].item() == pytest.approx(st.item(), rel=1e-6)
    angle = objective_from_config(TrainConfig(loss="angle"))
    got = angle.losses(q, d, torch.ones(3, 0, dtype=torch.bool), gather=False, batch=batch)[0]
    want = AnglELoss(None, scale=20.0).compute_loss_from_embeddings([q, d], torch.tensor([0.9, 0.1, 0.5]))
    assert angle.name == "AnglELoss" and got.item() == pytest.approx(want.item(), rel=1e-6)


def _scored_pairs(path, n=24, seed=0):
    """Pairs whose second text repeats the first's words score 1.0, half-overlapping 0.5, unrelated 0.0."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a = rng.sample(WORDS, 4)
        rest = [w for w in WORDS if w not in a]
        b, score = [(a[:], 1.0), (a[:2] + rng.sample(rest, 2), 0.5), (rng.sample(rest, 4), 0.0)][i % 3]
        rows.append({"sentence1": " ".join(a), "sentence2": " ".join(b), "score": score})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def _cosent_of(model_dir, rows):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    m = SentenceTransformer(str(model_dir), device="cpu")
    a = m.encode([r["sentence1"] for r in rows], convert_to_tensor=True, prompt="")
    b = m.encode([r["sentence2"] for r in rows], convert_to_tensor=True, prompt="")
    return CoSENTLoss(None).compute_loss_from_embeddings([a, b], torch.tensor([r["score"] for r in rows])).item()


def test_a_few_steps_on_scored_pairs_lower_the_cosent_loss(tiny_model_path, tmp_path):
    from drmix.api import train

    data = tmp_path / "sts.jsonl"
    rows = _scored_pairs(data)
    before = _cosent_of(tiny_model_path, rows)
    result = train(config(tiny_model_path, data, tmp_path / "run", max_steps=30, loss="cosent", batch_size=12,
                          learning_rate=2e-3, scheduler="constant"))
    assert _cosent_of(result.model_dir, rows) < 0.8 * before
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[1])["loss"] > 0


def test_scored_pairs_are_read_only_under_a_scored_pair_loss(tiny_model_path, tmp_path):
    from drmix.data.collections import load_collections
    from drmix.data.formats import reading_scored_pairs
    from drmix.train.trainer import Trainer

    data = tmp_path / "sts.jsonl"
    _scored_pairs(data, n=6)
    with pytest.raises(DataError, match="--loss cosent"):
        load_collections([str(data)])
    with reading_scored_pairs():
        [c] = load_collections([str(data)])
    assert c.dataset[0]["positive_scores"] == [1.0] and c.dataset[0]["negatives"] == []
    assert c.dataset[1]["positive_scores"] == [0.5]
    # a (query, positive) collection has no scores: refused by the loss, naming it
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"query": "alpha", "positive": "beta"}) + "\n" * 1)
    with pytest.raises(ConfigError, match="'plain'.*without exactly one score"):
        Trainer(config(tiny_model_path, plain, tmp_path / "run", max_steps=1, loss="cosent", batch_size=1))


@pytest.mark.parametrize("fields, match", [
    (dict(loss="cosent", strategy="groupdro", batching="mixed"), "one loss per batch"),
    (dict(loss="angle", matryoshka_dims=[4]), "--matryoshka-dims"),
])
def test_refusals_say_why(fields, match):
    with pytest.raises(ConfigError, match=match):
        objective_from_config(TrainConfig(**fields))


def test_pair_score_loss_objects_train_on_scored_pairs_too():
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, CosineSimilarityLoss

    from drmix.train.scored_pairs import ScoredPairLoss
    from drmix.train.st_losses import objective_from_loss

    obj = objective_from_loss(CoSENTLoss(None, scale=5.0), TrainConfig())
    assert isinstance(obj, ScoredPairLoss) and obj.scored_pairs and obj.num_negatives == 0
    cos = objective_from_loss(CosineSimilarityLoss(None), TrainConfig())
    q, d = torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [1.0, 0.0]])   # cosines 1 and 0
    batch = SimpleNamespace(positive_scores=np.array([0.5, 0.5]))
    # MSE of the cosines to the scores: ((1 - 0.5)^2 + (0 - 0.5)^2) / 2
    assert cos.losses(q, d, torch.ones(2, 0, dtype=torch.bool), gather=False, batch=batch)[0].item() == \
        pytest.approx(0.25)
    with pytest.raises(ConfigError, match="--strategy groupdro"):
        objective_from_loss(CoSENTLoss(None), TrainConfig(strategy="groupdro"))


def test_drmix_train_on_an_in_memory_scored_pair_dataset_as_sentence_transformers_takes_it(tiny_model_path,
                                                                                          tmp_path):
    import datasets
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    import drmix
    from drmix.train.scored_pairs import reads_scored_pairs

    ds = datasets.Dataset.from_dict({"sentence1": ["alpha beta", "gamma delta", "alpha gamma", "beta delta"],
                                     "sentence2": ["alpha beta", "omega psi", "alpha", "psi"],
                                     "score": [1.0, 0.0, 0.7, 0.2]})
    cfg = config(tiny_model_path, tmp_path / "unused", tmp_path / "run", max_steps=2, batch_size=4).replace(data=[])
    result = drmix.train(cfg, train_dataset=ds, loss="cosent")
    assert result.steps == 2
    cfg2 = cfg.replace(output_dir=str(tmp_path / "run2"))
    assert drmix.train(cfg2, train_dataset=ds, loss=CoSENTLoss(None)).steps == 2
    assert reads_scored_pairs(TrainConfig(loss="angle")) and not reads_scored_pairs(TrainConfig())


def test_cli_trains_cosent_on_a_csv_of_scored_pairs_and_other_losses_point_to_it(tiny_model_path, tmp_path, capsys):
    from cli_helpers import run

    csv = tmp_path / "sts.csv"
    csv.write_text("sentence1,sentence2,score\nalpha beta,alpha beta,5.0\ngamma delta,omega psi,0.0\n"
                   "alpha gamma,alpha,3.5\nbeta delta,psi,1.0\n", encoding="utf-8")
    common = ["train", "--data", str(csv), "--model", tiny_model_path, "--max-steps", "2", "--batch-size", "4",
              "--device", "cpu", "--no-show-progress"]
    code, _, err = run([*common, "--loss", "cosent", "--output-dir", str(tmp_path / "run")], capsys)
    assert code == 0, err
    assert (tmp_path / "run" / "model" / "modules.json").exists()
    code, _, err = run([*common, "--output-dir", str(tmp_path / "other")], capsys)
    assert code == 2 and "--loss cosent" in err and "sts.csv" in err


def test_one_score_each_is_counted_in_arrow():
    import datasets

    from drmix.train.st_losses import _one_score_each

    assert _one_score_each(datasets.Dataset.from_dict({"positive_scores": [[1.0], [0.5]]}))
    assert not _one_score_each(datasets.Dataset.from_dict({"positive_scores": [[1.0], [0.5, 0.2]]}))
    assert not _one_score_each(datasets.Dataset.from_dict({"positive_scores": [[1.0], []]}))
    assert not _one_score_each(datasets.Dataset.from_dict({"positive_scores": [[1.0], None]}))
