"""LLM listwise reranking of the teacher's candidates
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3.1.3, Fig. 1c).

For each query the teacher's top ``k = 20`` candidates are shown to an instruction-following LLM, each cut to
``max_passage_words`` words and numbered ``[1]..[20]`` in the teacher's order; the query is repeated after the
passages and the model is asked to answer only with identifiers in descending relevance (``[4] > [2] > ...``).
Decoding is greedy (temperature 0). The reranked top-1 becomes the positive and reranked ranks 10-20 (the
paper's ``[k - n, k]`` with ``n = 10``) the hard negatives. Each written row carries the LLM's order as teacher
scores, ``-ln(rank)`` (``positive_scores`` ``[0.0]``, ``negative_scores`` aligned with the negatives), for the
distillation losses of :mod:`drmix.train.distill`.

Small models rarely produce a valid permutation, so :func:`parse_ranking` repairs what they write and counts
each repair: identifiers outside ``1..k`` are dropped, repeated identifiers keep their first position, and
identifiers never mentioned are appended in the teacher's order. An output with no valid identifier at all
carries no judgement: it is counted as ``unparsed`` and the query is dropped.

Departure: the authors cut passages to 256 *tokens* of the LLM's tokenizer; an HTTP endpoint exposes no
tokenizer, so passages are cut to ``max_passage_words`` whitespace words (192 words is about 256 tokens of
English text for Llama-style tokenizers).
"""
from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from drmix.augment.mine import RankWindow
from drmix.augment.steps import AugmentContext, AugmentStep, register_step
from drmix.augment.templates import read_template
from drmix.errors import DataError
from drmix.llm.base import ChatRequest, GenerationParams, LLMBackend

log = logging.getLogger(__name__)

RERANK_PARAMS = GenerationParams(temperature=0.0, top_p=1.0, max_new_tokens=160)
_ID = re.compile(r"\[\s*(\d+)\s*\]")
_BARE = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


@dataclass
class Ranking:
    """A repaired permutation of ``0..k-1`` (teacher positions) and what was repaired."""

    order: list[int]
    valid: int = 0        # identifiers taken from the output as they were
    invalid: int = 0      # identifiers outside 1..k, dropped
    duplicates: int = 0   # repeated identifiers, dropped
    missing: int = 0      # identifiers never given, appended in the teacher's order

    @property
    def parsed(self) -> bool:
        return self.valid > 0

    @property
    def complete(self) -> bool:
        return self.valid > 0 and self.invalid == 0 and self.duplicates == 0 and self.missing == 0


def parse_ranking(output: str, k: int) -> Ranking:
    """Turn a completion such as ``"[3] > [1] > [2]"`` into a permutation of teacher positions ``0..k-1``.

    Bracketed identifiers are read; when there are none, bare integers are (``3 > 1 > 2``). See the module
    docstring for the repair rules.
    """
    found = [int(x) for x in _ID.findall(output or "")]
    if not found:
        found = [int(x) for x in _BARE.findall(output or "")]
    seen: set[int] = set()
    order: list[int] = []
    r = Ranking(order)
    for ident in found:
        if not 1 <= ident <= k:
            r.invalid += 1
        elif ident in seen:
            r.duplicates += 1
        else:
            seen.add(ident)
            order.append(ident - 1)
            r.valid += 1
    for pos in range(k):
        if pos + 1 not in seen:
            order.append(pos)
            r.missing += 1
    return r


@dataclass(frozen=True)
class RerankTemplate:
    system: str
    user: str
    passage: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> "RerankTemplate":
        text, src = read_template(path, "rerank_prompt.json")
        try:
            raw = json.loads(text)
            t = cls(raw["system"], raw["user"], raw["passage"])
            t.user.format(n=1, passages="", query="")
            t.passage.format(id=1, text="")
        except (json.JSONDecodeError, KeyError, TypeError, IndexError) as e:
            raise DataError(f"invalid rerank template ({type(e).__name__}: {e}).", path=src,
                            fix='write {"system", "user" (with {n}, {passages}, {query}), "passage" (with {id}, '
                                '{text})}.') from None
        return t

    def messages(self, query: str, passages: Sequence[str], *, max_words: int = 192) -> list[dict[str, str]]:
        shown = "\n".join(self.passage.format(id=i, text=" ".join(p.split()[:max_words]))
                          for i, p in enumerate(passages, start=1))
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": self.user.format(n=len(passages), passages=shown, query=query)}]


@dataclass
class RerankStats:
    queries: int = 0
    kept: int = 0
    cached: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)   # complete | repaired | unparsed | llm_error
    repairs: Counter = field(default_factory=Counter)    # invalid | duplicates | missing (identifier counts)
    failures: Counter = field(default_factory=Counter)   # failed LLM requests by cause (FAILURE_CAUSES)
    answered: int = 0

    def as_dict(self) -> dict[str, Any]:
        n = self.queries or 1
        return {"queries": self.queries, "answered": self.answered, "kept": self.kept, "cached": self.cached,
                "complete_share": self.outcomes["complete"] / n, "repaired_share": self.outcomes["repaired"] / n,
                "dropped_share": (self.outcomes["unparsed"] + self.outcomes["llm_error"]) / n,
                "llm_seconds": round(self.seconds, 2),
                "queries_per_second": (self.answered - self.cached) / self.seconds if self.seconds > 0 else None,
                "outcomes": dict(self.outcomes), "repairs": dict(self.repairs), "failures": dict(self.failures)}


def rerank_candidates(items: Sequence[tuple[str, Sequence[str]]], backend: LLMBackend, *,
                      template: RerankTemplate | None = None, params: GenerationParams = RERANK_PARAMS,
                      max_words: int = 192, chunk: int = 8, stats: RerankStats | None = None
                      ) -> tuple[list[Ranking | None], RerankStats]:
    """Rank each ``(query, candidate texts in teacher order)``; ``None`` where the output was dropped.
    ``stats``, when given, is filled as answers come (the counts survive a run that raises)."""
    import time

    from drmix.llm.base import describe_failures

    template = template or RerankTemplate.load()
    stats = stats if stats is not None else RerankStats()
    stats.queries = len(items)
    out: list[Ranking | None] = []
    for start in range(0, len(items), chunk):
        part = items[start:start + chunk]
        reqs = [ChatRequest.of(template.messages(q, cands, max_words=max_words), params) for q, cands in part]
        t0 = time.perf_counter()
        comps = backend.complete_many(reqs)
        if any(not c.cached for c in comps):
            stats.seconds += time.perf_counter() - t0
        for (q, cands), comp in zip(part, comps):
            stats.answered += 1
            stats.cached += comp.cached
            if not comp.ok:
                stats.outcomes["llm_error"] += 1
                stats.failures[comp.failure_cause] += 1
                out.append(None)
                continue
            r = parse_ranking(comp.text, len(cands))
            if not r.parsed:
                stats.outcomes["unparsed"] += 1
                out.append(None)
                continue
            stats.outcomes["complete" if r.complete else "repaired"] += 1
            stats.repairs.update(invalid=r.invalid, duplicates=r.duplicates, missing=r.missing)
            stats.kept += 1
            out.append(r)
        log.info("reranked %d/%d (kept %d)", min(start + chunk, len(items)), len(items), stats.kept)
    if stats.failures:
        log.warning("%d of %d LLM requests failed (%s)", sum(stats.failures.values()), len(items),
                    describe_failures(stats.failures))
    return out, stats


RERANK_NEGATIVES = RankWindow(10, 20)


def rerank_examples(rows: Sequence[dict[str, Any]], corpus: Mapping[str, str], backend: Any, *, k: int = 20,
                    negatives: RankWindow | str = RERANK_NEGATIVES, template: Any = None,
                    max_words: int = 192, path: str | Path = "", stats: Any = None) -> tuple[list[dict[str, Any]], Any]:
    """Rerank each mined row's top-``k`` teacher candidates with the LLM: positive = reranked top-1,
    negatives = reranked ranks in ``negatives``. Rows without ``teacher.candidates`` raise :class:`DataError`."""
    negatives = RankWindow.parse(negatives)
    items, cand_ids = [], []
    for i, row in enumerate(rows, start=1):
        cands = (row.get("teacher") or {}).get("candidates")
        if not cands:
            raise DataError("line has no teacher candidates to rerank.", path=path, line=i,
                            fix="rerank the output of `drmix augment mine`, which records them.")
        missing = [c[0] for c in cands[:k] if c[0] not in corpus]
        if missing:
            raise DataError(f"candidate {missing[0]!r} is not in the corpus.", path=path, line=i,
                            fix="pass the corpus the queries were mined from.")
        ids = [c[0] for c in cands[:k]]
        cand_ids.append(ids)
        items.append((row["query"], [corpus[d] for d in ids]))
    rankings, stats = rerank_candidates(items, backend, template=template, max_words=max_words, stats=stats)
    out = []
    for row, ids, r in zip(rows, cand_ids, rankings):
        if r is None:
            continue
        order = [ids[j] for j in r.order]
        line = {kk: v for kk, v in row.items() if kk not in ("positives", "negatives")}
        negative_ranks = list(range(negatives.start, negatives.start + len(negatives.take(order))))
        line.update({"positives": [corpus[order[0]]], "negatives": [corpus[d] for d in negatives.take(order)],
                     # the LLM's order as teacher scores, -ln(rank): loss=kl at teacher_temperature 1 then
                     # targets P(doc) proportional to 1/rank (drmix.train.distill)
                     "positive_scores": [0.0], "negative_scores": [round(-math.log(k), 6) for k in negative_ranks],
                     "augment": str(row.get("augment", "query")) + "+rerank",
                     "llm_rerank": {**backend.describe(), "order": order, "negative_ranks": str(negatives),
                                    "repairs": {"invalid": r.invalid, "duplicates": r.duplicates,
                                                "missing": r.missing}}})
        out.append(line)
    return out, stats


# -- the recipe step -----------------------------------------------------------------------------------------
class RerankStepOptions(BaseModel):
    """The ``rerank`` step has no options of its own (the window and template are the paper's)."""


def rerank_step(ctx: AugmentContext, opts: RerankStepOptions) -> tuple[list[dict], dict]:
    """The LLM's listwise rerank of the generated queries' teacher top-20 (DRAMA Sec. 3.3)."""
    from drmix.llm.runstats import failure_line, llm_stats

    stats = RerankStats()
    with llm_stats(ctx.stats_file("rerank"), stats) as stats_path:
        rows, _ = rerank_examples(ctx.rows_of("generate"), ctx.texts, ctx.backend, stats=stats)
    ctx.why["rerank"] = failure_line(stats, stats_path) + f"; outcomes {dict(stats.outcomes)}"
    return rows, stats.as_dict()


register_step(AugmentStep("rerank", RerankStepOptions, rerank_step, order=30, needs_llm=True,
                          enabled_by="rerank",
                          reads=("generate",), help="LLM listwise rerank of the generated queries' top-20."))
