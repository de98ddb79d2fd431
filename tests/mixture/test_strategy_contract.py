"""Every registered strategy through the same checks: its weights sum to 1, its state survives a round trip,
its cross-process reductions go through the one helper (the identity on one process), and a run resumed from a
checkpoint comes to the same model and weights.

A strategy is given what its registry flags ask for (a reference model, dev sets, mixed batches); the
built-in ones also get small options so that their updates happen within a few steps.
"""
import ast
import copy
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import drmix
from drmix.config import TrainConfig
from drmix.device import all_reduce
from drmix.errors import ConfigError
from drmix.mixture.registry import (BUILTIN, STRATEGIES, StrategySpec, build_strategy, check_config, get_strategy,
                                    register_strategy, registered_strategies, strategy_names, unregister_strategy)
from drmix.train.trainer import Trainer

NAMES = list(registered_strategies())
#: options that make the built-in strategies update within a few steps (others run with their defaults)
FAST = {"idro": {"clusters": 2, "refresh_every": 2, "kmeans_iterations": 2, "kmeans_restarts": 1},
        "infdds": {"update_every": 2, "warmup_steps": 0, "train_batch_size": 4, "dev_batch_size": 4},
        "multidds": {"update_every": 2, "warmup_steps": 0, "train_batch_size": 4, "dev_batch_size": 4}}
WORDS = "apple river stone cloud music garden window summer paper silver forest engine doctor planet".split()


def test_the_builtin_strategies_register_themselves():
    assert set(NAMES) >= {"static", "tdro", "doremi", "groupdro", "infdds", "multidds", "idro"}
    assert strategy_names(family="dro") == ("doremi", "groupdro", "tdro")
    assert get_strategy("TDRO").needs_reference and not get_strategy("groupdro").needs_reference
    assert get_strategy("infdds").needs_dev and get_strategy("tdro").requires_mixed_batches
    for spec in registered_strategies().values():
        assert spec.help and callable(spec.build) and spec.card_text
        built = build_strategy(TrainConfig(strategy=spec.name), ["a", "b"])
        assert built.name == spec.name  # what weights.json and the logs call it
        # every strategy that learns weights cites the paper it implements, with its arXiv id where it has one
        assert (spec.paper is not None) == (spec.name != "static")
    assert {s: get_strategy(s).paper.arxiv for s in ("tdro", "doremi", "groupdro", "multidds", "idro")} == {
        "tdro": "2408.10613", "doremi": "2305.10429", "groupdro": "1911.08731", "multidds": "2004.06748",
        "idro": "2210.15212"}


def test_the_builtin_list_is_explicit_and_complete():
    """Each built-in strategy's module is named in BUILTIN (no directory scan finds a module by accident)."""
    assert {spec.build.__module__ for spec in registered_strategies().values()} <= set(BUILTIN)
    assert STRATEGIES.builtin == BUILTIN


def test_the_reference_need_follows_the_measurement_option():
    from drmix.mixture.dro import DROConfig

    tdro, groupdro = get_strategy("tdro"), get_strategy("groupdro")
    assert tdro.needs_reference_with(DROConfig()) and not tdro.needs_reference_with(DROConfig(measurement="raw"))
    assert not groupdro.needs_reference_with(None) and groupdro.needs_reference_with(DROConfig(measurement="ratio"))
    assert not get_strategy("infdds").needs_reference_with(None)


def test_unknown_names_and_options_are_refused_before_anything_loads(tmp_path):
    with pytest.raises(ConfigError, match="unknown strategy 'tdr0'.*tdro"):
        check_config(TrainConfig(strategy="tdr0"))
    with pytest.raises(ConfigError, match="dro option .*lrr"):
        check_config(TrainConfig(strategy="tdro", tdro={"lrr": 1}))
    with pytest.raises(ConfigError, match="influence option .*update_every"):
        check_config(TrainConfig(strategy="infdds", infdds={"update_every": 0}))
    with pytest.raises(ConfigError, match="takes no options"):
        check_config(TrainConfig(strategy="static", strategy_options={"x": 1}))
    # the trainer checks first: the missing model and data are never reached
    with pytest.raises(ConfigError, match="unknown strategy 'tdr0'"):
        Trainer(TrainConfig(strategy="tdr0", model=str(tmp_path / "no-model"), data=[str(tmp_path / "no-data")]))
    # and so does the command line, naming the config file
    from drmix.cli import main

    (tmp_path / "c.yaml").write_text("mixture: {strategy: groupdro}\ndro: {lrr: 1}\n")
    with pytest.raises(SystemExit) as e:
        main(["train", str(tmp_path / "c.yaml"), "--data", str(tmp_path / "no-data")])
    assert e.value.code == 2
    cfg = TrainConfig(strategy="groupdro", tdro={"lr": 0.5})  # written as given (config.yaml, resume checks)
    assert cfg.dro == {"lr": 0.5} and "measurement" not in cfg.model_dump()["dro"]


def test_a_strategy_of_another_module_registers_with_its_own_options(tmp_path):
    from pydantic import BaseModel, ConfigDict

    from drmix.mixture.static import StaticStrategy

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        first: float = 0.5

    def build(config, options, names, weights):
        rest = (1 - options.first) / (len(names) - 1)
        return StaticStrategy(np.array([options.first] + [rest] * (len(names) - 1)))

    register_strategy(StrategySpec(name="contract-first", build=build, options=Options, help="first gets more"))
    try:
        cfg = TrainConfig(strategy="contract-first", strategy_options={"first": 0.75})
        s = build_strategy(cfg, ["a", "b", "c"])
        s.setup(["a", "b", "c"], [1, 1, 1])
        np.testing.assert_allclose(s.sampling_weights(), [0.75, 0.125, 0.125])
        with pytest.raises(ConfigError, match="strategy_options option .*second"):
            check_config(TrainConfig(strategy="contract-first", strategy_options={"second": 1}))
    finally:
        unregister_strategy("contract-first")
    assert "contract-first" not in registered_strategies()


def test_cross_process_reductions_go_through_the_one_helper():
    """No module calls torch.distributed's all_reduce/broadcast itself, and the helper is the identity on one process."""
    root = Path(drmix.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path == root / "device.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("all_reduce", "broadcast") and \
                    "distributed" in ast.unparse(node.value):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []
    t = torch.tensor([1.0, 2.0])
    assert all_reduce(t) is t and t.tolist() == [1.0, 2.0] and all_reduce(t, "mean").tolist() == [1.0, 2.0]
    a = np.array([3.0, 4.0])
    np.testing.assert_array_equal(all_reduce(a), a)


# ------------------------------------------------------------------------------------------- with the trainer

def _write_data(root: Path) -> Path:
    from drmix.data.beir import write_beir

    rng = random.Random(0)
    for name in ("north", "south"):
        rows = []
        for _ in range(12):
            q = rng.sample(WORDS, 2)
            rest = [w for w in WORDS if w not in q]
            rows.append({"query": " ".join(q), "positive": " ".join(q + rng.sample(rest, 2)),
                         "negatives": [" ".join(rng.sample(rest, 4))]})
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pairs = [(" ".join(rng.sample(WORDS, 2)), " ".join(rng.sample(WORDS, 4))) for _ in range(8)]
    write_beir(root / "devset", {f"d{i}": {"title": "", "text": p} for i, (_, p) in enumerate(pairs)},
               {f"q{i}": q for i, (q, _) in enumerate(pairs)},
               {"dev": {f"q{i}": {f"d{i}": 1} for i in range(len(pairs))}})
    return root


def _config(name: str, model: str, root: Path, out: str, **kw) -> TrainConfig:
    spec = get_strategy(name)
    values = dict(model=model, data=[str(root / "north.jsonl"), str(root / "south.jsonl")],
                  output_dir=str(root / out), max_steps=3, batch_size=4, learning_rate=1e-3, warmup_ratio=0.0,
                  scheduler="constant", query_max_length=12, doc_max_length=16, save_every=2, log_every=1,
                  show_progress=False, device="cpu", seed=3, strategy=name)
    values[spec.field] = FAST.get(name, {})
    if spec.needs_reference:
        values["reference_model"] = model
    if spec.needs_dev:
        values["dev"] = [str(root / "devset")]
    if spec.requires_mixed_batches:
        values["batching"] = "mixed"
    values.update(kw)
    return TrainConfig(**values)


def _params(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def _same(a, b) -> bool:
    """Equal, exactly; entries named ``*_s`` / ``*_seconds`` are wall-clock durations and only need to exist."""
    if isinstance(a, dict):
        timed = [k for k in a if isinstance(k, str) and k.endswith(("_s", "_seconds"))]
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a if k not in timed)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, torch.as_tensor(b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, np.asarray(b))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a):
        return np.isnan(b)
    return a == b


@pytest.mark.parametrize("name", NAMES)
def test_strategy_contract(name, tiny_model_path, tmp_path):
    root = _write_data(tmp_path)
    full = Trainer(_config(name, tiny_model_path, root, "full"))
    full.train()
    s = full.strategy
    # weights: one per collection, non-negative, summing to 1, also in weights.json
    w = s.sampling_weights()
    assert len(w) == 2 and (w >= 0).all() and w.sum() == pytest.approx(1.0)
    written = json.loads((root / "full" / "weights.json").read_text())
    assert written["collections"] == ["north", "south"] and sum(written["weights"]) == pytest.approx(1.0)
    # the state survives a round trip into a freshly built strategy
    state = copy.deepcopy(s.state_dict())
    fresh = build_strategy(full.config, full.names, [None, None])
    fresh.setup(full.names, full.sizes)
    fresh.load_state_dict(copy.deepcopy(state))
    assert _same(fresh.state_dict(), state)
    np.testing.assert_array_equal(fresh.sampling_weights(), w)

    # the run resumed from its step-2 checkpoint (in a copy without its final outputs, so its step 3 is replayed
    # over the one it ran) comes to the same model and weights (the resume after a kill is the trainer's own test)
    from train_helpers import stopped_copy

    stopped_copy(root / "full", root / "cut")
    resumed = Trainer(_config(name, tiny_model_path, root, "cut", resume=True,
                              resume_from=str(root / "cut" / "checkpoints" / "step-2")))
    resumed.train()
    assert [r["step"] for r in map(json.loads, (root / "cut" / "metrics.jsonl").read_text().splitlines())
            if r.get("event") == "start"] == [0, 2]
    assert torch.equal(_params(resumed), _params(full))
    assert _same(json.loads((root / "cut" / "weights.json").read_text()), written)
    assert _same(resumed.strategy.state_dict(), state)
