"""What names one training collection: :class:`CollectionSpec` (path, name, instruction, weight, split, format,
column mapping), the column-mapping syntax and the query-instruction rule.

It sits in the data package (configuration imports it, not the other way round) and depends on nothing but
pydantic, so every reader and :mod:`drmix.config` can share it.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

#: values of ``--format`` / ``CollectionSpec.format``; ``auto`` detects the layout from the file
FORMATS = ("auto", "drmix", "st", "tevatron", "flag", "beir")
FormatName = Literal["auto", "drmix", "st", "tevatron", "flag", "beir"]

#: other spellings of a format name that --format and format: accept (the libraries' own names)
FORMAT_ALIASES = {"sentence-transformers": "st", "sentence_transformers": "st", "sentencetransformers": "st",
                  "sentence-transformer": "st", "flagembedding": "flag", "flag-embedding": "flag",
                  "flag_embedding": "flag", "bge": "flag"}


def format_name(value: Any) -> Any:
    """``value`` with a library's spelling of a format (``sentence-transformers``, ``FlagEmbedding``) mapped to
    drmix's name (``st``, ``flag``); anything else unchanged (validation names it)."""
    return FORMAT_ALIASES.get(value.strip().lower(), value) if isinstance(value, str) else value

#: the roles a column can play, and the other names ``--columns`` accepts for them
ROLES = ("query", "positive", "negatives", "score", "positive_scores", "negative_scores", "prompt")
ROLE_ALIASES = {
    "query": "query", "anchor": "query",
    "positive": "positive", "positives": "positive", "pos": "positive",
    "negatives": "negatives", "negative": "negatives", "neg": "negatives",
    "score": "score", "scores": "score", "label": "score", "labels": "score",
    "positive_scores": "positive_scores", "pos_scores": "positive_scores",
    "negative_scores": "negative_scores", "neg_scores": "negative_scores",
    "prompt": "prompt", "instruction": "prompt",
}


def parse_columns(value: Any) -> dict[str, str]:
    """A column mapping as ``{role: column}``: from ``"query=question,positive=answer"`` or a mapping.

    A role's column may be several columns joined by ``+`` (``negatives=hard1+hard2``); an empty column
    (``score=``) means the role is not read at all, so a score column is ignored. Role names are those of
    :data:`ROLES` or their aliases (``anchor``, ``pos``, ``neg_scores``...). Raises ``ValueError``.
    """
    if value is None or value == "" or value == {}:
        return {}
    if isinstance(value, str):
        items = []
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"column mapping item {part!r} is not ROLE=COLUMN (e.g. query=question)")
            k, v = part.split("=", 1)
            items.append((k, v))
    elif isinstance(value, dict):
        items = [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    else:
        raise ValueError("a column mapping is a string 'query=question,positive=answer' or a mapping")
    out: dict[str, str] = {}
    for k, v in items:
        role = ROLE_ALIASES.get(k.strip().lower())
        if role is None:
            raise ValueError(f"unknown column role {k.strip()!r}; use one of {', '.join(ROLES)}")
        if role in out:
            raise ValueError(f"column role {role!r} is mapped twice")
        out[role] = "+".join(c.strip() for c in v.split("+") if c.strip())
    return out


def format_columns(mapping: dict[str, str]) -> str:
    """The ``--columns`` string of a mapping (inverse of :func:`parse_columns`)."""
    return ",".join(f"{k}={v}" for k, v in mapping.items())


class CollectionSpec(BaseModel):
    """One training collection: a file, a folder, a saved dataset, a Hub dataset id or a YAML list file."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A collection file (JSONL, JSON, parquet, CSV/TSV, Arrow), a folder of them, a "
                                  "saved datasets folder, a BEIR folder, a Hub dataset id (owner/name), or a YAML "
                                  "list of collections; NAME:split picks a split.")
    name: str | None = Field(None, description="Collection name (default: file stem or directory name).")
    instruction: str | None = Field(None, validation_alias=AliasChoices("instruction", "query_prompt"),
                                    description="Text prepended to every query of this collection (also read as "
                                                "query_prompt).")
    document_prompt: str | None = Field(None, description="Text prepended to every positive and negative of this "
                                                          "collection (E5's 'passage: '), after --document-prompt; "
                                                          "in the pre-tokenised cache's key.")
    weight: float | None = Field(None, ge=0, description="Mixture weight (used by mixture='file' when no weights_file is given).")
    split: str = Field("train", description="Split to read: a BEIR folder's qrels split, or the split of a saved "
                                            "DatasetDict or Hub dataset.")
    format: FormatName | None = Field(None, description="Layout of the rows: drmix | st | tevatron | flag | beir | "
                                                        "auto (default: --format, else auto).")
    columns: dict[str, str] | None = Field(None, description="Column mapping ROLE=COLUMN (query, positive, "
                                                             "negatives, score, positive_scores, negative_scores, "
                                                             "prompt); default: --columns.")

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, v: Any) -> Any:
        return None if v is None else parse_columns(v)

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, v: Any) -> Any:
        return format_name(v)


def apply_instruction(instruction: str | None, query: str) -> str:
    """Prepend an instruction; a separating space is added unless it ends in whitespace."""
    if not instruction:
        return query
    return instruction + query if instruction[-1].isspace() else f"{instruction} {query}"


_SPLIT = re.compile(r"^(?P<head>.+):(?P<split>[A-Za-z0-9_.-]+(?:\[[^\]]*\])?)$")


def split_suffix(path: str) -> tuple[str, str | None]:
    """``("NAME", "split")`` of ``NAME:split`` (``train[:1000]`` slices too); ``(path, None)`` without one."""
    m = _SPLIT.match(path)
    if m is None or m.group("head").endswith(":"):
        return path, None
    return m.group("head"), m.group("split")


__all__ = ["CollectionSpec", "FORMATS", "ROLES", "ROLE_ALIASES", "parse_columns", "format_columns",
           "apply_instruction", "split_suffix", "format_name", "FORMAT_ALIASES"]
