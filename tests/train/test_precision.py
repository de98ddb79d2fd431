"""Precision: auto resolution, per-trainer autocast, fp16 loss scaling, two trainers with different precision,
and drmix's trainer after another library's trainer left accelerate's process state at bf16."""
import pytest
import torch

from drmix.device import inference_autocast, resolve_precision
from drmix.train.precision import Precision, release_foreign_state
from train_helpers import config, make_collections, read_metrics


def test_auto_resolves_to_fp32_on_cpu_and_explicit_choices_are_kept():
    assert resolve_precision("auto", "cpu") == "no"
    assert resolve_precision(None, "cpu") == "no"
    assert resolve_precision("fp32", "cpu") == "no"
    assert resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("fp16", "cuda") == "fp16"
    lin = torch.nn.Linear(4, 4)
    with inference_autocast("auto", "cpu"):
        assert lin(torch.ones(1, 4)).dtype == torch.float32
    with inference_autocast("bf16", "cpu"):
        assert lin(torch.ones(1, 4)).dtype == torch.bfloat16


def test_fp16_scaler_unscales_gradients_to_their_true_value():
    p = Precision("fp16", "cpu")
    assert p.scaler is not None
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([w], lr=0.5)
    x = torch.tensor([1.0, -2.0, 3.0])
    p.backward((w * x).sum())
    assert w.grad.abs().max() > 100  # scaled (initial scale 2**16)
    p.unscale_(opt)
    torch.testing.assert_close(w.grad, x)
    p.step(opt)
    torch.testing.assert_close(w.detach(), -0.5 * x)
    assert p.state_dict()["scaler"]["scale"] == 2.0 ** 16


def test_two_trainers_with_different_precision_in_one_process(tiny_model_path, tmp_path):
    from drmix.train.trainer import Trainer

    data = make_collections(tmp_path / "data", n=16)
    fp32 = Trainer(config(tiny_model_path, data, tmp_path / "a", max_steps=2, mixed_precision="no"))
    bf16 = Trainer(config(tiny_model_path, data, tmp_path / "b", max_steps=2, mixed_precision="bf16"))
    auto = Trainer(config(tiny_model_path, data, tmp_path / "c", max_steps=2))  # the default: auto
    assert (fp32.precision.name, bf16.precision.name, auto.precision.name) == ("no", "bf16", "no")
    lin = torch.nn.Linear(2, 2)
    with bf16.precision.autocast():
        assert lin(torch.ones(1, 2)).dtype == torch.bfloat16
    with fp32.precision.autocast():  # the first trainer kept its precision after the second was made
        assert lin(torch.ones(1, 2)).dtype == torch.float32
    for t, out in ((fp32, "a"), (bf16, "b"), (auto, "c")):
        assert t.train().steps == 2
        assert len(read_metrics(tmp_path / out)) == 2


@pytest.fixture()
def fresh_accelerate_state():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _st_train_bf16(model_path, out):
    """One step of sentence-transformers' own trainer at bf16: it leaves accelerate's state at bf16."""
    from datasets import Dataset
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments, losses)

    model = SentenceTransformer(model_path, device="cpu")
    ds = Dataset.from_dict({"anchor": ["alpha beta", "gamma delta"], "positive": ["alpha", "gamma"]})
    args = SentenceTransformerTrainingArguments(output_dir=str(out), per_device_train_batch_size=2, max_steps=1,
                                                use_cpu=True, bf16=True, report_to=[], save_strategy="no",
                                                disable_tqdm=True)
    SentenceTransformerTrainer(model=model, args=args, train_dataset=ds,
                               loss=losses.MultipleNegativesRankingLoss(model)).train()


def test_sentence_transformers_trainer_at_bf16_and_drmix_trainer_alternate_in_one_process(
        tiny_model_path, tmp_path, fresh_accelerate_state):
    """bench_train.py --rounds 2: drmix, ST at bf16, drmix again (refused before), ST again."""
    from accelerate.state import AcceleratorState

    from drmix.train.trainer import Trainer

    data = make_collections(tmp_path / "data", n=8)
    for r in range(2):
        drmix = Trainer(config(tiny_model_path, data, tmp_path / f"d{r}", max_steps=1, mixed_precision="no"))
        assert AcceleratorState().mixed_precision == "no"
        assert drmix.train().steps == 1
        _st_train_bf16(tiny_model_path, tmp_path / f"st{r}")
        assert AcceleratorState._shared_state["_mixed_precision"] == "bf16"


def test_release_clears_only_a_state_drmix_would_be_refused(fresh_accelerate_state):
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    assert release_foreign_state(cpu=True) is False  # nothing built yet
    Accelerator(mixed_precision="no", cpu=True)
    assert release_foreign_state(cpu=True) is False  # drmix's own state is kept
    assert AcceleratorState._shared_state["_mixed_precision"] == "no"
    AcceleratorState._reset_state(reset_partial_state=True)
    Accelerator(mixed_precision="bf16", cpu=True)
    with pytest.raises(ValueError, match="already been initialized"):
        Accelerator(mixed_precision="no", cpu=True)
    assert release_foreign_state(cpu=True) is True
    assert Accelerator(mixed_precision="no", cpu=True).mixed_precision == "no"


def test_release_on_a_gpu_keeps_the_process_state_and_clears_the_precision(fresh_accelerate_state):
    """A stand-in for CUDA: the state another trainer left on a GPU (device cuda, bf16)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState

    Accelerator(mixed_precision="bf16", cpu=True)
    for shared in (PartialState._shared_state, AcceleratorState._shared_state):
        shared["device"] = torch.device("cuda", 0)
    assert release_foreign_state(cpu=False) is True
    assert AcceleratorState._shared_state == {}
    assert PartialState._shared_state["device"] == torch.device("cuda", 0)  # the process group is kept
    Accelerator(mixed_precision="no", cpu=True)
    for shared in (PartialState._shared_state, AcceleratorState._shared_state):
        shared["device"] = torch.device("cuda", 0)
    assert release_foreign_state(cpu=False) is False  # already "no" on the GPU: nothing to clear
    assert release_foreign_state(cpu=True) is True  # a CPU run after a GPU one starts the process state afresh
    assert PartialState._shared_state == {} and AcceleratorState._shared_state == {}


def test_release_leaves_a_distributed_or_deepspeed_state_alone(fresh_accelerate_state):
    """Under torch.distributed the process group is never torn down, and DeepSpeed's precision is its config's
    (accelerate does not refuse it): nothing is cleared."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, DistributedType

    Accelerator(mixed_precision="no", cpu=True)
    AcceleratorState._shared_state.update(device=torch.device("cuda", 0), distributed_type=DistributedType.MULTI_GPU)
    assert release_foreign_state(cpu=True) is False
    AcceleratorState._shared_state.update(_mixed_precision="bf16", distributed_type=DistributedType.DEEPSPEED)
    assert release_foreign_state(cpu=False) is False
    assert AcceleratorState._shared_state["_mixed_precision"] == "bf16"


def test_bf16_asked_for_on_a_cpu_without_bf16_units_runs_and_says_so(monkeypatch, caplog):
    """--bf16 on a CPU without AMX is what was asked for (autocast to bf16) and one warning line names the fp32
    option; with AMX (mocked) nothing is said."""
    import logging

    from drmix import device

    monkeypatch.setattr(device, "_warned", set())
    monkeypatch.setattr(device, "cpu_bf16", lambda: {"avx512_bf16": True, "amx": False, "arm_bf16": False,
                                                     "fast": False})
    with caplog.at_level(logging.WARNING, logger="drmix.device"):
        p = Precision("bf16", "cpu")
    assert p.name == "bf16" and p.dtype == torch.bfloat16
    assert "without bf16 matrix units" in caplog.text and "--mixed-precision no" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="drmix.device"):
        Precision("auto", "cpu")
        Precision("no", "cpu")
    assert caplog.text == ""
    monkeypatch.setattr(device, "_warned", set())
    monkeypatch.setattr(device, "cpu_bf16", lambda: {"avx512_bf16": True, "amx": True, "arm_bf16": False,
                                                     "fast": True})
    with caplog.at_level(logging.WARNING, logger="drmix.device"):
        Precision("bf16", "cpu")
    assert caplog.text == ""
