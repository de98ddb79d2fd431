"""The processes of a ``torchrun`` / ``accelerate launch`` run: which one this is, and what they share.

Both launchers start one process per GPU (on one node or several) and describe it with the same
environment variables: ``RANK`` and ``WORLD_SIZE`` (the *global* rank among every process of every node),
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` (the rank among the processes of this node, and how many there are),
``GROUP_RANK`` (the node's rank among the nodes), ``MASTER_ADDR``, ``MASTER_PORT``. :func:`launched` reads
them; :class:`Ranks` joins the process group (``torch.distributed``, ``env://``: NCCL when the process has a
GPU, gloo on CPU) unless the caller already did, and gives the few collectives sharded encoding needs: a
barrier, and each rank's small result gathered to every rank. A plain ``python`` process is a world of one and
joins nothing.

The two kinds of rank are kept apart: the *global* rank 0 (:attr:`Ranks.main`) writes a command's outputs; the
*local* rank selects the GPU (``cuda:LOCAL_RANK``) and the local rank 0 of each node (:attr:`Ranks.local_main`)
builds the caches a node keeps for itself (``DRMIX_CACHE``). A folder that every rank reads what another rank
wrote in -- a shard folder, a training run's output directory, ``drmix adapt``'s output directory -- must be one
folder on every node (a filesystem they all mount at the same path): :meth:`Ranks.check_shared` proves it
before any work with a marker file rank 0 writes and every other rank reads, and stops every rank with one line
naming the ranks and nodes that do not see it.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

# the marker check_shared writes (.drmix-shared.<token>.tmp: a killed run's is a temporary; the output contract does
# not count it as an entry of the folder)
from drmix.outputs import SHARED_MARKER

log = logging.getLogger(__name__)

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
#: how long a rank waits for the others at a barrier: the ranks' shares differ by up to one chunk of texts, but
#: GPUs of one node do not run at one speed for hours (a rank that died stops the launcher's other ranks at once)
WAIT_S = 2 * 3600


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def launched() -> bool:
    """Whether this process was started by ``torchrun`` / ``accelerate launch`` (``RANK`` and
    ``WORLD_SIZE`` set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def main_process() -> bool:
    """Whether this process writes a command's outputs and prints its results: global rank 0 of a launch (``RANK``),
    or a plain process; read from the launcher's environment, without joining anything."""
    try:
        return int(os.environ.get("RANK", "0") or 0) == 0
    except ValueError:
        return True


@dataclass
class Ranks:
    """This process's place among the launched ones (rank 0 of 1 in a plain process)."""

    rank: int = 0          # global: among every process of every node
    world_size: int = 1
    local_rank: int = 0    # among the processes of this node
    joined: bool = False  # this object initialised the process group (and destroys it on close)
    local_world_size: int | None = None  # processes on this node (None: every process, one node)
    node: int | None = None              # this node's rank among the nodes (None: from the ranks)

    @classmethod
    def from_env(cls) -> Ranks:
        """Join the launcher's process group (a plain process: rank 0 of 1, nothing joined)."""
        if not launched():
            return cls()
        from drmix.errors import ConfigError

        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            local = int(os.environ.get("LOCAL_RANK", rank))
            per_node = _env_int("LOCAL_WORLD_SIZE")
            node = _env_int("GROUP_RANK")
        except ValueError:
            shown = ", ".join(f"{k}={os.environ.get(k)!r}" for k in ENV[:5] if k in os.environ)
            raise ConfigError(f"{shown}: not whole numbers.", fix="start the processes with torchrun or accelerate "
                              "launch, which set them.") from None
        if world < 1 or not 0 <= rank < world:
            raise ConfigError(f"RANK={rank} does not lie in WORLD_SIZE={world}.",
                              fix="start the processes with torchrun or accelerate launch, which set them.")
        ranks = cls(rank, world, local, local_world_size=per_node, node=node)
        if world > 1:
            ranks._join()
        return ranks

    def _join(self) -> None:
        import torch
        import torch.distributed as dist

        if dist.is_initialized():
            return
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", 0) or 0)
        if torch.cuda.is_available() and per_node > torch.cuda.device_count():
            from drmix.errors import ConfigError

            gpus = torch.cuda.device_count()
            raise ConfigError(f"{per_node} processes on this node but {gpus} GPU{'s' if gpus != 1 else ''}: each "
                              "process encodes on a GPU of its own.",
                              fix=f"start {gpus} process{'es' if gpus != 1 else ''} per node "
                                  f"(torchrun --nproc-per-node {gpus}).")
        if backend == "nccl":
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
        dist.init_process_group(backend=backend, init_method="env://", timeout=timedelta(seconds=WAIT_S))
        self.joined = True
        log.info("rank %d of %d joined the process group (%s)", self.rank, self.world_size, backend)

    @property
    def main(self) -> bool:
        """Global rank 0: the process that writes a command's outputs."""
        return self.rank == 0

    @property
    def local_main(self) -> bool:
        """Local rank 0 of this node: the process that builds the node's own caches."""
        return self.local_rank == 0

    @property
    def per_node(self) -> int:
        """Processes on this node (``LOCAL_WORLD_SIZE``; every process when it is not set)."""
        return self.local_world_size or self.world_size

    @property
    def node_rank(self) -> int:
        """This node's rank among the nodes (``GROUP_RANK``, else ``RANK // LOCAL_WORLD_SIZE``)."""
        return self.node if self.node is not None else self.rank // self.per_node

    @property
    def nodes(self) -> int:
        """How many nodes the processes span (``WORLD_SIZE / LOCAL_WORLD_SIZE``, rounded up)."""
        return -(-self.world_size // self.per_node)

    def describe(self) -> str:
        """``rank R (node N, local rank L)``: where this process is, in words for a message."""
        return f"rank {self.rank} (node {self.node_rank}, local rank {self.local_rank})"

    def device(self) -> str | None:
        """The GPU of this rank (``cuda:LOCAL_RANK``) when launched on GPUs, else None (keep the model's)."""
        import torch

        if self.world_size > 1 and torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return None

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (small, picklable), in rank order, on every rank."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def check_shared(self, folder: str | Path, *, what: str, fix: str) -> None:
        """A collective (every rank calls it): that ``folder`` is one folder on every node. Rank 0 creates it and
        writes a marker with a fresh random token in it; every rank reads the marker at its own ``folder`` (the same
        path, or what this process's environment makes of it, e.g. ``$DRMIX_CACHE``); then rank 0 removes it. A rank
        that does not find rank 0's token (a node's own disk at that path) stops every rank with one
        :class:`~drmix.errors.ConfigError` naming ``what``, the folder, the ranks and nodes that do not see it, and
        ``fix``. A world of one checks nothing."""
        if self.world_size == 1:
            return
        import secrets

        folder = Path(folder).expanduser().absolute()  # the message names where this process looked
        token = problem = None
        if self.main:
            token = secrets.token_hex(8)
            try:
                folder.mkdir(parents=True, exist_ok=True)
                for stale in folder.glob(SHARED_MARKER.format("*")):  # left by a killed check
                    stale.unlink(missing_ok=True)
                (folder / SHARED_MARKER.format(token)).write_text(token, encoding="utf-8")
            except OSError as e:
                problem = f"cannot be written by rank 0 ({e.strerror or e})"
        token, problem = self.gather((token, problem))[0]  # after rank 0's write: every rank may look
        if problem is None:
            try:
                seen = (folder / SHARED_MARKER.format(token)).read_text(encoding="utf-8") == token
            except OSError:
                seen = False
            views = self.gather((seen, self.node_rank))
            if self.main:
                (folder / SHARED_MARKER.format(token)).unlink(missing_ok=True)
            blind = [(rank, node) for rank, (ok, node) in enumerate(views) if not ok]
            if blind:
                listed = ", ".join(f"rank {r} (node {n})" for r, n in blind)
                problem = (f"is not one folder on every node: {listed} do{'es' if len(blind) == 1 else ''} not see "
                           f"the marker rank 0 (node {views[0][1]}) wrote there")
        if problem is not None:
            from drmix.errors import ConfigError

            raise ConfigError(f"{what} {problem}; every rank reads what the others write in it.", path=folder,
                              fix=fix)

    def close(self) -> None:
        if self.joined:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.joined = False
