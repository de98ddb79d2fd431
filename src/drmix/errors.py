"""Errors a user can cause. Each names the file (and line, when there is one) and says how to fix it.

The CLI turns any :class:`DrmixError` into one clear line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

from pathlib import Path


class DrmixError(Exception):
    """An error caused by input the user controls (files, options, models)."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None,
                 fix: str | None = None) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.line = line
        self.fix = fix
        super().__init__(self.format())

    def format(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path + (f":{self.line}" if self.line is not None else "") + ": "
        text = where + self.message
        if self.fix:
            text += f" Fix: {self.fix}"
        return text


class DataError(DrmixError):
    """Malformed or inconsistent data files (collections, BEIR directories, tables)."""


class ConfigError(DrmixError):
    """Invalid configuration values or files."""


class ModelError(DrmixError):
    """A model that cannot be found or loaded."""


class IndexLoadError(DrmixError):
    """A missing or inconsistent search index."""


class CheckpointError(DrmixError):
    """A checkpoint that cannot be resumed from."""


class DiskFullError(DrmixError):
    """The filesystem (or the file size limit, ``ulimit -f``) had no room for an output; nothing was replaced."""


class ArgumentError(ConfigError, TypeError):
    """A Python API argument of a type the function cannot use (``drmix.train(config, model=123)``), refused
    before anything loads (made by :func:`wrong_argument`). Also a ``TypeError``, what Python code catches for a
    wrong type."""


def wrong_argument(where: str, argument: str, value: object, expected: str, *, fix: str) -> ArgumentError:
    """The error for ``where(argument=value)``: the function, the argument, what it got and the fix."""
    return ArgumentError(f"{where}({argument}=...) must be {expected}, not {describe(value)}.", fix=fix)


def describe(value: object) -> str:
    """A value as an error shows it: its type and a shortened repr (``int 123``, ``str 'model'``)."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlist, short.maxdict = 40, 40, 4, 3
    return f"{type(value).__name__} {short.repr(value)}"


def path_argument(where: str, argument: str, value: object, *, fix: str) -> Path:
    """``value`` as a :class:`~pathlib.Path` when it is a ``str`` or ``os.PathLike``, else :func:`wrong_argument`."""
    import os

    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    raise wrong_argument(where, argument, value, "a path (str or os.PathLike)", fix=fix)


def path_list(where: str, argument: str, value: object, *, fix: str) -> list:
    """One path or an iterable of them as a list of the paths as given (a single ``str`` is one path, never its
    characters); anything else is :func:`wrong_argument`."""
    import os

    if isinstance(value, (str, os.PathLike)):
        return [value]
    if isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        raise wrong_argument(where, argument, value, "a path or a list of paths", fix=fix)
    items = list(value)
    for i, v in enumerate(items):
        path_argument(where, f"{argument}[{i}]", v, fix=fix)
    return items
