"""Reading text files line by line: JSONL (:func:`iter_jsonl`), plain lines (:func:`iter_lines`) and YAML
(:func:`read_yaml`), every error naming the file, the line and the fix.

Every record passes through :func:`clean_records` (lone surrogates replaced by U+FFFD, :mod:`drmix.io.text`),
counted and logged once per file.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError, DrmixError
from drmix.io.text import clean_json, may_hold_surrogates

log = logging.getLogger(__name__)


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
