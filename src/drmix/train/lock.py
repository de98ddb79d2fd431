"""The output directory's lock under its former name: it lives in :mod:`drmix.lock`."""
from __future__ import annotations

from drmix.lock import (LOCK_NAME, LockHeld, RunLockedError, acquire, clean_stale_temporaries, holding, read_lock,
                        release, run_lock, try_lock)

__all__ = ["LOCK_NAME", "LockHeld", "RunLockedError", "acquire", "clean_stale_temporaries", "holding", "read_lock",
           "release", "run_lock", "try_lock"]
