"""Training collections built from the documentation of the installed Python packages.

``drmix demo`` needs data that is on every machine with drmix installed and needs no download: the
docstrings and package metadata of the installed libraries. This module turns them into retrieval
pairs, one **collection per library family** (``stdlib``, ``numerics``, ``ml``, ``tooling``), each
with a held-out split written as a BEIR directory.

Pair types (one pair per documented object; the type is drawn per object with a seeded coin among
the types that apply, so two pairs never share an object and no hard or in-batch negative is a
hidden positive):

* ``signature`` -- signature -> docstring: query ``numpy.linalg.norm(x, ord=None, axis=None,
  keepdims=False)``, positive the docstring's first paragraphs (up to its first section header);
* ``summary`` -- summary line -> body: query the docstring's first line, positive the rest;
* ``package`` -- package summary -> description: query the distribution's ``Summary`` metadata,
  positive the start of its long description (``importlib.metadata``).

Why one collection per family and not per (family, pair type): a family is a *domain* (its own
vocabulary: POSIX and text handling, arrays and statistics, tensors and models, terminals and
validation), which is what mixture weighting is about; a (family, ``package``) collection would
hold a handful of pairs, too few for a batch. Families have very different sizes, so uniform and
temperature mixtures really differ.

How the modules are read: the family's modules are imported in a **child process** (``python -m
drmix.data.builders.localdocs``), so import side effects (warnings filters, global settings, printing, memory)
never reach the caller, the caller's own imports never change what is found, and a time limit can be
enforced. The standard-library family is a fixed list of modules; for other packages the root and
its public submodules (no ``_private``, tests, CLIs, converters, ...) are listed from the file system
with :mod:`pkgutil` without importing them, sorted (top level first, then by name) and imported up to
``max_modules_per_package``. Everything after that is sorted and sampled with ``random.Random``
seeded from ``seed`` and the family name, so the same installed versions give the same collections.
(A per-family time limit guards against a very slow import; when it cuts a walk short the result
depends on machine speed, and a warning says so.)

Hard negatives: for each training pair, ``num_negatives`` documents of the same family and the same
root package: the lexically closest one (IDF-weighted term overlap, via an inverted index) and random
ones for the rest.

Held-out split: per family, ``test_queries`` + ``dev_queries`` pairs become the queries of a BEIR
directory whose corpus holds their positives plus ``distractors`` documents of the same family that
are not training positives, so retrieval is non-trivial and no training positive leaks into it.

Hand-written: no library walks installed packages' docstrings into retrieval pairs. Text cleaning is
deliberately minimal (RST roles and directives, Markdown links, badges and code fences, doctest
lines, whitespace), then truncation to ``max_words`` words.

Layout: ``options`` (options, default families, records), ``scan`` (package scanning, the child
process), ``clean`` (markup removal, docstring splitting), ``pairs`` (pair building), ``negatives``
(hard negatives), ``beir_writer`` (held-out splits as BEIR directories), ``build`` (:func:`build_localdocs`).
"""
from __future__ import annotations

from drmix.data.builders.localdocs.beir_writer import FamilySplit, split_family
from drmix.data.builders.localdocs.build import STATS_COLUMNS, build_localdocs, stats_table
from drmix.data.builders.localdocs.clean import clean_text, split_docstring
from drmix.data.builders.localdocs.negatives import add_hard_negatives
from drmix.data.builders.localdocs.options import (
    DEFAULT_FAMILIES,
    PAIR_TYPES,
    STDLIB_MODULES,
    DocItem,
    LocalDocsData,
    LocalDocsOptions,
    Pair,
)
from drmix.data.builders.localdocs.pairs import make_pairs
from drmix.data.builders.localdocs.scan import collect_items, extract_items, list_submodules

__all__ = [
    "DEFAULT_FAMILIES", "PAIR_TYPES", "STATS_COLUMNS", "STDLIB_MODULES", "DocItem", "FamilySplit", "LocalDocsData",
    "LocalDocsOptions", "Pair", "add_hard_negatives", "build_localdocs", "clean_text", "collect_items",
    "extract_items", "list_submodules", "make_pairs", "split_docstring", "split_family", "stats_table",
]
