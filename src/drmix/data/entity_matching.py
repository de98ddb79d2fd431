"""Build multi-corpus retrieval benchmarks from entity-matching tables (Walmart-Amazon, Amazon-Google).

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 5.1: "given a product title, the goal is to retrieve its description from both sources"; the
matched items are the evaluation queries (the title of either side is a query, so there are two queries
per matched pair), split 1:1 into validation and test; the unmatched items of the known side are its
training data; both directions (either side known) are evaluated.

Input: a directory in the Magellan / DeepMatcher layout -- ``tableA.csv`` and ``tableB.csv`` (an ``id``
column plus attribute columns) and labelled pair files ``train.csv``, ``valid.csv``, ``test.csv`` (columns
``ltable_id``, ``rtable_id``, ``label``; any subset of them, or a single ``matches.csv``). Every pair with
label 1, from every pair file, is a match; the DeepMatcher train/valid/test split of the *pairs* is not
used, since the benchmark splits *items* instead.

Output layout (``OUT`` = the output directory, ``A``/``B`` = the side names, e.g. ``walmart``/``amazon``)::

    OUT/manifest.json          what was built: corpora, splits, counts, options, source
    OUT/A/                     a BEIR directory: corpus.jsonl = every record of table A (minus dropped
                               distractors), queries.jsonl = all multi-corpus queries, qrels/dev.tsv and
                               qrels/test.tsv = the judgements that fall in corpus A
    OUT/B/                     the same for table B (same queries, same query ids)
    OUT/train/A.jsonl          {"query": title, "positive": passage} for A's unmatched records: the training
    OUT/train/B.jsonl          collection when A (resp. B) is the known corpus (``drmix train --data``)

Queries are ``A-<id>`` / ``B-<id>`` (the side and the record id); the text is the record's ``title``
(``query_field``). A query from record ``a`` of A has relevant passages ``a`` in A and every record of B
matched to ``a``. The Magellan tables are *structured* (no free-text description column), so a passage is
the record serialised as ``"brand: ...; modelno: ..."`` over ``passage_fields``.

**The passage never contains the query field by default.** The default ``passage_fields`` is every column
except ``id`` *and* ``query_field``: with the title inside the passage every query appears verbatim in its
own relevant passage (every query of the shared Walmart-Amazon and Amazon-Google tables), naive merging is
nearly perfect (docs/multicorpus.md) and fine-tuning learns string identity -- not the paper's task, where a
title retrieves a *description*. Including the title is an explicit option (``include_query_field=True`` or naming the query
field in ``passage_fields``), recorded in the manifest as ``passage_contains_query: true``; it is an
*identity* task, useful only as a sanity check. Departure from the paper: the paper's passages are the
free-text descriptions, which these tables do not have, so the title-free attributes are the closest
honest substitute (Walmart-Amazon has category/brand/modelno/price; Amazon-Google only manufacturer and
price, which makes that benchmark much harder than the paper's).

Validation/test split: matches form a bipartite graph; its connected components (an item with all its
counterparts) are shuffled with the seed and each goes whole to whichever split has fewer queries so
far, so no item's queries straddle the splits and the two halves have (nearly) equal query counts.

Corpora are full size by default (every record of each table). Optionally the unmatched records of a side
are subsampled (seeded, ``max_unmatched``) to bound encoding time in a quick test; matched records are always
kept. Subsampling changes the corpus-size imbalance the paper is about, so benchmarks do not use it.

Every problem a user can cause -- a missing column, a duplicate id, a pair naming an id that is not in
its table, a label that is not 0/1, bytes that are not UTF-8 -- raises :class:`DataError` with the file,
the line and a fix. Written by hand on the standard ``csv`` module: no library builds this benchmark.
"""
from __future__ import annotations

import csv
import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from drmix.errors import ConfigError, DataError
from drmix.io.atomic import atomic_dir, atomic_write_json, write_jsonl_atomic

log = logging.getLogger(__name__)

PAIR_FILES = ("train.csv", "valid.csv", "test.csv", "matches.csv")
PAIR_COLUMNS = ("ltable_id", "rtable_id", "label")
SPLITS = ("dev", "test")


class EntityMatchingConfig(BaseModel):
    """Options of the builder (defaults follow the paper's construction)."""

    names: tuple[str, str] | None = Field(None, description="names of side A and side B; default from the "
                                          "source directory name 'a-b' (walmart-amazon -> walmart, amazon)")
    query_field: str = Field("title", description="column whose value is the query text")
    passage_fields: list[str] | None = Field(None, description="columns serialised into the passage "
                                             "(default: every column except id and the query field)")
    include_query_field: bool = Field(False, description="also put the query field into the default passage "
                                      "(an identity task: each query appears verbatim in its own passage)")
    seed: int = Field(42, description="seed of the dev/test split and of distractor subsampling")
    max_unmatched: int | None = Field(None, ge=0, description="keep at most this many unmatched records "
                                      "per side (seeded sample); None keeps all")


@dataclass
class Table:
    """One side's records: ``rows[id] = {column: value}`` in file order, plus the header."""

    path: Path
    columns: list[str]
    rows: dict[str, dict[str, str]]
    lines: dict[str, int] = field(default_factory=dict)


@dataclass
class BuildSummary:
    """What :func:`build_entity_matching` wrote."""

    out_dir: Path
    names: tuple[str, str]
    corpus_sizes: dict[str, int]
    train_sizes: dict[str, int]
    queries: dict[str, int]          # split -> number of queries
    matches: int

    def to_json(self) -> dict[str, Any]:
        return {"out_dir": str(self.out_dir), "names": list(self.names), "corpus_sizes": self.corpus_sizes,
                "train_sizes": self.train_sizes, "queries": self.queries, "matches": self.matches}


# --------------------------------------------------------------------------------------------------
# Reading CSV files with file/line errors
# --------------------------------------------------------------------------------------------------


def _decode(path: Path) -> str:
    if not path.is_file():
        raise DataError("file not found.", path=path, fix="check the path (expected tableA.csv, tableB.csv and "
                        "train/valid/test.csv with ltable_id,rtable_id,label).")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise DataError(f"not valid UTF-8 ({e.reason} at byte {e.start}).", path=path, line=line,
                        fix="re-encode the file as UTF-8 (e.g. iconv -f latin1 -t UTF-8).") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_csv(path: str | Path, required: Sequence[str], *, options: Mapping[str, str] | None = None
             ) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and ``(line, row)`` records of a UTF-8 CSV; checks required columns and field counts.

    ``options`` maps a required column to the command-line option that chose it (``title`` ->
    ``--query-field``): a missing column that an option named is fixed with that option, not in the file.
    """
    path = Path(path)
    reader = csv.reader(io.StringIO(_decode(path), newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise DataError("file is empty (no header).", path=path, line=1,
                        fix=f"write a header line with the columns {', '.join(required)}.") from None
    except csv.Error as e:
        raise DataError(f"malformed CSV header ({e}).", path=path, line=1, fix="fix the header line.") from None
    missing = [c for c in required if c not in header]
    chosen = [c for c in missing if options and c in options]
    if chosen:
        opt = options[chosen[0]]
        raise DataError(f"no column {chosen[0]!r} (chosen by {opt}); the header has {', '.join(header)}.", path=path,
                        line=1, fix=f"pass {opt} NAME with one of the header's columns "
                                    f"(e.g. {opt} {next((h for h in header if h != 'id'), 'name')}).")
    if missing:
        raise DataError(f"missing column(s) {', '.join(missing)}; the header has {', '.join(header)}.", path=path,
                        line=1, fix=f"add the column(s) {', '.join(missing)} to the header.")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise DataError(f"duplicate column(s) {', '.join(dup)} in the header.", path=path, line=1,
                        fix="give every column a distinct name.")
    rows: list[tuple[int, dict[str, str]]] = []
    while True:
        start = reader.line_num + 1
        try:
            rec = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise DataError(f"malformed CSV ({e}).", path=path, line=start, fix="fix the quoting on this line.") from None
        if not rec or all(not v.strip() for v in rec):
            continue
        if len(rec) != len(header):
            raise DataError(f"{len(rec)} fields but the header has {len(header)}.", path=path, line=start,
                            fix="quote values that contain commas; give every row one value per column.")
        rows.append((start, dict(zip(header, (v.strip() for v in rec)))))
    return header, rows


def read_table(path: str | Path, required: Sequence[str] = ("id",), *,
               options: Mapping[str, str] | None = None) -> Table:
    """Read ``tableA.csv``/``tableB.csv``: unique non-empty ids, the required columns present (``options``:
    see :func:`read_csv`)."""
    path = Path(path)
    header, records = read_csv(path, ["id", *[c for c in required if c != "id"]], options=options)
    rows: dict[str, dict[str, str]] = {}
    lines: dict[str, int] = {}
    for line, row in records:
        rid = row["id"]
        if not rid:
            raise DataError("empty id.", path=path, line=line, fix="give every record an id.")
        if rid in rows:
            raise DataError(f"duplicate id {rid!r} (first on line {lines[rid]}).", path=path, line=line,
                            fix="give every record a unique id.")
        rows[rid] = row
        lines[rid] = line
    if not rows:
        raise DataError("table has no records.", path=path, fix="add records below the header.")
    return Table(path, header, rows, lines)


def read_matches(path: str | Path, left: Table, right: Table) -> list[tuple[str, str]]:
    """Matched ``(left id, right id)`` pairs (label 1) of one pair file; ids are checked against the tables."""
    path = Path(path)
    _, records = read_csv(path, PAIR_COLUMNS)
    out: list[tuple[str, str]] = []
    for line, row in records:
        label = row["label"]
        if label not in ("0", "1"):
            raise DataError(f"label {label!r} is not 0 or 1.", path=path, line=line,
                            fix="write 1 for a match and 0 for a non-match.")
        for col, table in (("ltable_id", left), ("rtable_id", right)):
            if row[col] not in table.rows:
                raise DataError(f"{col} {row[col]!r} is not an id of {table.path.name}.", path=path, line=line,
                                fix=f"remove the pair or add the record to {table.path.name}.")
        if label == "1":
            out.append((row["ltable_id"], row["rtable_id"]))
    return out


# --------------------------------------------------------------------------------------------------
# Building the benchmark
# --------------------------------------------------------------------------------------------------


def default_names(src: Path) -> tuple[str, str]:
    """``walmart-amazon`` -> ``(walmart, amazon)``; anything else -> ``(a, b)``."""
    parts = src.resolve().name.replace("_", "-").lower().split("-")
    if len(parts) == 2 and all(parts) and parts[0] != parts[1]:
        return parts[0], parts[1]
    return "a", "b"


def passage_fields(columns: Sequence[str], cfg: EntityMatchingConfig) -> list[str]:
    """The columns serialised into a passage: explicit ``passage_fields``, else all but id and the query field."""
    if cfg.passage_fields:
        return list(cfg.passage_fields)
    return [c for c in columns if c != "id" and (cfg.include_query_field or c != cfg.query_field)]


def serialise(row: dict[str, str], fields: Sequence[str]) -> str:
    """``"title: x; brand: y"`` over the non-empty fields."""
    return "; ".join(f"{f}: {row[f]}" for f in fields if row.get(f, "").strip())


def split_components(matches: Sequence[tuple[str, str]], seed: int) -> dict[str, list[tuple[set[str], set[str]]]]:
    """Connected components of the match graph, dealt into dev/test with equal query counts (seeded)."""
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in matches:
        ra, rb = find((0, a)), find((1, b))
        if ra != rb:
            parent[rb] = ra
    comps: dict[tuple[int, str], tuple[set[str], set[str]]] = {}
    for node in list(parent):
        side, rid = node
        comps.setdefault(find(node), (set(), set()))[side].add(rid)
    ordered = sorted(comps.values(), key=lambda c: (sorted(c[0]), sorted(c[1])))
    perm = np.random.default_rng(seed).permutation(len(ordered))
    out: dict[str, list[tuple[set[str], set[str]]]] = {s: [] for s in SPLITS}
    counts = dict.fromkeys(SPLITS, 0)
    for i in perm:
        comp = ordered[int(i)]
        split = min(SPLITS, key=lambda s: (counts[s], SPLITS.index(s)))
        out[split].append(comp)
        counts[split] += len(comp[0]) + len(comp[1])
    return out


def _pair_files(src: Path) -> list[Path]:
    files = [src / f for f in PAIR_FILES if (src / f).is_file()]
    if not files:
        raise DataError("no labelled pair file found.", path=src,
                        fix="add train.csv/valid.csv/test.csv (or matches.csv) with columns ltable_id,rtable_id,label.")
    return files


def _queries_and_judgements(matches: list[tuple[str, str]], tables: tuple[Table, Table],
                            partner: list[dict[str, set[str]]], names: tuple[str, ...], cfg: EntityMatchingConfig
                            ) -> tuple[dict[str, str], list[dict[str, dict[str, dict[str, int]]]]]:
    """Each matched record's query (``<side>-<id>``, in id order) and, per side and split, what it matches: itself on
    its own side, its partners on the other."""
    queries: dict[str, str] = {}
    qrels: list[dict[str, dict[str, dict[str, int]]]] = [{sp: {} for sp in SPLITS}, {sp: {} for sp in SPLITS}]
    skipped = 0
    for split, comps in split_components(matches, cfg.seed).items():
        for comp in comps:
            for s in (0, 1):
                for rid in sorted(comp[s], key=_id_key):
                    text = tables[s].rows[rid][cfg.query_field]
                    if not text:
                        skipped += 1
                        continue
                    qid = f"{names[s]}-{rid}"
                    queries[qid] = text
                    qrels[s][split][qid] = {rid: 1}
                    qrels[1 - s][split][qid] = {o: 1 for o in sorted(partner[s][rid], key=_id_key)}
    if skipped:
        log.warning("%d matched records have an empty %r and give no query", skipped, cfg.query_field)
    ordered_q = dict(sorted(queries.items(), key=lambda kv: _qid_key(kv[0], names)))
    return ordered_q, qrels


def build_entity_matching(src: str | Path, out_dir: str | Path,
                          config: EntityMatchingConfig | None = None) -> BuildSummary:
    """Convert a Magellan-layout directory into the multi-corpus layout described in the module docstring."""
    from drmix.data.beir import write_beir

    cfg = config or EntityMatchingConfig()
    src, out = Path(src).expanduser(), Path(out_dir).expanduser()
    names = tuple(cfg.names) if cfg.names else default_names(src)
    if len(set(names)) != 2 or any(not n or "/" in n for n in names):
        raise ConfigError(f"side names {names} must be two distinct names without '/'.",
                          fix="pass --names walmart,amazon.")
    required = [cfg.query_field, *(cfg.passage_fields or [])]
    options = {**{c: "--passage-fields" for c in cfg.passage_fields or []}, cfg.query_field: "--query-field"}
    left = read_table(src / "tableA.csv", required, options=options)
    right = read_table(src / "tableB.csv", required, options=options)
    tables = (left, right)
    fields = [passage_fields(t.columns, cfg) for t in tables]
    for t, f in zip(tables, fields):
        if not f:
            raise ConfigError(f"{t.path.name} has no column to put in a passage besides id and the query field "
                              f"{cfg.query_field!r}.", fix="name the passage columns with --passage-fields, or "
                              "pass --include-query-field for an identity task.")
    contains_query = any(cfg.query_field in f for f in fields)
    if contains_query:
        log.warning("passages contain the query field %r: every query appears verbatim in its own passage "
                    "(an identity task)", cfg.query_field)
    matches = sorted({m for f in _pair_files(src) for m in read_matches(f, left, right)})
    if not matches:
        raise DataError("the pair files hold no match (no row with label 1).", path=src,
                        fix="label matching pairs with 1.")
    partner = [dict[str, set[str]](), dict[str, set[str]]()]
    for a, b in matches:
        partner[0].setdefault(a, set()).add(b)
        partner[1].setdefault(b, set()).add(a)

    # Corpora: matched records always, unmatched ones optionally subsampled.
    kept: list[list[str]] = []
    train: list[list[dict[str, str]]] = []
    rng = np.random.default_rng(cfg.seed)
    for s, t in enumerate(tables):
        unmatched = [rid for rid in t.rows if rid not in partner[s]]
        if cfg.max_unmatched is not None and len(unmatched) > cfg.max_unmatched:
            pick = set(rng.choice(len(unmatched), size=cfg.max_unmatched, replace=False).tolist())
            unmatched = [rid for i, rid in enumerate(unmatched) if i in pick]
        keep = set(unmatched) | set(partner[s])
        kept.append([rid for rid in t.rows if rid in keep])
        train.append([{"query": t.rows[rid][cfg.query_field], "positive": serialise(t.rows[rid], fields[s])}
                      for rid in unmatched if t.rows[rid][cfg.query_field] and serialise(t.rows[rid], fields[s])])

    ordered_q, qrels = _queries_and_judgements(matches, tables, partner, names, cfg)

    with atomic_dir(out) as tmp:
        for s, t in enumerate(tables):
            corpus = {rid: {"title": "", "text": serialise(t.rows[rid], fields[s])} for rid in kept[s]}
            write_beir(tmp / names[s], corpus, ordered_q, {sp: qrels[s][sp] for sp in SPLITS})
            write_jsonl_atomic(tmp / "train" / f"{names[s]}.jsonl", train[s])
        summary = BuildSummary(out, names, {names[s]: len(kept[s]) for s in (0, 1)},
                               {names[s]: len(train[s]) for s in (0, 1)},
                               {sp: len(qrels[0][sp]) for sp in SPLITS}, len(matches))
        atomic_write_json(tmp / "manifest.json", {
            "format": "drmix-multicorpus/1", "source": str(src.resolve()),
            "corpora": {names[s]: names[s] for s in (0, 1)},
            "train": {names[s]: f"train/{names[s]}.jsonl" for s in (0, 1)},
            "splits": list(SPLITS), "options": cfg.model_dump(mode="json"),
            "passage_fields": {names[s]: fields[s] for s in (0, 1)}, "passage_contains_query": contains_query,
            **{key: v for key, v in summary.to_json().items() if key != "out_dir"},
        })
    log.info("built %s: corpora %s, queries %s, %d matches", out, summary.corpus_sizes, summary.queries, len(matches))
    return summary


def _id_key(rid: str) -> tuple[int, int | str]:
    return (0, int(rid)) if rid.isdigit() else (1, rid)


def _qid_key(qid: str, names: Sequence[str]) -> tuple[int, tuple[int, int | str]]:
    for s, n in enumerate(names):
        if qid.startswith(n + "-"):
            return s, _id_key(qid[len(n) + 1:])
    return 2, (1, qid)


def read_manifest(root: str | Path) -> dict[str, Any]:
    """The ``manifest.json`` of a built benchmark, with the corpus directories resolved."""
    import json

    root = Path(root).expanduser()
    path = root / "manifest.json"
    if not path.is_file():
        raise DataError("not a multi-corpus benchmark directory (no manifest.json).", path=root,
                        fix="build one with drmix multicorpus build, or pass --corpus NAME=DIR options.")
    try:
        man = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON ({e.msg}).", path=path, line=e.lineno, fix="rebuild the benchmark.") from None
    man["corpus_dirs"] = {name: root / rel for name, rel in man.get("corpora", {}).items()}
    man["train_files"] = {name: root / rel for name, rel in man.get("train", {}).items()}
    return man
