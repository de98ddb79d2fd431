"""drmix.io.read_yaml: one YAML reader, errors naming the file, the line and the fix."""
import pytest

from drmix.errors import ConfigError, DataError
from drmix.io import read_yaml


def test_reads_a_document(tmp_path):
    (tmp_path / "a.yaml").write_text("a: 1\nb: [x, y]\n", encoding="utf-8")
    assert read_yaml(tmp_path / "a.yaml") == {"a": 1, "b": ["x", "y"]}
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert read_yaml(tmp_path / "empty.yaml") is None


def test_errors_name_the_file_the_line_and_the_fix(tmp_path):
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
