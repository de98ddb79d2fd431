"""The index stage of ``drmix adapt`` (:mod:`drmix.recipes.adapt.index`): one index per target corpus that
``drmix search --index`` answers, kept when built by the same model from the same corpus, the printed command,
--no-index, and the backend options checked as ``drmix index`` checks them."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from drmix.errors import ConfigError
from drmix.recipes.adapt import plan_adapt, plan_work
from drmix.recipes.adapt.index import (build_indexes, index_finished, read_index_record, search_command)
from drmix.recipes.adapt.stages import adapt_stages

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/recipes: test_adapt.py
from test_adapt import make_config  # noqa: E402


def _queries(root: Path, corpus: str, text: str) -> None:
    """The synthetic test queries the printed command's example is taken from."""
    d = root / "synthetic" / corpus
    d.mkdir(parents=True, exist_ok=True)
    (d / "queries.jsonl").write_text(json.dumps({"_id": "s1", "text": text}) + "\n")


def test_one_index_per_corpus_that_drmix_search_answers_kept_on_rerun(tmp_path, tiny_model_path, capsys):
    from cli_helpers import run

    cfg = make_config(tmp_path, tiny_model_path)
    plan = plan_adapt(cfg)
    root = plan.root
    _queries(root, "pets", "about ferrets and 'quotes'")
    record = build_indexes(cfg, plan.root, plan.corpora, "size+synthetic", Path(tiny_model_path))
    assert set(record["corpora"]) == {"pets", "travel"} and record["backend"] == "memory"
    assert record["model"] == str((root / "model").resolve()) and record["candidate"] == "size+synthetic"
    for name in ("pets", "travel"):
        entry = record["corpora"][name]
        assert entry["location"] == str(root / "index" / name) and entry["documents"] == 8 and entry["built"]
        meta = json.loads((root / "index" / name / "meta.json").read_text())
        assert meta["count"] == 8 and meta["corpus_fingerprint"] == entry["corpus_fingerprint"]
    assert read_index_record(root) == json.loads((root / "index" / "index.json").read_text()) == record
    assert index_finished(root, "size+synthetic") and not index_finished(root, "uniform")
    # the printed command, quoted for a shell, runs as it is: the query is the corpus's first synthetic test query
    command = search_command(record, root)
    assert command == (f"drmix search --index {root / 'index' / 'pets'} --query "
                       "'about ferrets and '\"'\"'quotes'\"'\"''")
    argv = shlex.split(command)
    assert argv[:2] == ["drmix", "search"] and argv[-1] == "about ferrets and 'quotes'"
    (root / "model").symlink_to(Path(tiny_model_path))          # the adapted model's copy the index names
    code, out, _ = run([*argv[1:], "--json", "-k", "3"], capsys)
    assert code == 0, out
    hits = json.loads(out.strip().splitlines()[-1])["hits"]
    assert len(hits) == 3 and all(h["doc_id"].startswith("pets") for h in hits)
    # a rerun keeps each index built by the same model from the same corpus (nothing encoded again)
    stamp = (root / "index" / "pets" / "meta.json").stat().st_mtime_ns
    again = build_indexes(cfg, plan.root, plan.corpora, "size+synthetic", Path(tiny_model_path))
    assert (root / "index" / "pets" / "meta.json").stat().st_mtime_ns == stamp
    assert again["corpora"]["pets"]["built"] is False and again["corpora"]["pets"]["documents"] == 8   # kept


def test_no_index_declares_no_stage_and_counts_no_work(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform"])
    names = [s.name for s in adapt_stages(cfg, plan_adapt(cfg), labelled=lambda *a: None)]
    assert names[-1] == "index" and "index of the adapted model" in [w.name for w in plan_work(cfg)]
    off = cfg.replace(index=False)
    plan = plan_adapt(off)
    assert "index" not in [s.name for s in adapt_stages(off, plan, labelled=lambda *a: None)]
    assert "index of the adapted model" not in [w.name for w in plan_work(off)]


def test_the_stage_is_made_with_its_backend_settings(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform"])
    stage = next(s for s in adapt_stages(cfg, plan_adapt(cfg)) if s.name == "index")
    assert stage.settings() == {"corpus": cfg.target.corpus, "index_backend": "memory", "index_uri": None}
    assert stage.record == Path(cfg.run.output_dir) / "index" / "index.yaml"
    # the record build_indexes writes: the same settings are no change, another backend is one the rerun names
    import yaml

    from drmix.recipes.adapt.index import index_settings

    stage.record.parent.mkdir(parents=True)
    stage.record.write_text(yaml.safe_dump(index_settings(cfg)))
    assert stage.changes() == {}
    faiss = cfg.replace(index_backend="faiss-disk")
    other = next(s for s in adapt_stages(faiss, plan_adapt(faiss)) if s.name == "index")
    assert other.changes() == {"index_backend": {"before": "memory", "after": "faiss-disk"}}


def test_backend_options_are_checked_like_drmix_index(tmp_path):
    from drmix.config import load_config
    from drmix.recipes.adapt import AdaptConfig

    assert AdaptConfig().search.index_backend == "memory"                  # drmix index's default
    assert AdaptConfig(index_backend="FAISS-DISK").search.index_backend == "faiss-disk"
    for over, message in (({"index_backend": "milvus"}, "--index-backend milvus writes a collection: give "
                                                        "--index-uri"),
                          ({"index_uri": "x.db"}, "--index-backend memory writes a folder; --index-uri is for "
                                                  "--index-backend milvus"),
                          ({"index_backend": "elastic"}, "unknown index backend 'elastic'")):
        with pytest.raises(ConfigError, match=message):
            load_config(AdaptConfig, None, over)
    # --no-index: the backend options are not checked (nothing is built)
    assert load_config(AdaptConfig, None, {"index": False, "index_backend": "milvus"}).search.index is False


def test_a_milvus_collection_per_corpus(tmp_path, tiny_model_path):
    pytest.importorskip("milvus_lite")
    cfg = make_config(tmp_path, tiny_model_path, index_backend="milvus", index_uri=str(tmp_path / "idx.db"))
    plan = plan_adapt(cfg)
    record = build_indexes(cfg, plan.root, plan.corpora, "uniform", Path(tiny_model_path))
    assert record["corpora"]["pets"]["location"] == f"{tmp_path / 'idx.db'}#pets"
    assert record["backend"] == "milvus" and (plan.root / "index" / "index.json").is_file()
    from drmix.retrieval.backends import open_index

    index = open_index(record["corpora"]["travel"]["location"])
    assert len(index) == 8 and index.metadata["candidate"] == "uniform"
    # a collection of the same name that this run did not write is refused, naming adapt's own options
    from drmix.retrieval.backends import build_index
    import numpy as np

    other = tmp_path / "other.db"
    build_index("milvus", f"{other}#pets", [(["d1", "d2"], np.eye(2, dtype="float32"))], metadata={"model": "m"})
    with pytest.raises(ConfigError, match="index of pets: collection pets already exists.*--index-uri"):
        build_indexes(cfg.replace(index_uri=str(other)), plan.root, plan.corpora, "uniform", Path(tiny_model_path))


def test_an_interrupted_index_stage_keeps_the_finished_corpora(tmp_path, tiny_model_path, monkeypatch):
    from drmix.recipes.adapt import index as index_mod
    from drmix.retrieval import backends

    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform"])
    plan = plan_adapt(cfg)
    original = backends.index_documents
    built: list[str] = []

    def killed_in_travel(spec, target, *a, **kw):
        if target.endswith("travel"):
            raise RuntimeError("killed in the index of travel")
        built.append(target)
        return original(spec, target, *a, **kw)

    monkeypatch.setattr(backends, "index_documents", killed_in_travel)
    with pytest.raises(RuntimeError, match="killed"):
        build_indexes(cfg, plan.root, plan.corpora, "uniform", Path(tiny_model_path))
    assert not index_finished(plan.root, "uniform") and not (plan.root / "index" / "travel").exists()
    stamp = (plan.root / "index" / "pets" / "meta.json").stat().st_mtime_ns
    monkeypatch.setattr(backends, "index_documents", original)
    record = build_indexes(cfg, plan.root, plan.corpora, "uniform", Path(tiny_model_path))
    assert (plan.root / "index" / "pets" / "meta.json").stat().st_mtime_ns == stamp     # kept
    assert record["corpora"]["travel"]["built"] and not record["corpora"]["pets"]["built"]
    assert record["corpora"]["travel"]["documents"] == 8 and index_finished(plan.root, "uniform")
    assert index_mod.read_index_record(plan.root) == record


def test_an_index_the_disk_has_no_room_for_is_refused_before_encoding(tmp_path, tiny_model_path, monkeypatch):
    """The stage checks the disk as ``drmix index`` does: 8 documents of 32-d float32 vectors plus their texts need
    more than the 1,000 bytes the disk is said to have; nothing is encoded and nothing is written."""
    import collections
    import shutil

    from drmix.errors import DiskFullError
    from drmix.retrieval import backends

    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform"])
    plan = plan_adapt(cfg)
    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 1_000, 1_000))
    encoded: list[str] = []
    monkeypatch.setattr(backends, "index_documents", lambda spec, target, *a, **kw: encoded.append(target))
    with pytest.raises(DiskFullError, match=r"index/pets: index of pets: the index of 8 documents needs about \d+ "
                                            r"bytes and the disk has 1000 bytes free; nothing was written\. Fix: free "
                                            r"space on that filesystem, choose another --output-dir, or pass "
                                            r"--no-index"):
        build_indexes(cfg, plan.root, plan.corpora, "uniform", Path(tiny_model_path))
    assert encoded == [] and not (plan.root / "index" / "pets").exists()
    assert not index_finished(plan.root, "uniform")
