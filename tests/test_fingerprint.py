"""drmix.fingerprint: one hash (BLAKE2b-160) for files, folders, texts, settings and model weights; file digests
remembered by (path, size, mtime, ctime, inode), so an edit that keeps size, inode and mtime is still seen."""
from __future__ import annotations

import hashlib
import json
import runpy
import sqlite3
from pathlib import Path

import pytest
import torch
from stat_helpers import rewrite_keeping_stat

from drmix import fingerprint
from drmix.fingerprint import (config_digest, file_digest, file_summary, files_digest, read_file_digest,
                               tensors_digest, text_digest, text_key, texts_digest, weights_fingerprint)

ROOT = Path(__file__).resolve().parents[1]


def b2(data: bytes, size: int = 20) -> str:
    return hashlib.blake2b(data, digest_size=size).hexdigest()


@pytest.fixture(autouse=True)
def own_store(tmp_path, monkeypatch):
    """A digest store of this test's own; files count as settled at once (tests write and read in one tick)."""
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fingerprint, "_MEMO", {})
    monkeypatch.setattr(fingerprint, "SETTLE_NS", 0)


def test_every_digest_is_blake2b_160_of_what_it_names(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b"one\ntwo\nthree")
    assert fingerprint.ALGORITHM == "blake2b-160"
    assert file_digest(f) == read_file_digest(f) == b2(b"one\ntwo\nthree")
    assert file_summary(f, count_rows=True) == (b2(b"one\ntwo\nthree"), 13, 3)   # a last row without its newline
    assert file_summary(f).rows is None
    assert text_digest("caf\u00e9") == b2("caf\u00e9".encode()) and text_key("x") == bytes.fromhex(b2(b"x"))
    assert text_digest("\ud800") == b2(b"\xed\xa0\x80")                            # a lone surrogate kept as it is
    # texts: each length-prefixed, so boundaries count
    assert texts_digest(["ab", "c"]) == b2(b"\x02" + b"\0" * 7 + b"ab" + b"\x01" + b"\0" * 7 + b"c")
    assert texts_digest(["ab", "c"]) != texts_digest(["a", "bc"]) != texts_digest(["abc"])
    assert config_digest({"b": 1, "a": [2, None]}) == config_digest({"a": [2, None], "b": 1}) \
        == b2(b'{"a": [2, null], "b": 1}')
    assert files_digest([("x/a", "d1"), ("b", "d2")]) == b2(b"x/a\0d1\nb\0d2\n")


def test_an_edit_keeping_size_inode_and_mtime_is_seen_through_the_change_time(tmp_path):
    """rsync -t / cp -p: the digest remembered for the old content is not served for the new one."""
    f = tmp_path / "corpus.jsonl"
    f.write_bytes(b'{"text": "old"}\n')
    assert file_digest(f) == b2(b'{"text": "old"}\n')
    rewrite_keeping_stat(f, b'{"text": "new"}\n')
    assert file_digest(f) == b2(b'{"text": "new"}\n')
    fingerprint._MEMO.clear()                                          # and from the SQLite store, another process
    assert file_digest(f) == b2(b'{"text": "new"}\n')


def test_a_digest_is_read_back_from_the_store_by_its_key(tmp_path, monkeypatch):
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    first = file_summary(f)
    fingerprint._MEMO.clear()
    calls = []
    real = fingerprint._read
    monkeypatch.setattr(fingerprint, "_read", lambda p, rows: calls.append(p) or real(p, rows))
    assert file_summary(f) == first and calls == []                   # read back from the SQLite store
    assert file_summary(f, count_rows=True).rows == 1 and calls == [f]  # rows not stored yet: read once more
    assert file_summary(f, count_rows=True).rows == 1 and calls == [f]
    f.write_bytes(b"other!!")
    assert file_digest(f) == b2(b"other!!") and calls == [f, f]


def test_a_file_changed_within_the_settling_time_is_hashed_but_not_remembered(tmp_path, monkeypatch):
    """Timestamps move in ticks: a second write in the tick of the first keeps every field of the key, so a digest
    taken that soon is not remembered; once the file has settled it is."""
    monkeypatch.setattr(fingerprint, "SETTLE_NS", 2_000_000_000)
    f = tmp_path / "fresh.txt"
    f.write_bytes(b"fresh")
    assert file_digest(f) == b2(b"fresh")
    assert fingerprint._MEMO == {} and not fingerprint.store_path().exists()
    now = fingerprint.time.time_ns
    monkeypatch.setattr(fingerprint.time, "time_ns", lambda: now() + 2_000_000_000)
    assert file_digest(f) == b2(b"fresh")
    assert list(fingerprint._MEMO.values()) == [(b2(b"fresh"), None)] and fingerprint.store_path().is_file()


def test_a_store_written_by_an_earlier_version_is_never_read(tmp_path):
    """The earlier table was keyed without the change time: its rows (here a wrong digest under the file's path,
    size, mtime and inode) are dropped, and the file is hashed again."""
    f = tmp_path / "data.tsv"
    f.write_bytes(b"a\tb\n")
    st = f.stat()
    fingerprint.store_path().parent.mkdir(parents=True)
    con = sqlite3.connect(fingerprint.store_path())
    con.execute("CREATE TABLE digests (path TEXT, size INTEGER, mtime_ns INTEGER, inode INTEGER, algorithm TEXT, "
                "digest TEXT, rows INTEGER, PRIMARY KEY (path, size, mtime_ns, inode, algorithm))")
    con.execute("INSERT INTO digests VALUES (?, ?, ?, ?, ?, ?, ?)",
                (str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, "blake2b-160", "0" * 40, 1))
    con.commit()
    con.close()
    assert file_digest(f) == b2(b"a\tb\n")
    tables = sqlite3.connect(fingerprint.store_path()).execute("SELECT name FROM sqlite_master").fetchall()
    assert ("digests",) not in tables


def test_a_read_digest_reads_the_bytes_not_the_store(tmp_path, monkeypatch):
    """A check of drmix's own output against damage (a sharded encoding's shards) must read what is there."""
    f = tmp_path / "shard.npy"
    f.write_bytes(b"\0" * 8)
    monkeypatch.setattr(fingerprint, "_remembered", lambda key: ("0" * 40, None))
    assert file_digest(f) == "0" * 40                                  # what the store says
    assert read_file_digest(f) == b2(b"\0" * 8)                        # what the file holds


def test_tensors_digest_by_hand_in_bfloat16_and_at_an_earlier_size():
    m = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        m.weight.copy_(torch.tensor([[1.0, 1.0 + 2 ** -12]]))         # equal once rounded to bfloat16
    raw = torch.tensor([[1.0, 1.0 + 2 ** -12]]).view(-1).view(torch.uint8).numpy().tobytes()
    assert tensors_digest(m, extra="x") == b2(b"x" + b"weight:(1, 2):torch.float32" + raw)
    bf = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16).view(-1).view(torch.uint8).numpy().tobytes()
    assert tensors_digest(m, bfloat16=True) == b2(b"weight:(1, 2):torch.bfloat16" + bf)
    # an index's model record written before (BLAKE2b-96, 24 hex digits) is checked at its own size
    old = b2(b"weight:(1, 2):torch.bfloat16" + bf, size=12)
    assert tensors_digest(m, bfloat16=True, like=old) == old
    assert tensors_digest(m, bfloat16=True, like="f" * 40) == tensors_digest(m, bfloat16=True)


def test_a_loaded_model_is_its_files_until_a_weight_changes(tiny_model_path):
    from drmix.model.encoder import load_encoder

    a, b = load_encoder(tiny_model_path, device="cpu"), load_encoder(tiny_model_path, device="cpu")
    fp = weights_fingerprint(a)
    assert fp == "files:" + fingerprint.model_folder_digest(tiny_model_path) == weights_fingerprint(b)
    with torch.no_grad():
        next(a.parameters()).mul_(2.0)
    changed = weights_fingerprint(a)
    assert changed == "tensors:" + tensors_digest(a) and changed != fp
    with torch.no_grad():
        next(a.parameters()).div_(2.0)                              # the same values again, but no longer "as loaded"
    assert weights_fingerprint(a) == "tensors:" + tensors_digest(b)


def test_a_model_folder_digest_leaves_out_checkpoints_and_hidden_folders(tmp_path):
    (tmp_path / "m" / "checkpoints" / "step-1").mkdir(parents=True)
    (tmp_path / "m" / ".git").mkdir()
    (tmp_path / "m" / "sub").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"w")
    (tmp_path / "m" / "sub" / "config.json").write_text("{}")
    (tmp_path / "m" / "checkpoints" / "step-1" / "optimizer.pt").write_bytes(b"o")
    (tmp_path / "m" / ".git" / "HEAD").write_text("ref")
    want = files_digest([("model.safetensors", b2(b"w")), ("sub/config.json", b2(b"{}"))])
    assert fingerprint.model_folder_digest(tmp_path / "m") == want


def test_the_digest_script_names_each_hash_call_with_its_size(tmp_path):
    m = runpy.run_path(str(ROOT / "scripts" / "digest_sites.py"))
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("import hashlib\nSIZE = 12\nOLD = {24: 12, 32: 16}\n"
                              "x = hashlib.sha1(b'')\ny = hashlib.blake2b(digest_size=SIZE)\n"
                              "z = hashlib.blake2b(b'', digest_size=OLD[24])\n")
    (pkg / "b.py").write_text("import hashlib\nh = hashlib.blake2b()\nlen(b'')\n")
    assert m["hash_calls"](pkg) == [("pkg/a.py", 4, "sha1"), ("pkg/a.py", 5, "blake2b-96"),
                                    ("pkg/a.py", 6, "blake2b-96/128"), ("pkg/b.py", 2, "blake2b-512")]
    (pkg / "io.py").write_text("a\nb\n")
    assert m["measure"](pkg) == {"modules": ["pkg/a.py", "pkg/b.py"], "calls": 4,
                                 "hashes": ["blake2b-512", "blake2b-96", "blake2b-96/128", "sha1"],
                                 "io_modules": 1, "io_longest": 2}


def test_the_digest_table_of_docs_testing_is_the_scripts():
    """docs/testing.md prints scripts/digest_sites.py's table: the measure at the commit before the fingerprint
    module (stored) beside today's, where every hash is in drmix.fingerprint (and the sampling seed's MD5)."""
    m = runpy.run_path(str(ROOT / "scripts" / "digest_sites.py"))
    after = m["measure"](ROOT / "src" / "drmix")
    assert after["modules"] == ["drmix/data/collections.py", "drmix/fingerprint.py"]
    assert [h for mod, _, h in m["hash_calls"](ROOT / "src" / "drmix") if mod == "drmix/data/collections.py"] == ["md5"]
    before = json.loads((ROOT / "tests" / "benchmarks" / "fixtures" / "digest-sites-before.json").read_text())
    assert len(before["modules"]) == 14 and before["io_modules"] == 1 and before["io_longest"] == 775
    table = m["table"](before, after)
    assert "| modules that call a hash function | 14 | 2 |" in table
    assert table in (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
