"""A local Milvus server of the ``milvus`` package on free ports, started here with authorization on: the ports it
opens are the ones drawn, and drmix reaches it with the token in MILVUS_TOKEN, refuses a wrong one in one line and
writes the token nowhere."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_helpers import run
from drmix.data.beir import write_beir
from milvus_helpers import local_milvus

pytest.importorskip("pymilvus")
SECRET = "Zq7-not-the-default-9Kx"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from pymilvus import MilvusClient

    with local_milvus(tmp_path_factory.mktemp("milvus-auth"), authorization=True) as server:
        MilvusClient(uri=server.uri, token="root:Milvus").update_password("root", "Milvus", SECRET)
        yield server


def _listening(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (/proc/PID/fd's sockets in /proc/net/tcp and tcp6, state 0A)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


def test_every_port_the_server_opens_is_one_drawn_free(secured):
    from drmix.retrieval.backends.milvus_local import PORT_RANGE

    drawn = set(secured.ports.values())
    assert len(drawn) == len(secured.ports)  # all different
    assert all(PORT_RANGE[0] <= p < PORT_RANGE[1] for p in drawn)
    opened = _listening(secured.pid)
    # not Milvus's defaults (19530, 2379, 2380, 9091, ...): two servers on one machine never meet
    assert secured.port in opened and secured.ports["etcd_peer_port"] in opened and opened <= drawn


def test_the_token_comes_from_milvus_token_only_and_is_written_nowhere(secured, tiny_model_path, tmp_path, capsys,
                                                                          monkeypatch):
    from drmix.retrieval.backends import milvus

    data = write_beir(tmp_path / "toy", {f"d{i}": {"title": "t", "text": f"cat {i}"} for i in range(30)},
                      {"q1": "cat 3"}, {"test": {"q1": {"d3": 1}}})
    monkeypatch.setattr(milvus, "_clients", {})
    monkeypatch.delenv("MILVUS_TOKEN", raising=False)
    code, _, err = run(["index", "--corpus", str(data), "--backend", "milvus", "--uri", secured.uri, "--model",
                        tiny_model_path], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and f"Milvus at {secured.uri} refused the token" in lines[0], err
    monkeypatch.setenv("MILVUS_TOKEN", "root:wrong-password")
    code, _, err = run(["search", "--index", f"{secured.uri}#toy", "-q", "cat"], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "refused the token" in lines[0] and "wrong-password" not in err
    monkeypatch.setenv("MILVUS_TOKEN", f"root:{SECRET}")
    out = tmp_path / "eval"
    said = []
    for argv in (["index", "--corpus", str(data), "--backend", "milvus", "--uri", secured.uri, "--model",
                  tiny_model_path, "-v"],
                 ["search", "--index", f"{secured.uri}#toy", "-q", "cat 3", "--json"],
                 ["eval", "--index", f"{secured.uri}#toy", "--data", str(data), "--output", str(out), "-v"]):
        code, stdout, err = run(argv, capsys)
        assert code in (0, None), err
        said += [stdout, err]
    assert json.loads(said[2])["hits"][0]["doc_id"] == "d3"
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    meta = milvus.client(secured.uri).describe_collection("toy")["properties"]
    for text in [*said, *written, json.dumps(meta)]:
        assert SECRET not in text
