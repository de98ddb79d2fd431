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
drmix.data.localdocs``), so import side effects (warnings filters, global settings, printing, memory)
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
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import math
import os
import pkgutil
import random
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from drmix.errors import ConfigError, DataError
from drmix.io import atomic_dir, atomic_write_json, write_jsonl_atomic

log = logging.getLogger(__name__)

STDLIB_MODULES: list[str] = [
    "abc", "argparse", "array", "ast", "base64", "bisect", "calendar", "collections", "colorsys",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "filecmp",
    "fnmatch", "fractions", "functools", "glob", "gzip", "hashlib", "heapq", "hmac", "html", "http.client",
    "inspect", "io", "ipaddress", "itertools", "json", "logging", "math", "mimetypes", "operator", "os",
    "os.path", "pathlib", "pprint", "queue", "random", "re", "sched", "secrets", "shlex", "shutil",
    "socket", "sqlite3", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile",
    "textwrap", "threading", "time", "timeit", "tokenize", "typing", "unicodedata", "urllib.parse",
    "urllib.request", "uuid", "warnings", "weakref", "zipfile", "zlib",
]

DEFAULT_FAMILIES: dict[str, list[str]] = {
    "stdlib": STDLIB_MODULES,
    "numerics": ["numpy", "scipy", "pandas", "pyarrow"],
    "ml": ["torch", "transformers", "datasets", "sentence_transformers", "accelerate", "tokenizers",
           "safetensors", "faiss"],
    "tooling": ["click", "typer", "rich", "pydantic", "yaml", "tqdm", "packaging", "jinja2", "pytest",
                "requests", "fsspec", "filelock"],
}

# Submodule name parts never imported: tests, command lines, converters, build helpers, deprecated shims.
_SKIP_PARTS = {
    "test", "tests", "testing", "conftest", "benchmarks", "benchmark", "__main__", "main", "setup", "cli",
    "commands", "distutils", "f2py", "compat", "core", "contrib", "conversion_mapping", "utils_test",
    "pyplot", "hub", "onnx", "_vendor", "vendor", "experimental", "lib2to3", "tkinter", "idlelib",
}
_SKIP_PREFIXES = ("convert", "test_", "check_")

PAIR_TYPES = ("signature", "summary", "package")


class LocalDocsOptions(BaseModel):
    """Options of :func:`build_localdocs` (defaults sized for ``drmix demo`` on 2 CPU cores)."""

    seed: int = Field(0, description="Seed of every random choice (pair types, sampling, splits, negatives).")
    families: dict[str, list[str]] = Field(default_factory=lambda: {k: list(v) for k, v in DEFAULT_FAMILIES.items()},
                                           description="Family name -> importable modules/packages (roots).")
    max_pairs_per_collection: int = Field(3000, ge=1, description="Cap on training pairs per family.")
    min_train_pairs: int = Field(20, ge=1, description="A family with fewer training pairs is dropped.")
    test_queries: int = Field(50, ge=1, description="Held-out test queries per family (BEIR qrels/test.tsv).")
    dev_queries: int = Field(25, ge=0, description="Held-out dev queries per family (BEIR qrels/dev.tsv).")
    distractors: int = Field(200, ge=0, description="Extra same-family documents in each held-out corpus.")
    num_negatives: int = Field(2, ge=0, description="Hard negatives per training pair (same family and package).")
    max_words: int = Field(200, ge=8, description="Texts are truncated to this many words.")
    min_words: int = Field(5, ge=1, description="Positives shorter than this are dropped.")
    min_query_words: int = Field(3, ge=1, description="Summary-line queries shorter than this are dropped.")
    max_modules_per_package: int = Field(30, ge=1, description="Submodules imported per third-party package.")
    max_depth: int = Field(2, ge=0, description="Submodule depth walked below a package root.")
    max_methods_per_class: int = Field(20, ge=0, description="Public methods read per class.")
    family_time_limit_s: float = Field(60.0, gt=0, description="Import time budget per family (safety cap).")
    isolate: bool = Field(True, description="Import modules in a child process (recommended).")


@dataclass
class DocItem:
    """One documented object (or distribution) found by the walk."""

    family: str
    root: str
    kind: str  # module | function | class | method | package
    name: str
    doc: str
    signature: str | None = None
    summary: str | None = None  # package summary (kind == "package")


@dataclass
class Pair:
    query: str
    positive: str
    type: str
    root: str
    key: str  # the object the pair came from (never a negative of itself)
    negatives: list[str] = field(default_factory=list)


@dataclass
class LocalDocsData:
    """What :func:`build_localdocs` wrote."""

    root: Path
    train_files: dict[str, Path]  # family -> JSONL file (one collection per file, name = family)
    beir_dirs: dict[str, Path]  # family -> BEIR directory (splits test and dev)
    stats: list[dict[str, Any]]

    @property
    def train_dir(self) -> Path:
        return self.root / "train"

    @property
    def families(self) -> list[str]:
        return list(self.train_files)


# --------------------------------------------------------------------------------------------- walk

def _skip_module(name: str) -> bool:
    for part in name.split(".")[1:]:
        if part.startswith("_") or part in _SKIP_PARTS or part.startswith(_SKIP_PREFIXES) or part.endswith("_test"):
            return True
    return False


def list_submodules(root: str, *, max_depth: int = 2, limit: int = 30) -> list[str]:
    """Public submodules of package ``root`` (root first), found on the file system without importing them.

    Sorted by depth then name, cut at ``limit`` names (the root included).
    """
    spec = importlib.util.find_spec(root)
    if spec is None:
        return []
    names: list[tuple[int, str]] = [(0, root)]
    locations = list(spec.submodule_search_locations or [])

    def walk(paths: list[str], prefix: str, depth: int) -> None:
        if depth > max_depth:
            return
        for info in pkgutil.iter_modules(paths):
            full = prefix + info.name
            if _skip_module(full):
                continue
            names.append((depth, full))
            if info.ispkg:
                finder_path = getattr(info.module_finder, "path", None)
                if finder_path:
                    walk([os.path.join(finder_path, info.name)], full + ".", depth + 1)

    if locations:
        walk(locations, root + ".", 1)
    return [n for _, n in sorted(set(names))][:limit]


_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


def _signature(name: str, obj: Any, is_method: bool) -> str | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if is_method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    try:
        text = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    except (TypeError, ValueError):
        return None
    text = _ADDR.sub("", text)
    if len(text) > 300:
        text = text[:297] + "...)"
    return name + text


def _own_doc(obj: Any) -> str | None:
    doc = getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    return inspect.cleandoc(doc)


def _public_members(module: Any) -> list[tuple[str, Any]]:
    """Public attributes already present in the module's namespace, sorted by name.

    Only ``vars(module)`` is read, never ``getattr`` on a name of ``__all__`` that is not loaded yet: lazy
    packages (``transformers``) would otherwise import hundreds of submodules.
    """
    namespace = vars(module)
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)):
        names = list(namespace)
    wanted = {n for n in names if isinstance(n, str) and not n.startswith("_")}
    return [(n, namespace[n]) for n in sorted(wanted) if n in namespace]


def _owned(obj: Any, top: str, stdlib: set[str]) -> bool:
    """Whether ``obj`` is defined in package ``top`` (for the standard library: in any standard module,
    since e.g. ``os.path`` re-exports ``posixpath``)."""
    owner = getattr(obj, "__module__", None)
    if not isinstance(owner, str) or not owner:
        return False
    otop = owner.split(".")[0]
    return otop == top or (top in stdlib and otop in stdlib)


def _items_of_module(module: Any, family: str, root: str, seen: set[int], opts: LocalDocsOptions) -> list[DocItem]:
    """Module docstring, public functions and classes (and their methods) owned by ``root``'s package."""
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    items: list[DocItem] = []
    mname = module.__name__
    top = root.split(".")[0]
    doc = _own_doc(module)
    if doc and id(module) not in seen:
        seen.add(id(module))
        items.append(DocItem(family, root, "module", mname, doc))
    for attr, obj in _public_members(module):
        if not (inspect.isroutine(obj) or inspect.isclass(obj)) or id(obj) in seen:
            continue
        if not _owned(obj, top, stdlib):
            continue
        seen.add(id(obj))
        qual = f"{mname}.{attr}"
        d = _own_doc(obj)
        if d:
            kind = "class" if inspect.isclass(obj) else "function"
            items.append(DocItem(family, root, kind, qual, d, _signature(qual, obj, False)))
        if inspect.isclass(obj) and opts.max_methods_per_class:
            n = 0
            for mattr in sorted(vars(obj)):
                if mattr.startswith("_") or n >= opts.max_methods_per_class:
                    continue
                meth = vars(obj)[mattr]
                if isinstance(meth, (staticmethod, classmethod)):
                    meth = meth.__func__
                if not inspect.isroutine(meth) or id(meth) in seen:
                    continue
                md = _own_doc(meth)
                if not md:
                    continue
                seen.add(id(meth))
                n += 1
                mq = f"{qual}.{mattr}"
                items.append(DocItem(family, root, "method", mq, md, _signature(mq, meth, True)))
    return items


def _package_items(family: str, roots: list[str], dist_map: dict[str, list[str]]) -> list[DocItem]:
    items = []
    done: set[str] = set()
    for root in roots:
        for dist_name in sorted(dist_map.get(root.split(".")[0], [])):
            if dist_name.lower() in done:
                continue
            done.add(dist_name.lower())
            try:
                meta = importlib.metadata.metadata(dist_name)
            except importlib.metadata.PackageNotFoundError:
                continue
            summary = meta.get("Summary") or ""
            desc = meta.get_payload() if hasattr(meta, "get_payload") else ""
            desc = desc or meta.get("Description") or ""
            if summary.strip() and isinstance(desc, str) and desc.strip():
                items.append(DocItem(family, root, "package", dist_name, desc, summary=summary.strip()))
    return items


def extract_items(families: dict[str, list[str]], opts: LocalDocsOptions) -> tuple[list[DocItem], dict[str, dict]]:
    """Import the families' modules in this process and collect their documented objects.

    Returns the items and per-family walk statistics (modules imported / failed, truncated).
    Prefer :func:`collect_items`, which runs this in a child process.
    """
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    try:
        dist_map = importlib.metadata.packages_distributions()
    except Exception:  # noqa: BLE001 - broken metadata must not stop the walk
        dist_map = {}
    items: list[DocItem] = []
    walk_stats: dict[str, dict] = {}
    for family in sorted(families):
        start = time.monotonic()
        seen: set[int] = set()
        st = {"modules": 0, "failed": 0, "truncated": False}
        fam_items: list[DocItem] = []
        roots = sorted(dict.fromkeys(families[family]))
        for root in roots:
            top = root.split(".")[0]
            if top in stdlib:
                modules = [root]
            else:
                try:
                    modules = list_submodules(root, max_depth=opts.max_depth, limit=opts.max_modules_per_package)
                except Exception:  # noqa: BLE001 - a parent package that fails to import is skipped
                    modules = []
            for mname in modules:
                if time.monotonic() - start > opts.family_time_limit_s:
                    st["truncated"] = True
                    break
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        module = importlib.import_module(mname)
                except BaseException as e:  # noqa: BLE001 - any failing import is skipped (SystemExit included)
                    log.debug("skip %s: %s", mname, e)
                    st["failed"] += 1
                    continue
                st["modules"] += 1
                fam_items.extend(_items_of_module(module, family, root, seen, opts))
        fam_items.extend(_package_items(family, roots, dist_map))
        st["seconds"] = round(time.monotonic() - start, 2)
        walk_stats[family] = st
        items.extend(fam_items)
    return items, walk_stats


def collect_items(families: dict[str, list[str]], opts: LocalDocsOptions) -> tuple[list[DocItem], dict[str, dict]]:
    """:func:`extract_items`, in a child process when ``opts.isolate`` (see the module docstring)."""
    if not opts.isolate:
        return extract_items(families, opts)
    with tempfile.TemporaryDirectory(prefix="drmix-localdocs-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "items.json"
        spec_path.write_text(json.dumps({"families": families, "options": opts.model_dump(), "sys_path": sys.path}),
                             encoding="utf-8")
        limit = opts.family_time_limit_s * max(1, len(families)) + 120
        # The child sees exactly the modules this process can import.
        # PYTHONHASHSEED: set-valued defaults in signatures print in a fixed order.
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore", PYTHONHASHSEED="0",
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            proc = subprocess.run([sys.executable, "-m", "drmix.data.localdocs", str(spec_path), str(out_path)],
                                  capture_output=True, text=True, timeout=limit, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DataError(f"reading the installed packages' documentation took over {limit:.0f} s.",
                            fix="lower max_modules_per_package or choose fewer families.") from None
        if proc.returncode != 0 or not out_path.exists():
            tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
            raise DataError(f"the documentation reader process failed (exit {proc.returncode}: {tail[0][:200]}).",
                            fix="run with isolate=False to see the full error, or choose fewer families.")
        payload = json.loads(out_path.read_text(encoding="utf-8"))
    items = [DocItem(**d) for d in payload["items"]]
    return items, payload["walk"]


def _child_main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    sys.path[:] = spec["sys_path"]
    opts = LocalDocsOptions(**spec["options"])
    # Whatever imported modules print must not end up anywhere the parent reads.
    sys.stdout = sys.stderr
    items, walk = extract_items(spec["families"], opts)
    Path(argv[1]).write_text(json.dumps({"items": [vars(i) for i in items], "walk": walk}), encoding="utf-8")
    return 0


# --------------------------------------------------------------------------------------------- text

_RST_ROLE = re.compile(r":(?:[a-zA-Z]+:)*[a-zA-Z]+:`~?([^`]*)`")
_RST_DIRECTIVE = re.compile(r"^\s*\.\. [^\n]*$", re.MULTILINE)
_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_RST_LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")
_HTML_TAG = re.compile(r"<[^>\n]{1,200}>")
_CODE_FENCE = re.compile(r"```.*?```", re.DOTALL)
_URL = re.compile(r"https?://\S+")
_SECTION_UNDERLINE = re.compile(r"^\s*([-=~^*#+])\1{2,}\s*$")
_SECTION_HEADER = re.compile(
    r"^\s*(Parameters|Args|Arguments|Keyword Args|Kwargs|Returns?|Yields?|Raises|Examples?|Notes?|See Also|"
    r"References|Attributes|Methods|Warnings?|Other Parameters|Example usage|Usage)\s*:?\s*$", re.IGNORECASE)
_SIG_LINE = re.compile(r"^[\w.]+\(.*\)\s*(->.*)?$")
_WORD = re.compile(r"[a-z0-9]+")


def _strip_markup(text: str) -> str:
    text = _CODE_FENCE.sub(" ", text)
    text = _MD_IMAGE.sub(" ", text)
    text = _RST_LINK.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_DIRECTIVE.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _URL.sub(" ", text)
    text = text.replace("``", "").replace("**", "").replace("`", "")
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith((">>>", "... ", "$ ", "|")) or s == "..." or _SECTION_UNDERLINE.match(s):
            continue
        lines.append(re.sub(r"^#+\s*", "", line))
    return "\n".join(lines)


def clean_text(text: str, max_words: int = 200) -> str:
    """Minimal markup removal (RST roles/directives, Markdown links/images/fences, doctest lines),
    whitespace collapsed, truncated to ``max_words`` words."""
    words = _strip_markup(text).split()
    return " ".join(words[:max_words])


def split_docstring(doc: str, max_summary_words: int = 40) -> tuple[str, str, str]:
    """Split a docstring into (summary, lead, body).

    ``summary`` is the first paragraph (or its first sentence when the paragraph is longer than
    ``max_summary_words``), ``body`` everything after the summary, ``lead`` the paragraphs before the
    first section header (``Parameters``/``Args:``/an underlined title ...), summary included.
    A first line that is itself a call signature (as in C extensions: ``add(input, other) -> Tensor``)
    is dropped.
    """
    lines = doc.strip().splitlines()
    while lines and (_SIG_LINE.match(lines[0].strip()) or not lines[0].strip()):
        lines = lines[1:]
    if not lines:
        return "", "", ""
    n_first = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    first = " ".join(line.strip() for line in lines[:n_first])
    rest = "\n".join(lines[n_first:])
    if len(first.split()) > max_summary_words:
        m = re.search(r"(?<=[.!?])\s+(?=[A-Z(`*])", first)
        if m is None:
            return "", "\n".join(lines), rest
        summary, body = first[:m.start()], first[m.end():] + "\n" + rest
    else:
        summary, body = first, rest
    lead: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if i > 0 and (_SECTION_HEADER.match(line) or (line.strip() and _SECTION_UNDERLINE.match(nxt))):
            break
        lead.append(line)
    return summary, "\n".join(lead), body


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


# --------------------------------------------------------------------------------------------- pairs

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


def add_hard_negatives(pairs: list[Pair], pool: list[Pair], *, num_negatives: int, seed: int) -> None:
    """Give each pair ``num_negatives`` negatives from ``pool`` with the same root package, in place.

    The first is the pool positive with the highest IDF-weighted term overlap with the query
    (``sum idf(t) / sqrt(len(doc))`` over shared terms t; terms in more than a quarter of the pool's
    documents, and more than 10, are ignored as stop words), the rest are drawn at random; a pair's own positive,
    documents of the same object and documents that contain the query verbatim are never chosen. A root with too few documents borrows from the
    whole family.
    """
    if num_negatives <= 0:
        return
    docs = [set(_tokens(p.positive)) for p in pool]
    n = len(pool)
    df = Counter(t for d in docs for t in d)
    idf = {t: math.log((n + 1) / (c + 0.5)) for t, c in df.items() if c <= max(10, n // 4)}
    norm = [math.sqrt(max(1, len(d))) for d in docs]
    postings: dict[str, list[int]] = defaultdict(list)
    for j, d in enumerate(docs):
        for t in d:
            if t in idf:
                postings[t].append(j)
    by_root: dict[str, list[int]] = defaultdict(list)
    for j, p in enumerate(pool):
        by_root[p.root].append(j)
    root_of = [p.root for p in pool]
    rng = random.Random(seed)
    for pair in pairs:
        same_root = len(by_root[pair.root]) > num_negatives + 1
        allowed = by_root[pair.root] if same_root else list(range(n))

        def usable(j: int) -> bool:
            return (not same_root or root_of[j] == pair.root) and pool[j].key != pair.key \
                and pool[j].positive != pair.positive and query_l not in pool[j].positive.lower()

        query_l = pair.query.lower()

        scores: dict[int, float] = defaultdict(float)
        for t in sorted(set(_tokens(pair.query))):  # a fixed summation order: ties break the same way
            w = idf.get(t)
            if w is not None:
                for j in postings[t]:
                    scores[j] += w
        ranked = sorted((j for j in scores if usable(j)), key=lambda j: (-scores[j] / norm[j], j))
        chosen = ranked[:1]
        tries = 0
        while len(chosen) < num_negatives and tries < 50 * num_negatives:
            tries += 1
            j = allowed[rng.randrange(len(allowed))]
            if usable(j) and j not in chosen and pool[j].positive not in {pool[c].positive for c in chosen}:
                chosen.append(j)
        pair.negatives = [pool[j].positive for j in chosen]


@dataclass
class FamilySplit:
    train: list[Pair]
    test: list[Pair]
    dev: list[Pair]
    distractors: list[Pair]


def split_family(pairs: list[Pair], opts: LocalDocsOptions, rng: random.Random) -> FamilySplit:
    """Shuffle, then take test, dev and distractor pairs first and train on (at most) the rest.

    When the family is small, the held-out parts shrink so that training keeps at least half the pairs.
    """
    pairs = list(pairs)
    rng.shuffle(pairs)
    n = len(pairs)
    held = opts.test_queries + opts.dev_queries + opts.distractors
    scale = min(1.0, (n // 2) / held) if held else 1.0
    n_test = max(1, int(opts.test_queries * scale)) if n >= 2 else 0
    n_dev = int(opts.dev_queries * scale)
    n_dis = int(opts.distractors * scale)
    test, dev = pairs[:n_test], pairs[n_test:n_test + n_dev]
    distractors = pairs[n_test + n_dev:n_test + n_dev + n_dis]
    train = pairs[n_test + n_dev + n_dis:][:opts.max_pairs_per_collection]
    return FamilySplit(train, test, dev, distractors)


def _doc_id(text: str) -> str:
    return "d" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _write_beir_dir(root: Path, split: FamilySplit) -> Path:
    from drmix.data.beir import write_beir

    corpus: dict[str, dict[str, str]] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, dict[str, int]]] = {"test": {}, "dev": {}}
    for p in split.test + split.dev + split.distractors:
        corpus.setdefault(_doc_id(p.positive), {"title": "", "text": p.positive})
    for name, part in (("test", split.test), ("dev", split.dev)):
        for i, p in enumerate(part):
            qid = f"{name}-{i}"
            queries[qid] = p.query
            qrels[name][qid] = {_doc_id(p.positive): 1}
    if not qrels["dev"]:
        del qrels["dev"]
    return write_beir(root, corpus, queries, qrels)


# --------------------------------------------------------------------------------------------- build

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
    rows = data.stats if isinstance(data, LocalDocsData) else data
    lines = ["| " + " | ".join(STATS_COLUMNS) + " |", "|" + "---|" * len(STATS_COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in STATS_COLUMNS) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # the isolated reader process started by collect_items
    sys.exit(_child_main(sys.argv[1:]))
