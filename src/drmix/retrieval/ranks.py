"""The processes of a ``torchrun`` / ``accelerate launch`` run: which one this is, and what they share.

Both launchers start one process per GPU (on one node or several) and describe it with the same
environment variables: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``.
:func:`launched` reads them; :class:`Ranks` joins the process group (``torch.distributed``, ``env://``:
NCCL when the process has a GPU, gloo on CPU) unless the caller already did, and gives the few
collectives sharded encoding needs: a barrier, and each rank's small result gathered to every rank. A
plain ``python`` process is a world of one and joins nothing.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

log = logging.getLogger(__name__)

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: how long a rank waits for the others at a barrier: the ranks' shares differ by up to one chunk of texts, but
#: GPUs of one node do not run at one speed for hours (a rank that died stops the launcher's other ranks at once)
WAIT_S = 2 * 3600


def launched() -> bool:
    """Whether this process was started by ``torchrun`` / ``accelerate launch`` (``RANK`` and
    ``WORLD_SIZE`` set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


@dataclass
class Ranks:
    """This process's place among the launched ones (rank 0 of 1 in a plain process)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    joined: bool = False  # this object initialised the process group (and destroys it on close)

    @classmethod
    def from_env(cls) -> Ranks:
        """Join the launcher's process group (a plain process: rank 0 of 1, nothing joined)."""
        if not launched():
            return cls()
        from drmix.errors import ConfigError

        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            local = int(os.environ.get("LOCAL_RANK", rank))
        except ValueError:
            raise ConfigError(f"RANK={os.environ.get('RANK')!r} and WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} "
                              "are not whole numbers.", fix="start the processes with torchrun or accelerate "
                              "launch, which set them.") from None
        if world < 1 or not 0 <= rank < world:
            raise ConfigError(f"RANK={rank} does not lie in WORLD_SIZE={world}.",
                              fix="start the processes with torchrun or accelerate launch, which set them.")
        ranks = cls(rank, world, local)
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
        return self.rank == 0

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

    def close(self) -> None:
        if self.joined:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.joined = False
