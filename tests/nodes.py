"""Two nodes on one machine, for the tests: two ``torchrun`` launchers (``--nnodes 2 --nproc-per-node 1``, c10d
rendezvous on 127.0.0.1 at a free port), each started in its own working directory with its own ``TMPDIR`` and
``DRMIX_CACHE`` -- what two nodes that share no disk but the one the test names look like. A relative path on
the command line is then a node-local folder, an absolute one under the test's folder a shared one."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

HELPER = Path(__file__).resolve().parent / "helpers" / "nodes_cli.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    """One launcher: its folder (working directory, ``tmp/``, ``cache/``) and what it printed."""

    root: Path
    stdout: str = ""
    stderr: str = ""
    returncode: int | None = None

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def codes(self) -> dict[int, tuple[int, str]]:
        """``{command index: (global rank of this node's process, exit code)}``."""
        return {int(i): (int(r), c) for i, r, c in re.findall(r"^EXIT (\d+) RANK (\d+) CODE (\S+)$", self.stdout,
                                                               re.M)}


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    # the launchers start in their own folders: a relative PYTHONPATH (PYTHONPATH=src) would point nowhere
    env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p)
    env.update(OMP_NUM_THREADS="1", TMPDIR=str(root / "tmp"), DRMIX_CACHE=str(root / "cache"),
               DRMIX_EMBEDDING_CACHE="0")
    return env


def two_nodes(tmp_path: Path, commands: list[list[str]], *, script: Path | None = None, sort_chunk: int | None = 4,
              timeout: float = 300) -> list[Node]:
    """Run ``commands`` (drmix command lines, one after the other in the same processes) on two nodes of one process
    each; or, with ``script``, that script with ``commands[0]`` as its arguments. Both launchers are stopped (their
    process groups killed) however this returns."""
    if script is None:
        args = [str(HELPER), *(["--sort-chunk", str(sort_chunk)] if sort_chunk else [])]
        for i, command in enumerate(commands):
            args += (["---"] if i else []) + command
    else:
        args = [str(script), *commands[0]]
    port, run_id = free_port(), uuid.uuid4().hex[:12]
    nodes = [Node(tmp_path / f"node{r}") for r in range(2)]
    procs = []
    try:
        for r, node in enumerate(nodes):
            for sub in ("tmp", "cache"):
                (node.root / sub).mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                   "--node-rank", str(r), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                   "--rdzv-id", run_id, *args]
            procs.append(subprocess.Popen(cmd, cwd=node.root, env=_env(node.root), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
        deadline = time.monotonic() + timeout
        for node, proc in zip(nodes, procs):
            try:
                node.stdout, node.stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
                node.returncode = proc.returncode
            except subprocess.TimeoutExpired:
                break
    finally:
        for node, proc in zip(nodes, procs):  # never leave a launcher or its workers behind
            if node.returncode is None:
                node.stdout, node.stderr = _stop(proc)
                node.stderr += f"\n[stopped after {timeout:.0f} s]"
    return nodes


def _stop(proc: subprocess.Popen) -> tuple[str, str]:
    """Stop a launcher (SIGTERM: torchrun then stops its workers, each in a session of its own; SIGKILL to its
    process group after 30 s); what it printed."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            return proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return "", ""


def by_rank(nodes: list[Node], command: int = 0) -> dict[int, Node]:
    """The nodes by the global rank their process had in ``command`` (c10d numbers the nodes as they arrive)."""
    return {node.codes()[command][0]: node for node in nodes}


def one_line(text: str) -> str:
    return " ".join(text.split())
