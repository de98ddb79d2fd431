"""Containers (drmix.data.formats.sources through load_collections): parquet, CSV/TSV, JSON arrays, Arrow, saved
Dataset / DatasetDict, folders, the Hub (offline: fails in seconds), the content-keyed conversion cache."""
import json
import logging
import os
import time

import pytest

from drmix.data.collections import load_collections
from drmix.data.pages import dataset_files
from drmix.errors import DataError

ST_ROWS = [{"anchor": "what is a cat", "positive": "a cat is a small feline", "negative": "dogs bark"},
           {"anchor": "why is the sky blue", "positive": "Rayleigh scattering", "negative": "grass is green"}]
GOLDEN = [{"query": "what is a cat", "positives": ["a cat is a small feline"], "negatives": ["dogs bark"]},
          {"query": "why is the sky blue", "positives": ["Rayleigh scattering"], "negatives": ["grass is green"]}]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "drmix-cache"))


def _csv(rows, sep):
    cols = list(rows[0])
    return sep.join(cols) + "\n" + "".join(sep.join(r[c] for c in cols) + "\n" for r in rows)


def write_st(path, kind, rows=ST_ROWS):
    """The same rows in each container, written with the libraries users write them with."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif kind == "csv":
        path.write_text(_csv(rows, ","), encoding="utf-8")
    elif kind == "tsv":
        path.write_text(_csv(rows, "\t"), encoding="utf-8")
    elif kind == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif kind == "arrow":
        ds = datasets.Dataset.from_list(rows)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, ds.data.table.schema) as w:
            w.write_table(ds.data.table)
    elif kind == "saved":
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    elif kind == "dict":
        datasets.DatasetDict({"train": datasets.Dataset.from_list(rows),
                              "dev": datasets.Dataset.from_list(rows[:1])}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("kind, name", [("parquet", "st.parquet"), ("csv", "st.csv"), ("tsv", "st.tsv"),
                                        ("json", "st.json"), ("jsonl", "st.jsonl"), ("arrow", "st.arrow"),
                                        ("saved", "st"), ("dict", "st")])
def test_every_container_reads_into_the_same_golden_collection(tmp_path, kind, name):
    path = write_st(tmp_path / name, kind)
    [c] = load_collections([str(path)])
    assert c.dataset.to_list() == GOLDEN and c.layout == "st" and c.name == "st"
    assert dataset_files(c.dataset), "collections are memory-mapped Arrow, not rows in RAM"


def test_a_datasetdict_split_is_picked_with_a_suffix(tmp_path):
    path = write_st(tmp_path / "dd", "dict")
    [c] = load_collections([f"{path}:dev"])
    assert c.dataset.to_list() == GOLDEN[:1] and c.name == "dd-dev"
    with pytest.raises(DataError) as e:
        load_collections([f"{path}:test"])
    assert "'test'" in e.value.message and "train, dev" in e.value.message


def test_a_folder_of_mixed_files_gives_one_collection_per_file(tmp_path):
    write_st(tmp_path / "a.parquet", "parquet")
    write_st(tmp_path / "b.csv", "csv")
    write_st(tmp_path / "c", "saved")
    (tmp_path / "notes.txt").write_text("not data")
    cols = load_collections([str(tmp_path)])
    assert [(c.name, c.dataset.to_list() == GOLDEN) for c in cols] == [("a", True), ("b", True), ("c", True)]


def test_the_conversion_is_cached_by_content_not_by_size_or_time(tmp_path):
    path = write_st(tmp_path / "st.parquet", "parquet")
    first = load_collections([str(path)])[0]
    assert first.dataset.to_list() == GOLDEN
    files = dataset_files(first.dataset)
    assert all(str(tmp_path / "drmix-cache" / "collections") in f for f in files)
    assert not any((tmp_path / "drmix-cache" / "sources").iterdir()), "datasets' copy of the parquet is not kept"
    stat = path.stat()
    changed = [dict(r, anchor=r["anchor"].upper()) for r in ST_ROWS]
    write_st(path, "parquet", changed)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = load_collections([str(path)])[0]
    assert again.dataset["query"] == ["WHAT IS A CAT", "WHY IS THE SKY BLUE"]
    assert load_collections([str(path)])[0].dataset._fingerprint == again.dataset._fingerprint


def test_string_columns_of_a_saved_dataset_are_wrapped_never_split(tmp_path, caplog, tiny_model_path):
    """Issue #31: a saved dataset whose positives/negatives are strings was trained on character by character."""
    import datasets

    from drmix.data.tokenized import tokenize_collection
    from drmix.model.encoder import load_encoder

    root = tmp_path / "strings"
    datasets.Dataset.from_list([{"query": "q1", "positives": "malaria is spread by mosquitoes", "negatives": "no"},
                                {"query": "q2", "positives": "second passage", "negatives": "other"}]
                               ).save_to_disk(str(root))
    with caplog.at_level(logging.WARNING, logger="drmix"):
        [c] = load_collections([str(root)])
    assert c.dataset["positives"] == [["malaria is spread by mosquitoes"], ["second passage"]]
    assert c.dataset["negatives"] == [["no"], ["other"]]
    warned = [r.getMessage() for r in caplog.records if "where a list is expected" in r.getMessage()]
    assert len(warned) == 2 and all(str(root) in w for w in warned)
    assert {'"positives"', '"negatives"'} == {w.split("column ")[1].split(" ")[0] for w in warned}
    ids = tokenize_collection(c, load_encoder(tiny_model_path), query_max_length=16, doc_max_length=16,
                              cache_dir=tmp_path / "tok")
    assert ids.positive_counts([0, 1]).tolist() == [1, 1]     # one positive per row, not one per character


def test_a_json_list_in_a_csv_cell_is_refused_naming_the_row(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text('query,positive,negatives\nq,p,n\nq2,p2,"[""a"", ""b""]"\n', encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_collections([str(f)], columns="query=query,positive=positive,negatives=negatives", format="drmix")
    assert e.value.path == str(f) and "row 2" in e.value.message and "JSON-encoded list" in e.value.message


@pytest.mark.parametrize("header,row", [
    ("anchor,positive,negative", 'q2,p2,"[""a"", ""b""]"'),                  # sentence-transformers, by name
    ("query,positive,negatives", 'q2,p2,"[""a"", ""b""]"'),
    ("anchor,positive,negative_1,negative_2", 'q2,p2,n,"[""a"", ""b""]"'),  # numbered negatives
    ("anchor,positive,negative", 'q2,"[""a"", ""b""]",n'),                  # a positive cell too
    ("question,answer,distractor", 'q2,p2,"[""a"", ""b""]"'),               # by position
    ("anchor,positive,negative", 'q2,p2,[]'),                               # an empty list, as pandas writes it
])
def test_a_json_list_in_any_text_cell_is_refused_in_every_layout(tmp_path, header, row):
    """The rule of docs/data.md holds whatever the layout and column: never trained as one literal text."""
    n = header.count(",") + 1
    f = tmp_path / "st.csv"
    f.write_text(f"{header}\n" + ",".join(["q", "p"] + ["n"] * (n - 2)) + f"\n{row}\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.path == str(f) and "row 2" in e.value.message and "JSON-encoded list" in e.value.message


def test_numbers_where_text_goes_are_refused_before_reading_rows(tmp_path):
    import datasets

    root = tmp_path / "nums"
    datasets.Dataset.from_list([{"anchor": "q", "positive": 3, "negative": "n"}]).save_to_disk(str(root))
    with pytest.raises(DataError) as e:
        load_collections([str(root)])
    assert e.value.path == str(root) and '"positive"' in e.value.message and "number" in e.value.message


def test_a_canonical_saved_dataset_is_used_as_it_is(tmp_path):
    import datasets

    root = tmp_path / "canon"
    datasets.Dataset.from_list(GOLDEN).save_to_disk(str(root))
    [c] = load_collections([str(root)], format="drmix")
    assert all(str(root) in f for f in dataset_files(c.dataset))   # no copy
    assert not (tmp_path / "drmix-cache" / "collections").exists()


def test_broken_files_name_the_file(tmp_path):
    f = tmp_path / "broken.parquet"
    f.write_bytes(b"not parquet at all")
    with pytest.raises(DataError) as e:
        load_collections([str(f)])
    assert e.value.path == str(f) and "parquet" in e.value.message
    g = tmp_path / "data.xlsx"
    g.write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError) as e:
        load_collections([str(g)])
    assert "'.xlsx'" in e.value.message and ".parquet" in e.value.fix


def test_a_hub_id_offline_fails_in_seconds(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(DataError) as e:
        load_collections(["sentence-transformers/no-such-dataset-here"])
    assert time.perf_counter() - t0 < 10
    assert e.value.path == "sentence-transformers/no-such-dataset-here" and "offline" in e.value.message
    assert "save_to_disk" in e.value.fix


def test_an_unreachable_hub_fails_before_any_retry(monkeypatch):
    import datasets

    from drmix.data.formats import sources

    monkeypatch.setattr(sources, "hub_offline", lambda: False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")          # nothing listens: refused at once

    def no_retry_loop(*a, **k):
        raise AssertionError("datasets.load_dataset must not be reached without the Hub")

    monkeypatch.setattr(datasets, "load_dataset", no_retry_loop)
    t0 = time.perf_counter()
    with pytest.raises(DataError) as e:
        load_collections(["owner/dataset:train"])
    assert time.perf_counter() - t0 < 10
    assert "cannot be reached" in e.value.message and "127.0.0.1:9" in e.value.message


def test_a_hub_id_online_goes_through_load_dataset(monkeypatch):
    import datasets

    from drmix.data.formats import sources

    calls = []

    def fake_load_dataset(repo, subset=None, split=None, **kw):
        calls.append((repo, subset, split))
        return datasets.Dataset.from_list(ST_ROWS)

    monkeypatch.setattr(sources, "hub_offline", lambda: False)
    monkeypatch.setattr(sources, "hub_unreachable", lambda timeout=5.0: None)
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    [a, b] = load_collections(["someone/triplets", "someone/nli:triplet:dev"])
    assert calls == [("someone/triplets", None, "train"), ("someone/nli", "triplet", "dev")]
    assert a.dataset.to_list() == GOLDEN and (a.name, b.name) == ("triplets", "nli-triplet-dev")


def test_missing_local_paths_are_not_mistaken_for_hub_ids(tmp_path):
    for missing in (str(tmp_path / "nope.jsonl"), "data/nope.parquet", "./rel/name"):
        with pytest.raises(DataError, match="does not exist"):
            load_collections([missing])
