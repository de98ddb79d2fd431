"""benchmarks/build_collections.py: a collection is kept only when built with the settings asked for."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import build_collections as bc  # noqa: E402


@pytest.fixture
def builds(monkeypatch, tmp_path):
    """Every source builder replaced by 20 rows of its own; the calls are counted per source."""
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []

    def rows(name):
        def build(*a, **k):
            calls.append(name)
            return [{"query": f"{name} q{i}", "positive": f"p{i}", "negatives": [f"n{i}"]} for i in range(20)]
        return build

    for fn in ("beir_collection", "altlex", "msrp", "sick", "xquad", "entity_matching"):
        monkeypatch.setattr(bc, fn, rows(fn))
    return calls


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_another_cap_builds_the_collections_again(tmp_path, builds):
    out = tmp_path / "collections"
    bc.build_all(tmp_path, out, max_per_collection=10, localdocs=False)
    assert len(builds) == 8 and _lines(out / "msrp.jsonl") == 10
    assert bc.read_build_record(out)["key"]["max_per_collection"] == 10
    bc.build_all(tmp_path, out, max_per_collection=10, localdocs=False)
    assert len(builds) == 8                                          # the same settings: kept
    sizes = bc.build_all(tmp_path, out, max_per_collection=15, localdocs=False)
    assert len(builds) == 16 and sizes["msrp"] == 15 and _lines(out / "msrp.jsonl") == 15


def test_a_collection_edited_since_it_was_built_is_built_again(tmp_path, builds):
    out = tmp_path / "collections"
    bc.build_all(tmp_path, out, max_per_collection=10, localdocs=False)
    (out / "sick.jsonl").write_text('{"query": "q", "positive": "p"}\n')
    sizes = bc.build_all(tmp_path, out, max_per_collection=10, localdocs=False)
    assert builds[8:] == ["sick"] and sizes["sick"] == 10


def test_files_from_before_the_record_are_built_again(tmp_path, builds):
    out = tmp_path / "collections"
    out.mkdir()
    (out / "xquad.jsonl").write_text('{"query": "q", "positive": "p"}\n' * 3)
    sizes = bc.build_all(tmp_path, out, max_per_collection=10, localdocs=False)
    assert sizes["xquad"] == 10 and set(bc.read_build_record(out)["files"]) >= {"xquad", "scifact"}
