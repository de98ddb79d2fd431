"""`drmix train --data` with another tool's layout: --format / --columns on the command line (issue #31)."""
import json

import pytest
from typer.testing import CliRunner

from drmix.cli import app
from drmix.errors import DataError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "drmix-cache"))


def test_train_on_a_parquet_file_with_mapped_columns(tmp_path, tiny_model_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"question": f"question {i}", "answer": f"answer {i}", "hard": [f"wrong {i}"], "id": i} for i in range(8)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "qa.parquet")
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--data", str(tmp_path / "qa.parquet"), "--columns",
                                 "query=question,positive=answer,negatives=hard", "--model", tiny_model_path,
                                 "--max-steps", "2", "--batch-size", "4", "--output-dir", str(out), "--device", "cpu",
                                 "--no-show-progress", "--save-every", "10"])
    assert r.exit_code == 0, r.output
    import yaml

    cfg = yaml.safe_load((out / "config.yaml").read_text())["data"]
    assert cfg["columns"] == {"query": "question", "positive": "answer", "negatives": "hard"} and cfg["format"] == "auto"
    assert (out / "model").is_dir()


def test_train_with_a_format_that_does_not_fit_names_the_file(tmp_path):
    f = tmp_path / "st.jsonl"
    f.write_text(json.dumps({"anchor": "q", "positive": "p"}) + "\n")
    r = CliRunner().invoke(app, ["train", "--data", str(f), "--format", "flag", "--output-dir", str(tmp_path / "r")])
    assert isinstance(r.exception, DataError) and r.exception.path == str(f) and '"query"' in r.exception.message
