"""drmix's one lock: a lock file holding the owner's pid and host, for one writer per output directory (and per
benchmark work item: :func:`holding`).

``drmix train`` takes ``OUTPUT_DIR/.drmix.lock`` before it touches anything in the directory and removes
it when it ends (normally or by an exception). The file is created atomically (written under a temporary
name, then hard-linked into place, which fails when the lock exists), so two runs started at the same
moment cannot both get it. A second run into the same directory is refused with a :class:`RunLockedError`
that names the owner.

A lock left by a process that no longer exists (``kill -9``, a crash, a reboot) is *stale*: on the same
host drmix checks the pid and takes the lock over (with a warning). A lock from another host (a shared
filesystem) cannot be checked; the error then says to delete the file once that run is known to have
ended. While the lock is held, :func:`clean_stale_temporaries` removes the ``.NAME.*.tmp`` folders and
files that a killed save left behind.

Hand-written: ``filelock`` (present through huggingface_hub) uses ``flock``, which holds no owner
information to report and does not work across hosts on many network filesystems.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError
from drmix.io.checks import writable

log = logging.getLogger(__name__)

LOCK_NAME = ".drmix.lock"
_TMP = re.compile(r"^\..+\.tmp$")


class RunLockedError(ConfigError):
    """Another run is writing to the same output directory."""


class LockHeld(RunLockedError):
    """Another live process holds a lock file (:func:`holding`); ``owner``: its record (pid, host, started)."""

    def __init__(self, lock: Path, owner: dict[str, Any]) -> None:
        super().__init__(f"process {owner.get('pid', '?')} on host {owner.get('host', '?')} holds this lock.",
                         path=lock, fix="wait for it to end; if it is known to have ended, delete the lock file.")
        self.owner = owner


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    except OSError:
        return False
    return True


def read_lock(path: Path) -> dict[str, Any] | None:
    """The lock's content, ``{}`` when unreadable, None when there is no lock."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        obj = json.loads(text)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _is_stale(owner: dict[str, Any]) -> bool:
    if owner.get("host") != socket.gethostname():
        return False
    pid = owner.get("pid")
    return not isinstance(pid, int) or not _pid_alive(pid)


def try_lock(lock: str | Path) -> dict[str, Any] | None:
    """Create the lock file ``lock`` for this process, atomically, taking over a stale one (see the module
    docstring): None when this process now holds it, else the record of the live process that does (``{}``
    when unreadable). The one lock of drmix: output directories (:func:`acquire`) and the benchmarks' work
    items (:func:`holding`) use it."""
    lock = Path(lock)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for _ in range(3):
        try:
            fd, tmp = tempfile.mkstemp(prefix=".drmix.lock.", suffix=".tmp", dir=lock.parent)
        except PermissionError as e:
            raise ConfigError(f"cannot write to the output directory ({e.strerror}).", path=lock.parent,
                              fix="choose a writable --output-dir.") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(me, f)
            os.link(tmp, lock)  # atomic: fails when the lock exists
            return None
        except FileExistsError:
            pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        owner = read_lock(lock)
        if owner is None:
            continue  # released meanwhile
        if _is_stale(owner):
            log.warning("removing a stale lock of process %s on %s (no longer running): %s",
                        owner.get("pid"), owner.get("host"), lock)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock)
            continue
        return owner
    raise RunLockedError("could not take the output directory's lock.", path=lock,
                         fix="retry; if no run is active, delete the lock file.")


def acquire(out_dir: str | Path, *, flag: str = "--output-dir") -> Path:
    """Create ``out_dir/.drmix.lock`` for this process, taking over a stale one; return its path. ``flag``: the
    option that names the output, in the errors' fixes."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{flag} is a file.", path=out, fix=f"choose a folder for {flag}.")
    with writable(out):
        out.mkdir(parents=True, exist_ok=True)
    lock = out / LOCK_NAME
    owner = try_lock(lock)
    if owner is None:
        return lock
    who = f"process {owner.get('pid', '?')} on host {owner.get('host', '?')} (since {owner.get('started', '?')})"
    raise RunLockedError(f"another run is writing to this output directory: {who}.", path=out,
                         fix=f"wait for it to end or choose another {flag}; if it is known to have "
                             f"ended, delete {lock}.")


def release(lock: Path) -> None:
    """Remove the lock if this process still owns it."""
    owner = read_lock(lock)
    if owner and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)


@contextlib.contextmanager
def run_lock(out_dir: str | Path, *, enabled: bool = True, flag: str = "--output-dir") -> Iterator[Path | None]:
    """Hold the output directory's lock for the block (no-op when ``enabled`` is false: non-main ranks); a folder
    the lock created is removed again when the block leaves it empty (a refused run creates nothing). ``flag``:
    the option naming the output, in the errors' fixes. Also the lock of a sharded run's shard folder (one run at
    a time into an output: :mod:`drmix.retrieval.build`, :mod:`drmix.cli.sharded`)."""
    if not enabled:
        yield None
        return
    made = not Path(out_dir).exists()
    lock = acquire(out_dir, flag=flag)
    try:
        yield lock
    finally:
        release(lock)
        if made:
            with contextlib.suppress(OSError):
                Path(out_dir).rmdir()  # only when empty


@contextlib.contextmanager
def holding(lock: str | Path) -> Iterator[Path]:
    """Hold the lock file ``lock`` for the block (taking over a stale one), or raise :class:`LockHeld` when a live
    process holds it; released at the end of the block, also on an exception."""
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    owner = try_lock(lock)
    if owner is not None:
        raise LockHeld(lock, owner)
    try:
        yield lock
    finally:
        release(lock)


def clean_stale_temporaries(out_dir: str | Path) -> list[Path]:
    """Remove ``.NAME.*.tmp`` leftovers of killed atomic writes in the run folder and its checkpoints.

    Call only while holding the lock (no other writer can be mid-save). Returns what was removed.
    """
    removed = []
    out = Path(out_dir)
    for folder in (out, out / "checkpoints"):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if not _TMP.match(p.name) or p.name.startswith(".drmix.lock."):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            removed.append(p)
    if removed:
        log.info("removed %d temporary files left by an interrupted save in %s", len(removed), out)
    return removed
