"""The milvus backend against real engines: Milvus Lite (one .db folder per module) and a Milvus 2.3 server (the
session's, one database per module), every test on both."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from drmix.errors import ConfigError, IndexLoadError
from drmix.retrieval.backends import build_index, open_index
from drmix.retrieval.backends.milvus import BUILD_SUFFIX, VARCHAR_LIMIT, client, default_collection, split_location

from backend_helpers import AWKWARD, chunks, exact_top, ids, vectors

pytest.importorskip("pymilvus")

N = 300


@pytest.fixture(scope="module", params=["lite", "server"])
def db(request, tmp_path_factory):
    from conftest import milvus_location

    with milvus_location(request.param, request, tmp_path_factory.mktemp("milvus")) as where:
        yield where


@pytest.fixture(scope="module")
def data():
    return ids(N), vectors(N)


def test_flat_collection_is_exact_and_records_the_model(db, data):
    doc_ids, x = data
    loc = build_index("milvus", f"{db}#flat", chunks(doc_ids, x, size=120), metadata={"model": "m", "fingerprint": "f"})
    assert loc == f"{db}#flat"
    idx = open_index(loc)
    assert len(idx) == N and idx.dim == 16
    assert idx.metadata["index_type"] == "FLAT" and idx.metadata["fingerprint"] == "f"
    assert idx.metadata["model"] == "m" and idx.metadata["metric"] == "inner_product"
    scores, got = idx.search(x[:15], 5)
    want_s, want = exact_top(x, x[:15], doc_ids, 5)
    assert got == want
    np.testing.assert_allclose(scores, want_s, rtol=1e-4, atol=1e-4)
    rows = np.sort(np.random.default_rng(1).choice(N, size=6, replace=False))
    np.testing.assert_allclose(idx.sample_vectors(6, 1), x[rows], rtol=1e-6)


@pytest.mark.parametrize("kind,params,expect", [
    ("hnsw", {}, {"M": 32, "efConstruction": 200, "ef": 128}),
    ("ivf-flat", {"nprobe": 3}, {"nlist": 7, "nprobe": 3}),  # 4 sqrt(300) = 69 wanted, at most 300 // 39 = 7
])
def test_approximate_types_and_their_defaults(db, data, kind, params, expect):
    doc_ids, x = data
    name = kind.replace("-", "_")
    idx = open_index(build_index("milvus", f"{db}#{name}", chunks(doc_ids, x), kind=kind, **params))
    assert idx.metadata["params"] == expect
    _, got = idx.search(x[:20], 10)
    _, want = exact_top(x, x[:20], doc_ids, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want)])
    assert recall >= 0.8


def test_awkward_ids_and_long_passages(db, data, caplog):
    doc_ids, x = data
    corpus = {d: {"title": "t", "text": f"about {d}"} for d in doc_ids}
    corpus["d10"] = {"title": "long", "text": "é" * (VARCHAR_LIMIT // 2 + 1)}  # 65,538 bytes of UTF-8
    loc = build_index("milvus", f"{db}#texts", chunks(doc_ids, x), corpus=corpus)
    assert "1 passages are longer than Milvus's 65535-byte text field" in caplog.text
    idx = open_index(loc)
    assert idx.metadata["texts_not_stored"] == 1 and idx.metadata["has_texts"] is True
    for i, d in enumerate(AWKWARD):
        _, got = idx.search(x[i], 1)
        assert got == [[d]]
        # the id round-trips exactly; a text holds U+FFFD for a lone surrogate (drmix.io.text.clean_text)
        assert idx.doc(d) == {"title": "t", "text": f"about {d}".replace("\udc80", "\ufffd")}
    assert idx.doc("d10") is None  # stored by id only
    _, got = idx.search(x[10], 1)
    assert got == [["d10"]]
    fresh = open_index(loc)  # no search yet: looked up by id
    assert fresh.doc("it's") == {"title": "t", "text": "about it's"} and fresh.doc("nope") is None
    assert open_index(loc).doc('say "hi"') == {"title": "t", "text": 'about say "hi"'}


def test_existing_collection_is_refused_before_anything_is_written(db, data):
    doc_ids, x = data
    build_index("milvus", f"{db}#mine", chunks(doc_ids[:50], x[:50]), metadata={"model": "old-model"})
    pulled = []

    def tracked():
        for c in chunks(doc_ids, x):
            pulled.append(1)
            yield c
    with pytest.raises(ConfigError, match=r"collection mine already exists in .* \(model old-model, 16-d, "
                                          r"50 passages\); this build is model new-model, 16-d\."):
        build_index("milvus", f"{db}#mine", tracked(), metadata={"model": "new-model", "dim": 16})
    assert not pulled and len(open_index(f"{db}#mine")) == 50
    build_index("milvus", f"{db}#mine", chunks(doc_ids, x), metadata={"model": "new-model"}, overwrite=True)
    assert len(open_index(f"{db}#mine")) == N and open_index(f"{db}#mine").metadata["model"] == "new-model"


def test_a_build_killed_midway_leaves_the_old_collection(db, data):
    doc_ids, x = data
    build_index("milvus", f"{db}#killed", chunks(doc_ids[:40], x[:40]))
    with pytest.raises(KeyboardInterrupt):
        build_index("milvus", f"{db}#killed", chunks(doc_ids, x, fail_after=2), overwrite=True)
    c = client(db)
    assert c.has_collection("killed" + BUILD_SUFFIX)  # the unfinished build, under its own name
    assert len(open_index(f"{db}#killed")) == 40
    build_index("milvus", f"{db}#killed", chunks(doc_ids, x), overwrite=True)
    assert len(open_index(f"{db}#killed")) == N and not c.has_collection("killed" + BUILD_SUFFIX)


def test_locations_and_names(db, data):
    assert split_location("http://h:19530#c") == ("http://h:19530", "c")
    assert split_location("runs/x.db") == ("runs/x.db", None)
    assert default_collection("data/sci-fact/corpus.jsonl") == "sci_fact"
    assert default_collection("data/2024") == "c_2024"
    with pytest.raises(ConfigError, match="not a usable Milvus collection name"):
        build_index("milvus", f"{db}#bad-name", [])
    with pytest.raises(IndexLoadError, match=r"drmix collections \(.*flat.*\)"):
        open_index(db)  # several collections: one must be named
    with pytest.raises(IndexLoadError, match="has no collection nothere"):
        open_index(f"{db}#nothere")


def test_searching_a_database_that_does_not_exist_creates_nothing(tmp_path):
    """A search is read-only: a .db path that is not there is one line, and no database appears there."""
    with pytest.raises(IndexLoadError, match="no Milvus Lite database here") as e:
        open_index(f"{tmp_path / 'typo.db'}#c")
    assert e.value.path == str(tmp_path / "typo.db") and list(tmp_path.iterdir()) == []


def test_an_unreachable_uri_is_one_line_within_seconds():
    t0 = time.monotonic()
    with pytest.raises(IndexLoadError, match=r"Milvus at http://127\.0\.0\.1:9 does not answer"):
        open_index("http://127.0.0.1:9#c")
    assert time.monotonic() - t0 < 15


KILLED_BUILD = """
import os, sys
import numpy as np
sys.path.insert(0, {helpers!r})
from backend_helpers import ids, vectors
from drmix.retrieval.backends import build_index

def chunks():
    doc_ids, x = ids(300), vectors(300)
    for c, s in enumerate(range(0, 300, 100)):
        if c == 2:
            os._exit(9)  # killed midway: no cleanup, no exception handler runs
        yield doc_ids[s:s + 100], x[s:s + 100]

build_index("milvus", {target!r}, chunks(), overwrite=True)
"""


def test_a_process_killed_midway_leaves_the_collection_as_it_was(tmp_path, data):
    import subprocess
    import sys
    from pathlib import Path

    doc_ids, x = data
    db = str(tmp_path / "k.db")
    script = KILLED_BUILD.format(helpers=str(Path(__file__).parent), target=f"{db}#c")
    # the old collection, written by another process (Milvus Lite holds one process per .db at a time)
    subprocess.run([sys.executable, "-c", script.replace("if c == 2", "if c == 99").replace("300)", "40)")],
                   check=True, capture_output=True)
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert killed.returncode == 9
    idx = open_index(f"{db}#c")
    assert len(idx) == 40
    _, got = idx.search(vectors(40)[:3], 1)  # the old collection's own vectors find themselves
    assert got == [[d] for d in ids(40)[:3]]
    build_index("milvus", f"{db}#c", chunks(doc_ids, x), overwrite=True)  # the rerun drops the leftover
    assert len(open_index(f"{db}#c")) == N and not client(db).has_collection("c" + BUILD_SUFFIX)


# -- what every server version returns, which servers drmix takes --------------------------------------------------
def test_the_primary_key_of_a_hit_is_read_as_every_version_returns_it():
    from drmix.retrieval.backends.milvus import hit_pk

    assert hit_pk({"id": 7, "distance": 0.5, "entity": {"doc_id": "a"}}) == 7  # Milvus 2.3 server: "id"
    assert hit_pk({"pk": 8, "distance": 0.5, "entity": {"doc_id": "a"}}) == 8  # Milvus Lite: the field's name
    assert hit_pk({"id": 7, "entity": {"pk": 9, "doc_id": "a"}}) == 9  # the output field, when asked for
    with pytest.raises(IndexLoadError, match="has no primary key"):
        hit_pk({"distance": 0.5, "entity": {}})


def test_a_server_older_than_2_3_is_refused_naming_both_versions(db, monkeypatch):
    from drmix.retrieval.backends import milvus

    milvus.check_version("http://h:1", "v2.3.5-lite")
    milvus.check_version("http://h:1", "2.6.0")
    milvus.check_version("http://h:1", "unknown")  # nothing to compare: not refused
    with pytest.raises(IndexLoadError, match=r"Milvus at http://h:1 is version v2\.2\.14; drmix needs Milvus 2\.3 or "
                                             r"later"):
        milvus.check_version("http://h:1", "v2.2.14")
    if not milvus.is_uri(db):
        return
    from pymilvus import MilvusClient

    uri = db.rsplit("/", 1)[0] + "/default"
    assert milvus.client(uri).get_server_version().startswith("v2.3")  # the session's server: taken
    monkeypatch.setattr(milvus, "_clients", {})
    monkeypatch.setattr(MilvusClient, "get_server_version", lambda self, **kw: "v2.2.14")
    with pytest.raises(IndexLoadError, match=r"is version v2\.2\.14; drmix needs Milvus 2\.3 or later"):
        milvus.client(uri)


def test_a_uri_with_a_password_is_refused_without_echoing_it():
    from drmix.retrieval.backends.milvus import client

    with pytest.raises(ConfigError) as e:
        client("http://root:hunter2@127.0.0.1:19530")
    assert "hunter2" not in str(e.value) and "MILVUS_TOKEN" in str(e.value)


def test_the_already_exists_message_names_no_unknown_dimension(db, data):
    from drmix.retrieval.backends.milvus import _check

    doc_ids, x = data
    build_index("milvus", f"{db}#dims", chunks(doc_ids[:20], x[:20]), metadata={"model": "old"})
    with pytest.raises(ConfigError) as e:
        _check(f"{db}#dims", {"model": "new"}, overwrite=False)  # before the model is loaded: no dimension yet
    assert str(e.value).split("Fix:")[0].endswith("this build is model new. ") and "?-d" not in str(e.value)


# -- a damaged, misplaced or missing Milvus Lite folder: one line, nothing created ----------------------------------
def _lite(tmp_path, name="i.db"):
    db = str(tmp_path / name)
    build_index("milvus", f"{db}#c", chunks(ids(N), vectors(N)), corpus={d: {"title": "t", "text": d} for d in ids(N)})
    from drmix.retrieval.backends.milvus import _forget_lite

    _forget_lite(Path(db).resolve(), remove=False)  # as another process finds it
    return db


def test_a_truncated_milvus_lite_folder_is_one_line_naming_it(tmp_path):
    pytest.importorskip("milvus_lite")
    db = _lite(tmp_path)
    part = next(Path(db).rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:100])
    with pytest.raises(IndexLoadError) as e:
        open_index(f"{db}#c")
    line = e.value.format()
    assert line.startswith(f"the Milvus Lite database {db} is damaged") and "Parquet magic bytes" in line
    assert "\n" not in line and "drmix index --backend milvus" in line


def test_a_plain_file_or_a_missing_folder_is_named_and_nothing_is_created(tmp_path):
    pytest.importorskip("milvus_lite")
    plain = tmp_path / "old.db"
    plain.write_text("a Milvus Lite 2 file")
    for call in (lambda: open_index(f"{plain}#c"),
                 lambda: build_index("milvus", f"{plain}#c", chunks(ids(5), vectors(5)))):
        with pytest.raises(IndexLoadError, match=r"old\.db is a file, not a Milvus Lite database"):
            call()
    assert plain.read_text() == "a Milvus Lite 2 file"
    with pytest.raises(IndexLoadError, match=r"no Milvus Lite database here"):
        open_index(f"{tmp_path / 'missing.db'}#c")
    (tmp_path / "empty.db").mkdir()
    with pytest.raises(IndexLoadError, match=r"empty\.db is not a Milvus Lite database"):
        open_index(str(tmp_path / "empty.db"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "old.db"]
    assert not list((tmp_path / "empty.db").iterdir())


FULL_DISK = """
import resource, signal, sys
sys.path.insert(0, {helpers!r})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from backend_helpers import ids, vectors
from drmix.errors import DrmixError
from drmix.retrieval.backends import build_index
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
try:
    build_index("milvus", {target!r}, [(ids(2000), vectors(2000, dim=64))])
except DrmixError as e:
    print(e.format())
"""


def test_a_full_disk_during_a_milvus_lite_build_is_one_line_and_leaves_nothing(tmp_path):
    """A file size limit (ulimit -f) stands in for a full disk: Milvus Lite's write fails midway; the folder this
    build created is removed, and an existing folder keeps what it held (Milvus Lite cannot even drop the
    unfinished build collection then: the line says so, and the next build drops it)."""
    import subprocess
    import sys

    pytest.importorskip("milvus_lite")
    helpers = str(Path(__file__).parent)
    fresh = tmp_path / "new.db"
    done = subprocess.run([sys.executable, "-c", FULL_DISK.format(helpers=helpers, target=f"{fresh}#c")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"{fresh}: Milvus ran out of room building c (") and "Traceback" not in done.stderr
    assert not fresh.exists()
    kept = _lite(tmp_path, "kept.db")
    done = subprocess.run([sys.executable, "-c", FULL_DISK.format(helpers=helpers, target=f"{kept}#d")],
                          capture_output=True, text=True, timeout=300)
    assert "Milvus ran out of room building d" in done.stdout and "Traceback" not in done.stderr
    left = client(kept).has_collection("d" + BUILD_SUFFIX)
    assert ("the unfinished d__drmix_build could not be dropped" in done.stdout) == left
    assert ("nothing was left behind" in done.stdout) == (not left)
    idx = open_index(kept)  # the one drmix collection it held, as it was
    assert idx.name == "c" and len(idx) == N
    build_index("milvus", f"{kept}#d", chunks(ids(N), vectors(N)))  # the next build drops the leftover
    assert len(open_index(f"{kept}#d")) == N and not client(kept).has_collection("d" + BUILD_SUFFIX)
