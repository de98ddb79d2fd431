"""``--compile``: compiled training on the tiny random BERT gives eager's weights, clean checkpoints, exact resume.

The tests compile with ``backend="aot_eager"`` (forward and backward traced by dynamo/AOTAutograd, run with
eager kernels): no C/C++ toolchain is needed, and the traced graph -- which is what ``--compile`` changes -- is
exercised. The default ``inductor`` backend is measured in benchmarks/bench_compile.py.
"""
import json

import pytest
import torch
from safetensors import safe_open

from drmix.errors import ConfigError
from drmix.train.compile import compile_model, compile_targets
from drmix.train.trainer import Trainer

from train_helpers import config, make_collections, params, read_metrics


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module", autouse=True)
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled(**kw):
    return dict(compile=True, compile_backend="aot_eager", **kw)


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _saved_keys(folder) -> set[str]:
    keys = set()
    for f in folder.rglob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            keys |= set(st.keys())
    return keys


def test_compiled_training_matches_eager_and_saves_plain_names(tiny_model_path, data, tmp_path):
    eager = Trainer(config(tiny_model_path, data, tmp_path / "eager", max_steps=4, save_every=2))
    eager.train()
    assert all(m._compiled_call_impl is None for m in eager.model.modules())  # off: nothing compiled
    comp = Trainer(config(tiny_model_path, data, tmp_path / "comp", max_steps=4, save_every=2, **_compiled()))
    comp.train()
    assert _graphs() >= 1  # the backbone really ran through torch.compile
    assert [m._compiled_call_impl is not None for m in compile_targets(comp.model)] == [True]
    # aot_eager runs the same aten kernels on the traced graph; only AOTAutograd's decompositions may round
    # differently (float32 eps ~1.2e-7 per op). Four AdamW steps at lr 1e-3 move each weight by up to ~4e-3,
    # so 1e-5 is far below any real difference (a wrong gradient or a skipped step moves weights by ~1e-3).
    diff = (params(eager.model) - params(comp.model)).abs().max().item()
    assert diff <= 1e-5, diff
    from drmix.model.encoder import load_encoder

    assert (params(eager.model) - params(load_encoder(tiny_model_path))).abs().max() > 1e-3  # the weights moved
    le, lc = ([m["loss"] for m in read_metrics(tmp_path / r)] for r in ("eager", "comp"))
    assert lc == pytest.approx(le, abs=1e-5)
    # the in-memory state dict, every checkpoint and the final folder carry the eager model's parameter names
    assert list(comp.model.state_dict()) == list(eager.model.state_dict())
    for sub in ("checkpoints/step-2", "checkpoints/step-4", "model"):
        keys = _saved_keys(tmp_path / "comp" / sub)
        assert keys and keys == _saved_keys(tmp_path / "eager" / sub), sub
        assert not any("_orig_mod" in k for k in keys)


def test_compiled_run_resumes_exactly(tiny_model_path, data, tmp_path):
    full = Trainer(config(tiny_model_path, data, tmp_path / "full", max_steps=6, save_every=3, **_compiled()))
    full.train()

    class Killed(Exception):
        pass

    def kill_at_4(ctx):
        if ctx.step == 4:
            raise Killed

    with pytest.raises(Killed):
        Trainer(config(tiny_model_path, data, tmp_path / "cut", max_steps=6, save_every=3, **_compiled()),
                callbacks=[kill_at_4]).train()
    resumed = Trainer(config(tiny_model_path, data, tmp_path / "cut", max_steps=6, save_every=3, resume=True,
                             **_compiled()))
    assert resumed.train().steps == 6
    assert torch.equal(params(full.model), params(resumed.model))
    assert [m["loss"] for m in read_metrics(tmp_path / "cut")] == [m["loss"] for m in read_metrics(tmp_path / "full")]
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert state["config"]["compile"] is True


def test_compiling_is_not_a_training_change():
    from drmix.train.resume_check import training_changes

    before = {"compile": False, "compile_backend": "inductor", "seed": 0}
    assert training_changes(before, {"compile": True, "compile_backend": "aot_eager", "seed": 0}) == {}
    assert training_changes(before, {"compile": True, "compile_backend": "aot_eager", "seed": 1}) == {
        "seed": {"before": 0, "after": 1}}


def test_unknown_backend_is_refused(tiny_model_path):
    from drmix.model.encoder import load_encoder

    with pytest.raises(ConfigError, match="backend"):
        compile_model(load_encoder(tiny_model_path), "no-such-backend")
