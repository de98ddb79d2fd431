"""Releasing memory-mapped Arrow pages: the maps parser, the release itself, and the builder's cadence."""
import sys

import numpy as np
import pytest

from drmix.data.pages import PageReleaser, mapped_ranges, release_mapped_pages


def test_mapped_ranges_keeps_read_only_mappings_of_the_named_files(tmp_path):
    data = tmp_path / "data-00000-of-00001.arrow"
    data.write_bytes(b"x")
    other = tmp_path / "other.arrow"
    maps = tmp_path / "maps"
    maps.write_text(
        f"7f0000000000-7f0000004000 r--s 00000000 08:01 11 {data}\n"
        f"7f0000004000-7f0000006000 rw-p 00000000 08:01 11 {data}\n"      # writable: never touched
        f"7f0000010000-7f0000011000 r--p 00004000 08:01 11 {data}\n"
        f"7f0000020000-7f0000021000 r--s 00000000 08:01 12 {other}\n"     # another file
        "7f0000030000-7f0000031000 rw-p 00000000 00:00 0 \n"              # anonymous
        "7f0000040000-7f0000041000 r--p 00000000 00:00 0 [vvar]\n")
    assert mapped_ranges([str(data)], maps=str(maps)) == [(0x7F0000000000, 0x7F0000004000),
                                                          (0x7F0000010000, 0x7F0000011000)]
    assert mapped_ranges([], maps=str(maps)) == []


def _rss_file_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise on /proc/self/maps is Linux-only")
def test_release_drops_resident_pages_and_keeps_the_rows(tmp_path):
    import datasets
    import pyarrow as pa

    n = 100_000  # about 16 MB of Arrow
    text = pa.array([f"row {i} " + "abcdefghij" * 15 for i in range(n)])
    datasets.Dataset(pa.table({"text": text})).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    files = [f["filename"] for f in ds.cache_files]
    size_kb = sum((tmp_path / "ds" / f.split("/")[-1]).stat().st_size for f in files) // 1024
    before = ds[::997]["text"]
    _ = ds[:]["text"]                       # touch every page
    touched = _rss_file_kb()
    assert release_mapped_pages(files) >= size_kb * 1024
    released = _rss_file_kb()
    assert touched - released >= 0.8 * size_kb
    assert ds[::997]["text"] == before      # the data reads back unchanged from the page cache


def test_releaser_fires_every_n_ticks_and_never_without_files(monkeypatch):
    calls = []
    monkeypatch.setattr("drmix.data.pages.release_mapped_pages", lambda paths: calls.append(list(paths)) or 0)

    class DS:
        cache_files = [{"filename": "/tmp/b.arrow"}, {"filename": "/tmp/a.arrow"}]

    r = PageReleaser([DS(), DS()], every=3)
    assert [r.tick() for _ in range(7)] == [False, False, True, False, False, True, False]
    assert calls == [["/tmp/a.arrow", "/tmp/b.arrow"]] * 2
    empty = PageReleaser([object()], every=1)
    assert not empty.tick() and len(calls) == 2


def test_sampler_permutation_is_int32_and_equals_numpy_permutation():
    from drmix.data.sampling import MixtureSampler

    s = MixtureSampler([1000, 7], batch_size=4, seed=3)
    perm = s._perm(0)
    assert perm.dtype == np.int32
    assert perm.tolist() == np.random.default_rng([3, 0, 0]).permutation(1000).tolist()
