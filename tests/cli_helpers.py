"""Running ``drmix`` in-process from a test: the exit code and what it printed."""
from __future__ import annotations

import pytest

from drmix.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int | str | None, str, str]:
    """``main(argv)`` until its ``SystemExit``: ``(exit code, stdout, stderr)``."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err
