"""LLM-generated queries
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3.1.2 and Fig. 1b).

The prompt follows the structure of the authors' query-generation scripts, in our own words: a system
message casting the model as a search agent that invents a retrieval task the passage supports and a query
for it, in the passage's language; three few-shot turns, each a passage answered by three labelled lines
(``Task:``, ``Query:``, ``Language:``); then the target passage with its newlines removed. Sampling uses
temperature 0.8, top_p 0.9 and 256 new tokens. Only a parsed query is kept.

The template (system text, user and assistant formats, few-shot examples) is a JSON file; the default ships
as package data (``drmix/augment/data/qgen_fewshot.json``) and ``--template FILE`` replaces it.

:func:`parse_query` accepts the ``Query:`` line (any case, optional bullets, bold markers or quotes) and
rejects, with a reason that is counted: no ``Query:`` line, an empty query, a query longer than
``max_words``, a query that is the template's placeholder, one that copies the whole passage, or one that
repeats a few-shot example's query (small models parrot the examples).
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from drmix.augment.steps import AugmentContext, AugmentStep, register_step, sample_ids
from drmix.augment.templates import read_template
from drmix.errors import DataError
from drmix.llm.base import ChatRequest, GenerationParams, LLMBackend

log = logging.getLogger(__name__)

QGEN_PARAMS = GenerationParams(temperature=0.8, top_p=0.9, max_new_tokens=256)
_QUERY_LINE = re.compile(r"^[ \t>*_#-]*query[ \t*]*[:：][ \t]*(.*)$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class QGenTemplate:
    system: str
    user: str
    assistant: str
    examples: tuple[Mapping[str, str], ...]

    @classmethod
    def load(cls, path: str | Path | None = None) -> "QGenTemplate":
        """The template in ``path`` (JSON), or the packaged default."""
        text, src = read_template(path, "qgen_fewshot.json")
        try:
            raw = json.loads(text)
            t = cls(raw["system"], raw["user"], raw["assistant"], tuple(raw.get("examples", ())))
            for ex in t.examples:
                t.assistant.format(**ex)
                t.user.format(**ex)
            t.user.format(text="")
        except (json.JSONDecodeError, KeyError, TypeError, IndexError) as e:
            raise DataError(f"invalid query-generation template ({type(e).__name__}: {e}).", path=src,
                            fix='write {"system", "user" (with {text}), "assistant" (with {task}, {query}, '
                                '{language}), "examples": [{"text", "task", "query", "language"}, ...]}.') from None
        return t

    def messages(self, passage: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}]
        for ex in self.examples:
            msgs.append({"role": "user", "content": self.user.format(**ex)})
            msgs.append({"role": "assistant", "content": self.assistant.format(**ex)})
        msgs.append({"role": "user", "content": self.user.format(text=clean_passage(passage))})
        return msgs


def clean_passage(text: str) -> str:
    """The passage as the prompt shows it: newlines removed, runs of spaces collapsed."""
    return " ".join(text.split())


def parse_query(output: str, passage: str = "", *, max_words: int = 48,
                examples: Sequence[str] = ()) -> tuple[str | None, str]:
    """``(query, "kept")`` or ``(None, reason)`` for one completion (see the module docstring); a query equal to
    one of the few-shot ``examples`` (small models parrot them) is ``copied_example``."""
    m = _QUERY_LINE.search(output or "")
    if m is None:
        return None, "no_query_line"
    q = m.group(1).strip().strip("*").strip().strip('"“”\'`').strip()
    if not q:
        return None, "empty_query"
    if q in ("<the search query>", "{query}") or q.startswith("<"):
        return None, "placeholder"
    if len(q.split()) > max_words:
        return None, "too_long"
    if passage and clean_passage(q).lower() == clean_passage(passage).lower():
        return None, "copied_passage"
    if any(clean_passage(q).lower() == clean_passage(e).lower() for e in examples):
        return None, "copied_example"
    return q, "kept"


@dataclass
class GenerationStats:
    documents: int = 0
    kept: int = 0
    cached: int = 0
    seconds: float = 0.0       # wall time of the LLM calls that were not cached
    outcomes: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)   # failed LLM requests by cause (FAILURE_CAUSES)
    answered: int = 0          # requests with a completion so far (cached, failed or not)

    def as_dict(self) -> dict[str, Any]:
        return {"documents": self.documents, "answered": self.answered, "kept": self.kept, "cached": self.cached,
                "kept_share": self.kept / self.documents if self.documents else 0.0,
                "llm_seconds": round(self.seconds, 2),
                "docs_per_second": (self.answered - self.cached) / self.seconds if self.seconds > 0 else None,
                "outcomes": dict(self.outcomes), "failures": dict(self.failures)}


def generate_queries(corpus: Mapping[str, str], backend: LLMBackend, *, template: QGenTemplate | None = None,
                     params: GenerationParams = QGEN_PARAMS, max_words: int = 48, completion: bool = False,
                     chunk: int = 16, stats: GenerationStats | None = None
                     ) -> tuple[list[dict[str, Any]], GenerationStats]:
    """One generated query per document of ``corpus`` (id -> text) where the output parses.

    Returns rows ``{"query", "doc_id", "raw"}`` in corpus order and the statistics (bad outputs are counted
    by reason and dropped, never fatal; failed requests by cause in ``failures``). ``chunk`` requests go to the
    backend at a time (its cache persists each answer as it arrives, so an interrupted run resumes). Pass
    ``stats`` to keep the counts of a run that raises (an unreachable endpoint): it is filled as answers come.
    """
    import time

    from drmix.llm.base import describe_failures

    template = template or QGenTemplate.load()
    shots = [ex["query"] for ex in template.examples if "query" in ex]
    ids = list(corpus)
    stats = stats if stats is not None else GenerationStats()
    stats.documents = len(ids)
    rows: list[dict[str, Any]] = []
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        reqs = [ChatRequest.of(template.messages(corpus[d]), params, completion=completion) for d in part]
        t0 = time.perf_counter()
        comps = backend.complete_many(reqs)
        fresh = sum(not c.cached for c in comps)
        if fresh:
            stats.seconds += time.perf_counter() - t0
        for doc_id, comp in zip(part, comps):
            stats.answered += 1
            stats.cached += comp.cached
            if not comp.ok:
                stats.outcomes["llm_error"] += 1
                stats.failures[comp.failure_cause] += 1
                continue
            q, outcome = parse_query(comp.text, corpus[doc_id], max_words=max_words, examples=shots)
            stats.outcomes[outcome] += 1
            if q is not None:
                stats.kept += 1
                rows.append({"query": q, "doc_id": doc_id, "raw": comp.text})
        log.info("generated %d/%d (kept %d)", min(start + chunk, len(ids)), len(ids), stats.kept)
    if stats.failures:
        log.warning("%d of %d LLM requests failed (%s)", sum(stats.failures.values()), len(ids),
                    describe_failures(stats.failures))
    return rows, stats


def document_texts(corpus: Mapping[str, Mapping[str, str]], ids: Sequence[str] | None = None) -> dict[str, str]:
    """``{id: "title text"}`` for BEIR documents (the text an LLM sees)."""
    from drmix.data.beir import doc_text

    return {d: doc_text(corpus[d]) for d in (ids if ids is not None else corpus)}


# -- the recipe step -----------------------------------------------------------------------------------------
def generation_ids(ids: list[str], n: int, seed: int) -> list[str]:
    """The documents given to the LLM: a seeded sample of ``n`` spread over all of ``ids`` (not its head).

    ``ids`` is already a sorted sample of the corpus, so its first ``n`` would be the documents with the
    smallest ids; a second seeded draw (its own stream) spreads the generated queries over the corpus.
    """
    return sample_ids(ids, n, seed + 7907)


class GenerateStepOptions(BaseModel):
    """Options of the ``generate`` step (fields of ``drmix pipeline drama`` of the same names)."""

    generate_max_docs: int = Field(100, ge=1, description="Documents per corpus given to the LLM.")


def generate_step(ctx: AugmentContext, opts: GenerateStepOptions) -> tuple[list[dict], dict]:
    """One LLM-generated query per sampled document, mined by the teacher (DRAMA Sec. 3.2)."""
    from drmix.llm.runstats import failure_line, llm_stats

    gen_ids = generation_ids(ctx.ids, opts.generate_max_docs, ctx.seed)
    stats = GenerationStats()
    with llm_stats(ctx.stats_file("generate"), stats) as stats_path:  # written on every exit path
        rows, _ = generate_queries(document_texts(ctx.corpus, gen_ids), ctx.backend, stats=stats)
    rows = [{"query": r["query"], "augment": "generate", "source_doc": r["doc_id"], "llm": ctx.backend.describe()}
            for r in rows]
    mined, counts = ctx.mine(rows)
    ctx.why["generate"] = (failure_line(stats, stats_path) + f"; outcomes {dict(stats.outcomes)}, mining "
                           f"{dict(counts)}. Check the endpoint or llm.timeout")
    return mined, stats.as_dict()


register_step(AugmentStep("generate", GenerateStepOptions, generate_step, order=20, needs_llm=True,
                          enabled_by="generate",
                          help="LLM-generated queries (one per document), mined by the teacher."))
