"""A few labels when the user has them (``--dev-labels``): the labelled dev queries of the targets, checked before
any stage runs, written as one BEIR folder per corpus (``dev-labels/<corpus>/``: the target's corpus, the
labelled queries, ``qrels/dev.tsv``) and the choice made on them.

A ``--dev-labels`` source is a folder holding ``queries.jsonl`` and ``qrels/<--dev-labels-split>.tsv`` (a BEIR
folder; its corpus, if any, is not read: the labels name documents of the ``--corpus`` they belong to), or one
qrels ``.tsv`` file with ``queries.jsonl`` in its folder or the folder above it (``FOLDER/qrels/mine.tsv``).
Sources are matched to the corpora by name (the folder's name is a corpus name) when every one of them is,
else in ``--corpus`` order. Only the labelled queries' ids, texts and judgements are read; the same query ids
judged in the ``--eval-data`` split of the same corpus are refused (the final figure would score the choice on
the queries that made it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError, DataError

#: the split name of the written ``dev-labels/<corpus>/`` folders
SPLIT = "dev"
#: the file of ``dev-labels/`` that marks it finished (the counts and sources)
DONE_FILE = "labels.json"


@dataclass
class LabelSet:
    """The labelled dev queries of one target corpus."""

    corpus: str                                  # the corpus name
    qrels_path: Path
    queries_path: Path
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    queries: dict[str, str] = field(default_factory=dict)      # the judged queries only


@dataclass
class LabelledSelection:
    """The candidates on the labelled dev: nDCG@10 per corpus, their average, the best (ties: the earlier)."""

    results: dict[str, dict[str, dict[str, float]]]
    average: dict[str, float]
    selected: str
    queries: dict[str, int]                      # corpus -> labelled queries


def label_files(source: str | Path, split: str) -> tuple[Path, Path]:
    """``(qrels file, queries file)`` of one ``--dev-labels`` source; a missing one is a ``DataError`` naming it."""
    p = Path(source).expanduser()
    if p.is_dir():
        qrels = p / "qrels" / f"{split}.tsv"
        if not qrels.is_file():
            have = sorted(f.stem for f in (p / "qrels").glob("*.tsv")) if (p / "qrels").is_dir() else []
            raise DataError(f"dev labels: no qrels/{split}.tsv in the folder.", path=p,
                            fix=(f"pass --dev-labels-split {have[0]} (it has {', '.join(have)})" if have else
                                 "add qrels/<split>.tsv (query-id<TAB>corpus-id<TAB>score)") + ", or pass the qrels "
                                "file itself as --dev-labels.")
        queries = p / "queries.jsonl"
    elif p.is_file():
        qrels = p
        queries = next((d / "queries.jsonl" for d in (p.parent, p.parent.parent) if (d / "queries.jsonl").is_file()),
                       p.parent / "queries.jsonl")
    else:
        raise DataError("dev labels not found.", path=p, fix="pass a folder with queries.jsonl and qrels/<split>.tsv, "
                                                             "or a qrels .tsv file, as --dev-labels.")
    if not queries.is_file():
        raise DataError("dev labels: no queries.jsonl with the texts of the labelled queries.", path=queries,
                        fix="put queries.jsonl ({\"_id\", \"text\"} a line) beside qrels/, as in a BEIR folder.")
    return qrels, queries


def source_name(source: str | Path) -> str:
    """The name a source is matched to a corpus by: its folder's (a qrels file: the folder holding queries.jsonl)."""
    p = Path(source).expanduser()
    if p.is_dir():
        return p.name
    return (p.parent.parent if p.parent.name == "qrels" else p.parent).name


def match_sources(sources: Sequence[str], corpora: Mapping[str, str]) -> dict[str, str]:
    """``{corpus name: source}``: by name when every source's name is a corpus name, else in ``--corpus`` order
    (as many sources as corpora)."""
    names = [source_name(s) for s in sources]
    if all(n in corpora for n in names) and len(set(names)) == len(names):
        return dict(zip(names, sources))
    if len(sources) == len(corpora):
        return dict(zip(corpora, sources))
    unknown = next(s for s, n in zip(sources, names) if n not in corpora)
    raise ConfigError(f"dev labels: {len(sources)} --dev-labels for {len(corpora)} --corpus, and "
                      f"{source_name(unknown)!r} is not a corpus name ({', '.join(corpora)}).", path=unknown,
                      fix="pass one --dev-labels per --corpus in the same order, or name each labels folder as its "
                          "corpus.")


def _corpus_ids(corpus: str) -> set[str]:
    from drmix.data.beir import _record_id
    from drmix.io.read import iter_jsonl
    from drmix.pretrain.coco import corpus_file

    path = corpus_file(corpus)
    return {_record_id(path, line, obj) for line, obj in iter_jsonl(path)}


def _first_line(path: Path, wanted: Any) -> int | None:
    """The first line of the qrels file whose (query id, doc id) ``wanted`` accepts."""
    from drmix.io.read import iter_lines

    for line, text in iter_lines(path):
        cols = [c.strip() for c in text.split("\t")]
        if len(cols) == 3 and wanted(cols[0], cols[1]):
            return line
    return None


def read_label_set(corpus: str, corpus_path: str, source: str | Path, split: str) -> LabelSet:
    """One source read and checked against its corpus: every judged query has a text, every judged document is
    in the corpus (a ``DataError`` naming the qrels file and line otherwise)."""
    from drmix.data.beir import read_qrels, read_queries

    qrels_path, queries_path = label_files(source, split)
    qrels = read_qrels(qrels_path)
    queries = read_queries(queries_path)
    missing = [q for q in qrels if q not in queries]
    if missing:
        line = _first_line(qrels_path, lambda q, d: q == missing[0])
        raise DataError(f"dev labels: query id {missing[0]!r} is not in {queries_path} ({len(missing)} of "
                        f"{len(qrels)} judged queries have no text).", path=qrels_path, line=line,
                        fix="add the queries to queries.jsonl, or remove their rows from the qrels.")
    ids = _corpus_ids(corpus_path)
    bad = [(q, d) for q, docs in qrels.items() for d in docs if d not in ids]
    if bad:
        line = _first_line(qrels_path, lambda q, d: (q, d) == bad[0])
        raise DataError(f"dev labels: document id {bad[0][1]!r} is not in the corpus of --corpus {corpus} "
                        f"({corpus_path}; {len(bad)} judgements name unknown documents).", path=qrels_path,
                        line=line, fix="label documents of that corpus: pass one --dev-labels per --corpus in the "
                                       "same order, or name each labels folder as its corpus.")
    return LabelSet(corpus, qrels_path, queries_path, qrels, {q: queries[q] for q in qrels})


def check_overlap(sets: Mapping[str, LabelSet], corpora: Mapping[str, str], eval_data: Sequence[str],
                  eval_split: str) -> None:
    """Refuse labelled dev queries judged in the ``--eval-data`` split of the same corpus (same query ids): a
    figure scored on the queries that made the choice would be inflated. Only the ids of those qrels are read."""
    from drmix.data.beir import read_qrels

    for name, s in sets.items():
        corpus = Path(corpora[name]).expanduser().resolve()
        for d in eval_data:
            p = Path(d).expanduser()
            if p.name != name and p.resolve() != corpus:
                continue
            test = p / "qrels" / f"{eval_split}.tsv"
            if not test.is_file():
                continue
            judged = read_qrels(test)
            shared = [q for q in s.qrels if q in judged]
            if shared:
                raise ConfigError(f"dev labels {s.qrels_path} share {len(shared)} query id(s) with the --eval-data "
                                  f"{eval_split} split {test} (e.g. {shared[0]!r}): the final figure would score the "
                                  "choice on the queries that made it.", path=s.qrels_path,
                                  fix="label other queries (a dev or train split: --dev-labels-split), or evaluate "
                                      "on another split (--eval-split).")


def read_labels(config: Any, corpora: Mapping[str, str]) -> dict[str, LabelSet]:
    """Every ``--dev-labels`` source read, checked and matched to its corpus ({} without any)."""
    lab = config.labels
    if not lab.dev_labels:
        return {}
    matched = match_sources(lab.dev_labels, corpora)
    sets = {name: read_label_set(name, corpora[name], src, lab.dev_labels_split) for name, src in matched.items()}
    check_overlap(sets, corpora, config.eval.eval_data, config.eval.eval_split)
    return sets


def write_label_dirs(sets: Mapping[str, LabelSet], corpora: Mapping[str, str], out: Path) -> dict[str, Any]:
    """``out/<corpus>/``: a BEIR folder of the labelled queries on the target corpus (``corpus.jsonl`` a link to
    it, a copy where links are not allowed), ``qrels/dev.tsv``; and ``out/labels.json`` (written last: the stage
    is finished), all in one atomic step. Returns what ``labels.json`` holds."""
    import json
    import os
    import shutil

    from drmix.io.atomic import atomic_dir, atomic_write_json
    from drmix.pretrain.coco import corpus_file

    info: dict[str, Any] = {}
    with atomic_dir(out) as tmp:
        for name, s in sets.items():
            d = tmp / name
            (d / "qrels").mkdir(parents=True)
            src = corpus_file(corpora[name]).resolve()
            try:
                os.symlink(src, d / "corpus.jsonl")
            except OSError:
                shutil.copy2(src, d / "corpus.jsonl")
            with open(d / "queries.jsonl", "w", encoding="utf-8", newline="\n") as f:
                for q, text in s.queries.items():
                    f.write(json.dumps({"_id": q, "text": text}, ensure_ascii=False) + "\n")
            with open(d / "qrels" / f"{SPLIT}.tsv", "w", encoding="utf-8", newline="\n") as f:
                f.write("query-id\tcorpus-id\tscore\n")
                for q, docs in s.qrels.items():
                    for doc, score in docs.items():
                        f.write(f"{q}\t{doc}\t{int(score)}\n")
            info[name] = {"queries": len(s.qrels), "qrels": str(s.qrels_path), "queries_file": str(s.queries_path)}
        atomic_write_json(tmp / DONE_FILE, {"corpora": info})
    return info


def choice_scores(synthetic: Mapping[str, float], labelled: Mapping[str, float] | None,
                  select_on: str) -> dict[str, float]:
    """The score each candidate is chosen by: its synthetic-dev average, its labelled-dev average, or (``both``)
    the mean of the two."""
    if select_on == "synthetic" or labelled is None:
        return dict(synthetic)
    if select_on == "labels":
        return {lb: labelled[lb] for lb in synthetic}
    return {lb: (synthetic[lb] + labelled[lb]) / 2 for lb in synthetic}
