"""drmix.train.checkpoint: a checkpoint is written whole and only the ``keep`` most recent stay."""
from __future__ import annotations

import pytest
import torch

from drmix.train import checkpoint as ck


def test_only_the_kept_checkpoints_stay_and_latest_names_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(ck, "save_model_folder", lambda model, folder: (folder / "modules.json").write_text("[]"))
    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    for step in (1, 2, 3, 10):
        ck.save_checkpoint(tmp_path, step, model=None, optimizer=opt, scheduler=sched, trainer_state={},
                           strategy_state={}, keep=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step-10", "step-3"]
    assert (root / "latest").read_text() == "step-10\n"
    assert ck.latest_checkpoint(tmp_path) == root / "step-10"
    ck.save_checkpoint(tmp_path, 11, model=None, optimizer=opt, scheduler=sched, trainer_state={},
                       strategy_state={}, keep=1)
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["step-11"]


def _weights(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))


def test_a_module_without_a_folder_format_and_an_earlier_checkpoint_load_back(tmp_path):
    """A model with no SentenceTransformer ``save`` (or with adapters) is checkpointed as training_model.safetensors;
    a checkpoint of drmix's earlier format holds model.safetensors of the whole module: both restore every weight."""
    from safetensors.torch import save_model

    ck.save_model_folder(_weights(0), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [ck.TRAINING_MODEL]
    restored = _weights(1)
    ck.load_model_folder(restored, tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(restored.state_dict().values(), _weights(0).state_dict().values()))
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    save_model(_weights(2), str(earlier / "model.safetensors"))
    ck.load_model_folder(restored, earlier)
    assert all(torch.equal(a, b) for a, b in zip(restored.state_dict().values(), _weights(2).state_dict().values()))


def test_a_resume_from_an_earlier_step_drops_the_later_checkpoints(tmp_path, monkeypatch):
    root = tmp_path / "checkpoints"
    for step in (2, 4, 6):
        (root / f"step-{step}").mkdir(parents=True)
        (root / f"step-{step}" / "trainer_state.json").write_text("{}")
    assert ck.latest_checkpoint(tmp_path) == root / "step-6"       # no pointer: the newest complete one
    ck.drop_checkpoints_after(tmp_path, 4)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-2", "step-4"]
    assert (root / "latest").read_text() == "step-4\n"
    # a later checkpoint another process removed first is no error
    gone = root / "step-8"
    monkeypatch.setattr(ck, "checkpoints", lambda run_dir: [root / "step-2", root / "step-4", gone])
    ck.drop_checkpoints_after(tmp_path, 4)
    assert (root / "latest").read_text() == "step-4\n"


def test_the_cuda_generators_are_saved_and_restored_when_a_gpu_is_there(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    state = ck.rng_state()
    assert "cuda" not in state
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: ["s0"])
    assert ck.rng_state()["cuda"] == ["s0"]
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    ck.set_rng_state({**state, "cuda": ["g0", "g1"]})
    assert restored == [["g0", "g1"]]
    ck.set_rng_state(state)                      # a checkpoint written without a GPU
    assert restored == [["g0", "g1"]]


def test_a_sentence_transformer_checkpoint_is_its_folder_only(tmp_path):
    """A model with ``save`` (a SentenceTransformer) and no adapters is checkpointed as its folder, without a second
    copy of its weights."""

    class Saved(torch.nn.Linear):
        def save(self, folder, create_model_card=True):
            (tmp_path / "modules.json").write_text("[]")

    ck.save_model_folder(Saved(2, 2), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["modules.json"]


def _two_checkpoints(tmp_path):
    model = _weights(0)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    for step in (1, 2):
        ck.save_checkpoint(tmp_path, step, model=model, optimizer=opt, scheduler=sched, trainer_state={},
                           strategy_state={})
    return tmp_path / "checkpoints" / "step-2", model, opt, sched


@pytest.mark.parametrize("damage", ["cut", "zeroed", "not a checkpoint"])
def test_a_damaged_checkpoint_file_is_named_with_the_earlier_checkpoint_as_the_fix(tmp_path, damage):
    from drmix.errors import CheckpointError

    path, model, opt, sched = _two_checkpoints(tmp_path)
    target = path / "optimizer.pt"
    data = target.read_bytes()
    if damage == "cut":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "zeroed":
        target.write_bytes(bytes(len(data)))
    else:
        torch.save({"weights": torch.zeros(2)}, target)   # a tensor file of something else
    with pytest.raises(CheckpointError) as e:
        ck.load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert e.value.path == str(target) and "damaged" in e.value.message
    assert f"--resume-from {tmp_path / 'checkpoints' / 'step-1'}" in e.value.fix
    assert "changed" not in e.value.message + e.value.fix
    assert ck.load_checkpoint(tmp_path / "checkpoints" / "step-1", model=model, optimizer=opt, scheduler=sched)


def test_damaged_weights_of_the_only_checkpoint_name_the_weights_file(tmp_path):
    from drmix.errors import CheckpointError

    import shutil

    path, model, opt, sched = _two_checkpoints(tmp_path)
    shutil.rmtree(tmp_path / "checkpoints" / "step-1")
    weights = path / ck.TRAINING_MODEL
    weights.write_bytes(weights.read_bytes()[:40])
    with pytest.raises(CheckpointError) as e:
        ck.load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert e.value.path == str(weights) and "damaged" in e.value.message
    assert e.value.fix.startswith("start a new --output-dir (the run has no other checkpoint)")


def test_a_checkpoint_of_another_model_is_named_as_not_fitting(tmp_path):
    from drmix.errors import CheckpointError

    path, _, _, _ = _two_checkpoints(tmp_path)
    other = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))     # other shapes
    opt = torch.optim.AdamW(other.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    with pytest.raises(CheckpointError) as e:
        ck.load_checkpoint(path, model=other, optimizer=opt, scheduler=sched)
    assert e.value.path == str(path / ck.TRAINING_MODEL) and "does not fit the run's model" in e.value.message
    assert "--model" in e.value.fix
    bigger = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1), torch.nn.Linear(1, 1))
    ck.load_model_folder(bigger[:2], path)   # the weights fit the first two layers; the optimiser state does not
    opt = torch.optim.AdamW(bigger.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    with pytest.raises(CheckpointError) as e:
        ck.load_checkpoint(path, model=bigger[:2], optimizer=opt, scheduler=sched)
    assert e.value.path == str(path / "optimizer.pt") and "does not fit" in e.value.message
