"""The output-directory lock (pid + host, stale locks) and the cleaning of temporaries left by killed saves."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from drmix.errors import ConfigError
from drmix.lock import (LOCK_NAME, LockHeld, RunLockedError, acquire, clean_stale_temporaries, holding, release,
                        run_lock, try_lock)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_second_writer_refused_naming_the_owner(tmp_path):
    lock = acquire(tmp_path)
    owner = json.loads(lock.read_text())
    assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    with pytest.raises(RunLockedError) as e:
        acquire(tmp_path)
    assert f"process {os.getpid()} on host {socket.gethostname()}" in str(e.value)
    release(lock)
    assert not lock.exists()
    with run_lock(tmp_path) as held:
        assert held.exists()
    assert not (tmp_path / LOCK_NAME).exists()


def test_stale_lock_is_taken_over_other_host_is_not(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname()}))
    lock = acquire(tmp_path)
    assert json.loads(lock.read_text())["pid"] == os.getpid()
    release(lock)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": _dead_pid(), "host": "elsewhere-" + socket.gethostname()}))
    with pytest.raises(RunLockedError) as e:
        acquire(tmp_path)
    assert "elsewhere-" in str(e.value) and "delete" in str(e.value)


def test_try_lock_on_any_file_reports_the_live_owner(tmp_path):
    """The benchmarks' work-item locks: a held lock names its owner, a dead owner's lock is taken over."""
    item = tmp_path / "model.lock"
    assert try_lock(item) is None and json.loads(item.read_text())["pid"] == os.getpid()
    owner = try_lock(item)
    assert owner is not None and owner["pid"] == os.getpid()
    release(item)
    assert not item.exists()
    item.write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname()}))
    assert try_lock(item) is None
    release(item)
    item.write_text("not json")                   # unreadable: held by someone unknown, never taken over
    assert try_lock(item) == {}


def test_holding_a_work_item_lock_names_a_live_owner_and_releases_its_own(tmp_path):
    item = tmp_path / "sub" / "item.lock"
    with holding(item) as held:                   # its folder is made
        assert held == item and json.loads(item.read_text())["pid"] == os.getpid()
        with pytest.raises(LockHeld, match=f"process {os.getpid()} on host") as busy:
            with holding(item):
                pass
        assert busy.value.owner["pid"] == os.getpid() and isinstance(busy.value, RunLockedError)
        assert item.exists()                      # the refused block left the holder's lock alone
    assert not item.exists()
    with pytest.raises(KeyError):
        with holding(item):
            raise KeyError("boom")
    assert not item.exists()                      # released on an exception too


def test_output_dir_that_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ConfigError):
        acquire(f)
    assert f.read_text() == "x"


def test_trainer_refuses_a_locked_directory(tiny_model_path, tmp_path):
    from drmix.train.trainer import Trainer

    from train_helpers import config, make_collections

    data = make_collections(tmp_path / "data", n=8)
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    tr = Trainer(config(tiny_model_path, data, out, max_steps=1))
    with pytest.raises(RunLockedError):
        tr.train()
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written, the other run's lock kept


def test_clean_stale_temporaries(tmp_path):
    (tmp_path / "checkpoints" / ".step-4.x1y2.tmp").mkdir(parents=True)
    (tmp_path / "checkpoints" / ".step-4.x1y2.tmp" / "model.safetensors").write_text("partial")
    (tmp_path / ".model.abc.tmp").mkdir()
    (tmp_path / ".metrics.jsonl.q.tmp").write_text("{}")
    (tmp_path / "checkpoints" / "step-2").mkdir()
    (tmp_path / "notes.tmp").write_text("mine")
    removed = clean_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == [".metrics.jsonl.q.tmp", ".model.abc.tmp", ".step-4.x1y2.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "notes.tmp"]
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-2"]
