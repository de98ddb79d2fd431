"""``--compile``: compiled training on the tiny random BERT gives eager's weights, clean checkpoints, exact resume.

The tests compile with ``backend="aot_eager"`` (forward and backward traced by dynamo/AOTAutograd, run with
eager kernels): no C/C++ toolchain is needed, and the traced graph -- which is what ``--compile`` changes -- is
exercised. The default ``inductor`` backend is measured in benchmarks/bench_compile.py; its exact resume is a
slow test (it needs a C++ compiler and minutes of compiling on a CPU).
"""
import json
import os
import shutil

import pytest
import torch
from safetensors import safe_open

from drmix.errors import ConfigError
from drmix.train.compile import compile_model, compile_targets
from drmix.train.trainer import Trainer

from train_helpers import config, make_collections, params, read_metrics, stopped_copy


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module", autouse=True)
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    flags = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch._dynamo.reset()
    torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])  # compile_model turns it on process-wide


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
    assert torch.are_deterministic_algorithms_enabled()  # inductor keeps deterministic accumulation kernels
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


def _with_dropout(path: str, p: float = 0.1):
    """The tiny model with dropout on (its config has none), so resuming must also restore the random state."""
    from drmix.model.encoder import load_encoder

    model = load_encoder(path)
    drops = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops
    for m in drops:
        m.p = p
    return model


def _check_resume_exact(tiny_model_path, data, tmp_path, backend: str) -> None:
    """An uninterrupted compiled run, then a copy of it resumed from its step-3 checkpoint in a process state that
    compiles afresh (``torch._dynamo.reset()``, as a new process would): the replayed steps 4-6 give the same
    weights and log records (the resume after a kill is the trainer's own test)."""
    import torch._dynamo

    opts = dict(max_steps=6, save_every=3, compile=True, compile_backend=backend)
    full = Trainer(config(tiny_model_path, data, tmp_path / "full", **opts), model=_with_dropout(tiny_model_path))
    full.train()
    stopped_copy(tmp_path / "full", tmp_path / "cut")  # no final model or weights.json left to find
    torch._dynamo.reset()
    resumed = Trainer(config(tiny_model_path, data, tmp_path / "cut", resume=True, **opts,
                             resume_from=str(tmp_path / "cut" / "checkpoints" / "step-3")),
                      model=_with_dropout(tiny_model_path))
    assert resumed.train().steps == 6
    starts = [r["step"] for r in map(json.loads, (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines())
              if r.get("event") == "start"]
    assert starts == [0, 3]  # the copy's first start, then the replay from step 3
    assert torch.equal(params(full.model), params(resumed.model))
    assert [m["loss"] for m in read_metrics(tmp_path / "cut")] == [m["loss"] for m in read_metrics(tmp_path / "full")]
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert state["config"]["optim"]["compile"] is True


def test_compiled_run_resumes_exactly(tiny_model_path, data, tmp_path):
    _check_resume_exact(tiny_model_path, data, tmp_path, "aot_eager")


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which(os.environ.get("CXX", "g++")), reason="inductor on CPU needs a C++ compiler")
def test_inductor_run_resumes_exactly(tiny_model_path, data, tmp_path):
    # the default backend: generated C++ kernels, dropout masks from inductor's generator (seeded from torch's,
    # whose state the checkpoint restores); dynamic shapes make the resumed run compile the same kernels
    _check_resume_exact(tiny_model_path, data, tmp_path, "inductor")


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
