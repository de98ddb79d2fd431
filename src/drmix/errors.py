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
