"""Whether an output can be written at all, and where it lands: paths, links, permissions, room on disk.

* **Paths**: :func:`resolved_path` follows every symbolic link (a loop of links is one line, not Python's
  RuntimeError); :func:`write_target` is where a write to a path lands (a link's target; the link is kept).
* **Permissions**: :func:`writable` turns a missing permission, a read-only filesystem or a file in the way
  into one line naming the path; :func:`check_writable` refuses, before any work, an output under a file or
  in a folder where nothing can be created.
* **A full disk** (or the file size limit, ``ulimit -f``) ends in one :class:`~drmix.errors.DiskFullError`
  naming the output, not the temporary file (:func:`is_disk_full`, :func:`disk_full_error`);
  :func:`check_free_space` refuses an output larger than the free space before the work.
* **drmix's cache** (:func:`cache_root`) and the errors of writing it (:class:`cache_writes`).

Hand-written: no library translates a full disk across numpy, safetensors and torch writers.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from drmix.errors import ConfigError, DiskFullError, DrmixError


def _named(e: OSError, path: Path) -> str | Path:
    """The path an error names: the one that failed, unless it is a temporary sibling (``.NAME.XXXX.tmp``)
    the user never asked for; then the folder it was made in."""
    failed = Path(e.filename) if e.filename else None
    if failed is None or (failed.name.startswith(".") and failed.parent == Path(path)):
        return path
    return failed


@contextlib.contextmanager
def writable(path: Path) -> Iterator[None]:
    """Turn a missing permission or a file in the way into a one-line error naming the path."""
    try:
        yield
    except PermissionError as e:
        raise ConfigError(f"no permission to write here ({e.strerror}).", path=_named(e, path),
                          fix="choose a writable location or fix the folder's permissions.") from None
    except (NotADirectoryError, FileExistsError) as e:
        raise ConfigError(f"cannot create this path: a file is in the way ({e.strerror}).", path=_named(e, path),
                          fix="choose another location.") from None
    except OSError as e:
        if e.errno == errno.EROFS:
            raise ConfigError("the filesystem is read-only.", path=_named(e, path),
                              fix="choose a location on a writable filesystem.") from None
        if e.errno == errno.ELOOP:
            raise link_loop_error(_named(e, path)) from None
        raise


def link_loop_error(path: str | Path) -> ConfigError:
    return ConfigError("the path runs into a loop of symbolic links.", path=path,
                       fix="remove or fix the link, or choose another path.")


def resolved_path(path: str | Path) -> Path:
    """``path`` absolute with every symbolic link followed; a loop of links is a one-line ConfigError naming
    ``path`` (Python's own answer is a RuntimeError, or on 3.13 a path that is still a link)."""
    path = Path(path).expanduser()
    try:
        real = Path(os.path.abspath(path)).resolve()
    except RuntimeError:
        raise link_loop_error(path) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_loop_error(path) from None
        raise
    if os.path.islink(real):
        raise link_loop_error(path)
    return real


def write_target(path: str | Path) -> Path:
    """Where a write to ``path`` lands: a symbolic link's final target (the user's link is kept, and the
    output is written into what it points at), else ``path`` itself. A loop of links anywhere on the way is
    a one-line ConfigError."""
    path = Path(path)
    real = resolved_path(path)
    return real if os.path.islink(path) else path


def make_parent(path: Path) -> None:
    """Create the parent folders of ``path`` (a missing permission or a file in the way: one line)."""
    with writable(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)


def cache_root() -> Path:
    """drmix's cache folder: ``$DRMIX_CACHE``, default ``~/.cache/drmix`` (GGUF conversions, ONNX exports)."""
    return Path(os.environ.get("DRMIX_CACHE", Path.home() / ".cache" / "drmix")).expanduser()


class cache_writes(contextlib.ContextDecorator):
    """Around code that writes drmix's cache (:func:`cache_root`), as a ``with`` block or a decorator: a full
    disk, a read-only filesystem or a missing permission there is one line naming the cache and the fix
    (another ``DRMIX_CACHE``; ``also``: a further way round it, e.g. an option that skips this cache)."""

    def __init__(self, *, also: str = "") -> None:
        self.also = also

    def __enter__(self) -> "cache_writes":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, DrmixError):
            return False
        root = cache_root()
        fix = (f"point DRMIX_CACHE at a writable folder with room (e.g. DRMIX_CACHE=/tmp/drmix-cache)"
               f"{', ' + self.also if self.also else ''}, then run the command again.")
        if is_disk_full(exc):
            full = disk_full_error(exc, root, unchanged=False)
            raise DiskFullError(full.message.replace("no room to write this output", "no room in drmix's cache"),
                                path=root, fix=fix) from None
        if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and (
                exc.filename is None or _under(Path(str(exc.filename)), root)):
            raise ConfigError(f"drmix's cache cannot be written ({exc.strerror}).", path=root, fix=fix) from None
        return False


def _under(path: Path, root: Path) -> bool:
    a, b = os.path.abspath(path), os.path.abspath(root)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def _umask() -> int:
    """The process's umask (read by setting and restoring it; there is no other portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(directory: bool = False) -> int:
    """The mode a plain ``open``/``mkdir`` would give under the user's umask (``mkstemp``/``mkdtemp``
    create 0600/0700 instead, which other users and web servers cannot read)."""
    return (0o777 if directory else 0o666) & ~_umask()


# -- a full disk, a read-only folder, a path under a file ----------------------------------------------------
_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG} | ({errno.EDQUOT} if hasattr(errno, "EDQUOT") else set())
#: how the writers underneath say it when they hide the errno (numpy's tofile, safetensors' Rust IoError)
_FULL_TEXT = re.compile(r"no space left|file too large|disk quota exceeded|requested and \d+ written|"
                        r"\b(?:os error|errno|code:) ?(?:27|28|122)\b", re.IGNORECASE)
#: torch's writer says only this; it counts as a full disk when :func:`_no_room` confirms it
_WRITE_FAILED = re.compile(r"write failed|failed writing|failed to write", re.IGNORECASE)


def file_size_limit() -> int | None:
    """The per-file size limit of this process (``ulimit -f``, bytes), None when unlimited or unknown."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def _no_room(where: Path | None) -> bool:
    """Whether the filesystem of ``where`` is (nearly) full, or a file below it reached the size limit."""
    if where is None:
        return False
    try:
        if shutil.disk_usage(existing_ancestor(where)).free < (1 << 20):
            return True
    except OSError:
        return False
    limit = file_size_limit()
    if limit is None:
        return False
    if where.is_file():
        return where.stat().st_size >= limit - 65536
    with contextlib.suppress(OSError):
        return any(p.is_file() and p.stat().st_size >= limit - 65536 for p in where.rglob("*"))
    return False


def is_disk_full(exc: BaseException, where: str | Path | None = None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk or the file size limit was full.

    ``where`` (a temporary file or folder being written) lets a writer that hides the cause (torch's
    ``file write failed``) be recognised by looking at the filesystem."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        text = str(e)
        if _FULL_TEXT.search(text):
            return True
        if _WRITE_FAILED.search(text) and _no_room(Path(where) if where is not None else None):
            return True
        e = e.__cause__ or e.__context__
    return False


def disk_full_error(exc: BaseException, path: str | Path, *, unchanged: bool = True) -> DiskFullError:
    """The one-line error of a write to ``path`` that ran out of room (``exc`` the writer's exception)."""
    if isinstance(exc, OSError) and exc.strerror:  # not str(exc): it names the temporary file
        reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else exc.strerror
    else:
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
    limit = file_size_limit()
    where = f"the file size limit (ulimit -f: {limit} bytes) or the disk" if limit else "the disk"
    tail = f"; {path} was left as it was" if unchanged else ""
    return DiskFullError(f"no room to write this output: {where} is full ({reason}){tail}.", path=path,
                         fix="free space on that filesystem (or raise the limit), or choose another location, "
                             "then run the command again.")


def existing_ancestor(path: Path) -> Path:
    """The nearest path at or above ``path`` that exists (where a new file below it would be made)."""
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def check_writable(path: str | Path, *, into: bool = False, what: str = "output") -> None:
    """Refuse, before any work, an output that cannot be created: a path below a file, or a folder where
    no file can be created (permissions, a read-only filesystem). The folder probed is the nearest existing
    parent of ``path`` (where the temporary sibling goes), or ``path`` itself when ``into`` and it is a
    folder (a command that writes files into it).

    The folder is probed by creating and removing a hidden file: permission bits do not tell a read-only
    mount or an ACL, and the superuser passes every permission check."""
    path = Path(os.path.abspath(Path(path).expanduser()))
    if into and path.is_dir():
        anc = path
    else:
        anc = existing_ancestor(path.parent)
    if not anc.is_dir():
        raise ConfigError(f"the {what} path lies under a file ({anc} is a file, not a folder).", path=path,
                          fix="choose a location whose parents are folders.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".drmix-write-probe.", dir=anc)
    except OSError as e:
        why = ("the filesystem is read-only" if e.errno == errno.EROFS else
               "no permission to create files there" if e.errno in (errno.EACCES, errno.EPERM) else
               e.strerror or type(e).__name__)
        raise ConfigError(f"the {what} cannot be written: {why} ({anc}).", path=path,
                          fix="choose a writable location or fix the folder's permissions.") from None
    os.close(fd)
    os.unlink(probe)


def check_free_space(path: str | Path, nbytes: int, *, what: str = "the output",
                     largest_file: int | None = None) -> None:
    """Refuse, before the work, an output of about ``nbytes`` that the filesystem of ``path`` has no room
    for (or whose ``largest_file`` is over the file size limit, ``ulimit -f``)."""
    path = Path(path).expanduser()
    anc = existing_ancestor(path)
    anc = anc if anc.is_dir() else anc.parent
    free = shutil.disk_usage(anc).free
    if nbytes > free:
        raise DiskFullError(f"{what} needs about {_mb(nbytes)} and the disk has {_mb(free)} free; nothing was "
                            "written.", path=path, fix="free space on that filesystem or choose another location.")
    limit = file_size_limit()
    biggest = nbytes if largest_file is None else largest_file
    if limit is not None and biggest > limit:
        raise DiskFullError(f"{what} needs a file of about {_mb(biggest)}, over the file size limit (ulimit -f: "
                            f"{limit} bytes); nothing was written.", path=path,
                            fix="raise the limit (ulimit -f unlimited) or make the output smaller.")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} bytes"
