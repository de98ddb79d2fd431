"""Regenerate docs/cli.md, the reference of every drmix command and option, from the CLI itself.

    .venv/bin/python scripts/gen_cli_docs.py          # writes docs/cli.md
    .venv/bin/python scripts/gen_cli_docs.py --check  # exits 1 if docs/cli.md is out of date (tests run this)
"""
from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"

HEADER = """# Command-line reference

Generated from the CLI by `scripts/gen_cli_docs.py`; `drmix COMMAND --help` shows the same. Guides:
[training](training.md), [data formats](data.md), [evaluation, index and search](evaluation.md),
[mixtures](mixture.md), [influence-guided sampling](influence.md), [multi-corpus retrieval](multicorpus.md),
[demo](demo.md), [model cards, reports, tracking and Hub upload](reports.md). Mining hard negatives: [data formats](data.md#mining-hard-negatives-drmix-mine).

Every `drmix train` field can also come from a YAML config file (flags override it). What each command
writes and refuses to overwrite: [outputs](outputs.md). Errors caused by input
(files, options, models) print one line naming the file, line and fix, and exit with code 2.

"""


def render() -> str:
    import typer
    from typer.cli import get_docs_for_click

    from drmix.cli import app

    click_obj = typer.main.get_command(app)
    ctx = typer.Context(click_obj)
    body = get_docs_for_click(obj=click_obj, ctx=ctx, name="drmix", title="drmix").strip()
    return HEADER + body.split("\n", 1)[1].lstrip() + "\n" if body.startswith("# ") else HEADER + body + "\n"


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docgen import write_or_check

    return write_or_check(DOC, render(), "gen_cli_docs.py")


if __name__ == "__main__":
    sys.exit(main())
