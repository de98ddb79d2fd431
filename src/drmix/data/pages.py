"""Keep a process's resident memory flat while it reads rows of large memory-mapped Arrow files.

A collection is a ``datasets.Dataset`` whose Arrow files are memory-mapped. Reading a row maps the
pages around it into the process (the kernel's read-around and fault-around bring in tens of
kilobytes per touched buffer), and opening an IPC *stream* file walks every record batch's header,
so a 10-million-row collection ends up with most of its file resident in the process after a few
hundred random batches: clean, file-backed pages the kernel could drop, but counted in the
process's RSS and in a container's working set, which is what memory limits and schedulers watch.

:func:`release_mapped_pages` drops those pages from the process's page tables with
``madvise(MADV_DONTNEED)``, only on read-only mappings of the given files (found in
``/proc/self/maps``): for a file mapping that was never written this discards nothing, and the next
read maps the page again from the page cache (a minor fault, no disk read while the page is cached).
:class:`PageReleaser` does it every ``every`` calls. Linux only; elsewhere both are no-ops.

Hand-written: neither ``datasets`` nor ``pyarrow`` exposes ``madvise`` on the mappings they own.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

MADV_DONTNEED = 4  # Linux <sys/mman.h>


def dataset_files(dataset: Any) -> list[str]:
    """The Arrow files behind a ``datasets.Dataset`` (empty for an in-memory one)."""
    files = getattr(dataset, "cache_files", None) or []
    return [f["filename"] for f in files if isinstance(f, dict) and f.get("filename")]


def mapped_ranges(paths: Iterable[str], maps: str = "/proc/self/maps") -> list[tuple[int, int]]:
    """``(start, end)`` of every mapping of ``paths`` that is not writable, from ``/proc/self/maps``."""
    wanted = {os.path.realpath(p) for p in paths}
    if not wanted:
        return []
    ranges = []
    try:
        with open(maps, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or "w" in parts[1]:
                    continue
                if parts[5].rstrip("\n") in wanted:
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        return []
    return ranges


_libc: Any = None


def _madvise() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        _libc.madvise.restype = ctypes.c_int
    return _libc.madvise


def release_mapped_pages(paths: Iterable[str]) -> int:
    """Drop the resident pages of the read-only mappings of ``paths`` from this process; bytes advised."""
    if not sys.platform.startswith("linux"):
        return 0
    total = 0
    madvise = _madvise()
    for start, end in mapped_ranges(paths):
        if madvise(start, end - start, MADV_DONTNEED) == 0:
            total += end - start
        else:  # pragma: no cover - the kernel refuses only invalid ranges, which maps never lists
            log.debug("madvise failed on %x-%x: errno %d", start, end, ctypes.get_errno())
    return total


class PageReleaser:
    """Calls :func:`release_mapped_pages` on the files of ``datasets`` every ``every`` ticks (thread-safe)."""

    def __init__(self, datasets: Iterable[Any], every: int = 16) -> None:
        self.paths = sorted({p for ds in datasets for p in dataset_files(ds)})
        self.every = max(1, int(every))
        self._count = 0
        self._lock = threading.Lock()

    def tick(self) -> bool:
        """Count one read; release when the count reaches ``every``. True when it released."""
        if not self.paths:
            return False
        with self._lock:
            self._count += 1
            if self._count < self.every:
                return False
            self._count = 0
        release_mapped_pages(self.paths)
        return True
