"""Every fix a DrmixError offers names options that exist: each ``--flag`` in a ``fix=`` text anywhere in
src/drmix (string literals and the literal parts of f-strings) is an option of some drmix command."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import typer

from drmix.cli import app

SRC = Path(__file__).resolve().parents[2] / "src" / "drmix"
# fix, _SCORES_FIX, a config's left_out and TDRO_LEFT_OUT ({field: (why, fix)}); not prefix / suffix
FIX_NAME = re.compile(r"(?:^|_)(?:fix(?:es)?|left_out)(?:$|_)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# flags of other tools that fix texts tell users to pass to those tools
OTHER_TOOLS = {
    "--no-deps": "pip install --no-deps",
    "--nproc-per-node": "torchrun --nproc-per-node N -m drmix ...",
}


def _fix_values(tree: ast.AST):
    """The expressions that make fix texts: ``fix=`` arguments, and values assigned to a name that says fix
    (``_SCORES_FIX = ...``, ``fix = ...``: texts built before the error is raised)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield from (kw.value for kw in node.keywords if kw.arg == "fix")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and FIX_NAME.search(t.id.lower()) for t in targets):
                yield node.value


def _fix_texts() -> list[tuple[str, int, str]]:
    """(file, line, literal text) of every string literal (f-strings' literal parts too) in a fix text."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for value in _fix_values(tree):
            for part in ast.walk(value):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    found.append((str(path.relative_to(SRC)), part.lineno, part.value))
    return found


def _all_options() -> set[str]:
    opts: set[str] = set()

    def walk(cmd) -> None:  # typer vendors its own click: duck-typed
        for p in cmd.params:
            opts.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    root = typer.main.get_command(app)
    walk(root)
    return opts | set(root.context_settings.get("help_option_names", []))


def test_the_walk_finds_fix_texts_and_options():
    texts = _fix_texts()
    assert len(texts) > 300
    assert any("--resume" in t for _, _, t in texts)
    assert any("--loss infonce" in t for f, _, t in texts if f == "train/distill.py")    # _SCORES_FIX = ...
    assert any("--transfers" in t for f, _, t in texts if f == "recipes/tdro.py")        # TDRO_LEFT_OUT
    assert any("--candidates" in t for f, _, t in texts if f == "recipes/adapt/config.py")  # ADAPT_LEFT_OUT
    opts = _all_options()
    assert {"--output-dir", "--resume", "--max-docs", "--overwrite"} <= opts
    assert "--synthetic-docs" not in opts


def test_every_flag_in_a_fix_text_is_a_real_option():
    opts = _all_options() | set(OTHER_TOOLS)
    unknown = sorted({f"{file}:{line}: {flag}" for file, line, text in _fix_texts()
                      for flag in FLAG.findall(text) if flag not in opts})
    assert unknown == []
