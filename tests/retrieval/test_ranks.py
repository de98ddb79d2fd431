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


def test_global_and_node_local_ranks_are_read_apart(monkeypatch):
    """torchrun --nnodes 2 --nproc-per-node 4: the process of global rank 6 is local rank 2 on node 1."""
    for name, value in (("RANK", "6"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "2"), ("LOCAL_WORLD_SIZE", "4"),
                        ("GROUP_RANK", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(Ranks, "_join", lambda self: None)
    r = Ranks.from_env()
    assert (r.rank, r.world_size, r.local_rank, r.per_node, r.node_rank, r.nodes) == (6, 8, 2, 4, 1, 2)
    assert (r.main, r.local_main) == (False, False)
    assert r.describe() == "rank 6 (node 1, local rank 2)"
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "4")
    r = Ranks.from_env()
    assert (r.main, r.local_main, r.node_rank) == (False, True, 1)  # builds node 1's caches, writes no output
    monkeypatch.delenv("GROUP_RANK")                                 # another launcher: the node from the ranks
    assert Ranks.from_env().node_rank == 4 // 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "four")
    with pytest.raises(ConfigError, match="LOCAL_WORLD_SIZE='four'"):
        Ranks.from_env()
    assert (Ranks(3, 4).per_node, Ranks(3, 4).node_rank, Ranks(3, 4).nodes) == (4, 0, 1)  # unset: one node


class ThreadRanks(Ranks):
    """One rank of a world whose ranks are threads of this process: ``gather`` is a real all-gather (a barrier
    and a shared list), so a collective's logic runs as it does across processes."""

    def __init__(self, rank: int, world: int, box: dict, node: int) -> None:
        super().__init__(rank, world, 0, local_world_size=1, node=node)
        self.box = box

    def gather(self, obj):
        self.calls = getattr(self, "calls", 0) + 1       # every rank makes the same calls in the same order
        self.box[(self.calls, self.rank)] = obj
        self.box["barrier"].wait()
        return [self.box[(self.calls, r)] for r in range(self.world_size)]


def run_ranks(folders: list, world: int) -> list:
    """check_shared on every rank (a thread each, rank r looking at ``folders[r]``): what each raised (or None)."""
    import threading

    box: dict = {"barrier": threading.Barrier(world)}
    errors: list = [None] * world

    def rank(r: int) -> None:
        try:
            ThreadRanks(r, world, box, node=r).check_shared(folders[r], what="the shard folder", fix="share it.")
        except ConfigError as e:
            errors[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


def test_a_folder_every_node_sees_passes_and_keeps_no_marker(tmp_path):
    shared = tmp_path / "shared" / "shards"
    assert run_ranks([shared] * 3, 3) == [None, None, None]
    assert shared.is_dir() and list(shared.iterdir()) == []   # created by rank 0, the marker removed


def test_a_folder_on_each_nodes_own_disk_is_refused_on_every_rank(tmp_path):
    """Nodes 1 and 2 see their own disk at the path (simulated: another folder each): every rank stops with the
    same line, naming the ranks and nodes that miss rank 0's marker; a stale marker of another run does not pass."""
    own = [tmp_path / f"node{r}" / "shards" for r in range(3)]
    own[2].mkdir(parents=True)
    (own[2] / ".drmix-shared.0123456789abcdef.tmp").write_text("0123456789abcdef")  # an earlier run's, on node 2
    errors = run_ranks(own, 3)
    assert all(isinstance(e, ConfigError) for e in errors)
    text = str(errors[0])
    assert text.startswith(f"{own[0]}: the shard folder is not one folder on every node: rank 1 (node 1), rank 2 "
                           "(node 2) do not see the marker rank 0 (node 0) wrote there")
    assert text.endswith("Fix: share it.")
    assert str(errors[1]).split(": ", 1)[1] == text.split(": ", 1)[1]  # each names the folder it looked at
    assert list(own[0].iterdir()) == []


def test_one_node_of_two_missing_is_named_alone(tmp_path):
    errors = run_ranks([tmp_path / "a", tmp_path / "a", tmp_path / "b"], 3)
    assert "rank 2 (node 2) does not see the marker" in str(errors[0])
    assert "rank 1" not in str(errors[0])


def test_a_folder_rank_0_cannot_create_is_one_line_on_every_rank(tmp_path):
    (tmp_path / "file").write_text("x")
    errors = run_ranks([tmp_path / "file" / "shards"] * 2, 2)
    assert all("the shard folder cannot be written by rank 0" in str(e) for e in errors)


def test_one_process_checks_nothing(tmp_path):
    Ranks().check_shared(tmp_path / "never", what="the shard folder", fix="x")
    assert not (tmp_path / "never").exists()


def test_the_main_process_is_global_rank_0_or_a_plain_process(monkeypatch):
    from drmix.retrieval.ranks import main_process

    monkeypatch.delenv("RANK", raising=False)
    assert main_process()
    for rank, main in (("0", True), ("1", False), ("8", False), ("", True)):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", "0")   # a node's first process is not the main one unless its RANK is 0
        assert main_process() is main, rank
