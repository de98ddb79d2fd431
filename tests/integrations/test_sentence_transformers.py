"""drmix's mixtures in SentenceTransformerTrainer: sampled shares follow the weights (binomial bounds), the
DRO updates move as the rules say on hand-computed losses, and the callback's weights are drmix's own."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict
from scipy.stats import norm
from torch.utils.data import BatchSampler, ConcatDataset, RandomSampler

from drmix.errors import CheckpointError, ConfigError
from drmix.integrations.sentence_transformers import MixtureBatchSampler, MixtureDRO, mixture
from drmix.mixture.dro import build_dro_strategy, DROConfig

SIZES = {"a": 40, "b": 20, "c": 12}
FAIL_PROB = 1e-6   # chance that a correct sampler fails one count test (Bonferroni over the datasets)


def binomial_bound(n: int, p: float, k: int) -> float:
    """Half-width of a two-sided bound on Binomial(n, p) counts, missed with probability FAIL_PROB / k (normal
    approximation to the binomial)."""
    return float(norm.ppf(1 - FAIL_PROB / (2 * k))) * math.sqrt(n * p * (1 - p))


def _train_dataset() -> DatasetDict:
    return DatasetDict({n: Dataset.from_dict({"anchor": [f"{n} question {i}" for i in range(s)],
                                              "positive": [f"{n} answer number {i}" for i in range(s)]})
                        for n, s in SIZES.items()})


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # two shared cores: tiny-model steps are 10x slower with oversubscribed threads
    yield
    torch.set_num_threads(before)


# -------------------------------------------------------------------------------------------- the sampler

def _sampler(weights, num_batches, seed=0, batch_size=4):
    data = [list(range(s)) for s in SIZES.values()]
    children = [BatchSampler(RandomSampler(d, generator=torch.Generator().manual_seed(i)), batch_size, False)
                for i, d in enumerate(data)]
    return MixtureBatchSampler.factory(weights, num_batches)(ConcatDataset(data), children, seed=seed)


def _dataset_of(batch: list[int]) -> int:
    edges = np.cumsum(list(SIZES.values()))
    ids = {int(np.searchsorted(edges, i, side="right")) for i in batch}
    assert len(ids) == 1, f"batch spans datasets {ids}"
    return ids.pop()


def test_sampler_counts_follow_weights_within_binomial_bounds():
    w = np.array([0.6, 0.3, 0.1])
    n = 20000
    sampler = _sampler(w, n)
    counts = np.bincount([_dataset_of(b) for b in sampler], minlength=3)
    assert counts.sum() == n == len(sampler)
    for c, p in zip(counts, w):
        assert abs(c - n * p) <= binomial_bound(n, p, 3), (counts, n * w)


def test_sampler_batches_come_from_each_datasets_own_sampler_and_zero_weight_is_never_drawn():
    sampler = _sampler([1.0, 0.0, 1.0], 60)
    batches = list(sampler)
    assert {_dataset_of(b) for b in batches} == {0, 2}
    a_rows = [i for b in batches if _dataset_of(b) == 0 for i in b]
    first_pass = a_rows[:SIZES["a"]]
    assert sorted(first_pass) == list(range(SIZES["a"]))   # a full pass without repeats, then a new pass
    # deterministic per (seed, epoch); another epoch draws another sequence
    assert [_dataset_of(b) for b in _sampler([1.0, 0.0, 1.0], 60)] == [_dataset_of(b) for b in batches]
    again = _sampler([1.0, 0.0, 1.0], 60)
    again.set_epoch(1)
    assert [_dataset_of(b) for b in again] != [_dataset_of(b) for b in batches]


def test_sampler_default_length_and_errors():
    assert len(_sampler([1, 1, 1], None)) == 10 + 5 + 3   # the datasets' batch counts at batch size 4
    with pytest.raises(ConfigError, match="3 datasets"):
        _sampler([1, 1], 5)
    with pytest.raises(ConfigError, match="non-negative"):
        _sampler([1, -1, 1], 5)


# --------------------------------------------------------------------------------------------- mixtures

def test_static_given_and_file_mixtures(tmp_path):
    train = _train_dataset()
    s = np.array(list(SIZES.values()), dtype=float)
    assert mixture(train).sampling == pytest.approx([1 / 3] * 3)
    assert mixture(train, "size").sampling == pytest.approx(s / s.sum())
    assert mixture(train, "temperature", temperature=2.0).sampling == pytest.approx(np.sqrt(s) / np.sqrt(s).sum())
    assert mixture(train, weights={"c": 1, "a": 3, "b": 0}).sampling == pytest.approx([0.75, 0.0, 0.25])
    # weights whose sum overflows (near 1.8e308) are scaled by the largest first, in either spelling
    assert mixture(train, weights=[1.5e308, 0.0, 0.5e308]).sampling == pytest.approx([0.75, 0.0, 0.25])
    assert mixture(train, weights={"a": 1.5e308, "b": 0, "c": 0.5e308}).sampling == pytest.approx([0.75, 0.0, 0.25])
    learned = tmp_path / "weights.json"
    learned.write_text(json.dumps({"collections": ["a", "b", "c", "other"], "weights": [0.2, 0.5, 0.2, 0.1]}))
    assert mixture(train, weights_file=learned).sampling == pytest.approx([2 / 9, 5 / 9, 2 / 9])
    top = mixture(train, weights_file=learned, transfer="top:0.7")   # floor(3 * 0.7) = 2: b, then a (first of ties)
    assert top.sampling == pytest.approx([0.5, 0.5, 0.0]) and top.loss_scales is None and top.info["kept"] == ["b", "a"]
    assert mixture(train, weights_file=learned, transfer="reweight").sampling == pytest.approx([2 / 9, 5 / 9, 2 / 9])
    loss = mixture(train, weights_file=learned, transfer="loss")
    assert loss.sampling == pytest.approx([1 / 3] * 3) and loss.loss_scales == pytest.approx([6 / 9, 15 / 9, 6 / 9])
    wrapped = loss.wrap_loss(_ConstantLoss(2.0))
    assert set(wrapped) == {"a", "b", "c"}
    assert float(wrapped["b"]({}, None).detach()) == pytest.approx(2.0 * 15 / 9)
    assert mixture(train).wrap_loss(base := _ConstantLoss(1.0)) is base
    with pytest.raises(ConfigError, match="no weight for training collection"):
        mixture(train, weights={"a": 1, "b": 1})
    with pytest.raises(ConfigError, match="weights_file"):
        mixture(train, transfer="top:0.7")
    with pytest.raises(ConfigError, match="unknown mixture"):
        mixture(train, "learned")


# ------------------------------------------------------------------------------ DRO on hand-computed losses

class _ConstantLoss(torch.nn.Module):
    """A loss whose value is set by the test (a parameter, so it has a gradient)."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = torch.nn.Parameter(torch.tensor(float(value)))
        self.calls = 0

    def forward(self, features, labels):
        self.calls += 1
        return self.value * 1.0


class _Args:
    gradient_accumulation_steps = 1
    output_dir = ""


class _State:
    global_step = 0
    is_world_process_zero = True


def _started(dro: MixtureDRO, tmp_path: Path, accumulation: int = 1) -> MixtureDRO:
    args = _Args()
    args.output_dir, args.gradient_accumulation_steps = str(tmp_path), accumulation
    dro.on_train_begin(args, _State(), None)
    return dro


def test_groupdro_moves_weight_to_the_higher_loss_by_the_rule(tmp_path):
    dro = _started(MixtureDRO(_train_dataset(), "groupdro", options={"lr": 0.5}), tmp_path)
    base = _ConstantLoss(2.0)
    losses = dro.wrap_loss(base)
    out = losses["a"]({}, None)                  # a batch of a, loss 2: q ∝ (e^{0.5*2}, 1, 1) / 3
    qa = math.e / (math.e + 2)
    assert dro.weights["a"] == pytest.approx(qa) and dro.weights["b"] == pytest.approx(1 / (math.e + 2))
    assert float(out.detach()) == pytest.approx(2.0 * 3 * qa)   # scaled by q_a / p_a with uniform p = 1/3
    base.value.data.fill_(1.0)
    losses["b"]({}, None)                        # then b, loss 1: q ∝ (e, e^{0.5}, 1)
    z = math.e + math.exp(0.5) + 1
    assert [dro.weights[n] for n in "abc"] == pytest.approx([math.e / z, math.exp(0.5) / z, 1 / z])
    assert dro.weights["c"] < dro.weights["b"] < dro.weights["a"]
    with torch.no_grad():                        # evaluation: not recorded, not scaled
        assert float(losses["c"]({}, None)) == pytest.approx(1.0)
    assert dro.strategy.n_steps == 2


def test_doremi_moves_by_the_excess_over_the_reference_with_smoothing(tmp_path):
    dro = _started(MixtureDRO(_train_dataset(), "doremi", reference={"a": 1.5, "b": 0.2, "c": 3.0}), tmp_path)
    base = _ConstantLoss(2.0)
    losses = dro.wrap_loss(base)
    losses["a"]({}, None)                        # excess max(2 - 1.5, 0) = 0.5; eta 1; then (1-c) q + c/3
    c = 1e-3
    q = np.array([math.exp(0.5), 1, 1]) / (math.exp(0.5) + 2)
    q = (1 - c) * q + c / 3
    assert [dro.weights[n] for n in "abc"] == pytest.approx(q.tolist())
    losses["c"]({}, None)                        # loss 2 under its reference 3: excess 0, only the smoothing moves
    q = (1 - c) * q + c / 3
    assert [dro.weights[n] for n in "abc"] == pytest.approx(q.tolist())
    assert dro.weights["a"] > dro.weights["b"] == pytest.approx(dro.weights["c"])


def test_doremi_reference_module_runs_on_the_same_batch_without_gradient(tmp_path):
    seen = {}

    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor(0.5))

        def forward(self, features, labels):
            seen.update(grad=torch.is_grad_enabled(), features=features)
            features[0]["written"] = True          # models write into the feature dicts: a copy must be passed
            return self.w * features[0]["x"].sum()

    dro = _started(MixtureDRO(_train_dataset(), "doremi", reference=Ref()), tmp_path)
    features = [{"x": torch.tensor([1.0, 3.0])}]
    dro.wrap_loss(_ConstantLoss(2.5))["b"](features, None)   # reference 0.5 * 4 = 2, excess 0.5
    assert seen["grad"] is False and "written" not in features[0]
    c = 1e-3
    q = np.array([1, math.exp(0.5), 1]) / (math.exp(0.5) + 2)
    assert [dro.weights[n] for n in "abc"] == pytest.approx(((1 - c) * q + c / 3).tolist())


def test_window_measures_batches_together(tmp_path):
    # accumulation 2: nothing moves at the first forward; at the second both batches are measured together
    dro = _started(MixtureDRO(_train_dataset(), "groupdro", options={"lr": 1.0}), tmp_path, accumulation=2)
    base = _ConstantLoss(1.0)
    losses = dro.wrap_loss(base)
    first = losses["a"]({}, None)
    assert dro.strategy.n_steps == 0 and float(first.detach()) == pytest.approx(1.0)
    base.value.data.fill_(3.0)
    losses["a"]({}, None)
    ref = build_dro_strategy("groupdro", DROConfig(lr=1.0))
    ref.setup(list(SIZES), list(SIZES.values()))
    ref.step_weights(np.array([1.0, 3.0]), None, np.array([0, 0]))   # M_a = mean(1, 3) = 2
    assert [dro.weights[n] for n in "abc"] == pytest.approx(ref.weights.tolist())


def test_refusals(tmp_path):
    train = _train_dataset()
    with pytest.raises(ConfigError, match="tDRO's stage 1 cannot run"):
        MixtureDRO(train, "tdro")
    with pytest.raises(ConfigError, match="pass reference="):
        MixtureDRO(train, "doremi")
    with pytest.raises(ConfigError, match="absent='keep'"):
        MixtureDRO(train, "groupdro", options={"absent": "keep"})
    with pytest.raises(ConfigError, match="invalid DRO option"):
        MixtureDRO(train, "groupdro", options={"nope": 1})
    with pytest.raises(ConfigError, match="callbacks="):
        MixtureDRO(train).wrap_loss(_ConstantLoss(1.0))["a"]({}, None)
    (tmp_path / "weights.json").write_text("{}")
    with pytest.raises(ConfigError, match="overwrite=True"):
        _started(MixtureDRO(train), tmp_path)
    _started(MixtureDRO(train, overwrite=True), tmp_path)


# ---------------------------------------------------------------------------------- in the real trainer

class _Recording(torch.nn.Module):
    """Wraps a loss and records which dataset each training batch came from."""

    def __init__(self, base, name, log):
        super().__init__()
        self.base, self.name, self.log = base, name, log

    @property
    def model(self):
        return self.base.model

    def forward(self, features, labels):
        if torch.is_grad_enabled():
            self.log.append(self.name)
        return self.base(features, labels)


def _trainer(model_path, out, *, sampler, loss_fn, steps, callbacks=(), accumulation=1, save_steps=None,
             batch_size=4):
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    model = SentenceTransformer(model_path, device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out), per_device_train_batch_size=batch_size, max_steps=steps, seed=3,
        gradient_accumulation_steps=accumulation, multi_dataset_batch_sampler=sampler, report_to="none",
        save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, logging_steps=1000,
        use_cpu=True, disable_tqdm=True, learning_rate=1e-3, dataloader_drop_last=False)
    return SentenceTransformerTrainer(model=model, args=args, train_dataset=_train_dataset(),
                                      loss=loss_fn(model), callbacks=list(callbacks))


def test_trainer_draws_batches_by_the_weights(tiny_model_path, tmp_path, one_thread):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    w = {"a": 0.6, "b": 0.3, "c": 0.1}
    mix = mixture(_train_dataset(), weights=w)
    seen: list[str] = []
    steps = 150
    trainer = _trainer(tiny_model_path, tmp_path / "out", sampler=mix.batch_sampler(num_batches=steps), steps=steps,
                       loss_fn=lambda m: {n: _Recording(MultipleNegativesRankingLoss(m), n, seen) for n in w})
    trainer.train()
    assert len(seen) == steps
    for name, p in w.items():
        assert abs(seen.count(name) - steps * p) <= binomial_bound(steps, p, 3), {n: seen.count(n) for n in w}
    # exactly the sampler's own draws for the trainer's seed, epoch 0
    expected = np.random.default_rng([3, 0, 65537]).choice(3, size=steps, p=mix.sampling)
    assert seen == [list(w)[i] for i in expected]


def test_groupdro_callback_weights_equal_drmix_strategy_and_resume(tiny_model_path, tmp_path, one_thread):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from transformers import TrainerCallback

    class StopAt(TrainerCallback):   # an interruption: same schedule (max_steps 12), stopped after step 6
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 6:
                control.should_save = control.should_training_stop = True
            return control

    def run(out, stop=False, resume=None):
        dro = MixtureDRO(_train_dataset(), "groupdro", options={"lr": 0.2}, update_every=2)
        trainer = _trainer(tiny_model_path, out, sampler=dro.batch_sampler(), steps=12, accumulation=2,
                           loss_fn=lambda m: dro.wrap_loss(MultipleNegativesRankingLoss(m)),
                           callbacks=[dro] + ([StopAt()] if stop else []))
        trainer.train(resume_from_checkpoint=resume)
        return dro

    dro = run(tmp_path / "full")
    lines = [json.loads(x) for x in (tmp_path / "full" / "weights.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4, 6, 8, 10, 12] and sum(lines[0]["counts"].values()) == 4
    # replay the per-dataset losses of every window through drmix's own strategy
    ref = build_dro_strategy("groupdro", DROConfig(lr=0.2))
    ref.setup(list(SIZES), list(SIZES.values()))
    for x in lines:
        present = [i for i, n in enumerate(SIZES) if x["counts"][n]]
        ref.step_weights(np.array([x["proxy_loss"][list(SIZES)[i]] for i in present]), None, np.array(present))
    assert [dro.weights[n] for n in SIZES] == pytest.approx(ref.weights.tolist(), rel=1e-12)
    saved = json.loads((tmp_path / "full" / "weights.json").read_text())
    assert saved["weights"] == pytest.approx(ref.weights.tolist()) and saved["trainer"] == "sentence-transformers"
    assert max(abs(w - 1 / 3) for w in saved["weights"]) > 1e-4   # the weights moved
    from drmix.report.html import render_report   # drmix report draws the run's weights and proxy losses

    assert "Mixture weights" in render_report(tmp_path / "full")
    # a run stopped at step 6 and resumed from its checkpoint ends with the same weights
    part = tmp_path / "part"
    run(part, stop=True)
    assert (part / "checkpoint-6" / "drmix_mixture.json").is_file()
    resumed = run(part, resume=str(part / "checkpoint-6"))
    assert [resumed.weights[n] for n in SIZES] == pytest.approx([dro.weights[n] for n in SIZES], rel=1e-6)
    assert [json.loads(x)["step"] for x in (part / "weights.jsonl").read_text().splitlines()] == [2, 4, 6, 8, 10, 12]
    (part / "checkpoint-6" / "drmix_mixture.json").unlink()
    with pytest.raises(CheckpointError, match="drmix_mixture.json"):
        run(part, resume=str(part / "checkpoint-6"))


def test_example_script_runs(tiny_model_path, tmp_path, one_thread, monkeypatch):
    import runpy
    import sys

    from drmix.data.beir import write_beir

    dirs = []
    for name in ("alpha", "beta"):
        corpus = {f"d{i}": {"title": "", "text": f"{name} document {i}"} for i in range(12)}
        queries = {f"q{i}": f"{name} question {i}" for i in range(12)}
        dirs.append(write_beir(tmp_path / name, corpus, queries, {"train": {f"q{i}": {f"d{i}": 1} for i in range(12)}}))
    script = Path(__file__).resolve().parents[2] / "examples" / "sentence_transformers" / "train_mixture.py"
    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", [str(script), "--output-dir", str(out), "--model", tiny_model_path,
                                      "--data", f"alpha={dirs[0]}", "--data", f"beta={dirs[1]}", "--dro", "groupdro",
                                      "--steps", "3", "--batch-size", "4"])
    runpy.run_path(str(script), run_name="__main__")
    saved = json.loads((out / "weights.json").read_text())
    assert saved["collections"] == ["alpha", "beta"] and saved["steps"] == 3
    assert (out / "model" / "modules.json").is_file()
