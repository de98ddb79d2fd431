"""What the localdocs builder reads and writes: options, the default families, documented objects, pairs."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

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


