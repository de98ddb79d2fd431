"""drmix.io.read: JSONL read with surrogates replaced and counted once per file, and YAML errors that name the
file, the line and the fix."""
from __future__ import annotations

import logging

import pytest

from drmix.errors import ConfigError
from drmix.io.read import iter_jsonl


def test_iter_jsonl_replaces_surrogates_and_logs_once_per_file(tmp_path, caplog):
    p = tmp_path / "c.jsonl"
    p.write_text('{"q": "a\\ud800"}\n{"q": "fine \\ud83d\\ude00"}\n{"q": "\\udc00\\udc01"}\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="drmix.io.read"):
        rows = [obj for _, obj in iter_jsonl(p)]
    assert rows == [{"q": "a\ufffd"}, {"q": "fine 😀"}, {"q": "\ufffd\ufffd"}]
    warnings = [r.getMessage() for r in caplog.records if r.name == "drmix.io.read"]
    assert warnings == [f"{p}:1: 3 lone surrogate(s) (such as \"\\ud800\", not Unicode text) in 2 line(s) "
                        "replaced by U+FFFD"]


def test_a_peek_at_the_first_record_logs_nothing(tmp_path, caplog):
    """Readers that look at the first record to detect a layout, then read the file, log the count once."""
    p = tmp_path / "c.jsonl"
    p.write_text('{"q": "a\\ud800"}\n{"q": "b"}\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="drmix.io.read"):
        assert next(iter(iter_jsonl(p)))[1] == {"q": "a\ufffd"}
        assert len(list(iter_jsonl(p))) == 2
    assert len([r for r in caplog.records if "surrogate" in r.getMessage()]) == 1


def test_read_yaml_reads_a_document(tmp_path):
    from drmix.io.read import read_yaml

    (tmp_path / "a.yaml").write_text("a: 1\nb: [x, y]\n", encoding="utf-8")
    assert read_yaml(tmp_path / "a.yaml") == {"a": 1, "b": ["x", "y"]}
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert read_yaml(tmp_path / "empty.yaml") is None


def test_read_yaml_errors_name_the_file_the_line_and_the_fix(tmp_path):
    from drmix.errors import DataError
    from drmix.io.read import read_yaml

    (tmp_path / "bad.yaml").write_text("a: 1\nb: [x\nc: 2\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_yaml(tmp_path / "bad.yaml", what="collection list", error=DataError)
    assert "invalid YAML" in e.value.message and e.value.line == 3 and e.value.fix == "fix the YAML syntax."
    with pytest.raises(ConfigError, match="prompts file not found"):
        read_yaml(tmp_path / "missing.yaml", what="prompts file")
    (tmp_path / "latin.yaml").write_bytes("a: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="file is not valid UTF-8") as e:
        read_yaml(tmp_path / "latin.yaml")
    assert e.value.path == str(tmp_path / "latin.yaml")
