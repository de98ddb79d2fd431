"""Text cleaning: minimal markup removal (RST roles and directives, Markdown links, images and code fences,
HTML tags, URLs, doctest lines), docstring splitting into summary / lead / body, tokens for the negatives."""
from __future__ import annotations

import re

_RST_ROLE = re.compile(r":(?:[a-zA-Z]+:)*[a-zA-Z]+:`~?([^`]*)`")
_RST_DIRECTIVE = re.compile(r"^\s*\.\. [^\n]*$", re.MULTILINE)
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_RST_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")
_HTML_TAG = re.compile(r"<[^>\n]{1,200}>")
_CODE_FENCE = re.compile(r"```.*?```", re.DOTALL)
_URL = re.compile(r"https?://\S+")
_SECTION_UNDERLINE = re.compile(r"^\s*([-=~^*#+])\1{2,}\s*$")
_SECTION_HEADER = re.compile(
    r"^\s*(Parameters|Args|Arguments|Keyword Args|Kwargs|Returns?|Yields?|Raises|Examples?|Notes?|See Also|"
    r"References|Attributes|Methods|Warnings?|Other Parameters|Example usage|Usage)\s*:?\s*$", re.IGNORECASE)
_SIG_LINE = re.compile(r"^[\w.]+\(.*\)\s*(->.*)?$")
_WORD = re.compile(r"[a-z0-9]+")


def _strip_markup(text: str) -> str:
    text = _CODE_FENCE.sub(" ", text)
    text = _MD_IMAGE.sub(" ", text)
    text = _RST_LINK.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_DIRECTIVE.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _URL.sub(" ", text)
    text = text.replace("``", "").replace("**", "").replace("`", "")
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith((">>>", "... ", "$ ", "|")) or s == "..." or _SECTION_UNDERLINE.match(s):
            continue
        lines.append(re.sub(r"^#+\s*", "", line))
    return "\n".join(lines)


def clean_text(text: str, max_words: int = 200) -> str:
    """Minimal markup removal (RST roles/directives, Markdown links/images/fences, doctest lines),
    whitespace collapsed, truncated to ``max_words`` words."""
    words = _strip_markup(text).split()
    return " ".join(words[:max_words])


def split_docstring(doc: str, max_summary_words: int = 40) -> tuple[str, str, str]:
    """Split a docstring into (summary, lead, body).

    ``summary`` is the first paragraph (or its first sentence when the paragraph is longer than
    ``max_summary_words``), ``body`` everything after the summary, ``lead`` the paragraphs before the
    first section header (``Parameters``/``Args:``/an underlined title ...), summary included.
    A first line that is itself a call signature (as in C extensions: ``add(input, other) -> Tensor``)
    is dropped.
    """
    lines = doc.strip().splitlines()
    while lines and (_SIG_LINE.match(lines[0].strip()) or not lines[0].strip()):
        lines = lines[1:]
    if not lines:
        return "", "", ""
    n_first = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    first = " ".join(line.strip() for line in lines[:n_first])
    rest = "\n".join(lines[n_first:])
    if len(first.split()) > max_summary_words:
        m = re.search(r"(?<=[.!?])\s+(?=[A-Z(`*])", first)
        if m is None:
            return "", "\n".join(lines), rest
        summary, body = first[:m.start()], first[m.end():] + "\n" + rest
    else:
        summary, body = first, rest
    lead: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if i > 0 and (_SECTION_HEADER.match(line) or (line.strip() and _SECTION_UNDERLINE.match(nxt))):
            break
        lead.append(line)
    return summary, "\n".join(lead), body


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())

