"""The launched processes: rank and world size from the torchrun / accelerate environment, and its refusals."""
from __future__ import annotations

import pytest

from drmix.errors import ConfigError
from drmix.retrieval.ranks import Ranks


def test_ranks_from_the_launcher_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert (Ranks.from_env().rank, Ranks.from_env().world_size) == (0, 1)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    one = Ranks.from_env()
    assert (one.rank, one.world_size, one.joined, one.main) == (0, 1, False, True)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="RANK=3 does not lie in WORLD_SIZE=2"):
        Ranks.from_env()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ConfigError, match="not whole numbers"):
        Ranks.from_env()


def test_more_processes_than_gpus_on_a_node_is_refused(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "2")):
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"2 processes on this node but 1 GPU: .* Fix: start 1 process per node "
                                          r"\(torchrun --nproc-per-node 1\)"):
        Ranks.from_env()
