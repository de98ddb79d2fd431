"""Count the options each recipe's ``--help`` lists, from the CLI itself (the click command's parameters).

    python scripts/recipe_options.py                         # one line per recipe: its command and option count
    python scripts/recipe_options.py --json > counts.json    # the same as JSON ({command: count})
    python scripts/recipe_options.py --table BEFORE.json     # Markdown: BEFORE's counts beside today's

An option is a parameter of the command that ``--help`` lists as an option (``--help`` itself and hidden options
left out; the positional CONFIG argument is no option). The recipes are the multi-stage commands: ``drmix pipeline
tdro|coco|drama``, ``drmix adapt`` and ``drmix demo``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RECIPES = ("pipeline tdro", "pipeline coco", "pipeline drama", "adapt", "demo")


def option_counts() -> dict[str, int]:
    """``{"drmix <recipe>": number of options its --help lists}``."""
    import typer

    from drmix.cli import app

    root = typer.main.get_command(app)
    counts = {}
    for recipe in RECIPES:
        cmd = root
        for word in recipe.split():
            cmd = cmd.commands[word]
        counts[f"drmix {recipe}"] = sum(1 for p in cmd.params if getattr(p, "param_type_name", "") == "option"
                                        and p.name != "help" and not getattr(p, "hidden", False))
    return counts


def table(before: dict[str, int], after: dict[str, int]) -> str:
    """Markdown: each recipe's option count in ``before`` and ``after`` and the difference."""
    lines = ["| command | options before | options after | difference |", "|---|---:|---:|---:|"]
    for cmd in after:
        b = before.get(cmd)
        lines.append(f"| `{cmd} --help` | {b if b is not None else '-'} | {after[cmd]} | "
                     f"{after[cmd] - b:+d} |" if b is not None else f"| `{cmd} --help` | - | {after[cmd]} | |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    ap.add_argument("--table", type=Path, metavar="BEFORE.json", help="print a Markdown table of BEFORE's counts "
                                                                       "beside today's")
    args = ap.parse_args()
    counts = option_counts()
    if args.table is not None:
        sys.stdout.write(table(json.loads(args.table.read_text(encoding="utf-8")), counts))
    elif args.json:
        print(json.dumps(counts, indent=2))
    else:
        for cmd, n in counts.items():
            print(f"{cmd} --help: {n} options")
    return 0


if __name__ == "__main__":
    sys.exit(main())
