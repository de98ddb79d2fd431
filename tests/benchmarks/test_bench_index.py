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
