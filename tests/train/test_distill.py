"""Distillation from teacher scores (MarginMSE, KL): values by hand, refusals, and training toward the teacher."""
import json
import math
import random

import numpy as np
import pytest
import torch

from drmix.data.batch import Batch
from drmix.errors import ConfigError, DataError
from drmix.train.distill import DistillKL, MarginMSE, check_teacher_scores

from train_helpers import WORDS, config

# two queries, two hard-negative slots each (the second query has one negative)
Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
# documents: p0, p1, then the negatives present: n00, n01, n10
D = torch.tensor([[0.8, 0.6], [0.0, 1.0], [0.6, 0.8], [0.0, 1.0], [1.0, 0.0]])
MASK = torch.tensor([[True, True], [True, False]])


def _batch(pos=(2.0, 1.0), negs=((1.5, -1.0), (3.0,))):
    return Batch(["a", "b"], ["p0", "p1"], [["n00", "n01"], ["n10"]], np.zeros(2, dtype=np.int64),
                 positive_scores=np.array(pos), negative_scores=[list(n) for n in negs])


def test_margin_mse_by_hand():
    # student scores: row 0: p 0.8, n 0.6, 0.0; row 1: p 1.0, n 0.0
    # row 0 margins 0.2, 0.8 vs teacher 0.5, 3.0 -> ((0.2-0.5)^2 + (0.8-3.0)^2) / 2 = (0.09 + 4.84) / 2
    # row 1 margin 1.0 vs teacher -2.0 -> 9.0
    got = MarginMSE(num_negatives=2).losses(Q, D, MASK, gather=False, batch=_batch())
    assert got.tolist() == pytest.approx([(0.09 + 4.84) / 2, 9.0], abs=1e-6)


def test_margin_mse_is_sentence_transformers_loss_when_every_row_is_full():
    from sentence_transformers.sentence_transformer.losses import MarginMSELoss

    torch.manual_seed(0)
    q, p, n1, n2 = (torch.randn(4, 6) for _ in range(4))
    labels = torch.randn(4, 3)    # [positive, negative_1, negative_2] teacher scores
    batch = Batch(list("abcd"), list("abcd"), [["x", "y"]] * 4, np.zeros(4, dtype=np.int64),
                  positive_scores=labels[:, 0].double().numpy(), negative_scores=labels[:, 1:].tolist())
    d = torch.cat([p, torch.stack([n1, n2], 1).reshape(-1, 6)])
    ours = MarginMSE(num_negatives=2).losses(q, d, torch.ones(4, 2, dtype=torch.bool), gather=False, batch=batch)
    theirs = MarginMSELoss.__new__(MarginMSELoss)
    torch.nn.Module.__init__(theirs)
    from sentence_transformers.util import pairwise_dot_score

    theirs.similarity_fct, theirs.loss_fct = pairwise_dot_score, torch.nn.MSELoss()
    assert ours.mean().item() == pytest.approx(theirs.compute_loss_from_embeddings([q, p, n1, n2], labels).item(),
                                               rel=1e-5)


def test_kl_by_hand():
    # tau = 0.5 (student), tau_t = 1 (teacher)
    # row 0: student 0.8, 0.6, 0.0 / 0.5 -> 1.6, 1.2, 0; teacher 2.0, 1.5, -1.0
    # row 1: student 1.0, 0.0 / 0.5 -> 2, 0; teacher 1.0, 3.0
    def kl(s, t):
        ps = [math.exp(x) / sum(math.exp(y) for y in s) for x in s]
        pt = [math.exp(x) / sum(math.exp(y) for y in t) for x in t]
        return sum(a * (math.log(a) - math.log(b)) for a, b in zip(pt, ps))

    got = DistillKL(num_negatives=2, temperature=0.5).losses(Q, D, MASK, gather=False, batch=_batch())
    assert got.tolist() == pytest.approx([kl([1.6, 1.2, 0.0], [2.0, 1.5, -1.0]), kl([2.0, 0.0], [1.0, 3.0])],
                                         abs=1e-6)
    hot = DistillKL(num_negatives=2, temperature=0.5, teacher_temperature=2.0).losses(Q, D, MASK, gather=False,
                                                                                     batch=_batch())
    assert hot[1].item() == pytest.approx(kl([2.0, 0.0], [0.5, 1.5]), abs=1e-6)


def test_distillation_refuses_what_it_cannot_train():
    with pytest.raises(ConfigError, match="num_negatives"):
        MarginMSE(num_negatives=0)
    with pytest.raises(ConfigError, match="teacher scores"):
        MarginMSE(num_negatives=1).losses(Q, D, MASK, gather=False, batch=None)


def _collection(rows, scores=True, name="c"):
    import datasets

    from drmix.data.collections import Collection

    data = {"query": [r[0] for r in rows], "positives": [r[1] for r in rows], "negatives": [r[2] for r in rows]}
    if scores:
        data["positive_scores"] = [r[3] for r in rows]
        data["negative_scores"] = [r[4] for r in rows]
    return Collection(name=name, dataset=datasets.Dataset.from_dict(data), source=f"{name}.jsonl")


def test_missing_scores_are_refused_before_training():
    with pytest.raises(ConfigError, match="collection 'plain' has none"):
        check_teacher_scores([_collection([("q", ["p"], ["n"])], scores=False, name="plain")], "kl")
    rows = [("q", ["p"], ["n"], [1.0], [0.5]), ("r", ["p"], ["n"], [1.0], []), ("s", ["p"], ["n"], [], [])]
    with pytest.raises(DataError, match=r"2 of 3 rows .*\(the first is row 2\)") as e:
        check_teacher_scores([_collection(rows, name="half")], "margin_mse")
    assert e.value.path == "half.jsonl"


NAN, INF = float("nan"), float("inf")


def test_teacher_scores_that_are_all_nan_are_refused_naming_the_row_and_column():
    """Every row without a finite score: every step's loss would be 0 (nothing learned)."""
    rows = [("q", ["p"], ["n"], [NAN], [NAN]), ("r", ["p"], ["n", "m"], [INF], [NAN, -INF])]
    with pytest.raises(DataError) as e:
        check_teacher_scores([_collection(rows, name="nan")], "kl")
    assert e.value.path == "nan.jsonl"
    assert "every one of the 2 rows" in e.value.message and "row 1, positive_scores" in e.value.message
    assert "--loss infonce" in e.value.fix
    flag = _collection([("q", ["p"], ["n"], [1.0], [NAN])] * 3, name="flag")
    flag.layout = "flag"  # named by the file's own column
    check_teacher_scores([flag], "kl")  # the positive's score is finite: trained, warned
    flag = _collection([("q", ["p"], ["n"], [NAN], [NAN])] * 3, name="flag")
    flag.layout = "flag"
    with pytest.raises(DataError, match=r"row 1, pos_scores"):
        check_teacher_scores([flag], "margin_mse")


def test_a_few_nan_teacher_scores_are_counted_and_said(caplog):
    import logging

    rows = [("q", ["p"], ["n"], [1.0], [0.5]), ("r", ["p"], ["n", "m"], [1.0], [0.2, NAN]),
            ("s", ["p"], ["n"], [NAN], [NAN]), ("t", ["p"], ["n"], [2.0], [1.0])]
    with caplog.at_level(logging.WARNING, logger="drmix"):
        check_teacher_scores([_collection(rows, name="some")], "kl")
    said = [r.getMessage() for r in caplog.records if "NaN or infinite" in r.getMessage()]
    assert len(said) == 1 and "2 of 4 rows" in said[0] and "row 2, negative_scores" in said[0]
    assert "1 of them has no finite score" in said[0]


def test_the_builder_draws_scores_with_their_texts():
    from drmix.data.sampling import BatchBuilder

    rows = [("q", ["p0", "p1", "p2"], ["n0", "n1", "n2", "n3"], [0.0, 1.0, 2.0], [10.0, 11.0, 12.0, 13.0])] * 2
    for seed in range(5):
        batch = BatchBuilder([_collection(rows)], 2, seed=seed, scores=True).build([(0, 0), (0, 1)])
        for p, ps, ns, nss in zip(batch.positives, batch.positive_scores, batch.negatives, batch.negative_scores):
            assert ps == float(p[1:]) and nss == [10.0 + float(n[1:]) for n in ns]


def _distill_data(folder):
    """Each query's positive repeats its words, a 'half' negative two of them, an 'other' negative none; the
    teacher scores them 0.9, 0.5, 0.0."""
    rng = random.Random(1)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for _ in range(24):
        q = rng.sample(WORDS, 3)
        rest = [w for w in WORDS if w not in q]
        rows.append({"query": " ".join(q), "positive": " ".join(q + rng.sample(rest, 3)),
                     "negatives": [" ".join(q[:2] + rng.sample(rest, 4)), " ".join(rng.sample(rest, 6))],
                     "positive_scores": [0.9], "negative_scores": [0.5, 0.0]})
    (folder / "teacher.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _teacher_fit(model, rows, temperature=0.1):
    """The student against the teacher on ``rows``: the mean squared error of the margins (what MarginMSE
    minimises), the mean KL of the softmaxes (what KL minimises) and the share of candidate pairs ordered as the
    teacher orders them."""
    q = model.encode([r["query"] for r in rows], convert_to_tensor=True)
    docs = [[r["positive"], *r["negatives"]] for r in rows]
    d = model.encode([t for ds in docs for t in ds], convert_to_tensor=True).reshape(len(rows), 3, -1)
    s = torch.einsum("bd,bkd->bk", q, d)
    t = torch.tensor([[0.9, 0.5, 0.0]] * len(rows))
    mse = (((s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:])) ** 2).mean().item()
    pt, log_ps = t.softmax(-1), (s / temperature).log_softmax(-1)
    kl = (pt * (pt.log() - log_ps)).sum(-1).mean().item()
    agree = np.mean([float((s[:, i] > s[:, j]).float().mean()) for i, j in [(0, 1), (0, 2), (1, 2)]])
    return {"margin_mse": mse, "kl": kl, "agree": agree}


@pytest.mark.parametrize("loss", ["margin_mse", "kl"])
def test_training_moves_the_student_toward_the_teachers_order(tiny_model_path, tmp_path, loss):
    from sentence_transformers import SentenceTransformer

    from drmix.api import train

    rows = _distill_data(tmp_path / "data")
    before = _teacher_fit(SentenceTransformer(tiny_model_path, device="cpu"), rows)
    result = train(config(tiny_model_path, tmp_path / "data", tmp_path / "run", max_steps=30, loss=loss,
                          num_negatives=2, scheduler="constant", temperature=0.1))
    after = _teacher_fit(SentenceTransformer(str(result.model_dir), device="cpu"), rows)
    assert after[loss] < 0.7 * before[loss] and after["agree"] > before["agree"]
    card = (result.model_dir / "README.md").read_text()
    assert f"loss:{'MarginMSE' if loss == 'margin_mse' else 'DistillKL'}" in card
