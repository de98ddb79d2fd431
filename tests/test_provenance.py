"""Content fingerprints (drmix.provenance): full hashes remembered by (path, size, mtime, ctime, inode)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from stat_helpers import rewrite_keeping_stat

from drmix import fingerprint as fingerprints
from drmix import provenance
from drmix.provenance import beir_fingerprint, describe_change, file_fingerprint, fingerprint, short


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fingerprints, "_MEMO", {})
    monkeypatch.setattr(fingerprints, "SETTLE_NS", 0)   # remembered at once (tests write and read in one tick)


def _rows(path: Path, n: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'{{"query": "q{i}", "positive": "d{i}"}}\n' for i in range(n)))
    return path


def test_a_file_is_its_full_content_hash_bytes_and_rows(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"one\ntwo\nthree")            # the last row has no newline: still a row
    fp = fingerprint(f)
    assert fp == {"kind": "file", "digest": hashlib.blake2b(b"one\ntwo\nthree", digest_size=20).hexdigest(),
                  "bytes": 13, "rows": 3}
    (tmp_path / "w.bin").write_bytes(b"\n\n")
    assert "rows" not in fingerprint(tmp_path / "w.bin")     # not a text table: no rows
    assert fingerprint(tmp_path / "missing") is None


def test_a_digest_is_remembered_by_path_size_mtime_ctime_and_inode(tmp_path, monkeypatch):
    f = _rows(tmp_path / "c.jsonl", 20)
    first = file_fingerprint(f)
    fingerprints._MEMO.clear()
    calls = []
    real = fingerprints._read
    monkeypatch.setattr(fingerprints, "_read", lambda p, rows: calls.append(p) or real(p, rows))
    assert file_fingerprint(f) == first and calls == []          # read back from the SQLite store
    assert fingerprints.store_path().is_file()
    _rows(f, 15)
    assert file_fingerprint(f)["rows"] == 15 and calls == [f]     # another size: hashed again


def test_same_size_new_content_is_seen_through_the_mtime(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_text("a\tb\n")
    st = f.stat()
    before = fingerprint(f)
    f.write_text("a\tc\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    after = fingerprint(f)
    assert after["digest"] != before["digest"]
    assert describe_change(before, after) == "content changed, bytes 4 -> 4"


def test_same_size_same_mtime_same_inode_new_content_is_seen_through_the_change_time(tmp_path):
    """cp -p, rsync -t, tar x: the size, the inode and the modification time are the old ones."""
    f = _rows(tmp_path / "c.jsonl", 3)
    before = fingerprint(f)
    rewrite_keeping_stat(f, f.read_bytes().replace(b'"q1"', b'"q9"'))
    after = fingerprint(f)
    assert after["digest"] == hashlib.blake2b(f.read_bytes(), digest_size=20).hexdigest() != before["digest"]
    assert describe_change(before, after) == "content changed, bytes 102 -> 102"


def test_a_cache_that_cannot_be_written_falls_back_to_hashing(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("DRMIX_CACHE", str(blocker / "cache"))     # a cache path under a file: never writable
    f = _rows(tmp_path / "c.jsonl", 3)
    assert fingerprint(f)["rows"] == 3
    fingerprints._MEMO.clear()
    assert fingerprint(f)["rows"] == 3


def test_a_folder_lists_its_files_and_a_change_names_the_file_rows_and_bytes(tmp_path):
    beir = tmp_path / "set"
    _rows(beir / "corpus.jsonl", 5)
    _rows(beir / "queries.jsonl", 4)
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "q\td\t1\n" * 20)
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n")
    before = fingerprint(beir)
    assert sorted(before["files"]) == ["corpus.jsonl", "qrels/dev.tsv", "qrels/test.tsv", "queries.jsonl"]
    assert before["bytes"] == sum(p.stat().st_size for p in beir.rglob("*") if p.is_file())
    test_only = beir_fingerprint(beir, "test")
    assert sorted(test_only["files"]) == ["corpus.jsonl", "qrels/test.tsv", "queries.jsonl"]
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "q\td\t1\n" * 10)
    after = fingerprint(beir)
    assert describe_change(before, after) == "qrels/test.tsv: rows 21 -> 11, bytes 145 -> 85"
    (beir / "qrels" / "dev.tsv").unlink()
    assert describe_change(before, fingerprint(beir)).startswith("qrels/dev.tsv removed; qrels/test.tsv: rows")
    assert describe_change(after, after) is None
    assert describe_change(None, after) == "added" and describe_change(after, None) == "missing now"


def test_short_names_digest_size_and_rows(tmp_path):
    f = _rows(tmp_path / "data" / "c.jsonl", 2)
    fp = fingerprint(f)
    assert short(fp) == f"blake2b-160 {fp['digest'][:16]}, {fp['bytes']:,} bytes, 2 rows"
    assert short(fingerprint(tmp_path / "data")).endswith(", 1 files")
    assert short(None) == "missing"


def test_a_target_corpus_is_its_corpus_file_only(tmp_path):
    beir = tmp_path / "set"
    _rows(beir / "corpus.jsonl", 5)
    _rows(beir / "queries.jsonl", 4)
    assert sorted(provenance.corpus_fingerprint(beir)["files"]) == ["corpus.jsonl"]
    plain = _rows(tmp_path / "docs" / "a.txt", 2)
    assert sorted(provenance.corpus_fingerprint(plain.parent)["files"]) == ["a.txt"]
    assert provenance.corpus_fingerprint(plain)["rows"] == 2


def test_a_file_added_a_kind_changed_and_tool_folders_left_out(tmp_path):
    root = tmp_path / "model"
    _rows(root / "a.txt", 1)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    before = fingerprint(root)
    assert list(before["files"]) == ["a.txt"]                  # a tool's folder is not what the folder holds
    _rows(root / "b.txt", 2)
    assert describe_change(before, fingerprint(root)) == "b.txt added"
    assert describe_change(fingerprint(root / "a.txt"), before) == "was a file, now a folder"


def test_a_folder_with_many_changed_files_names_five_and_counts_the_rest(tmp_path):
    root = tmp_path / "shards"
    for i in range(8):
        _rows(root / f"s{i}.jsonl", 1)
    before = fingerprint(root)
    for i in range(8):
        _rows(root / f"s{i}.jsonl", 2)
    said = describe_change(before, fingerprint(root))
    assert said.count("rows 1 -> 2") == 5 and said.endswith("; and 3 more files")
