"""Tiny hand-written entity-matching tables (Magellan layout) shared by the multi-corpus tests."""
from __future__ import annotations

from pathlib import Path

TABLE_A = "id,title,brand\n0,acme widget,acme\n1,foo gadget,foo\n2,bar thing,bar\n3,solo item,\n"
TABLE_B = "id,title,brand\n10,acme widget pro,acme\n11,foo gadget x,foo\n12,other,zzz\n13,foo gadget y,foo\n"
TRAIN = "ltable_id,rtable_id,label\n0,10,1\n1,12,0\n"
VALID = "ltable_id,rtable_id,label\n1,11,1\n1,13,1\n"
TEST = "ltable_id,rtable_id,label\n2,12,0\n"


def write_src(root: Path, **over: str | bytes) -> Path:
    files = {"tableA.csv": TABLE_A, "tableB.csv": TABLE_B, "train.csv": TRAIN, "valid.csv": VALID, "test.csv": TEST}
    files.update({k.replace("_", ".") if k.endswith("_csv") else k: v for k, v in over.items()})
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return root
