"""Row layouts of training data: drmix, sentence-transformers, Tevatron, FlagEmbedding (and BEIR folders).

A **layout** says which column of a row plays which role: the query, the positive(s), the negatives, teacher
scores, a per-row prompt. Each layout is a module that registers a :class:`Layout` in :data:`LAYOUTS`
(a :class:`drmix.registry.Registry`; a package outside drmix can add one through the ``drmix.data_formats``
entry-point group). From a record's keys (a JSONL line) or a table's column names, :func:`plan_for` picks the
layout (or takes the one given with ``--format``), applies a ``--columns`` mapping and returns a :class:`Plan`;
a :class:`Converter` turns each row into drmix's canonical collection row::

    query: str   positives: list[str]   negatives: list[str]
    [positive_scores: list[float]   negative_scores: list[float]]   (teacher scores, aligned)

Rules every layout shares (what a user can rely on):

* A text column may hold a string, a list of strings, a passage ``{"title", "text"}`` (Tevatron) or a list
  of passages; a passage's text is ``(title + " " + text).strip()`` (BEIR's and Tevatron's rule). Empty and
  missing texts are dropped, with their scores.
* **A string where a list is expected** (drmix ``positives``/``negatives``, FlagEmbedding ``pos``/``neg``,
  Tevatron passages) is read as a one-element list, with one warning line per file and column; it is never
  split into characters. A text cell that holds a JSON-encoded list is refused, whatever the layout and column
  (a CSV cannot store lists).
* Teacher scores stay aligned with their texts: FlagEmbedding ``pos_scores``/``neg_scores`` as they are;
  sentence-transformers' label column as its losses define it (MarginMSE: one margin per negative, stored as
  positive 0 and negative -margin; DistillKLDiv: ``[positive, negative_1, ...]``). The losses that use them
  (MarginMSE, KL over scores) depend only on differences within a row, so the two encodings train alike.
* sentence-transformers pair rows with a label and no negative (``sentence1, sentence2, score``: CoSENT /
  CosineSimilarityLoss data) are read as scored pairs (the score the one positive score) within
  :func:`reading_scored_pairs` (``--loss cosent`` / ``angle``), and refused elsewhere with the reason and the fix.

Hand-written: no library maps these layouts onto one schema (sentence-transformers reads columns by position,
Tevatron and FlagEmbedding read only their own JSON); reading the files is ``datasets``' work
(:mod:`drmix.data.formats.sources`).
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from drmix.data.spec import apply_instruction
from drmix.errors import DataError
from drmix.registry import Registry

log = logging.getLogger(__name__)

#: bump when the canonical rows a converter makes change (it keys the converted-collection caches)
CONVERTER_VERSION = 2  # 2: JSON-encoded lists refused in every text cell; all-NaN teacher scores refused

#: sentence-transformers' label columns (``DEFAULT_LABEL_COLUMNS`` of its data collator)
ST_LABEL_COLUMNS = ("label", "labels", "score", "scores")

MISSING = object()


def _find_cleaner() -> Callable[[str], Any] | None:
    """The project's rule for lone surrogates (``drmix.io.text.clean_text``: ``"\\ud800"`` -> U+FFFD, issue #29),
    when this drmix has it."""
    try:
        from drmix.io import text as _text
    except ImportError:  # pragma: no cover
        return None
    fn = getattr(_text, "clean_text", None)
    return fn if callable(fn) else None


_CLEAN = _find_cleaner()


def clean_text(text: str) -> tuple[str, int]:
    """The one place where training text enters drmix: every query, positive and negative passes here.

    Returns the text with lone surrogates replaced by U+FFFD (``drmix.io.text.clean_text``) and how many were.
    """
    if _CLEAN is None or text.isascii():
        return text, 0
    out = _CLEAN(text)
    if isinstance(out, tuple):
        return out[0], int(out[1])
    return out, int(out != text)


@dataclass(frozen=True)
class Layout:
    """One row layout: the column names of each role, and how auto-detection recognises it.

    Args:
        name: the ``--format`` value.
        title: the layout's name for people (docs, messages).
        query, positive, negatives, positive_scores, negative_scores, label, prompt: column names that play
            each role, in order of preference (the first present one is used; ``negatives`` takes every
            present one, and ``negative_1..n`` columns when ``numbered_negatives``).
        lists: columns whose cells should be lists (a string there is wrapped, with a warning).
        positional: read unnamed columns by position as sentence-transformers does (anchor, positive,
            negative_1, ...), its label columns apart.
        claims: auto-detection: does a record with these keys look like this layout.
        example: one record, for the docs' table.
        reads: how drmix reads it, for the docs' table.
        order: detection order (lower first).
    """

    name: str
    title: str
    query: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()
    negatives: tuple[str, ...] = ()
    positive_scores: tuple[str, ...] = ()
    negative_scores: tuple[str, ...] = ()
    label: tuple[str, ...] = ()
    prompt: tuple[str, ...] = ()
    lists: frozenset[str] = frozenset()
    numbered_negatives: bool = False
    positional: bool = False
    claims: Callable[[Sequence[str]], bool] = field(default=lambda keys: False, compare=False)
    refuse: Callable[[Sequence[str]], tuple[str, str] | None] = field(default=lambda keys: None, compare=False)
    example: str = ""
    reads: str = ""
    order: int = 100
    directory: bool = False  # a folder layout (BEIR), not a row layout


LAYOUTS: Registry[Layout] = Registry(
    "data format", ["drmix.data.formats.tevatron", "drmix.data.formats.flag", "drmix.data.formats.drmix",
                    "drmix.data.formats.st", "drmix.data.formats.beir"],
    entry_points="drmix.data_formats", order=lambda s: s.order)


def register_layout(layout: Layout) -> Layout:
    """Add a layout (called by its module at import time)."""
    return LAYOUTS.register(layout)


@dataclass(frozen=True)
class Plan:
    """Which columns of a source play which role (what :class:`Converter` reads)."""

    layout: str
    query: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    positive_scores: str | None = None
    negative_scores: str | None = None
    label: str | None = None
    prompt: str | None = None
    lists: frozenset[str] = frozenset()
    ignored: tuple[str, ...] = ()

    @property
    def has_scores(self) -> bool:
        return bool(self.positive_scores or self.negative_scores or self.label)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the conversion reads."""
        cols = [self.query, *self.positives, *self.negatives, self.positive_scores, self.negative_scores,
                self.label, self.prompt]
        return tuple(dict.fromkeys(c for c in cols if c))

    def key(self) -> dict[str, Any]:
        """What identifies the conversion (for cache keys)."""
        return {"layout": self.layout, "query": self.query, "positives": list(self.positives),
                "negatives": list(self.negatives), "positive_scores": self.positive_scores,
                "negative_scores": self.negative_scores, "label": self.label, "prompt": self.prompt,
                "lists": sorted(self.lists), "version": CONVERTER_VERSION}

    def describe(self) -> str:
        parts = [f"query={self.query}", f"positive={'+'.join(self.positives)}"]
        if self.negatives:
            parts.append(f"negatives={'+'.join(self.negatives)}")
        for role in ("positive_scores", "negative_scores", "label", "prompt"):
            if getattr(self, role):
                parts.append(f"{'score' if role == 'label' else role}={getattr(self, role)}")
        return f"{self.layout} ({', '.join(parts)})"


class PlanError(Exception):
    """A layout cannot be read from these columns: ``message`` and ``fix`` (the caller adds the file)."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def layout_names(rows_only: bool = False) -> tuple[str, ...]:
    return tuple(n for n, s in LAYOUTS.all().items() if not (rows_only and s.directory))


def detect_layout(keys: Sequence[str]) -> Layout:
    """The first registered row layout that claims these keys (sentence-transformers' positional reading
    is the fallback); a :class:`PlanError` when none does."""
    for layout in LAYOUTS:
        if not layout.directory and layout.claims(keys):
            return layout
    raise PlanError(f"no known layout has the columns {json.dumps(list(keys))}: drmix rows need \"query\" and "
                    "\"positive\" (sentence-transformers: anchor, positive; Tevatron: positive_passages; FlagEmbedding: "
                    "pos).",
                    "name the columns with --columns query=COL,positive=COL[,negatives=COL], or convert the "
                    "rows to drmix JSONL {\"query\", \"positive\", \"negatives\"} (see docs/data.md).")


_NUMBERED = re.compile(r"^(negative|neg|negatives)_?(\d+)$")


def _quoted(names: Iterable[str]) -> str:
    return " or ".join(f'"{n}"' for n in names)


def _first(names: Iterable[str], keys: Sequence[str]) -> str | None:
    return next((n for n in names if n in keys), None)


#: True while a loss that trains on scored pairs loads its collections (:func:`reading_scored_pairs`)
_SCORED_PAIRS: ContextVar[bool] = ContextVar("drmix_scored_pairs", default=False)


def scored_pairs_on() -> bool:
    """Whether pair rows with a label are read as scored pairs here (:func:`reading_scored_pairs`)."""
    return _SCORED_PAIRS.get()


@contextmanager
def reading_scored_pairs(on: bool = True) -> Iterator[None]:
    """Within it, pair rows with a label and no negative (``sentence1, sentence2, score``) are read as scored
    pairs -- query, one positive, its score as the one positive score -- instead of refused: what ``--loss
    cosent`` / ``angle`` (:mod:`drmix.train.scored_pairs`) train on."""
    token = _SCORED_PAIRS.set(bool(on))
    try:
        yield
    finally:
        _SCORED_PAIRS.reset(token)


def _layout_for(keys: list[str], format: str | None, columns: dict[str, str]) -> Layout:
    """The layout of a file of rows with ``keys`` (``format`` or detected), once ``columns`` names only columns
    that exist and the layout does not refuse the keys."""
    for role, cols in columns.items():
        missing = [c for c in cols.split("+") if c and c not in keys]
        if missing:
            raise PlanError(f"--columns names {role}={'+'.join(missing)}, which is not a column here "
                            f"(columns: {', '.join(keys)}).", "name existing columns in --columns.")
    if format in (None, "auto"):
        if "query" in columns and "positive" in columns:
            layout = LAYOUTS.get("drmix") if not any(k in keys for k in ST_LABEL_COLUMNS) else LAYOUTS.get("st")
        else:
            layout = detect_layout(keys)
    else:
        layout = LAYOUTS.get(format)
        if layout.directory:
            raise PlanError(f"--format {format} names a folder layout, but this is a file of rows.",
                            "drop --format (or use --format auto) for files of rows.")
    refusal = layout.refuse(keys)
    if refusal is not None:
        raise PlanError(*refusal)
    return layout


def plan_for(keys: Sequence[str], *, format: str | None = None, columns: Mapping[str, str] | None = None) -> Plan:
    """The :class:`Plan` for a source whose records have ``keys`` (in order).

    ``format`` (``auto``/None: detect) picks the layout; ``columns`` (``{role: "col" or "a+b" or ""}``) names
    the column of a role explicitly (an empty name: the role is not read). Raises :class:`PlanError`.
    """
    keys = list(keys)
    columns = dict(columns or {})
    layout = _layout_for(keys, format, columns)

    def mapped(role: str) -> tuple[str, ...] | None:
        if role not in columns:
            return None
        return tuple(c for c in columns[role].split("+") if c)

    used: set[str] = set()
    q = mapped("query")
    query = q[0] if q else (None if q == () else _first(layout.query, keys))
    pos = mapped("positive")
    positives = pos if pos is not None else tuple(c for c in (_first(layout.positive, keys),) if c)
    neg = mapped("negatives")
    if neg is not None:
        negatives = neg
    else:
        negatives = tuple(n for n in layout.negatives if n in keys)
        if layout.numbered_negatives:
            numbered = sorted((int(m.group(2)), k) for k in keys if (m := _NUMBERED.match(k)))
            negatives += tuple(k for _, k in numbered if k not in negatives)

    def one(role: str, names: tuple[str, ...]) -> str | None:
        m = mapped(role)
        if m is not None:
            return m[0] if m else None
        return _first(names, keys)

    pos_scores = one("positive_scores", layout.positive_scores)
    neg_scores = one("negative_scores", layout.negative_scores)
    label = one("score", layout.label)
    prompt = one("prompt", layout.prompt)
    explicit = bool(columns.keys() & {"query", "positive", "negatives"})
    if layout.positional and not explicit and (query is None or not positives):
        # sentence-transformers: the columns in order, label columns apart: anchor, positive, negative_1, ...
        texts = [k for k in keys if k not in ST_LABEL_COLUMNS and k not in (pos_scores, neg_scores, prompt)]
        if len(texts) < 2:
            raise PlanError(f"sentence-transformers rows need at least two text columns (anchor, positive), got "
                            f"{texts}.", "add a positive column, or name the columns with --columns.")
        query, positives, negatives = texts[0], (texts[1],), tuple(texts[2:])
    if query is None:
        raise PlanError(f"missing query column ({layout.title} names it {_quoted(layout.query)}; columns here: "
                        f"{', '.join(keys)}).", "name it with --columns query=COLUMN.")
    if not positives:
        raise PlanError(f"missing positive column ({layout.title} names it {_quoted(layout.positive) or 'by position'}"
                        f"; columns here: {', '.join(keys)}).", "name it with --columns positive=COLUMN.")
    used.update([query, *positives, *negatives, *(c for c in (pos_scores, neg_scores, label, prompt) if c)])
    if label and (pos_scores or neg_scores):
        raise PlanError(f"both a label column ({label!r}) and per-text score columns are present.",
                        "keep one: --columns score= ignores the label column.")
    if label and not negatives and not _SCORED_PAIRS.get():
        raise PlanError(
            f"these are pair rows with a label ({query!r}, {positives[0]!r}, {label!r}): sentence-transformers' "
            "pair-score/pair-class layout, whose label grades how similar two texts are (CoSENT, "
            "CosineSimilarityLoss, SoftmaxLoss). A retriever trains on (query, positive, negatives); nothing in "
            "drmix can use a graded pair.",
            f"keep the pairs that count as relevant and drop the label (e.g. `ds.filter(lambda r: r[{label!r}] >= "
            f"0.8).remove_columns({label!r})`), pass --columns score= to read every pair as a positive, or train "
            "on the scores with --loss cosent (or --loss angle).")
    if neg_scores and len(negatives) != 1:
        raise PlanError(f"negative scores {neg_scores!r} need exactly one negatives column, got {list(negatives)}.",
                        "put the negatives in one list column aligned with the scores.")
    if pos_scores and len(positives) != 1:
        raise PlanError(f"positive scores {pos_scores!r} need exactly one positive column, got {list(positives)}.",
                        "put the positives in one list column aligned with the scores.")
    lists = frozenset(c for c in used if c in layout.lists)
    ignored = tuple(k for k in keys if k not in used)
    return Plan(layout=layout.name, query=query, positives=tuple(positives), negatives=tuple(negatives),
                positive_scores=pos_scores, negative_scores=neg_scores, label=label, prompt=prompt, lists=lists,
                ignored=ignored)


class RowError(Exception):
    """One row cannot be read: ``message`` and ``fix`` (the caller adds the file and line)."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def _passage(d: Mapping[str, Any], column: str) -> str:
    text = d.get("text")
    if text is not None and not isinstance(text, str):
        raise RowError(f'"{column}" holds a passage whose "text" is not a string.',
                       f'write passages as {{"title": "...", "text": "..."}}.')
    title = d.get("title")
    if title is not None and not isinstance(title, str):
        raise RowError(f'"{column}" holds a passage whose "title" is not a string.',
                       f'write passages as {{"title": "...", "text": "..."}}.')
    return f"{title or ''} {text or ''}".strip()


def _looks_like_json_list(s: str) -> bool:
    t = s.strip()
    if not (t.startswith("[") and t.endswith("]")):
        return False
    try:
        v = json.loads(t)
    except ValueError:
        return False
    return isinstance(v, list)


class Converter:
    """Turns rows of one source into canonical collection rows following a :class:`Plan`.

    ``source`` names the file in warnings. :meth:`row` raises :class:`RowError`; :attr:`warnings` collects
    the one-line warnings given (each once per column), so a cached conversion can repeat them.
    """

    def __init__(self, plan: Plan, source: str) -> None:
        self.plan = plan
        self.source = source
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self.rows = 0  # rows converted (0 after a conversion served from the cache)
        self.surrogates = 0  # lone surrogates replaced by U+FFFD

    def clean(self, text: str) -> str:
        text, n = clean_text(text)
        self.surrogates += n
        return text

    def finish(self) -> None:
        """After the last row: the one warning of replaced surrogates (kept with the other warnings)."""
        if self.surrogates:
            msg = (f"{self.source}: {self.surrogates} lone surrogate(s) (such as \"\\ud800\", not Unicode text) "
                   "replaced by U+FFFD.")
            self.warnings.append(msg)
            log.warning("%s", msg)

    def warn_string_column(self, column: str, role: str) -> None:
        if column in self._warned:
            return
        self._warned.add(column)
        msg = (f'{self.source}: column "{column}" holds a string where a list is expected; each is read as one '
               f'{role} (not split into characters).')
        self.warnings.append(msg)
        log.warning("%s", msg)

    def texts(self, value: Any, column: str, role: str, lists: frozenset[str] | None = None) -> list[str | None]:
        """The texts of one cell, positions kept (``None`` for an empty or missing text)."""
        lists = self.plan.lists if lists is None else lists
        if value is None or value is MISSING:
            return []
        if isinstance(value, str):
            # every text cell, in every layout (a list column or a one-text column such as sentence-transformers'
            # negative): a JSON-encoded list is a CSV writer's list, never one literal text
            if _looks_like_json_list(value):
                raise RowError(f'"{column}" holds a JSON-encoded list as text ({value[:40]!r}...), not a list.',
                               "store real lists (JSONL, JSON, parquet or a saved dataset), or one text per "
                               "column (negative_1, negative_2, ...) in CSV.")
            if column in lists:
                self.warn_string_column(column, role)
            return [self.clean(value) if value.strip() else None]
        if isinstance(value, Mapping) and isinstance(value.get("text"), (list, tuple)):
            # a legacy datasets Sequence of passages comes as columns: {"title": [...], "text": [...]}
            texts, titles = list(value["text"]), value.get("title")
            titles = list(titles) if isinstance(titles, (list, tuple)) else [None] * len(texts)
            value = [{"title": t, "text": x} for t, x in zip(titles, texts)]
        if isinstance(value, Mapping):
            if "text" not in value:
                raise RowError(f'"{column}" holds an object without "text".',
                               f'write "{column}" as text, a list of texts or passages {{"title", "text"}}.')
            if column in lists:
                self.warn_string_column(column, role)
            t = _passage(value, column)
            return [self.clean(t) if t else None]
        if isinstance(value, (list, tuple)):
            out: list[str | None] = []
            for v in value:
                if v is None:
                    out.append(None)
                elif isinstance(v, str):
                    out.append(self.clean(v) if v.strip() else None)
                elif isinstance(v, Mapping) and "text" in v:
                    t = _passage(v, column)
                    out.append(self.clean(t) if t else None)
                else:
                    raise RowError(f'"{column}" must be a string or a list of strings, got a list holding '
                                   f'{type(v).__name__}.', f'write "{column}": "text" or "{column}": ["text", ...].')
            return out
        raise RowError(f'"{column}" must be a string or a list of strings, got {type(value).__name__}.',
                       f'write "{column}": "text" or "{column}": ["text", ...].')

    @staticmethod
    def _scores(value: Any, column: str) -> list[float] | None:
        if value is None or value is MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, list, tuple)):
            raise RowError(f'"{column}" must hold numbers, got {type(value).__name__}.',
                           f'write "{column}" as a number or a list of numbers.')
        vals = [value] if isinstance(value, (int, float)) else list(value)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
            raise RowError(f'"{column}" must hold numbers.', f'write "{column}" as a list of numbers.')
        return [float(v) for v in vals]

    def row(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """One canonical row from one source row (a mapping of column -> value)."""
        return self._row(obj, self.plan)

    def _row(self, obj: Mapping[str, Any], p: Plan) -> dict[str, Any]:
        query = obj.get(p.query, MISSING)
        if query is MISSING or query is None or (isinstance(query, str) and not query.strip()):
            raise RowError(f'missing or empty "{p.query}" (a non-empty string).',
                           f'every row needs "{p.query}" and "{p.positives[0]}".')
        if isinstance(query, (list, tuple)):  # several queries in one row (or the wrong column as the query)
            raise RowError(f'"{p.query}" holds a list ({len(query)} item{"s" * (len(query) != 1)}), not a '
                           'text; a row has one query.',
                           "give each query a row of its own (with datasets: a batched map that repeats the "
                           f"row per text in \"{p.query}\"), or name the query column with --columns "
                           "query=COLUMN if this one is not it.")
        if not isinstance(query, str):
            raise RowError(f'"{p.query}" must be a string, got {type(query).__name__}.',
                           f'write the query as text: "{p.query}": "...".')
        query = self.clean(query)
        if p.prompt:
            prompt = obj.get(p.prompt)
            if prompt is not None and not isinstance(prompt, str):
                raise RowError(f'"{p.prompt}" must be a string, got {type(prompt).__name__}.',
                               f'write "{p.prompt}" as text.')
            query = apply_instruction(self.clean(prompt) if prompt else prompt, query)
        positives: list[str | None] = []
        present = False
        for c in p.positives:
            v = obj.get(c, MISSING)
            present |= v is not MISSING
            positives += self.texts(v, c, "positive", p.lists)
        if not present:
            raise RowError(f'missing "{p.positives[0]}".',
                           f'add "{p.positives[0]}": "relevant text" (or a list of them).')
        negatives: list[str | None] = []
        for c in p.negatives:
            v = obj.get(c, MISSING)
            if p.label and (v is None or v is MISSING):
                negatives.append(None)  # a label aligns with the negative columns: keep the position
            else:
                negatives += self.texts(v, c, "negative", p.lists)
        pos_s = neg_s = None
        if p.positive_scores:
            pos_s = self._scores(obj.get(p.positive_scores, MISSING), p.positive_scores)
            if pos_s is None or len(pos_s) != len(positives):
                raise RowError(f'"{p.positive_scores}" has {0 if pos_s is None else len(pos_s)} scores for '
                               f'{len(positives)} positives.', "give one score per positive, in the same order.")
        if p.negative_scores:
            neg_s = self._scores(obj.get(p.negative_scores, MISSING), p.negative_scores)
            if neg_s is None or len(neg_s) != len(negatives):
                raise RowError(f'"{p.negative_scores}" has {0 if neg_s is None else len(neg_s)} scores for '
                               f'{len(negatives)} negatives.', "give one score per negative, in the same order.")
        if p.label:
            pos_s, neg_s = self._label(obj.get(p.label, MISSING), p.label, len(positives), len(negatives))
        keep_p = [i for i, t in enumerate(positives) if t is not None]
        if not keep_p:
            raise RowError(f'"{p.positives[0]}" is empty.', f'give at least one non-empty "{p.positives[0]}".')
        keep_n = [i for i, t in enumerate(negatives) if t is not None]
        out: dict[str, Any] = {"query": query, "positives": [positives[i] for i in keep_p],
                               "negatives": [negatives[i] for i in keep_n]}
        if p.has_scores:
            out["positive_scores"] = [pos_s[i] for i in keep_p] if pos_s else []
            out["negative_scores"] = [neg_s[i] for i in keep_n] if neg_s else []
        return out

    def _label(self, value: Any, label_col: str, n_pos: int, n_neg: int) -> tuple[list[float], list[float]]:
        """sentence-transformers' label as aligned teacher scores (MarginMSELoss / DistillKLDivLoss inputs)."""
        col = label_col
        vals = self._scores(value, col)
        if vals is None:
            raise RowError(f'missing "{col}".', f'give every row its "{col}" (or pass --columns score= to ignore it).')
        if n_pos != 1:
            raise RowError(f'"{col}" scores need exactly one positive, got {n_pos}.',
                           "give one positive per row when the rows carry a label.")
        if not n_neg and len(vals) == 1 and _SCORED_PAIRS.get():
            return vals, []       # a scored pair (--loss cosent / angle): the pair's score
        if len(vals) == n_neg + 1 and n_neg:
            return vals[:1], vals[1:]
        if len(vals) == n_neg and n_neg:
            return [0.0], [-m for m in vals]  # margins M(q, p) - M(q, n_i): positive 0, negative -margin
        raise RowError(f'"{col}" has {len(vals)} value(s) for one positive and {n_neg} negative(s).',
                       f'give one margin per negative ([M(q,p) - M(q,n_i)]) or [M(q,p), M(q,n_1), ...] '
                       f'(sentence-transformers\' MarginMSELoss / DistillKLDivLoss labels).')


class RecordConverter(Converter):
    """A :class:`Converter` for schemaless records (JSON lines): each distinct key set gets its own plan in the
    layout of the first record, so optional columns (negatives, numbered negatives) may come and go."""

    def __init__(self, plan: Plan, source: str, columns: Mapping[str, str] | None = None) -> None:
        super().__init__(plan, source)
        self.columns = dict(columns or {})
        self._plans: dict[tuple[str, ...], Plan] = {}

    def row(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        keys = tuple(obj)
        plan = self._plans.get(keys)
        if plan is None:
            try:
                plan = plan_for(keys, format=self.plan.layout, columns=self.columns)
            except PlanError as e:
                raise RowError(e.message, e.fix) from None
            self._plans[keys] = plan
        if plan.has_scores != self.plan.has_scores:
            has, first = ("has", "has none") if plan.has_scores else ("has no", "has them")
            raise RowError(f"this record {has} teacher scores, while the first record {first}.",
                           "give every record teacher scores, or none (--columns score= ignores a label).")
        return self._row(obj, plan)


def canonical_features(with_scores: bool):
    """``datasets.Features`` of canonical collection rows."""
    import datasets

    f = {"query": datasets.Value("string"), "positives": datasets.Sequence(datasets.Value("string")),
         "negatives": datasets.Sequence(datasets.Value("string"))}
    if with_scores:
        f["positive_scores"] = datasets.Sequence(datasets.Value("float64"))
        f["negative_scores"] = datasets.Sequence(datasets.Value("float64"))
    return datasets.Features(f)


def layouts_table() -> str:
    """The Markdown table of every registered layout (docs/data.md prints it with ``python -m drmix.data.formats``)."""
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| layout (`--format`) | example row | how drmix reads it |", "|---|---|---|"]
    for layout in LAYOUTS:
        lines.append(f"| {cell(layout.title)} (`{layout.name}`) | {cell(layout.example)} | {cell(layout.reads)} |")
    return "\n".join(lines)


def describe_error(e: PlanError | RowError, path: Any, line: int | None = None, row: int | None = None) -> DataError:
    """A :class:`DataError` naming the file and the line (or row) of a plan or row problem."""
    msg = e.message if row is None else f"row {row}: {e.message}"
    return DataError(msg, path=path, line=line, fix=e.fix)


__all__ = ["Layout", "LAYOUTS", "register_layout", "Plan", "PlanError", "RowError", "Converter", "plan_for",
           "detect_layout", "canonical_features", "layouts_table", "clean_text", "ST_LABEL_COLUMNS"]
