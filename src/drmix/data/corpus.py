"""A corpus argument (``--corpus``): a BEIR directory (its ``corpus.jsonl``) or a JSONL file of documents.

One place for every command and recipe that takes a corpus path (``drmix index``, ``drmix augment``, ``drmix
pretrain coco``, ``drmix pipeline coco``, ``drmix adapt``): which file it means, the name it goes by, and the
check that several target corpora have distinct names.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from drmix.errors import ConfigError, DataError

#: the corpus file of a BEIR directory
CORPUS_FILE = "corpus.jsonl"


def corpus_file(path: str | Path) -> Path:
    """The JSONL file of a corpus argument: a BEIR directory's ``corpus.jsonl``, or the file itself (``~``
    expanded). A folder without ``corpus.jsonl``, or a path that does not exist, is a ``DataError``."""
    p = Path(path).expanduser()
    if p.is_dir():
        f = p / CORPUS_FILE
        if not f.exists():
            raise DataError(f"directory has no {CORPUS_FILE}.", path=p,
                            fix="pass a BEIR directory or a JSONL file with a 'text' field per line.")
        return f
    if not p.exists():
        raise DataError("corpus file not found.", path=p,
                        fix="pass --corpus with a BEIR directory or a corpus .jsonl file.")
    return p


def corpus_name(path: str | Path) -> str:
    """The name a corpus goes by: its folder's (a BEIR directory, or the folder of a ``corpus.jsonl``), else the
    file's stem (``docs.jsonl`` -> ``docs``)."""
    p = Path(path).expanduser()
    return p.name if p.is_dir() else (p.parent.name if p.stem == "corpus" else p.stem)


def check_corpus_names(paths: Sequence[str | Path]) -> list[str]:
    """The corpora's names (:func:`corpus_name`); no corpus, or two with the same name, is a ``ConfigError``."""
    if not paths:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR_OR_JSONL (repeatable).")
    names = [corpus_name(p) for p in paths]
    if len(set(names)) != len(names):
        raise ConfigError(f"two target corpora have the same name ({', '.join(names)}).",
                          fix="put each corpus in a folder of its own name.")
    return names
