"""The build: resolve families, collect, pair, split, add negatives, write collections + BEIR + stats."""
from __future__ import annotations

import importlib.util
import logging
import random
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from drmix.data.builders.localdocs.beir_writer import _doc_id, _write_beir_dir, split_family
from drmix.data.builders.localdocs.negatives import add_hard_negatives
from drmix.data.builders.localdocs.options import PAIR_TYPES, LocalDocsData, LocalDocsOptions
from drmix.data.builders.localdocs.pairs import make_pairs
from drmix.data.builders.localdocs.scan import collect_items
from drmix.errors import ConfigError, DataError
from drmix.io.atomic import atomic_dir, atomic_write_json, write_jsonl_atomic

log = logging.getLogger(__name__)


def _resolve_families(families: list[str] | dict[str, list[str]] | None, opts: LocalDocsOptions) -> dict[str, list[str]]:
    if families is None:
        chosen = dict(opts.families)
    elif isinstance(families, dict):
        chosen = {str(k): list(v) for k, v in families.items()}
    else:
        unknown = [f for f in families if f not in opts.families]
        if unknown:
            raise ConfigError(f"unknown documentation family {unknown[0]!r}.",
                              fix=f"choose from {', '.join(sorted(opts.families))}, or pass a mapping name -> modules.")
        chosen = {f: list(opts.families[f]) for f in families}
    bad = [f for f in chosen if not re.fullmatch(r"[A-Za-z0-9_.-]+", f)]
    if bad:
        raise ConfigError(f"family name {bad[0]!r} is not usable as a file name.", fix="use letters, digits, _ . -")
    available = {}
    for fam, roots in chosen.items():
        present = [r for r in roots if _importable(r)]
        if present:
            available[fam] = present
        else:
            log.info("family %s skipped: none of %s is installed", fam, roots)
    if not available:
        raise ConfigError("none of the requested documentation families has an installed package.",
                          fix="choose families whose packages are installed (stdlib always is).")
    return available


def _importable(name: str) -> bool:
    """Whether the top-level package of ``name`` is installed (checked without importing anything)."""
    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def build_localdocs(out_dir: str | Path, *, seed: int = 0, max_pairs_per_collection: int | None = None,
                    families: list[str] | dict[str, list[str]] | None = None,
                    options: LocalDocsOptions | None = None) -> LocalDocsData:
    """Build the documentation collections into ``out_dir`` (replaced atomically) and return what was written.

    Layout: ``train/<family>.jsonl`` (``{"query", "positive", "negatives"}`` per line; the directory is a
    multi-collection input for training), ``beir/<family>/`` (BEIR corpus, queries, ``qrels/test.tsv`` and
    ``qrels/dev.tsv``), ``stats.json``.

    Args:
        seed: seeds every random choice (overrides ``options.seed``).
        max_pairs_per_collection: cap on training pairs per family (overrides the option).
        families: names among the defaults (``stdlib``, ``numerics``, ``ml``, ``tooling``), or a mapping
            family name -> module/package names; None = all default families that are installed.
    """
    opts = (options or LocalDocsOptions()).model_copy()
    opts.seed = seed
    if max_pairs_per_collection is not None:
        if max_pairs_per_collection < 1:
            raise ConfigError("max_pairs_per_collection must be at least 1.", fix="pass a positive number.")
        opts.max_pairs_per_collection = max_pairs_per_collection
    fams = _resolve_families(families, opts)
    t0 = time.monotonic()
    items, walk = collect_items(fams, opts)
    log.info("read %d documented objects from %d families in %.1f s", len(items), len(fams), time.monotonic() - t0)
    for fam, st in walk.items():
        if st.get("truncated"):
            log.warning("family %s: import time limit (%.0f s) reached; the collection depends on machine speed",
                        fam, opts.family_time_limit_s)
    pairs = make_pairs(items, seed=seed, opts=opts)
    out_dir = Path(out_dir)
    train_files: dict[str, Path] = {}
    beir_dirs: dict[str, Path] = {}
    stats: list[dict[str, Any]] = []
    with atomic_dir(out_dir) as tmp:
        for fam in sorted(pairs):
            rng = random.Random(f"{seed}:split:{fam}")
            split = split_family(pairs[fam], opts, rng)
            if len(split.train) < opts.min_train_pairs:
                log.warning("family %s dropped: %d training pairs (< %d)", fam, len(split.train), opts.min_train_pairs)
                continue
            add_hard_negatives(split.train, split.train, num_negatives=opts.num_negatives, seed=seed)
            rows = [{"query": p.query, "positive": p.positive, "negatives": p.negatives} for p in split.train]
            write_jsonl_atomic(tmp / "train" / f"{fam}.jsonl", rows)
            _write_beir_dir(tmp / "beir" / fam, split)
            train_files[fam] = out_dir / "train" / f"{fam}.jsonl"
            beir_dirs[fam] = out_dir / "beir" / fam
            types = Counter(p.type for p in split.train)
            st = walk.get(fam, {})
            stats.append({
                "family": fam, "packages": len(fams[fam]), "modules": st.get("modules", 0),
                "train_pairs": len(split.train), **{f"{t}_pairs": types.get(t, 0) for t in PAIR_TYPES},
                "test_queries": len(split.test), "dev_queries": len(split.dev),
                "corpus_docs": len({_doc_id(p.positive) for p in split.test + split.dev + split.distractors}),
                "mean_positive_words": round(sum(len(p.positive.split()) for p in split.train) / len(split.train), 1),
            })
        if not train_files:
            raise DataError("no documentation family produced enough pairs.", path=out_dir,
                            fix="lower min_train_pairs or add families with installed packages.")
        atomic_write_json(tmp / "stats.json", {"seed": seed, "options": opts.model_dump(), "families": stats})
    return LocalDocsData(out_dir, train_files, beir_dirs, stats)


STATS_COLUMNS = ["family", "modules", "train_pairs", "signature_pairs", "summary_pairs", "package_pairs",
                 "test_queries", "dev_queries", "corpus_docs", "mean_positive_words"]


def stats_table(data: LocalDocsData | list[dict[str, Any]]) -> str:
    """The per-family statistics as a Markdown table (one row per family)."""
    from drmix.markdown import md_cell

    rows = data.stats if isinstance(data, LocalDocsData) else data
    lines = ["| " + " | ".join(STATS_COLUMNS) + " |", "|" + "---|" * len(STATS_COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(md_cell(r.get(c, "")) for c in STATS_COLUMNS) + " |")
    return "\n".join(lines)


