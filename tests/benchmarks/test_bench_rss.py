"""benchmarks/bench_rss.py: its parquet case holds sentence-transformers rows that drmix reads as the saved case's."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_rss  # noqa: E402


def test_the_parquet_case_is_the_saved_case_in_sentence_transformers_columns(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from drmix.data.collections import load_collections

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    bench_rss.write_parquet(tmp_path / "c.parquet", 5, chunk=2)
    assert pq.read_schema(tmp_path / "c.parquet").names == ["anchor", "positive", "negative"]
    bench_rss.write_collection(tmp_path / "saved", 5, chunk=2)
    [p] = load_collections([str(tmp_path / "c.parquet")])
    [s] = load_collections([str(tmp_path / "saved")])
    assert (p.layout, s.layout) == ("st", "drmix")
    assert p.dataset.to_list() == s.dataset.select_columns(["query", "positives", "negatives"]).to_list()
    assert p.dataset[1]["negatives"] == ["other 0 alpha beta gamma 0 delta"]   # each chunk's ids reversed
    assert p.dataset[4] == {"query": "query 4 alpha beta gamma 4 delta",
                            "positives": ["passage 4 alpha beta gamma 4 delta"],
                            "negatives": ["other 4 alpha beta gamma 4 delta"]}  # chunks of 2: [4] reversed
