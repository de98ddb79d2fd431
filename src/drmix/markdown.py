"""Markdown that drmix writes and the HTML it renders from it: user-controlled text (dataset, collection,
model and folder names) never becomes markup.

Two layers, each enough on its own for report.html:

* **writing**: every value put into a Markdown table or sentence goes through :func:`md_cell` (backslash
  escapes for what makes raw HTML, an autolink, an entity, a code span, emphasis with ``*`` or a new table
  column: ``\\ ` * < > | &``; ``_`` at a word's edge; ``]`` before ``(``, ``[`` or ``:``, which would close a
  link; newlines become spaces), or :func:`md_code` for a code span (a backtick fence longer than any run of backticks inside), so
  ``eval.md``, ``summary.md`` and model cards read the same in any Markdown renderer (GitHub, the Hub, an
  editor's preview) and stay readable as text (``my_data``, ``[0, 3]`` are left as they are);
* text that a template places in several contexts at once (sentence-transformers' model card template puts
  a dataset name in prose, headings, table headers, code spans and raw ``<details><summary>`` HTML) goes
  through :func:`md_entities`: numeric character references, literal text in Markdown and in HTML alike;
* **rendering**: :func:`render_html` uses ``markdown-it-py`` (CommonMark plus GFM tables) with raw HTML
  switched off (``<script>`` in a ``.md`` file is shown as text) and its link validation on (``javascript:``,
  ``vbscript:``, ``file:`` and non-image ``data:`` URLs are not made into links).
"""
from __future__ import annotations

import re
from typing import Any

_MD_SPECIAL = re.compile(r"([\\`*<>|&]|\](?=[(\[:])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z]))")
_BACKTICKS = re.compile(r"`+")


def md_cell(value: Any) -> str:
    """``value`` as literal text in a Markdown table cell or sentence (see the module docstring)."""
    text = " ".join(str(value).splitlines()) if value is not None else ""
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value: Any) -> str:
    """``value`` as a Markdown code span whose content is shown literally, whatever backticks it holds."""
    text = " ".join(str(value).splitlines())
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_ENTITY_SPECIAL = re.compile(r"[&<>\"'\[\]|`\\*]")


def md_entities(value: Any) -> str:
    """``value`` with the characters that make Markdown or HTML markup written as numeric character
    references (``<`` -> ``&#60;``): literal text both in Markdown and inside raw HTML blocks (shown as the
    reference itself only inside a code span)."""
    text = " ".join(str(value).splitlines()) if value is not None else ""
    return _ENTITY_SPECIAL.sub(lambda m: f"&#{ord(m.group())};", text)


def md_fence(text: str, info: str = "") -> str:
    """A fenced code block holding ``text`` literally (the fence is longer than any backtick run in it)."""
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def render_html(text: str) -> str:
    """Safe HTML of Markdown ``text``: no raw HTML passes through, no script link is made."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
