"""A local Milvus standalone server on free ports, from the ``milvus`` package (``pip install milvus``: the
Milvus 2.3 standalone binary with its embedded etcd and local storage, the server behind ``milvus-server``).

For trying drmix's server path on one machine, and for the tests and benchmarks that need a real server:
``with LocalMilvus(data_dir) as server: ... server.uri ...``. Every port the server opens (the proxy, its
internal port, the coordinators' and nodes' gRPC ports, the metrics/health port, the embedded etcd's client
and peer ports) is picked free and unique, so two servers (two test sessions, a CI job beside a developer's)
never collide; its data, configuration and logs live in ``data_dir``, removed by :meth:`LocalMilvus.remove`.
The server process dies with the process that started it (Linux ``PR_SET_PDEATHSIG``), so a killed test
session leaves no server behind.

The ``milvus-server`` command line picks its ports from the defaults upwards (19530, 2379, ...) and always
opens etcd's peer port 2380; this module writes the embedded etcd's own configuration
(``etcd.config.path``) so that port is free too. Hand-written: the ``milvus`` package's ``MilvusServer``
offers neither.
"""
from __future__ import annotations

import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from drmix.errors import DrmixError

#: the ports the ``milvus`` package's configuration template names (``*_port`` keys)
PORT_KEYS = ("etcd_port", "root_coord_port", "proxy_port", "proxy_internal_port", "query_coord_port",
             "query_node_port", "index_coord_port", "index_node_port", "data_coord_port", "data_node_port")
#: ports are drawn below Linux's ephemeral range (32768-60999), where outgoing connections take theirs
PORT_RANGE = (20000, 32000)


class MilvusStartError(DrmixError):
    """The local Milvus server did not start (the package is missing, or the server exited or timed out)."""


def free_ports(n: int, *, rng: random.Random | None = None) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 and on every address, drawn at random from
    :data:`PORT_RANGE` (held open together while drawn, so they differ)."""
    rng = rng or random.Random()
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(2000):
            if len(ports) == n:
                break
            port = rng.randrange(*PORT_RANGE)
            if port in ports:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            ports.append(port)
    finally:
        for s in held:
            s.close()
    if len(ports) < n:
        raise MilvusStartError(f"found {len(ports)} of the {n} free ports a Milvus server needs.",
                               fix="free some ports between 20000 and 32000.")
    return ports


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class LocalMilvus:
    """A Milvus standalone server of the ``milvus`` package, on free ports, its data in ``data_dir``."""

    def __init__(self, data_dir: str | Path, *, authorization: bool = False, timeout: float = 300.0,
                 settings: dict[str, Any] | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.authorization = authorization
        self.settings = dict(settings or {})  # milvus.yaml keys present in the package's template (dotted)
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.ports: dict[str, int] = {}
        self.version = ""

    @property
    def port(self) -> int:
        return self.ports["proxy_port"]

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _config(self) -> Any:
        try:
            import milvus
        except ImportError as e:
            raise MilvusStartError(f"the milvus package is not installed ({e}).",
                                   fix="pip install 'drmix[milvus-server]' (or pip install milvus).") from None
        packaged = Path(milvus.__file__).parent / "data" / "config.yaml.template"
        text = packaged.read_text(encoding="utf-8")
        anchor = "    dir: {{ etcd_data_dir }}\n"
        if anchor not in text:
            raise MilvusStartError(f"the milvus package {milvus.__version__} has a configuration template drmix does "
                                   "not know.", fix="pip install 'milvus>=2.3.5,<2.4'.")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        template = self.data_dir / "milvus.yaml.template"
        template.write_text(text.replace(anchor, anchor + "  config:\n    path: {{ etcd_config_path }}\n"),
                            encoding="utf-8")
        config = milvus.MilvusServerConfig(template=str(template), data_dir=str(self.data_dir))
        config.glog_conf_file = str(packaged.parent / "glog.conf")
        ports = free_ports(len(PORT_KEYS) + 2)
        self.ports = dict(zip((*PORT_KEYS, "metrics_port", "etcd_peer_port"), ports))
        config.update(**{k: self.ports[k] for k in PORT_KEYS})
        etcd = self.data_dir / "etcd.yaml"
        client, peer = f"http://127.0.0.1:{self.ports['etcd_port']}", f"http://127.0.0.1:{self.ports['etcd_peer_port']}"
        etcd.write_text(f"name: default\nlisten-client-urls: {client}\nadvertise-client-urls: {client}\n"
                        f"listen-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n"
                        f"initial-cluster: default={peer}\n", encoding="utf-8")
        config.set("etcd_config_path", str(etcd))
        config.set("authorization_enabled", self.authorization)
        config.set("etcd_log_level", "warn")
        for key, value in self.settings.items():
            config.set(key, value)
        config.resolve()
        return milvus, config

    def start(self) -> LocalMilvus:
        milvus, config = self._config()
        milvus._initialize_data_files(str(self.data_dir))
        exe = self.data_dir / "bin" / "milvus"
        env = {**os.environ, "DEPLOY_MODE": "STANDALONE", "METRICS_PORT": str(self.ports["metrics_port"]),
               "MILVUS_RUN_DIR": str(self.data_dir / "run"),
               "LD_LIBRARY_PATH": ":".join(filter(None, [str(exe.parent), os.environ.get("LD_LIBRARY_PATH")]))}
        logs = self.data_dir / "logs"
        logs.mkdir(exist_ok=True)
        with open(logs / "milvus-stdout.log", "wb") as out, open(logs / "milvus-stderr.log", "wb") as err:
            self.proc = subprocess.Popen([str(exe), "run", "standalone"], cwd=self.data_dir, env=env, stdout=out,
                                         stderr=err, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise
        self.version = milvus.__version__
        return self

    def _wait(self) -> None:
        url = f"http://127.0.0.1:{self.ports['metrics_port']}/healthz"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                tail = (self.data_dir / "logs" / "milvus-stderr.log").read_text(errors="replace")[-400:].strip()
                rc = self.proc.returncode if self.proc is not None else None
                raise MilvusStartError(f"the Milvus server exited while starting (rc {rc}): "
                                       f"{tail.splitlines()[-1] if tail else 'no output'}.",
                                       fix=f"read its logs in {self.data_dir / 'logs'}.")
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    if b"OK" in resp.read():
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.25)
        raise MilvusStartError(f"the Milvus server did not answer within {self.timeout:.0f} s.",
                               fix=f"read its logs in {self.data_dir / 'logs'}, or give it more time.")

    def stop(self, grace: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``grace`` seconds)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)

    def remove(self) -> None:
        """Stop the server (no graceful shutdown: its data goes) and delete its data folder."""
        self.stop(grace=1.0)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalMilvus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
