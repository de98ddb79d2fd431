"""What the doc generators share: write a generated page, or (``--check``) fail when it is out of date."""
from __future__ import annotations

import sys
from pathlib import Path


def write_or_check(doc: Path, text: str, script: str) -> int:
    if "--check" in sys.argv:
        if not doc.exists() or doc.read_text(encoding="utf-8") != text:
            print(f"{doc} is out of date: run python scripts/{script}", file=sys.stderr)
            return 1
        return 0
    doc.write_text(text, encoding="utf-8")
    print(f"wrote {doc}")
    return 0
