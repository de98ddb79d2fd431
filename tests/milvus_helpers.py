"""A local Milvus server for the tests (the ``milvus`` package's standalone server, drmix.retrieval.backends.milvus_local):
started on free ports, skipped with the reason where it cannot start here, removed at the end."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@contextlib.contextmanager
def local_milvus(folder: Path, **kwargs: Any) -> Iterator[Any]:
    """A started :class:`LocalMilvus` in ``folder`` (``kwargs``: its options); segments sealed 0.2 s after their
    last insert (default 2 s), so that a build's flush returns seconds sooner."""
    pytest.importorskip("pymilvus")
    from drmix.retrieval.backends.milvus_local import LocalMilvus, MilvusStartError

    server = LocalMilvus(folder, settings={"dataCoord.segment.assignmentExpiration": 200}, **kwargs)
    try:
        server.start()
    except MilvusStartError as e:
        server.remove()
        pytest.skip(f"no Milvus server: {e.format()}")
    try:
        yield server
    finally:
        server.remove()
