"""The throughput estimates are made at (drmix.recipes.throughput): measured with the run's model and lengths, or
assumed and said so; the arithmetic checked with a clock that ticks by hand (no test times anything)."""
from __future__ import annotations

import pytest

from drmix.recipes import throughput
from drmix.recipes.progress import StageWork, estimate_rows
from drmix.recipes.throughput import MODEL, Rate, Rates


class Clock:
    """A timer whose readings are given: each call returns the next one."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0)


def test_encoding_is_measured_after_a_warm_up_batch(tiny_model_path, monkeypatch):
    from drmix.model.encoder import load_encoder
    from drmix.retrieval import encode

    calls: list[tuple[int, int | None, bool]] = []
    original = encode.encode_texts

    def spy(model, texts, **kw):
        calls.append((len(texts), kw["max_length"], kw["cache_embeddings"]))
        return original(model, texts, **kw)

    monkeypatch.setattr(encode, "encode_texts", spy)
    model = load_encoder(tiny_model_path)
    # a warm-up call on 8 passages, then 2 batches of 8 in one call (the 5 passages taken again) between the
    # readings 10 and 14: 16 passages in 4 s
    rate = throughput.measure_encoding(model, [f"passage {i}" for i in range(5)], max_length=24, batch_size=8,
                                       timer=Clock(10.0, 14.0))
    assert rate == pytest.approx(4.0)
    assert calls == [(8, 24, False), (16, 24, False)]     # at the run's length, never from the embedding cache


def test_training_steps_count_examples_as_the_stages_do(tiny_model_path):
    from drmix.model.encoder import load_encoder

    model = load_encoder(tiny_model_path)
    was_training = model.training
    before = {k: v.clone() for k, v in model.state_dict().items()}
    texts = [f"a passage about topic {i} with a few more words" for i in range(6)]
    # 2 steps of 4 queries with 2 hard negatives each (counted as half an example): 2 x 4 x 2 = 16 in 8 s
    rate = throughput.measure_training(model, texts, batch_size=4, query_max_length=8, doc_max_length=16,
                                       num_negatives=2, timer=Clock(0.0, 8.0))
    assert rate == pytest.approx(2.0)
    assert model.training is was_training and model.max_seq_length == 64     # as it was
    assert any(not (v == before[k]).all() for k, v in model.state_dict().items())   # it did take the steps


def test_a_gpu_estimate_without_a_gpu_is_assumed_and_says_why(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rates = throughput.measure("cuda", model=None, texts=["x"], batch_size=4, query_max_length=8, doc_max_length=8)
    assert rates.examples == Rate(1000.0, False, "no GPU on this machine to measure; the assumption of docs/adapt.md")
    assert rates.encoding(MODEL).per_s == 10000.0 and not rates.measured
    assert rates.lines()[0] == ("- training: 1,000 examples/s (assumed: no GPU on this machine to measure; the "
                                "assumption of docs/adapt.md)")


def test_the_run_is_measured_with_its_model_and_each_encoder_at_its_length(tiny_model_path, monkeypatch):
    seen: list[tuple[str, int | None]] = []
    monkeypatch.setattr(throughput, "measure_encoding",
                        lambda model, texts, *, max_length, **kw: seen.append(("encode", max_length)) or 100.0)
    monkeypatch.setattr(throughput, "measure_training", lambda model, texts, **kw: seen.append(
        ("train", (kw["batch_size"], kw["query_max_length"], kw["doc_max_length"], kw["num_negatives"]))) or 20.0)
    rates = throughput.measure("cpu", model=tiny_model_path, texts=["a", "b"], batch_size=4, query_max_length=8,
                               doc_max_length=16, num_negatives=1, encoders={"teacher": (tiny_model_path, None)})
    assert seen == [("encode", 16), ("train", (4, 8, 16, 1)), ("encode", None)]
    assert rates.measured and rates.examples.per_s == 20.0 and set(rates.passages) == {MODEL, "teacher"}
    assert "2 steps of batch 4 at 8/16 tokens, 1 hard negatives" in rates.examples.how
    assert "at 64 tokens" in rates.passages["teacher"].how       # the teacher's own length: its max_seq_length
    missing = throughput.measure("cpu", model=tiny_model_path, texts=["a"], batch_size=4, query_max_length=8,
                                 doc_max_length=16, encoders={"teacher": ("/no/such/model", None)})
    assert not missing.passages["teacher"].measured and "did not load to measure" in missing.passages["teacher"].how


def test_an_estimate_at_given_rates_by_hand():
    rates = Rates("cpu", Rate(10.0, True, "m"), {MODEL: Rate(50.0, True, "m"), "teacher": Rate(5.0, False, "a")})
    work = [StageWork("train", examples=600), StageWork("teach", passages=300, encoder="teacher"),
            StageWork("eval", passages=3000), StageWork("other", passages=50, encoder="unmeasured")]
    rows = estimate_rows(work, rates)
    assert rows[:5] == ["Estimated time on cpu, at these rates:", "", "- training: 10 examples/s (measured: m)",
                        "- encoding by the model: 50 passages/s (measured: m)",
                        "- encoding by the teacher: 5 passages/s (assumed: a)"]
    # 600/10 = 60 s; 300/5 = 60 s; 3000/50 = 60 s; an encoder without a rate of its own goes at the model's
    assert "| train | 600 | 0 | 1.0 |" in rows and "| teach | 0 | 300 | 1.0 |" in rows
    assert "| eval | 0 | 3,000 | 1.0 |" in rows and "| other | 0 | 50 | 0.0 |" in rows
    assert rows[-1] == "| total | 600 | 3,350 | 3.0 |"
