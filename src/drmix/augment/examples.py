"""Collection lines from augmented queries: DRAMA's teacher windows and the provenance each line carries.

Every writer here produces a drmix collection JSONL (``query``, ``positives``, ``negatives``; what
``drmix train`` reads) plus provenance fields that loading ignores:

* ``augment`` -- how the line was made (``crop``, ``crop+mine``, ``generate+mine``, ``generate+mine+rerank``);
* ``source_doc`` -- the corpus id of the document the query came from (``sentence``: its index, for crops);
* ``teacher`` -- the teacher model, the positive/negative ids with their scores, and the top candidates
  (``candidates``: ``[[id, score], ...]``, what ``rerank`` reads);
* ``llm`` -- the backend and model that wrote the query or the ranking, and the ranking's repairs.

:func:`mine_examples` applies DRAMA's windows to the teacher's ranking (Sec. 3.1.1: top ``k = 50``, ranks
``[1, m = 10]`` positives, ``[k - n, k] = [30, 50]`` hard negatives) through :func:`drmix.augment.mine.mine_ranked`,
the same ranking ``drmix mine`` uses. A query whose positive window is empty is skipped and counted.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drmix.augment.mine import RankWindow, mine_ranked
from drmix.errors import DataError

log = logging.getLogger(__name__)

POSITIVES = RankWindow(1, 10)
NEGATIVES = RankWindow(30, 50)


def write_collection(path: str | Path, rows: Sequence[dict[str, Any]], *, why: str | None = None,
                     write: bool = True) -> None:
    """Write collection lines atomically; refuses to write an empty collection (``why``: the fix it names).
    ``write=False`` only checks (the caller writes the lines with other files)."""
    from drmix.io.atomic import write_jsonl_atomic

    if not rows:
        raise DataError("no example survived; nothing to write.", path=path,
                        fix=why or "check the counts logged above (too short sentences, empty windows, "
                                   "dropped outputs).")
    if write:
        write_jsonl_atomic(path, list(rows))


def read_query_rows(path: str | Path) -> list[dict[str, Any]]:
    """Query lines: any JSONL whose lines hold ``query`` (drmix collections, crop/generate outputs) or ``text``
    (BEIR queries.jsonl, with ``_id``). Other fields are kept as they are."""
    from drmix.io.read import iter_jsonl

    rows = []
    for line, obj in iter_jsonl(path):
        q = obj.get("query", obj.get("text"))
        if not isinstance(q, str) or not q.strip():
            raise DataError('line has no "query" (or "text") string.', path=path, line=line,
                            fix='write {"query": "..."} per line (crop/generate outputs already do).')
        rows.append({**obj, "query": q})
    if not rows:
        raise DataError("query file is empty.", path=path, fix="add at least one query line.")
    return rows


def crop_rows(queries: Sequence[Any], corpus: Mapping[str, str]) -> list[dict[str, Any]]:
    """Cropped sentences as collection lines: the source document is the positive."""
    return [{"query": q.query, "positive": corpus[q.doc_id], "augment": "crop", "source_doc": q.doc_id,
             "sentence": q.sentence} for q in queries]


def mine_examples(rows: Sequence[dict[str, Any]], corpus: Mapping[str, str], model: Any, *,
                  positives: RankWindow | str = POSITIVES, negatives: RankWindow | str = NEGATIVES,
                  keep_candidates: int = 20, batch_size: int = 64, teacher_name: str = "",
                  show_progress: bool = False) -> tuple[list[dict[str, Any]], Counter]:
    """Teacher positives and hard negatives for each query row (see the module docstring).

    ``corpus`` maps ids to document texts. Returns the collection lines and counts (``kept``,
    ``no_positive``, ``short_negatives``). ``show_progress``: a bar in passages/s with the time left for the
    corpus's and the queries' encoding passes.
    """
    positives, negatives = RankWindow.parse(positives), RankWindow.parse(negatives)
    ids = list(corpus)
    texts = [corpus[i] for i in ids]
    top_n = max(positives.end, negatives.end, keep_candidates)
    ranked = mine_ranked([r["query"] for r in rows], ids, texts, model, top_n=top_n, batch_size=batch_size,
                         show_progress=show_progress)
    counts: Counter = Counter()
    out = []
    for row, ranking in zip(rows, ranked):
        pos, neg = positives.take(ranking), negatives.take(ranking)
        if not pos:
            counts["no_positive"] += 1
            continue
        if len(neg) < negatives.end - negatives.start + 1:
            counts["short_negatives"] += 1
        base = str(row.get("augment", "query"))
        line = {k: v for k, v in row.items() if k not in ("positive", "positives", "negatives", "teacher", "raw")}
        line.update({
            "query": row["query"], "positives": [corpus[d] for d, _ in pos], "negatives": [corpus[d] for d, _ in neg],
            # the teacher's scores, aligned with the texts (the scores loss=margin_mse / kl distil)
            "positive_scores": [round(s, 5) for _, s in pos], "negative_scores": [round(s, 5) for _, s in neg],
            "augment": base + "+mine",
            "teacher": {"model": teacher_name, "positive_ranks": str(positives), "negative_ranks": str(negatives),
                        "positive_ids": [d for d, _ in pos], "positive_scores": [round(s, 5) for _, s in pos],
                        "negative_ids": [d for d, _ in neg], "negative_scores": [round(s, 5) for _, s in neg],
                        "candidates": [[d, round(s, 5)] for d, s in ranking[:keep_candidates]]},
        })
        out.append(line)
        counts["kept"] += 1
    log.info("mined %d of %d queries (%s)", counts["kept"], len(rows), dict(counts))
    return out, counts
