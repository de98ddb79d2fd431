"""Checkpoints: written atomically, resumed exactly.

A checkpoint is a directory ``checkpoints/step-N`` (``checkpoints/checkpoint-N`` with ``--checkpoint-naming hf``)
that is itself a SentenceTransformer folder (so
``drmix eval --model runs/x/checkpoints/step-400`` and ``SentenceTransformer(path)`` load it; with LoRA it is
the base model plus the adapter, which sentence-transformers loads through peft) plus the training
state: the optimiser and LR-scheduler states, the RNG states, the sampler cursors and the strategy state
(``optimizer.pt``, ``strategy.pt``, ``trainer_state.json``, which also holds transformers' ``global_step``
and ``log_history``). With LoRA the exact weights are also kept
in ``training_model.safetensors`` (the adapter-wrapped module's state); without, resuming reloads the
SentenceTransformer folder (safetensors: bit-exact). Checkpoints of earlier versions (one
``model.safetensors`` of the whole module, no ``modules.json``) still resume. It is
assembled under a temporary name and renamed into place, then ``checkpoints/latest`` (a one-line file)
is replaced atomically, so a run killed at any moment resumes from its last complete checkpoint and
loses only the steps since then. Optimiser/strategy states use ``torch.save`` and are loaded with
``weights_only=True`` (no arbitrary code runs on load); everything else is JSON or safetensors.
"""
from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from drmix.errors import CheckpointError
from drmix.io.atomic import atomic_dir, atomic_write_json, atomic_write_text

_NP = "__ndarray__"


def to_saveable(obj: Any) -> Any:
    """numpy arrays -> tagged tensors, recursively (so ``torch.load(weights_only=True)`` can read them)."""
    if isinstance(obj, np.ndarray):
        return {_NP: torch.from_numpy(np.ascontiguousarray(obj))}
    if isinstance(obj, dict):
        return {k: to_saveable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_saveable(v) for v in obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def from_saveable(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {_NP}:
            return obj[_NP].numpy()
        return {k: from_saveable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_saveable(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(from_saveable(v) for v in obj)
    return obj


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    np_state = state["numpy"]
    np.random.set_state(tuple(np_state) if isinstance(np_state, list) else np_state)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


TRAINING_MODEL = "training_model.safetensors"


def _has_adapters(model: torch.nn.Module) -> bool:
    from drmix.train.lora import peft_model_of

    return peft_model_of(model) is not None


def save_model_folder(model: torch.nn.Module, folder: Path) -> None:
    """``model`` as a SentenceTransformer folder in ``folder`` (and, with adapters, its exact state)."""
    from safetensors.torch import save_model

    if hasattr(model, "save"):
        model.save(str(folder), create_model_card=False)
    if not hasattr(model, "save") or _has_adapters(model):
        save_model(model, str(folder / TRAINING_MODEL))


def load_model_folder(model: torch.nn.Module, folder: Path) -> None:
    """Restore ``model``'s weights from a checkpoint folder written by :func:`save_model_folder` (or by an
    earlier version: ``model.safetensors`` of the whole module)."""
    from safetensors.torch import load_model

    folder = Path(folder)
    if (folder / TRAINING_MODEL).is_file():
        load_model(model, str(folder / TRAINING_MODEL))
    elif not (folder / "modules.json").is_file():  # an earlier checkpoint format
        load_model(model, str(folder / "model.safetensors"))
    else:
        from sentence_transformers import SentenceTransformer

        saved = SentenceTransformer(str(folder), device="cpu")
        model.load_state_dict(saved.state_dict(), strict=True)


#: checkpoint folder prefixes by ``checkpoint_naming``: drmix's and transformers' Trainer's (both are read)
PREFIXES = {"drmix": "step-", "hf": "checkpoint-"}


def checkpoint_step(path: Path) -> int | None:
    """The step of a checkpoint folder named ``step-N`` or ``checkpoint-N`` (None for any other name)."""
    for prefix in PREFIXES.values():
        rest = Path(path).name.removeprefix(prefix)
        if rest != Path(path).name and rest.isdigit():
            return int(rest)
    return None


def checkpoints(run_dir: Path) -> list[Path]:
    """The complete checkpoints of a run (with ``trainer_state.json``), oldest first, under either name."""
    root = Path(run_dir) / "checkpoints"
    found = [p for p in root.glob("*") if checkpoint_step(p) is not None and (p / "trainer_state.json").exists()]
    return sorted(found, key=checkpoint_step)


def save_checkpoint(run_dir: Path, step: int, *, model: torch.nn.Module, optimizer, scheduler,
                    trainer_state: dict[str, Any], strategy_state: dict[str, Any], keep: int = 2,
                    naming: str = "drmix") -> Path:
    ckpt_root = Path(run_dir) / "checkpoints"
    target = ckpt_root / f"{PREFIXES[naming]}{step}"
    with atomic_dir(target) as tmp:
        save_model_folder(model, tmp)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "rng": to_saveable(rng_state())}, tmp / "optimizer.pt")
        torch.save(to_saveable(strategy_state), tmp / "strategy.pt")
        atomic_write_json(tmp / "trainer_state.json", {**trainer_state, "step": step, "global_step": step})
    atomic_write_text(ckpt_root / "latest", f"{target.name}\n")
    done = sorted((p for p in ckpt_root.glob("*") if p.is_dir() and checkpoint_step(p) is not None),
                  key=checkpoint_step)
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def drop_checkpoints_after(run_dir: Path, step: int) -> None:
    """Remove the checkpoints of steps after ``step`` (a resume from an earlier one continues from there) and
    point ``checkpoints/latest`` at the one of ``step``."""
    for p in checkpoints(run_dir):
        if checkpoint_step(p) > step:
            shutil.rmtree(p, ignore_errors=True)
    kept = [p for p in checkpoints(run_dir) if checkpoint_step(p) == step]
    if kept:
        atomic_write_text(Path(run_dir) / "checkpoints" / "latest", f"{kept[-1].name}\n")


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpt_root = Path(run_dir) / "checkpoints"
    pointer = ckpt_root / "latest"
    if pointer.exists():
        p = ckpt_root / pointer.read_text().strip()
        if (p / "trainer_state.json").exists():
            return p
    done = checkpoints(run_dir)
    return done[-1] if done else None


#: what a checkpoint file that cannot be read raises (UnpicklingError: not a plain tensor file, which
#: ``weights_only`` refuses; RuntimeError: torch's zip reader on a cut file)
_UNREADABLE = (OSError, RuntimeError, KeyError, ValueError, TypeError, EOFError, IndexError, pickle.UnpicklingError)


def _why(e: BaseException) -> str:
    """The first sentence of ``e``; torch.load's refusals (whose text goes on to offer an unsafe load) as what they
    mean: the file is no tensor file that loads safely."""
    first = str(e).strip().split("\n")[0].split(". ")[0][:160]
    if isinstance(e, pickle.UnpicklingError) or "weights_only" in str(e):
        first = "not a tensor file that loads safely (weights_only)"
    return f"{type(e).__name__}: {first}"


def _damaged(file: Path, e: BaseException) -> CheckpointError:
    """``file`` of a checkpoint cannot be read: named, with the run's other checkpoints as the fix."""
    others = [c for c in checkpoints(file.parent.parent.parent) if c.resolve() != file.parent.resolve()]
    fix = (f"resume from an earlier checkpoint of the run (--resume-from {others[-1]}), or start a new --output-dir"
           if others else "start a new --output-dir (the run has no other checkpoint)")
    return CheckpointError(f"this checkpoint file is damaged and cannot be read ({_why(e)}).", path=file,
                           fix=fix + ".")


def _not_fitting(file: Path, e: BaseException) -> CheckpointError:
    return CheckpointError(f"this checkpoint file does not fit the run's model ({_why(e)}).",
                           path=file, fix="the model or its settings (--model, --lora-r, ...) changed since it was "
                                          "written: resume with the same ones, or start a new --output-dir.")


def _load_weights(model: torch.nn.Module, path: Path) -> None:
    from safetensors import SafetensorError

    file = next((path / n for n in (TRAINING_MODEL, "model.safetensors") if (path / n).is_file()), path)
    try:
        load_model_folder(model, path)
    except (SafetensorError, OSError, EOFError, pickle.UnpicklingError) as e:
        raise _damaged(file, e) from e
    except (RuntimeError, KeyError, ValueError, TypeError) as e:   # load_state_dict: missing keys, other shapes
        raise _not_fitting(file, e) from e


def _read(file: Path, read: Any) -> Any:
    try:
        return read(file)
    except _UNREADABLE as e:
        raise _damaged(file, e) from e


def _torch_file(file: Path) -> Any:
    return torch.load(file, weights_only=True, map_location="cpu")


def load_checkpoint(path: Path, *, model: torch.nn.Module, optimizer, scheduler) -> tuple[dict, dict]:
    """Restore model, optimiser, scheduler and RNG; return ``(trainer_state, strategy_state)``. A file that cannot
    be read is named as damaged (with the run's other checkpoints as the fix); one that reads but does not fit the
    model is named as written for another model or settings."""
    path = Path(path)
    _load_weights(model, path)
    opt_file = path / "optimizer.pt"
    opt = _read(opt_file, _torch_file)
    parts = _read(opt_file, lambda f: (opt["optimizer"], opt["scheduler"], from_saveable(opt["rng"])))
    try:
        optimizer.load_state_dict(parts[0])
        scheduler.load_state_dict(parts[1])
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as e:
        raise _not_fitting(opt_file, e) from e
    _read(opt_file, lambda f: set_rng_state(parts[2]))
    strategy_state = from_saveable(_read(path / "strategy.pt", _torch_file))
    trainer_state = _read(path / "trainer_state.json", lambda f: json.loads(f.read_text()))
    return trainer_state, strategy_state
