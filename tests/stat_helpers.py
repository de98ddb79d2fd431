"""Edits that keep a file's size, inode and modification time, as ``cp -p``, ``rsync -t``, ``tar x`` and archives
with normalised times leave them: only the change time (``st_ctime_ns``, which user space cannot set back) moves."""
import os
import time
from pathlib import Path


def rewrite_keeping_stat(path: Path, data: bytes) -> os.stat_result:
    """Overwrite ``path`` in place (same inode) with ``data`` of its size, put its access and modification times
    back, and wait until the change time differs from before (timestamps move in clock ticks); returns the new
    stat. The content must differ, or the edit is no edit."""
    path = Path(path)
    before = path.stat()
    assert len(data) == before.st_size and data != path.read_bytes()
    for _ in range(500):
        with open(path, "r+b") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = path.stat()
        if after.st_ctime_ns != before.st_ctime_ns:
            break
        time.sleep(0.01)
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns
    return after
