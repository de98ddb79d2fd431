"""What FAISS prints from C++ goes to the log, not to the user's terminal.

FAISS writes to the C ``stdout`` and ``stderr`` directly: k-means' "WARNING clustering 100 points to 12
centroids: please provide at least 468 training points", the on-disk lists' "resizing ..." and
"IO_FLAG_ONDISK_SAME_DIR: updating ondisk filename ...". Python's ``sys.stdout`` / ``sys.stderr`` never see
these lines, so they cannot be filtered there: :func:`faiss_output_to_log` points file descriptors 1 and 2 at a
temporary file while FAISS runs and logs each line it wrote (``drmix -vv`` shows them), which also keeps
``drmix search --json`` output clean.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator

log = logging.getLogger("drmix.faiss")


@contextlib.contextmanager
def faiss_output_to_log(level: int = logging.DEBUG) -> Iterator[None]:
    """Inside the block, what is written to file descriptors 1 and 2 goes to the log at ``level``, one record
    per line (``faiss: ...``). Keep the block around FAISS calls only: Python's own output in it is relayed too."""
    import ctypes

    libc = ctypes.CDLL(None)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    libc.fflush(None)
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as sink:
        try:
            for fd in saved:
                os.dup2(sink.fileno(), fd)
            yield
        finally:
            libc.fflush(None)
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            for line in sink.read().decode("utf-8", "replace").splitlines():
                if line.strip():
                    log.log(level, "faiss: %s", line.strip())
