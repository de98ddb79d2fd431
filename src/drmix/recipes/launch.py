"""A recipe under ``torchrun`` / ``accelerate launch`` (``drmix adapt``, ``drmix mixture audit``): rank 0 runs the
recipe, every other rank follows it.

Rank 0 does what one process does: the stage graph (:func:`drmix.recipes.stages.run_stages`: reuse, records,
the progress lines), the report and the model copy. Before it runs a stage it announces the stage, with what the
stages before it returned, to the other ranks (:func:`announced`), and every rank runs that stage's ``run``:

* a **corpus pass** (:data:`SHARDED`: the teacher's pass over each corpus for the round-trip filter and the hard
  negatives, tDRO stage 1's negative mining, each candidate's selection pass on the synthetic dev sub-corpus, the
  final evaluation's passes) encodes each corpus in shards over the ranks, exactly as ``drmix index|eval|mine``
  do under torchrun (:func:`drmix.retrieval.shards.sharded_corpora`): every rank writes its shard atomically
  under ``OUTPUT_DIR/shards/<stage>/<model>-<corpus>/``, rank 0 checks and merges them, and every rank gets the
  merged rows (byte-identical to one process's). A killed pass resumes from the shards written; the stage's
  shards are deleted once every rank has its merged rows;
* a **training stage** (:data:`EVERY`: COCO, the fine-tunings, tDRO stage 1's training, the audit's short runs)
  is distributed by accelerate as ``drmix train`` is under torchrun (DDP: the global batch split over the ranks,
  rank 0 writes).

A recipe run as a stage of another (adapt's ``audit`` candidate runs the whole audit, a stage every rank runs)
is launched inside the outer one: it takes the same ranks, its own shards folder, and announces its own stages
until it releases them; the outer recipe's announcements then go on.

A stage rank 0 reuses is not announced, so no rank runs it; a stage declared without either (``how=None``) runs on
rank 0 alone while the others wait for the next announcement. Ranks other than 0 write no stage output, summary,
report or model copy (:func:`drmix.retrieval.shards.writes_here` is false on them), and return None.
A plain process, or a launch of one process, runs as it always did: nothing is announced, nothing is sharded.
On several nodes ``OUTPUT_DIR`` must be one folder on every node (every rank reads the synthetic set, the models
and the shards rank 0's stages write there): :func:`launched_recipe` checks it first
(:meth:`drmix.retrieval.ranks.Ranks.check_shared`) and refuses a folder some node sees on its own disk.
"""
from __future__ import annotations

import contextlib
import logging
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: a stage every rank runs as it is (training: accelerate splits the batch over the ranks)
EVERY = "every"
#: a stage every rank runs with its corpus passes encoded in shards over the ranks
SHARDED = "sharded"
#: the folder of ``output_dir`` the corpus passes keep their shards in while they run
SHARDS = "shards"
#: the fix of an output folder that is not one folder on every node
SHARED_FIX = ("put --output-dir on a filesystem every node mounts at the same path (NFS, Lustre, ...): every rank "
              "reads the synthetic set, the models and the shards rank 0's stages write there")


@dataclass
class Launched:
    """The ranks of a launched ``drmix adapt`` (more than one process) and where its shards go."""

    ranks: Any          # drmix.retrieval.ranks.Ranks
    root: Path          # OUTPUT_DIR/shards


_launched: Launched | None = None


def launched_state() -> Launched | None:
    """The launched run in force (:func:`launched_recipe`), or None (one process)."""
    return _launched


def main_rank() -> bool:
    """Whether this process writes a launched recipe's outputs: one process, or rank 0 of a launch."""
    return _launched is None or _launched.ranks.main


def follower() -> bool:
    """Whether this process is a rank other than 0 of a launch of several processes (read from the launcher's
    environment, before any process group is joined)."""
    import os

    from drmix.retrieval.ranks import launched

    if not launched():
        return False
    try:
        return int(os.environ["WORLD_SIZE"]) > 1 and int(os.environ["RANK"]) != 0
    except ValueError:
        return False


@contextlib.contextmanager
def launched_recipe(output_dir: str | Path) -> Iterator[Any]:
    """Under torchrun / accelerate launch with several processes: join the ranks for the run (yields them; inside
    a launched recipe, the outer recipe's ranks, left joined); else yields None and changes nothing."""
    global _launched
    from drmix.retrieval.ranks import Ranks, launched

    if not launched():
        yield None
        return
    outer = _launched
    ranks = outer.ranks if outer is not None else Ranks.from_env()   # inside another recipe: its ranks
    if ranks.world_size == 1:
        yield None
        return
    _launched = Launched(ranks, Path(output_dir).expanduser() / SHARDS)
    try:
        ranks.check_shared(output_dir, what="the output directory", fix=SHARED_FIX)
        yield ranks
    finally:
        _launched = outer
        if outer is None:
            ranks.close()


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "stage"


def run_here(state: Launched, name: str, run: Callable[[dict[str, Any]], Any], results: dict[str, Any],
             how: str) -> Any:
    """This rank's part of stage ``name``: its corpus passes in shards under ``root/<stage>/`` (:data:`SHARDED`),
    or ``run`` as it is (:data:`EVERY`). After a sharded stage every rank waits for the others, then rank 0
    deletes the stage's shards (a stage that failed keeps them, so that the rerun resumes from them)."""
    from drmix.retrieval.shards import sharded_corpora

    if how != SHARDED:
        return run(results)
    folder = state.root / _slug(name)
    with sharded_corpora(state.ranks, folder, by_model=True, shared_fix=SHARED_FIX):
        value = run(results)
    state.ranks.barrier()  # every rank has merged its rows from the shards
    if state.ranks.main:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            state.root.rmdir()  # empty: no other stage's shards left
    return value


def announced(name: str, run: Callable[[dict[str, Any]], Any], how: str | None) -> Callable[[dict[str, Any]], Any]:
    """``run`` of stage ``name`` as the launched ranks run it (see the module docstring): in one process ``run``
    itself; on rank 0 the stage is announced, then run here; on the other ranks (called by :func:`follow`) run
    here. ``how``: :data:`SHARDED`, :data:`EVERY`, or None (rank 0 alone)."""
    def stage_run(results: dict[str, Any]) -> Any:
        state = _launched
        if state is None:
            return run(results)
        if how is None:
            return run(results) if state.ranks.main else None
        if state.ranks.main:
            state.ranks.gather((name, results))  # the announcement; the other ranks wait in follow()
        return run_here(state, name, run, results, how)

    stage_run.how = how  # type: ignore[attr-defined]
    return stage_run


def follow(stages: Sequence[Any]) -> None:
    """A rank other than 0: run each stage rank 0 announces, with what rank 0's earlier stages returned, until
    rank 0 says the stages are done (:func:`release`)."""
    state = _launched
    if state is None or state.ranks.main:
        return
    runs = {s.name: s.run for s in stages}
    while True:
        message = state.ranks.gather(None)[0]
        if message is None:
            return
        name, results = message
        if runs.get(name) is None:  # the same command on every rank declares the same stages
            from drmix.errors import ConfigError

            raise ConfigError(f"rank 0 runs stage {name!r}, which rank {state.ranks.rank} does not declare.",
                              fix="start every rank with the same command and config (torchrun --nproc-per-node "
                                  "N -m drmix adapt ...).")
        log.debug("rank %d: %s", state.ranks.rank, name)
        runs[name](results)


def release() -> None:
    """Rank 0, once every stage ran: the other ranks stop following (they write nothing more)."""
    state = _launched
    if state is not None and state.ranks.main:
        state.ranks.gather(None)
