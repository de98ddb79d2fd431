"""The files of a folder index: the record of each file's size and sampled checksum made at the build, and what
opening sees of a change (and, for a large file, what it does not)."""
from __future__ import annotations

import pytest

from drmix.errors import IndexLoadError
from drmix.retrieval.backends.folder import (BLOCK, BLOCKS, EDGE, WHOLE_FILE, _spans, check_files, file_checksum,
                                             record_files)


def test_a_small_file_is_hashed_whole_a_large_one_by_its_ends_and_32_blocks():
    assert _spans(0) == [(0, 0)] and _spans(WHOLE_FILE) == [(0, WHOLE_FILE)]
    size = 10 * 2**30                                            # 10 GiB: still 256 KiB read
    spans = _spans(size)
    assert spans[0] == (0, EDGE) and spans[-1] == (size - EDGE, EDGE) and len(spans) == BLOCKS + 2
    assert sum(length for _, length in spans) == 2 * EDGE + BLOCKS * BLOCK == 256 * 1024
    middle = spans[1:-1]
    assert all(EDGE <= o and o + n <= size - EDGE for o, n in middle)
    assert all(a[0] + a[1] <= b[0] for a, b in zip(middle, middle[1:]))          # in order, not overlapping
    step = (size - 2 * EDGE) / BLOCKS                                             # one block centred in each
    assert [o for o, _ in middle] == [EDGE + int(i * step + (step - BLOCK) / 2) for i in range(BLOCKS)]


def test_what_the_sampled_checksum_sees_in_a_large_file(tmp_path):
    path = tmp_path / "lists.ivfdata"
    size = 4 * WHOLE_FILE
    path.write_bytes(bytes(size))
    first = file_checksum(path)
    spans = _spans(size)

    def flipped(offset: int) -> str:
        data = bytearray(path.read_bytes())
        data[offset] ^= 1
        path.write_bytes(bytes(data))
        try:
            return file_checksum(path)
        finally:
            data[offset] ^= 1
            path.write_bytes(bytes(data))

    assert flipped(10) != first and flipped(size - 10) != first                  # the headers and the end
    assert flipped(spans[5][0] + 100) != first                                   # inside a sampled block
    assert flipped(spans[5][0] - 100) == first                                   # between blocks: not seen
    assert file_checksum(path) == first


def test_record_and_check(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abc")
    record = record_files(tmp_path, ["a.bin", "absent.bin"])
    assert list(record) == ["a.bin"] and record["a.bin"]["size"] == 3
    check_files(tmp_path, record, "fix it")
    (tmp_path / "a.bin").write_bytes(b"abd")
    with pytest.raises(IndexLoadError, match="a.bin does not match the checksum") as e:
        check_files(tmp_path, record, "fix it")
    assert e.value.fix == "fix it" and e.value.path == str(tmp_path / "a.bin")
    (tmp_path / "a.bin").write_bytes(b"ab")
    with pytest.raises(IndexLoadError, match="a.bin holds 2 bytes, the build wrote 3"):
        check_files(tmp_path, record, "fix it")


def test_the_checksum_is_blake2b_160_of_the_size_and_the_parts_and_an_earlier_record_is_checked_at_its_size(tmp_path):
    """A record is the digest of drmix.fingerprint; an index whose record holds the earlier 32-digit checksums
    (BLAKE2b-128 of the same bytes) still opens, and still sees a change."""
    import hashlib

    (tmp_path / "a.bin").write_bytes(b"abc")
    assert file_checksum(tmp_path / "a.bin") == hashlib.blake2b(b"3abc", digest_size=20).hexdigest()
    earlier = {"a.bin": {"size": 3, "checksum": hashlib.blake2b(b"3abc", digest_size=16).hexdigest()}}
    check_files(tmp_path, earlier, "fix it")
    (tmp_path / "a.bin").write_bytes(b"abd")
    with pytest.raises(IndexLoadError, match="a.bin does not match the checksum"):
        check_files(tmp_path, earlier, "fix it")
