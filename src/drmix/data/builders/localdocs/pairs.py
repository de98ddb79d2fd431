"""Pair building: one (query, positive) pair per documented object, its type drawn with a seeded coin."""
from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable

from drmix.data.builders.localdocs.clean import clean_text, split_docstring
from drmix.data.builders.localdocs.options import DocItem, LocalDocsOptions, Pair


def _candidate_pairs(item: DocItem, opts: LocalDocsOptions) -> list[Pair]:
    key = f"{item.kind}:{item.name}"
    if item.kind == "package":
        q, p = clean_text(item.summary or "", opts.max_words), clean_text(item.doc, opts.max_words)
        if len(q.split()) >= opts.min_query_words and len(p.split()) >= max(opts.min_words, 20):
            return [Pair(q, p, "package", item.root, key)]
        return []
    summary, lead, body = split_docstring(item.doc)
    out = []
    if item.signature:
        p = clean_text(lead, opts.max_words)
        if len(p.split()) >= opts.min_words:
            out.append(Pair(item.signature, p, "signature", item.root, key))
    q, p = clean_text(summary, 64), clean_text(body, opts.max_words)
    if len(q.split()) >= opts.min_query_words and len(p.split()) >= opts.min_words:
        out.append(Pair(q, p, "summary", item.root, key))
    return out


def make_pairs(items: Iterable[DocItem], *, seed: int = 0, opts: LocalDocsOptions | None = None) -> dict[str, list[Pair]]:
    """One pair per documented object (type drawn with a seeded coin), duplicates dropped, per family.

    Items are processed in sorted (family, name, kind) order so the result does not depend on walk order.
    An object whose docstring, or a pair whose query or positive text, was already used in its family
    is dropped (aliases and re-exports would otherwise be hidden positives of each other).
    """
    opts = opts or LocalDocsOptions()
    by_family: dict[str, list[Pair]] = defaultdict(list)
    used: dict[str, set[str]] = defaultdict(set)
    for item in sorted(items, key=lambda i: (i.family, i.name, i.kind)):
        dk = "d:" + " ".join(item.doc.lower().split())
        if dk in used[item.family]:
            continue  # the same docstring on another object (aliases, re-exports): a hidden positive
        cands = _candidate_pairs(item, opts)
        if not cands:
            continue
        used[item.family].add(dk)
        rng = random.Random(f"{seed}:{item.family}:{item.kind}:{item.name}")
        rng.shuffle(cands)
        for pair in cands:
            qk, pk = "q:" + pair.query.lower(), "p:" + pair.positive.lower()
            if qk in used[item.family] or pk in used[item.family]:
                continue
            used[item.family].update((qk, pk))
            by_family[item.family].append(pair)
            break
    return dict(by_family)


