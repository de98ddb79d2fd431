"""drmix.io.checks: a full disk recognised through the writers that hide it, and the checks before the work
(free space, the file size limit, a path under a file, a read-only folder)."""
from __future__ import annotations

import errno

import pytest

from drmix.errors import ConfigError, DiskFullError
from drmix.io import checks
from drmix.io.checks import check_free_space, check_writable, is_disk_full


def test_disk_full_is_recognised_through_the_writers_that_hide_the_errno():
    assert is_disk_full(OSError(errno.EFBIG, "File too large"))
    assert is_disk_full(OSError("76800 requested and 51168 written"))  # numpy's tofile
    assert is_disk_full(RuntimeError('Error while serializing: IoError(Os { code: 27, kind: FileTooLarge, '
                                     'message: "File too large" })'))  # safetensors
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert is_disk_full(wrapped)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(RuntimeError("file write failed"))  # torch's words alone: only with a full folder


def test_check_free_space_before_the_work(tmp_path, monkeypatch):
    check_free_space(tmp_path / "x", 10)
    with pytest.raises(DiskFullError, match="needs about"):
        check_free_space(tmp_path / "x", 10**18)
    monkeypatch.setattr(checks, "file_size_limit", lambda: 1000)
    with pytest.raises(DiskFullError, match="ulimit -f: 1000 bytes"):
        check_free_space(tmp_path / "x", 5000, largest_file=4000)
    check_free_space(tmp_path / "x", 5000, largest_file=900)


def test_check_writable_path_under_a_file_and_read_only_folder(tmp_path, monkeypatch):
    f = tmp_path / "notes.txt"
    f.write_text("n")
    with pytest.raises(ConfigError, match="lies under a file") as e:
        check_writable(f / "out" / "index")
    assert str(f) in str(e.value)
    check_writable(tmp_path / "new" / "deeper")  # the nearest existing folder is probed

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(checks.tempfile, "mkstemp", read_only)
    with pytest.raises(ConfigError, match="read-only") as e:
        check_writable(tmp_path / "out")
    assert str(tmp_path) in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
