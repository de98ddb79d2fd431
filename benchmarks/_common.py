"""What the benchmark scripts share (importing it sets the offline environment every benchmark runs in).

Statistics (intervals, paired tests) and cached evaluation are library functions:
:mod:`drmix.evaluation.significance` and :mod:`drmix.evaluation.suite`; a finished training run is
:func:`drmix.outputs.run_finished`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
#: the public datasets the benchmarks read (never copied into the repository)
DEFAULT_DATA = ROOT / ".." / "shared" / "data"


def apply_preset(args: Any, presets: dict[str, dict[str, Any]]) -> Any:
    """Override the parsed options with the chosen ``--preset``'s settings (none chosen: unchanged)."""
    for k, v in presets.get(getattr(args, "preset", None) or "", {}).items():
        setattr(args, k, v)
    return args


def scifact_passages(data: Path, n: int) -> list[str]:
    """The first ``n`` SciFact corpus passages (title and text, as drmix indexes them) from ``data/scifact``."""
    import json

    from drmix.data.beir import doc_text

    texts: list[str] = []
    with open(data / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            texts.append(doc_text(json.loads(line)))
            if len(texts) == n:
                break
    return texts
