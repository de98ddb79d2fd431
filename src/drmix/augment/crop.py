"""Cropped-sentence pseudo queries
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3.1.1 and Fig. 1a).

Every sentence of a document is a candidate query (the authors' scripts use all of them; the paper speaks of
random sentence cropping). Sentences come from pysbd's rule-based segmenter, which ships its rules and works
offline; ``min_words`` drops fragments ("Fig. 2.") that carry no retrieval intent, ``max_chars`` truncates run-on
sentences, and ``max_per_doc`` keeps a seeded random subset of a long document's sentences so one document
cannot dominate the queries. The teacher's mining (:func:`drmix.augment.mine.mine_ranked`, ranks 1-10 positives,
30-50 negatives) turns the queries into training examples; on its own, ``drmix augment crop`` writes the
source document as the positive (the pair a COCO-style run would use).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from drmix.augment.steps import AugmentContext, AugmentStep, register_step, sample_ids
from drmix.data.sentences import split_sentences
from drmix.errors import DataError

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class SentenceQuery:
    query: str
    doc_id: str
    sentence: int  # 0-based index of the sentence in its document


def crop_queries(corpus: Mapping[str, Mapping[str, str] | str], *, min_words: int = 4, max_chars: int = 512,
                 max_per_doc: int | None = None, language: str = "en", seed: int = 0,
                 include_title: bool = False) -> list[SentenceQuery]:
    """Sentence queries of every document, in corpus order.

    ``corpus`` maps ids to BEIR documents (``{"title", "text"}``) or plain strings. Raises :class:`DataError`
    when no document yields a sentence of ``min_words`` words.
    """
    rng = np.random.default_rng(seed)
    out: list[SentenceQuery] = []
    for doc_id, doc in corpus.items():
        if isinstance(doc, str):
            text = doc
        else:
            text = doc.get("text", "") or ""
            if include_title and doc.get("title"):
                text = f"{doc['title']}.\n{text}"
        sents = [(i, s[:max_chars].strip()) for i, s in enumerate(split_sentences(text, language))
                 if len(_WORD.findall(s)) >= min_words]
        if max_per_doc is not None and len(sents) > max_per_doc:
            keep = np.sort(rng.choice(len(sents), size=max_per_doc, replace=False))
            sents = [sents[j] for j in keep]
        out.extend(SentenceQuery(s, str(doc_id), i) for i, s in sents)
    if not out:
        raise DataError(f"no sentence of at least {min_words} words in {len(corpus)} documents.",
                        fix="check the corpus has a 'text' field with prose, or lower --min-words.")
    log.info("cropped %d sentence queries from %d documents", len(out), len(corpus))
    return out


# -- the recipe step -----------------------------------------------------------------------------------------
class CropStepOptions(BaseModel):
    """Options of the ``crop`` step (fields of ``drmix pipeline drama`` of the same names)."""

    min_words: int = Field(4, ge=1, description="Shortest sentence kept as a cropped query, in words.")
    max_per_doc: int | None = Field(2, ge=1, description="Cropped queries per document at most (seeded sample).")
    max_queries: int | None = Field(None, ge=1, description="Cropped queries per corpus at most (seeded sample).")


def crop_step(ctx: AugmentContext, opts: CropStepOptions) -> tuple[list[dict], dict]:
    """Sentences of the sampled documents as queries, mined by the teacher (DRAMA Sec. 3.1)."""
    queries = crop_queries({d: ctx.corpus[d] for d in ctx.ids}, min_words=opts.min_words,
                           max_per_doc=opts.max_per_doc, seed=ctx.seed)
    keep = sample_ids([str(i) for i in range(len(queries))], opts.max_queries, ctx.seed)
    rows = [{"query": q.query, "augment": "crop", "source_doc": q.doc_id, "sentence": q.sentence}
            for q in (queries[int(i)] for i in keep)]
    mined, counts = ctx.mine(rows)
    return mined, dict(counts)


register_step(AugmentStep("crop", CropStepOptions, crop_step, order=10,
                          help="Cropped-sentence queries mined by the teacher."))
