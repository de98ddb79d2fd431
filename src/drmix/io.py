"""File helpers shared by every module: atomic writes and folder swaps, line-numbered JSONL reading, the
one rule for text (lone surrogates), YAML reading (:func:`read_yaml`), and the checks that an output can be
written at all.

* **Files** go to a temporary sibling and are renamed into place (``os.replace`` is atomic on POSIX and
  Windows); :class:`AtomicFiles` writes several files of one output so that all of them are replaced or
  none.
* **Folders** are built under a hidden sibling and swapped in by :func:`atomic_dir`: at every instant the
  path holds the complete old or the complete new folder (``renameat2(RENAME_EXCHANGE)`` on Linux,
  ``renamex_np(RENAME_SWAP)`` on macOS; elsewhere a rename scheme whose hidden names say which folder is
  complete, recovered by :func:`recover_swap`). The hidden folders a killed swap leaves are recovered or
  removed by the next replacement of the same path.
* **A full disk** (or the file size limit, ``ulimit -f``) ends in one :class:`~drmix.errors.DiskFullError`
  naming the output, not the temporary file; the output is left as it was. :func:`check_writable` and
  :func:`check_free_space` refuse before any work an output under a file, in a read-only folder, or larger
  than the free space.
* **Text is text**: a JSON string may hold a lone surrogate (``"\\ud800"``, valid JSON but no Unicode text;
  tokenizers and UTF-8 encoders fail on it). :func:`clean_json` replaces each by U+FFFD where text enters
  drmix (:func:`iter_jsonl`, :func:`clean_records` for other readers, LLM answers), counted and logged once
  per file.

Hand-written: no library swaps folders atomically or translates a full disk across numpy, safetensors and
torch writers.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError, DiskFullError, DrmixError

log = logging.getLogger(__name__)


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


def _make_parent(path: Path) -> None:
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
        if shutil.disk_usage(_existing_ancestor(where)).free < (1 << 20):
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


def _existing_ancestor(path: Path) -> Path:
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
        anc = _existing_ancestor(path.parent)
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
    anc = _existing_ancestor(path)
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


# -- atomic files ------------------------------------------------------------------------------------------
def _stage(path: Path, data: bytes) -> str:
    """Write ``data`` to a new temporary sibling of ``path`` (fsynced, the umask's mode); return its name.
    ``path`` is where the file lands (:func:`write_target`: a link's target)."""
    if path.is_dir():
        raise ConfigError("expected a file path, found a folder.", path=path, fix="name a file, not a folder.")
    _make_parent(path)
    with writable(path.parent):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if hasattr(os, "fchmod"):  # POSIX: the mode open() would give, not mkstemp's 0600
            os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, Exception) and not isinstance(e, DrmixError) and is_disk_full(e):
            raise disk_full_error(e, path) from None
        raise
    return tmp


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace the file ``path`` (through a symbolic link: its target; the link is kept) in one rename."""
    path = write_target(path)
    tmp = _stage(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class AtomicFiles:
    """Several files of one output replaced together: each is written to a temporary sibling as it is
    given, and all are renamed into place when the block ends without error (none when it raises, so a
    full disk leaves every file as it was)::

        with AtomicFiles() as files:
            files.write_json(out / "eval.json", obj)
            files.write_text(out / "eval.md", text)
    """

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path]] = []

    def write_bytes(self, path: str | Path, data: bytes) -> None:
        path = write_target(path)
        self._staged.append((_stage(path, data), path))

    def write_text(self, path: str | Path, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_json(self, path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
        self.write_text(path, dumps_json(obj, indent=indent) + "\n")

    def __enter__(self) -> "AtomicFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        staged, self._staged = self._staged, []
        if exc_type is None:
            for tmp, path in staged:
                os.replace(tmp, path)
            return
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(exc, Exception) and not isinstance(exc, DrmixError) and is_disk_full(exc):
            paths = ", ".join(str(p) for _, p in staged) or "the output"
            raise disk_full_error(exc, paths) from None


def finite_json(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, ±inf) replaced by None, so JSON files hold ``null``.

    ``json.dumps`` would otherwise write bare ``NaN`` / ``Infinity``, which is not JSON.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    if hasattr(obj, "item") and getattr(obj, "ndim", None) == 0:
        return finite_json(obj.item())  # numpy / torch scalars
    return obj


def dumps_json(obj: Any, *, indent: int | None = None) -> str:
    """Strict JSON text of ``obj`` (non-finite numbers become ``null``)."""
    return json.dumps(finite_json(obj), indent=indent, ensure_ascii=False, allow_nan=False)


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, dumps_json(obj, indent=indent) + "\n")


# -- atomic folders ----------------------------------------------------------------------------------------
def _fault_point(step: str) -> None:
    """Called between the filesystem operations of a swap, with the name of the step just done.

    Does nothing; the swap tests replace it with ``os._exit`` to kill the process at each step."""


_USE_EXCHANGE = True   # tests set False to prove the rename fallback
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2   # linux/fs.h
_RENAME_SWAP = 2       # macOS sys/stdio.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step; False when this system or filesystem cannot."""
    if not _USE_EXCHANGE:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    fa, fb = os.fsencode(a), os.fsencode(b)
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, fa, _AT_FDCWD, fb, _RENAME_EXCHANGE)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        result = libc.renamex_np(fa, fb, _RENAME_SWAP)
    else:
        return False
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False  # a filesystem without the exchange (some network and FUSE ones): the fallback
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _swap_pattern(name: str) -> re.Pattern[str]:
    # ".NAME.drmix-XXXXXXXX.tmp|new|old" (this module), ".NAME.XXXXXXXX.tmp|old" (mkdtemp names of earlier
    # versions); XXXXXXXX: tempfile's letters. A user's ".NAME.old" matches neither.
    return re.compile(rf"\.{re.escape(name)}\.(?:drmix-([a-z0-9_]+)\.(tmp|new|old)|([a-z0-9_]{{8}})\.(tmp|old))")


def _locked(p: Path) -> bool:
    """Whether a live process holds the swap lock on folder ``p`` (its swap is under way, not killed)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks on folders
        return False
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


def _lock(p: Path) -> int | None:
    """Hold the swap lock on folder ``p`` until the returned descriptor is closed (released at a kill)."""
    try:
        import fcntl

        fd = os.open(p, os.O_RDONLY)
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pass
    return fd


def swap_leftovers(path: str | Path) -> list[tuple[Path, str]]:
    """The hidden folders a killed replacement of ``path`` left beside it, newest first, each with its
    state: ``tmp`` (a folder being built, or after an exchange the previous output), ``new`` (a complete new
    output not yet in place) or ``old`` (the complete previous output). Folders in use by a live swap are
    not listed."""
    path = Path(path)
    parent, pattern = path.parent, _swap_pattern(path.name)
    prefix = "." + path.name + "."
    found: list[tuple[float, Path, str]] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        m = pattern.fullmatch(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        p = Path(entry.path)
        if _locked(p):
            continue
        with contextlib.suppress(OSError):
            found.append((entry.stat(follow_symlinks=False).st_mtime, p, m.group(2) or m.group(4)))
    return [(p, state) for _, p, state in sorted(found, key=lambda t: -t[0])]


def _remove(p: Path) -> None:
    if p.is_symlink() or not p.is_dir():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
    else:
        shutil.rmtree(p, ignore_errors=True)


def recover_swap(path: str | Path) -> Path | None:
    """Finish what a killed replacement of ``path`` left: when ``path`` is missing, put back the complete
    folder (a ``new`` one, else the ``old`` one); remove every other hidden leftover. Returns the leftover
    put back at ``path``, or None. Called by :func:`atomic_dir` and by the output check of every command
    that replaces a folder (:func:`drmix.outputs.claim_output`)."""
    path = Path(path)
    leftovers = swap_leftovers(path)
    if not leftovers:
        return None
    restored = None
    if not os.path.lexists(path):
        for want in ("new", "old"):
            candidates = [p for p, state in leftovers if state == want]
            if candidates:
                with writable(path.parent):
                    os.rename(candidates[0], path)
                restored = candidates[0]
                log.warning("%s: put back the %s output from %s (a replacement was interrupted)", path,
                            "new" if want == "new" else "previous", candidates[0].name)
                break
    removed = [p for p, _ in leftovers if p != restored]
    for p in removed:
        _remove(p)
    if removed:
        log.info("%s: removed %d hidden folder(s) of an interrupted replacement", path, len(removed))
    return restored


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``path`` only when the block succeeds.

    At every instant ``path`` holds the complete previous folder or the complete new one: the new folder is
    built under a hidden sibling ``.NAME.drmix-XXXXXXXX.tmp`` and the two names are exchanged in one step
    (``renameat2(RENAME_EXCHANGE)`` / ``renamex_np(RENAME_SWAP)``); the previous folder, now under the
    hidden name, is then deleted. Where no exchange exists the complete new folder is first renamed
    ``.NAME.drmix-XXXXXXXX.new``, the previous one ``....old``, then the new one into place: a kill between
    the two renames leaves ``path`` missing, and :func:`recover_swap` (run by the next replacement and by
    the commands' output checks) puts the complete folder back. Leftovers of killed swaps are recovered or
    removed the same way, before the new folder is built.

    A file at ``path`` is refused (never renamed or replaced); callers that replace a folder given by the
    user check it first with :func:`drmix.outputs.claim_output`. Nothing beside ``path`` is touched (a
    user's ``.NAME.old`` is not one of these names). A full disk while building raises
    :class:`~drmix.errors.DiskFullError` naming ``path``, which is left as it was.

    A symbolic link at ``path`` is kept: the folder it points at (its final target, created when missing) is
    the one replaced, beside that target; a loop of links is a one-line ConfigError.
    """
    path = write_target(path)
    if path.exists() and not path.is_dir():
        raise ConfigError("the output path is a file; a folder is written here.", path=path,
                          fix="choose a new folder (the file is left as it is).")
    _make_parent(path)
    recover_swap(path)
    with writable(path.parent):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.drmix-", suffix=".tmp", dir=path.parent))
    lock = _lock(tmp)  # a concurrent recover_swap leaves a live swap's folders alone
    try:
        os.chmod(tmp, umask_mode(directory=True))
        _fault_point("created")
        try:
            yield tmp
        except BaseException as e:
            if isinstance(e, Exception) and not isinstance(e, DrmixError) and is_disk_full(e, tmp):
                raise disk_full_error(e, path) from None
            raise
        _fault_point("built")
        if not os.path.lexists(path):
            os.rename(tmp, path)
            _fault_point("renamed")
        elif _exchange(tmp, path):
            _fault_point("exchanged")   # path: the new folder; tmp: the previous one
            _remove(tmp)
        else:
            _swap_by_renames(tmp, path)
    except BaseException:
        _remove(tmp)  # the unfinished new folder, or the previous one after the exchange
        raise
    finally:
        if lock is not None:
            os.close(lock)


def _swap_by_renames(tmp: Path, path: Path) -> None:
    """The fallback of :func:`atomic_dir`: tmp -> .new (complete), path -> .old, .new -> path, remove .old."""
    stem = tmp.name[: -len(".tmp")]
    new, old = tmp.with_name(stem + ".new"), tmp.with_name(stem + ".old")
    os.rename(tmp, new)
    _fault_point("marked-new")
    held = _lock(path)
    try:
        os.rename(path, old)
        _fault_point("moved-old")
        try:
            os.rename(new, path)
        except BaseException:
            os.rename(old, path)
            raise
        _fault_point("moved-new")
    finally:
        if held is not None:
            os.close(held)
    _remove(old)


def file_digest(path: str | Path) -> str:
    """BLAKE2b hex digest of a file's content (streamed)."""
    import hashlib

    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- text is text --------------------------------------------------------------------------------------------
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: a JSON escape of a surrogate: the only way one gets into text decoded strictly from UTF-8
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate (U+D800..U+DFFF; no Unicode text holds one) replaced by U+FFFD: the
    one rule for text entering drmix. Paired surrogates never reach here: ``json.loads`` joins them.
    :func:`clean_records` also counts and logs them per file."""
    return counted_clean_text(text)[0]


def counted_clean_text(text: str) -> tuple[str, int]:
    """:func:`clean_text` and how many lone surrogates it replaced."""
    if text.isascii():
        return text, 0
    return _LONE_SURROGATE.subn(REPLACEMENT, text)


def clean_json(obj: Any) -> tuple[Any, int]:
    """A JSON value with :func:`clean_text` applied to every string (keys included); ``(value, count)``."""
    if isinstance(obj, str):
        return counted_clean_text(obj)
    if isinstance(obj, dict):
        n = 0
        out = {}
        for k, v in obj.items():
            k, a = counted_clean_text(k) if isinstance(k, str) else (k, 0)
            v, b = clean_json(v)
            out[k] = v
            n += a + b
        return out, n
    if isinstance(obj, list):
        n = 0
        items = []
        for v in obj:
            v, a = clean_json(v)
            items.append(v)
            n += a
        return items, n
    return obj, 0


def may_hold_surrogates(raw_json: str) -> bool:
    """Whether a JSON text has a surrogate escape (cheap test before :func:`clean_json`)."""
    return "\\u" in raw_json and _SURROGATE_ESCAPE.search(raw_json) is not None


def clean_records(path: str | Path, records: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
    """``(line, record)`` pairs of one file with lone surrogates replaced by U+FFFD (:func:`clean_json`);
    the count is logged once, naming the file and the first line, when the whole file has been read (a
    reader that only peeks at the first record logs nothing). The one rule for text entering drmix: every
    reader of text files passes its records through here."""
    count = lines = 0
    first: int | None = None
    for line, obj in records:
        if isinstance(obj, _Unchecked):  # iter_jsonl's record without a surrogate escape
            yield line, obj.obj
            continue
        obj, n = clean_json(obj)
        if n:
            count += n
            lines += 1
            first = line if first is None else first
        yield line, obj
    if count:
        log.warning("%s:%d: %d lone surrogate(s) (such as \"\\ud800\", not Unicode text) in %d line(s) "
                    "replaced by U+FFFD", path, first, count, lines)


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each non-blank line of a UTF-8 file (1-based numbers).

    Raises :class:`DataError` naming the line when a line is not valid UTF-8.
    """
    path = Path(path)
    if not path.exists():
        raise DataError("file not found.", path=path, fix="check the path.")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"line is not valid UTF-8 ({e.reason} at byte {e.start}).", path=path,
                                line=lineno, fix="re-encode the file as UTF-8 (e.g. iconv -t UTF-8).") from None
            text = text.rstrip("\r\n")
            if lineno == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if text.strip():
                yield lineno, text


class _Unchecked:
    """A record :func:`clean_records` passes through as it is (its raw text has no surrogate escape)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj


def _parsed_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    for lineno, text in iter_lines(path):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON ({e.msg} at column {e.colno}).", path=path, line=lineno,
                            fix="write one JSON object per line.") from None
        if not isinstance(obj, dict):
            raise DataError(f"expected a JSON object, got {type(obj).__name__}.", path=path, line=lineno,
                            fix="write one JSON object per line.")
        yield lineno, (obj if may_hold_surrogates(text) else _Unchecked(obj))


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each record of a JSONL file; errors name file and line.

    Lone surrogates in its strings are replaced by U+FFFD (:func:`clean_records`)."""
    return clean_records(path, _parsed_jsonl(Path(path)))


def write_jsonl_atomic(path: str | Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_yaml(path: str | Path, *, what: str = "file", error: type[DrmixError] = ConfigError) -> Any:
    """The YAML document of ``path`` (``yaml.safe_load``); an unreadable file or invalid YAML raises ``error``
    naming the file, the line and the fix (``what`` names the file in the message: "prompts file", ...)."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} not found.", path=path, fix="check the path.") from None
    except UnicodeDecodeError:
        raise error(f"{what} is not valid UTF-8.", path=path, fix="re-encode it as UTF-8.") from None
    except OSError as e:
        raise error(f"{what} cannot be read ({e.strerror}).", path=path,
                    fix="check the path and its permissions.") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise error(f"invalid YAML ({getattr(e, 'problem', e)}).", path=path,
                    line=(mark.line + 1) if mark else None, fix="fix the YAML syntax.") from None
