"""File helpers shared by every module: atomic writes, line-numbered JSONL reading and YAML reading.

Nothing drmix writes is ever left half-written: files go to a temporary sibling and are renamed
into place (``os.replace`` is atomic on POSIX and Windows); directories are built under a temporary
name and renamed at the end.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError, DrmixError


@contextlib.contextmanager
def writable(path: Path) -> Iterator[None]:
    """Turn a missing permission or a file in the way into a one-line error naming the path."""
    try:
        yield
    except PermissionError as e:
        raise ConfigError(f"no permission to write here ({e.strerror}).", path=e.filename or path,
                          fix="choose a writable location or fix the folder's permissions.") from None
    except (NotADirectoryError, FileExistsError) as e:
        raise ConfigError(f"cannot create this path: a file is in the way ({e.strerror}).", path=e.filename or path,
                          fix="choose another location.") from None


def _make_parent(path: Path) -> None:
    with writable(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)


def cache_root() -> Path:
    """drmix's cache folder: ``$DRMIX_CACHE``, default ``~/.cache/drmix`` (GGUF conversions, ONNX exports)."""
    return Path(os.environ.get("DRMIX_CACHE", Path.home() / ".cache" / "drmix")).expanduser()


def _umask() -> int:
    """The process's umask (read by setting and restoring it; there is no other portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(directory: bool = False) -> int:
    """The mode a plain ``open``/``mkdir`` would give under the user's umask (``mkstemp``/``mkdtemp``
    create 0600/0700 instead, which other users and web servers cannot read)."""
    return (0o777 if directory else 0o666) & ~_umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
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
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


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


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``path`` only when the block succeeds.

    A file at ``path`` is refused (never renamed or replaced); callers that replace a folder given by
    the user check it first with :func:`drmix.outputs.claim_output`. Nothing beside ``path`` is touched.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError("the output path is a file; a folder is written here.", path=path,
                          fix="choose a new folder (the file is left as it is).")
    _make_parent(path)
    with writable(path.parent):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        os.chmod(tmp, umask_mode(directory=True))
    try:
        yield tmp
        if path.exists():
            # a fresh, unique name for the previous folder: nothing already beside it (a user's ``.NAME.old``)
            # is renamed over or deleted; only the folder being replaced is removed
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old)            # onto the new empty folder (POSIX rename)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)
                raise
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_digest(path: str | Path) -> str:
    """BLAKE2b hex digest of a file's content (streamed)."""
    import hashlib

    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each record of a JSONL file; errors name file and line."""
    for lineno, text in iter_lines(path):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"invalid JSON ({e.msg} at column {e.colno}).", path=path, line=lineno,
                            fix="write one JSON object per line.") from None
        if not isinstance(obj, dict):
            raise DataError(f"expected a JSON object, got {type(obj).__name__}.", path=path, line=lineno,
                            fix="write one JSON object per line.")
        yield lineno, obj


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
        raise error(f"{what} cannot be read ({e.strerror}).", path=path, fix="check the path.") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise error(f"invalid YAML ({getattr(e, 'problem', e)}).", path=path,
                    line=(mark.line + 1) if mark else None, fix="fix the YAML syntax.") from None
