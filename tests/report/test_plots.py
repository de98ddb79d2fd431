"""Weight plots: what is drawn comes from the trajectory file; the PNG is complete and atomic."""
from __future__ import annotations

import json
import struct

import pytest

from drmix.errors import DataError
from drmix.report.plots import plot_weights, weight_series


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[-8:-4] == b"IEND"          # complete file
    return struct.unpack(">II", data[16:24])


def test_plot_weights_draws_trajectories_and_final_bars(tmp_path):
    traj = write(tmp_path / "weights.jsonl", [
        {"step": 1, "weights": {"msrp": 0.5, "scifact": 0.3, "sick": 0.2}, "skipped": False},
        {"step": 2, "weights": {"msrp": 0.4, "scifact": 0.35, "sick": 0.25}},
        {"step": 3, "weights": {"msrp": 0.3, "scifact": 0.45, "sick": 0.25}},
    ])
    series = plot_weights(traj, tmp_path / "out" / "weights.png")
    assert series.names == ["msrp", "scifact", "sick"]
    assert series.steps == [1, 2, 3]
    assert series.trajectories["scifact"] == [0.3, 0.35, 0.45]
    assert series.final == {"msrp": 0.3, "scifact": 0.45, "sick": 0.25}
    w, h = png_size(tmp_path / "out" / "weights.png")
    assert (w, h) == (1200, 400)       # 12 x 4 inches at 100 dpi
    assert not list((tmp_path / "out").glob(".*tmp"))   # no temp file left behind


def test_names_select_and_order_and_list_records(tmp_path):
    # list-valued weights are labelled with the given names; missing collections stay gaps (None)
    traj = write(tmp_path / "w.jsonl", [
        {"step": 10, "weights": [0.6, 0.4]},
        {"note": "no weights here"},
        {"step": 20, "weights": [0.7, 0.3]},
    ])
    s = weight_series(traj, names=["a", "b"])
    assert s.steps == [10, 20] and s.trajectories == {"a": [0.6, 0.7], "b": [0.4, 0.3]}
    traj2 = write(tmp_path / "w2.jsonl", [{"step": 1, "weights": {"a": 0.5, "b": 0.5}},
                                          {"step": 2, "weights": {"a": 0.9, "b": None}}])
    s2 = weight_series(traj2, names=["b", "a"])
    assert s2.trajectories == {"b": [0.5, None], "a": [0.5, 0.9]}
    assert s2.final == {"a": 0.9}


def test_bad_trajectory_files_raise_data_errors(tmp_path):
    empty = write(tmp_path / "e.jsonl", [{"step": 1}])
    with pytest.raises(DataError, match="no record with 'weights'"):
        plot_weights(empty, tmp_path / "x.png")
    broken = tmp_path / "b.jsonl"
    broken.write_text('{"step": 1, "weights": {"a": 1.0}}\n{oops\n')
    with pytest.raises(DataError) as e:
        plot_weights(broken, tmp_path / "x.png")
    assert e.value.line == 2
    assert not (tmp_path / "x.png").exists()
