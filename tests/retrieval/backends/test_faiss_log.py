"""What FAISS prints from C++ goes to the log (``drmix -vv``), not to the user's terminal."""
from __future__ import annotations

import logging
import os

import pytest

from drmix.retrieval.backends import build_index
from drmix.retrieval.backends.faiss_log import faiss_output_to_log

from backend_helpers import chunks, ids, vectors


@pytest.fixture(autouse=True)
def _only_caplog(caplog, monkeypatch):
    """The records reach caplog only (a handler an earlier test left on the root logger would print them)."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [caplog.handler])


def test_lines_written_to_the_c_streams_become_log_records(capfd, caplog):
    with caplog.at_level(logging.DEBUG, logger="drmix.faiss"), faiss_output_to_log():
        os.write(1, b"resizing to 12\n")
        os.write(2, b"WARNING clustering 100 points\n\n")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert [r.getMessage() for r in caplog.records] == ["faiss: resizing to 12", "faiss: WARNING clustering 100 points"]
    os.write(2, b"after\n")                                               # the streams are back
    assert capfd.readouterr().err == "after\n"


def test_the_clustering_warning_of_a_small_training_sample_is_logged_not_printed(tmp_path, capfd, caplog):
    """500 vectors in 12 lists trained on a sample of 100 rows: FAISS's k-means warns that it wants 468."""
    n = 500
    with caplog.at_level(logging.DEBUG, logger="drmix.faiss"):
        build_index("faiss-disk", str(tmp_path / "i"), chunks(ids(n), vectors(n)), kind="ivf-flat", train_size=100)
    assert "clustering" not in capfd.readouterr().err
    assert any("faiss: WARNING clustering 100 points to 12 centroids" in r.getMessage() for r in caplog.records)
