"""benchmarks/_common.py: a cached model or score is reused only when made with the settings asked for."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _common as common  # noqa: E402

from drmix.fingerprint import file_digest  # noqa: E402

from drmix.config import TrainConfig  # noqa: E402


def _run(out: Path, data: Path, **kw) -> TrainConfig:
    """A finished run as the trainer leaves it (config.yaml, model/modules.json) made with ``kw``."""
    cfg = TrainConfig(data=[str(data)], output_dir=str(out), resume=True, **kw)
    (out / "model").mkdir(parents=True)
    (out / "model" / "modules.json").write_text("[]")
    (out / "config.yaml").write_text(cfg.dump_yaml())
    return cfg


def test_a_run_made_with_other_settings_stops_the_benchmark(tmp_path):
    data = tmp_path / "c.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n')
    cfg = _run(tmp_path / "run", data, max_steps=300, learning_rate=5e-5)
    assert common.reusable(tmp_path / "run", cfg)
    # operational and speed-only fields may differ
    assert common.reusable(tmp_path / "run", cfg.replace(**{"log_every": 1, "tokenize_num_proc": 8,
                                                                    "device": "cpu"}))
    with pytest.raises(SystemExit, match=r"max_steps 300 -> 8.*another --work"):
        common.reusable(tmp_path / "run", cfg.replace(**{"max_steps": 8}))
    assert not common.reusable(tmp_path / "none", cfg)          # nothing there: train it


def test_paths_compare_by_what_they_hold(tmp_path):
    """Another worker's own copy of the same collection and its link to the shared folder are the same input;
    a collection with other content is not."""
    data = tmp_path / "w1" / "c.jsonl"
    data.parent.mkdir()
    data.write_text('{"query": "q", "positive": "p"}\n')
    shared = tmp_path / "w1" / "loo"
    shared.mkdir()
    cfg = _run(tmp_path / "w1" / "loo" / "run", data, reference_model=str(shared))
    copy = tmp_path / "w2" / "c.jsonl"
    copy.parent.mkdir()
    shutil.copy(data, copy)
    (tmp_path / "w2" / "loo").symlink_to(shared)
    worker2 = cfg.replace(**{"data": [str(copy)], "reference_model": str(tmp_path / "w2" / "loo")})
    assert common.settings_changes(tmp_path / "w1" / "loo" / "run", worker2) == {}
    copy.write_text('{"query": "q", "positive": "other"}\n')
    assert set(common.settings_changes(tmp_path / "w1" / "loo" / "run", worker2)) == {"data"}


def test_keyed_cache_returns_only_what_was_stored_under_the_same_key(tmp_path):
    path = tmp_path / "c.json"
    common.keyed_write(path, {"steps": 3, "caps": [1, 2]}, {"q1": 0.5})
    assert common.keyed_read(path, {"steps": 3, "caps": [1, 2]}) == {"q1": 0.5}
    assert common.keyed_read(path, {"steps": 4, "caps": [1, 2]}) is None
    path.write_text(json.dumps({"q1": 0.5}))                     # an unkeyed cache of an earlier version
    assert common.keyed_read(path, {"steps": 3, "caps": [1, 2]}) is None


def test_dataset_key_names_the_ids_a_cap_kept():
    from drmix.data.beir import BeirDataset

    a = BeirDataset(root=Path("/d/nfcorpus"), corpus={"d1": {}, "d2": {}}, queries={"q1": "x"},
                    qrels={"q1": {"d1": 1}}, split="test")
    b = BeirDataset(root=Path("/d/nfcorpus"), corpus={"d1": {}}, queries={"q1": "x"}, qrels={"q1": {"d1": 1}},
                    split="test")
    ka, kb = common.dataset_key(a), common.dataset_key(b)
    assert (ka["data"], ka["split"], ka["queries"], ka["documents"]) == ("nfcorpus", "test", 1, 2)
    assert ka["ids"] != kb["ids"] and common.dataset_key(a) == ka
    assert ka["files"] is None                                   # no folder at that path: nothing to read


def test_dataset_key_changes_when_a_text_is_edited_in_place(tmp_path, monkeypatch):
    from drmix.data.beir import load_beir

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "set"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "cats"}\n')
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "cat"}\n')
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    before = common.dataset_key(load_beir(root, "test"))
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "dogs and more"}\n')   # same ids
    after = common.dataset_key(load_beir(root, "test"))
    assert after["ids"] == before["ids"] and after["files"] != before["files"]


def test_a_collection_changed_in_place_after_the_run_stops_the_benchmark(tmp_path):
    """Both sides used to hash the file at the recorded path now: an edit in place was invisible."""
    data = tmp_path / "c.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n' * 20)
    cfg = TrainConfig(data=[str(data)], output_dir=str(tmp_path / "run"), resume=True)
    assert not common.reusable(tmp_path / "run", cfg)           # about to train: the inputs of now are recorded
    assert common.identities_file(tmp_path / "run") == tmp_path / "run.inputs.json"
    _run(tmp_path / "run", data)
    assert common.reusable(tmp_path / "run", cfg)
    data.write_text('{"query": "q", "positive": "p"}\n' * 15)
    with pytest.raises(SystemExit, match=r"other settings or inputs \(data \['file:[0-9a-f]{40}'\] -> "
                                         r"\['file:[0-9a-f]{40}'\]\)"):
        common.reusable(tmp_path / "run", cfg)


def test_a_run_made_before_identities_were_recorded_adopts_them(tmp_path):
    data = tmp_path / "c.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n')
    cfg = _run(tmp_path / "run", data)
    assert common.recorded_identities(tmp_path / "run") is None
    assert common.reusable(tmp_path / "run", cfg)
    ids = common.recorded_identities(tmp_path / "run")
    assert ids[str(data)] == common._identity(str(data)) == "file:" + file_digest(data)
    assert ids[str(tmp_path / "run")] == str(tmp_path / "run")           # a folder: its real path
