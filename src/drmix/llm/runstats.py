"""The counts of an LLM run written to ``stats.json`` on every exit path: success, an empty result, an
:class:`~drmix.llm.base.LLMError` half-way (an endpoint that went away, a bad API key), an interrupt (Ctrl-C,
or SIGTERM, which the command line turns into the same interrupt).

The run's output file is written once, at the end (atomically, like every drmix output): it does not grow
as answers arrive. Each answer is in the LLM cache the moment it arrives, so a stopped run loses nothing;
running the same command again reuses the cached answers and writes the whole output.

``with llm_stats(path, stats):`` writes ``stats.as_dict()`` atomically when the block ends, however it
ends (``"finished": false`` and the error when it raised), logs the failure counts by cause, and appends
to a :class:`~drmix.errors.DrmixError` raised inside a pointer to the file, so the one-line error says where
the counts are.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from drmix.errors import DrmixError
from drmix.llm.base import describe_failures

log = logging.getLogger(__name__)


class RunStats(Protocol):
    failures: Any
    answered: int

    def as_dict(self) -> dict[str, Any]: ...


def failure_line(stats: RunStats, path: str | Path) -> str:
    """``"3 of 5 answered requests failed (timeout 2, http_5xx 1); counts in PATH"``."""
    n = sum(stats.failures.values())
    return (f"{n} of {stats.answered} answered requests failed ({describe_failures(stats.failures)}); "
            f"counts in {path}")


@contextmanager
def llm_stats(path: str | Path, stats: RunStats) -> Iterator[Path]:
    from drmix.io.atomic import atomic_write_json

    path = Path(path)
    error: BaseException | None = None
    try:
        yield path
    except BaseException as e:
        error = e
        if isinstance(e, DrmixError):
            e.fix = ((e.fix.rstrip(".") + "; ") if e.fix else "") + failure_line(stats, path) + "."
        elif isinstance(e, KeyboardInterrupt):
            log.warning("stopped before the end: every answer received so far is in the LLM cache, the counts "
                        "in %s; the output is written only at the end: run the same command again to continue "
                        "(cached answers are not asked again)", path)
        raise
    finally:
        record = stats.as_dict()
        record["finished"] = error is None
        if error is not None:
            record["error"] = error.format() if isinstance(error, DrmixError) else type(error).__name__
        atomic_write_json(path, record)
        if stats.failures:
            log.warning("LLM failures by cause: %s (written to %s)", describe_failures(stats.failures), path)
