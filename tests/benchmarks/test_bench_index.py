"""benchmarks/bench_index.py: its data, its exact reference, its power-law projection, and the docs' table printed
from the stored results of the measured run."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_index as bi  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "index-cpu-results.json"
FULL = Path(__file__).parent / "fixtures" / "index-full-results.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "evaluation.md"


def test_generated_vectors_are_unit_seeded_and_read_back_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(bi, "CHUNK", 7)
    bi.generate(tmp_path / "v.f32", 20, seed=0)
    x = np.fromfile(tmp_path / "v.f32", dtype=np.float32).reshape(20, bi.DIM)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    bi.generate(tmp_path / "w.f32", 20, seed=0)
    assert (tmp_path / "v.f32").read_bytes() == (tmp_path / "w.f32").read_bytes()
    parts = list(bi.read_chunks(tmp_path / "v.f32", 20))
    assert [len(ids) for ids, _ in parts] == [7, 7, 6] and parts[2][0][0] == "14"
    np.testing.assert_array_equal(np.concatenate([p for _, p in parts]), x)


def test_exact_top_is_brute_force_over_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(bi, "CHUNK", 9)
    bi.generate(tmp_path / "v.f32", 40, seed=3)
    x = np.fromfile(tmp_path / "v.f32", dtype=np.float32).reshape(40, bi.DIM)
    q = x[:5] + 0.01
    want = np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :bi.K]
    np.testing.assert_array_equal(bi.exact_top(tmp_path / "v.f32", 40, q), want)


def test_power_law_fit():
    c, e = bi._fit([(10, 100.0), (1000, 10_000.0)])
    assert (c, e) == pytest.approx((10.0, 1.0))
    c, e = bi._fit([(100, 10.0), (10_000, 100.0)])  # y = sqrt(n)
    assert (c, e) == pytest.approx((1.0, 0.5))
    assert bi._fit([(10, 5.0)]) is None
    a, b = bi._affine([(1000, 3_000.0), (3000, 7_000.0)])  # 1,000 fixed + 2 per vector
    assert (a, b) == pytest.approx((1000.0, 2.0))
    assert bi._affine([(1000, 3_000.0)]) is None


def test_the_docs_table_is_printed_from_the_stored_results(tmp_path, capsys):
    if not FIXTURE.exists():
        pytest.skip("no stored results")
    shutil.copy(FIXTURE, tmp_path / "results.json")
    bi.main(["--report-only", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert printed == bi.table(json.loads(FIXTURE.read_text()))
    assert printed in DOCS.read_text(encoding="utf-8")


def test_low_rank_vectors_vary_around_their_centre_in_32_dimensions(tmp_path, monkeypatch):
    monkeypatch.setattr(bi, "JITTER", 0.0)
    bi.generate(tmp_path / "v.f32", 300, seed=0, data="lowrank")
    x = np.fromfile(tmp_path / "v.f32", dtype=np.float32).reshape(300, bi.DIM)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    bi.generate(tmp_path / "g.f32", 300, seed=0)
    assert (tmp_path / "g.f32").read_bytes() != (tmp_path / "v.f32").read_bytes()
    # without the jitter every vector is a multiple of (its centre + a vector of the 32-d subspace): with the
    # centres (1,000) and the subspace (32) together they span at most 1,032 dimensions; here: the 300 vectors
    # projected off the subspace are multiples of centres
    basis = np.linalg.qr(np.random.default_rng(54321).standard_normal((bi.DIM, bi.RANK)))[0]
    off = x - (x @ basis) @ basis.T
    centres = np.random.default_rng(12345).standard_normal((bi.CENTRES, bi.DIM)).astype(np.float32)
    c_off = centres - (centres @ basis) @ basis.T
    cos = (off / np.linalg.norm(off, axis=1, keepdims=True)) @ (c_off / np.linalg.norm(c_off, axis=1, keepdims=True)).T
    assert np.allclose(cos.max(axis=1), 1.0, atol=1e-4)


def test_peak_rss_is_this_process_high_water_mark():
    parts = bi.rss_parts()
    assert parts["rss_anon"] > 0 and parts["rss_file"] > 0
    assert bi.peak_rss() >= parts["rss_anon"] + parts["rss_file"] - 2**20


def test_the_page_cache_of_files_is_counted(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 65536)
    files = bi.index_files(tmp_path)
    assert files == [tmp_path / "f"] and bi.index_files(tmp_path / "nope.db") == []
    bi.evict(files)
    assert 0 <= bi.cached_bytes(files) <= 65536


def test_the_docs_full_table_is_printed_from_the_stored_results(tmp_path, capsys):
    if not FULL.exists():
        pytest.skip("no stored results")
    shutil.copy(FULL, tmp_path / "results.json")
    bi.main(["--report-only", "--preset", "full", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert printed == bi.table(json.loads(FULL.read_text()))
    assert "RSS: anonymous" in printed and printed in DOCS.read_text(encoding="utf-8")


SERVER = Path(__file__).parent / "fixtures" / "index-server-results.json"


def test_the_docs_server_table_is_printed_from_the_stored_results(tmp_path, capsys):
    if not SERVER.exists():
        pytest.skip("no stored results")
    shutil.copy(SERVER, tmp_path / "results.json")
    bi.main(["--report-only", "--preset", "server", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    assert printed == bi.table(json.loads(SERVER.read_text()))
    assert "| milvus-server flat |" in printed and "server peak RSS" in printed
    assert printed in DOCS.read_text(encoding="utf-8")


def test_a_process_memory_and_cpu_time_are_read_from_proc():
    import os

    got = bi.proc_memory(os.getpid())
    parts = bi.rss_parts()
    assert got["peak_rss"] >= got["rss"] > 0 and got["cpu_seconds"] > 0
    assert abs(got["rss"] - (parts["rss_anon"] + parts["rss_file"])) <= 0.1 * got["rss"]  # VmRSS: anon + file


def test_the_server_table_and_a_build_that_did_not_finish():
    server = {"version": "2.3.5", "started": {"rss": 200 * 2**20, "peak_rss": 200 * 2**20, "cpu_seconds": 1.0},
              "after_build": {"rss": 900 * 2**20, "peak_rss": 2**30, "cpu_seconds": 91.0},
              "after_search": {"rss": 700 * 2**20, "peak_rss": 2 * 2**30, "cpu_seconds": 95.0}}
    results = {"10|milvus-server flat": {"n": 10, "arm": "milvus-server flat", "data": "lowrank", "disk": 2**20,
                                         "build": {"seconds": 5.0, "peak_rss": 2**20},
                                         "search": {"qps": 10.0, "recall": 1.0, "peak_rss": 2**20}, "server": server},
               "10|milvus-server hnsw": {"n": 10, "arm": "milvus-server hnsw", "data": "lowrank", "disk": None,
                                         "build": None, "search": None, "server": server, "timed_out": 3600}}
    text = bi.table(results)
    assert "| 10 | milvus-server hnsw | over 1.0 h (stopped) | — | — | — | — | — |" in text
    # started 200 MB, peak 2 GB (after the search), 700 MB at the end, 90 s of the server's CPU in the build
    assert "| 10 | milvus-server flat | 200 MB | 2.0 GB | 700 MB | 1.5 min |" in text
    assert "Projected" not in text  # no projection from a server's clients (their memory is not the server's)
