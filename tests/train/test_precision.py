"""Precision: auto resolution, per-trainer autocast, fp16 loss scaling, two trainers with different precision."""
import torch

from drmix.device import inference_autocast, resolve_precision
from drmix.train.precision import Precision
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
