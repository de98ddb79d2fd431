"""Run by tests/test_faults.py: a folder-replacing drmix command killed (os._exit) at each step of its swap.

Usage: python swap_kill.py OUT CHECK MODE STEP[,STEP...] -- DRMIX ARGS...

The libraries are imported once; every run of the command is a forked child (the parent never runs torch,
so forking is safe), killed at one step of :func:`drmix.io.atomic.atomic_dir` (``removing``: half-way through
deleting the previous folder). After each kill the parent records whether ``OUT`` is usable right away,
whether it equals the first complete build, and the hidden leftovers; a last complete run must remove
them. Prints one JSON object.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import drmix.cli  # noqa: F401 - the libraries, imported once before forking
from drmix.io import atomic


def run(argv: list[str], step: str | None, mode: str, out: Path) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            atomic._USE_EXCHANGE = mode == "exchange"

            def fault(name: str) -> None:
                if name == step:
                    os._exit(137)

            atomic._fault_point = fault
            if step == "removing":  # the previous folder after the swap, not an earlier kill's leftover
                earlier = {p for p, _ in atomic.swap_leftovers(out)}
                plain = atomic._remove

                def remove(p: Path) -> None:
                    if p in earlier:
                        return plain(p)
                    files = sorted(f for f in p.rglob("*") if f.is_file())
                    if files:
                        files[0].unlink()
                    os._exit(137)

                atomic._remove = remove
            try:
                drmix.cli.main(argv)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def snapshot(root: Path) -> str | None:
    if not root.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != "README.md":  # a card names the command line, the same here
            h.update(rel.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def usable(out: Path, check: str) -> str:
    """"ok", or why the folder at ``out`` cannot be used."""
    try:
        if check == "index":
            from drmix.retrieval.index import DenseIndex

            DenseIndex.load(out)
        elif check == "multicorpus":
            from drmix.data.beir import load_beir
            from drmix.data.entity_matching import read_manifest

            for d in read_manifest(out)["corpus_dirs"].values():
                load_beir(d, split="test")
        from drmix.outputs import KINDS, _foreign, is_output_of

        kind = {"index": "index", "multicorpus": "multicorpus", "localdocs": "localdocs", "model": "model"}[check]
        if not is_output_of(out, kind):
            return f"not a {kind} output"
        foreign = _foreign(out, KINDS[kind])  # its own files only (no partial or foreign ones)
        if foreign:
            return f"foreign files {foreign}"
        if check == "model":
            json.loads((out / "drmix_prune.json").read_text())
            if not (out / "model.safetensors").stat().st_size:
                return "empty weights"
        return "ok"
    except Exception as e:  # noqa: BLE001 - reported to the test
        return f"{type(e).__name__}: {e}"


def checked(out: Path, check: str) -> str:
    """:func:`usable` in a forked child: the parent stays free of torch and OpenMP threads, so forks stay safe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.write(w, usable(out, check).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        text = f.read().decode()
    os.waitpid(pid, 0)
    return text


def main() -> None:
    out, check, mode, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    argv = sys.argv[sys.argv.index("--") + 1:]
    report: dict = {"first": run(argv, None, mode, out)}
    ref = snapshot(out)
    report["kills"] = []
    for step in steps:
        rc = run(argv, step, mode, out)
        hidden = sorted(p.name for p in out.parent.iterdir() if p.name.startswith("." + out.name + "."))
        exists = out.is_dir()
        state = checked(out, check) if exists else "missing"
        same = snapshot(out) == ref
        if not exists:  # the rename fallback's one gap: the next run of the command recovers it
            atomic.recover_swap(out)
            state, same = "recovered:" + checked(out, check), snapshot(out) == ref
        report["kills"].append({"step": step, "rc": rc, "state": state, "same": same, "hidden": hidden})
    report["last"] = run(argv, None, mode, out)
    report["last_state"] = checked(out, check)
    report["last_same"] = snapshot(out) == ref
    report["hidden_after"] = sorted(p.name for p in out.parent.iterdir() if p.name.startswith("." + out.name + "."))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
