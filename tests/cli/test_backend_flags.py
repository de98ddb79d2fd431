"""The index backends' choices and parameters as drmix index options, read from the registry."""
from __future__ import annotations

import inspect

from drmix.cli.backend_flags import PREFIX, kind_help, location_help, param_options, with_backend_options


def test_one_flag_per_parameter_name_naming_its_backends_and_their_defaults():
    options = {p.name[len(PREFIX):]: p.default for p in param_options()}
    assert options["nprobe"].param_decls == ("--nprobe",) and options["M"].param_decls == ("--hnsw-m",)
    assert options["nprobe"].help == ("memory, faiss-disk, milvus: IVF: clusters searched per query.  [default: 16 "
                                      "(memory), 32 (faiss-disk, milvus)]")
    assert options["rerank"].help.startswith("faiss-disk: ivf-pq: re-score") and options["rerank"].min == 0
    assert options["nlist"].help.endswith("(default 4*sqrt(n), at most n/39).")          # no default: none shown
    assert all(o.default is None for o in options.values())                              # not given: the backend's
    assert kind_help().startswith("Index type. memory: flat (default), hnsw, ivf; faiss-disk: ivf-pq (default)")
    assert location_help().startswith("An index: a folder written by drmix index (memory, faiss-disk), or a Milvus "
                                      "collection as PATH.db#COLLECTION")


def test_the_command_gets_the_given_parameters_only():
    seen = {}

    def command(backend: str = "memory", kind: str | None = None, params: dict | None = None) -> None:
        seen.update(backend=backend, kind=kind, params=params)

    wrapped = with_backend_options(command)
    names = list(inspect.signature(wrapped).parameters)
    assert names[:2] == ["backend", "kind"] and f"{PREFIX}nprobe" in names and "params" not in names
    enum = inspect.signature(wrapped).parameters["backend"].annotation
    wrapped(backend=enum("faiss-disk"), kind=None, **{f"{PREFIX}nprobe": 8, f"{PREFIX}rerank": None})
    assert seen == {"backend": "faiss-disk", "kind": None, "params": {"nprobe": 8}}
