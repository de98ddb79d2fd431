"""drmix adapt under torchrun: rank 0 announces each stage it runs, the other ranks follow; corpus passes sharded
(model-keyed folders, deleted once merged), training stages run by every rank, nothing written off rank 0; and
two real gloo processes give the synthetic set and the selection's scores of one process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drmix.errors import ConfigError
from drmix.recipes import launch
from drmix.retrieval import shards


class FakeRanks:
    """The collectives of :class:`drmix.retrieval.ranks.Ranks` in one process: ``gather`` records what this rank
    sent and answers rank 0's part from ``inbox`` (a follower) or what it sent (rank 0)."""

    def __init__(self, rank: int, inbox=()) -> None:
        self.rank, self.world_size, self.local_rank = rank, 2, rank
        self.inbox, self.sent, self.barriers = list(inbox), [], 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def gather(self, obj):
        self.sent.append(obj)
        first = obj if self.main else self.inbox.pop(0)
        return [first, None]

    def barrier(self) -> None:
        self.barriers += 1

    def device(self):
        return None


@pytest.fixture
def as_rank(monkeypatch, tmp_path):
    def make(rank: int, inbox=()) -> FakeRanks:
        ranks = FakeRanks(rank, inbox)
        monkeypatch.setattr(launch, "_launched", launch.Launched(ranks, tmp_path / "run" / "shards"))
        return ranks
    return make


def _recorder(seen: list, value):
    def run(results):
        active = shards.active()
        seen.append((dict(results), None if active is None else (active.root.name, active.by_model),
                     shards.writes_here()))
        if active is not None:  # a corpus pass leaves its shards in the stage's folder
            active.root.mkdir(parents=True)
            (active.root / "rank-00000-of-00002.npy").write_bytes(b"x")
        return value
    return run


def test_one_process_runs_each_stage_as_it_is(monkeypatch):
    monkeypatch.setattr(launch, "_launched", None)
    seen: list = []
    assert launch.announced("synthetic", _recorder(seen, 7), launch.SHARDED)({"a": 1}) == 7
    assert seen == [({"a": 1}, None, True)]  # nothing sharded, this process writes
    launch.release()                           # nothing to tell


def test_rank_0_announces_and_shards_corpus_passes_then_deletes_their_shards(as_rank, tmp_path):
    ranks = as_rank(0)
    seen: list = []
    assert launch.announced("candidate size+synthetic", _recorder(seen, "m"), launch.EVERY)({"COCO": 1}) == "m"
    assert launch.announced("selection", _recorder(seen, "s"), launch.SHARDED)({"x": 2}) == "s"
    assert launch.announced("own", _recorder(seen, "o"), None)({}) == "o"
    launch.release()
    assert ranks.sent == [("candidate size+synthetic", {"COCO": 1}), ("selection", {"x": 2}), None]
    assert seen == [({"COCO": 1}, None, True),                 # training: every rank, as it is
                    ({"x": 2}, ("selection", True), True),     # a corpus pass: shards keyed by model and corpus
                    ({}, None, True)]                          # rank 0 alone, not announced
    assert ranks.barriers == 1
    assert not (tmp_path / "run" / "shards").exists()          # merged everywhere, then deleted


def test_a_corpus_pass_that_fails_keeps_its_shards_for_the_rerun(as_rank, tmp_path):
    ranks = as_rank(0)

    def killed(results):
        _recorder([], None)(results)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch.announced("synthetic", killed, launch.SHARDED)({})
    assert ranks.barriers == 0 and shards.active() is None
    assert (tmp_path / "run" / "shards" / "synthetic" / "rank-00000-of-00002.npy").exists()


def test_a_follower_runs_what_rank_0_announces_and_writes_nothing(as_rank, tmp_path):
    from drmix.recipes.stages import Stage

    inbox = [("synthetic", {}), ("candidate uniform", {"COCO": "c"}), None]
    ranks = as_rank(1, inbox)
    seen: list = []
    stages = [Stage(n, run=launch.announced(n, _recorder(seen, n), how))
              for n, how in (("synthetic", launch.SHARDED), ("COCO", launch.EVERY),
                             ("candidate uniform", launch.EVERY), ("own", None))]
    launch.follow(stages)
    assert seen == [({}, ("synthetic", True), False),          # sharded, and this rank writes no output
                    ({"COCO": "c"}, None, True)]               # COCO was reused by rank 0: not announced
    assert ranks.sent == [None, None, None] and ranks.barriers == 1
    assert (tmp_path / "run" / "shards" / "synthetic").exists()  # rank 0 deletes the shards, not a follower
    assert stages[3].run({}) is None                           # a stage of rank 0 alone: nothing here


def test_a_stage_this_rank_does_not_declare_is_refused(as_rank):
    as_rank(1, [("index", {})])
    with pytest.raises(ConfigError, match="rank 0 runs stage 'index', which rank 1 does not declare"):
        launch.follow([])


def test_a_launch_of_several_processes_checks_its_output_dir_is_shared_first(monkeypatch, tmp_path):
    """Every rank reads what rank 0's stages write in OUTPUT_DIR: before any stage the launched run checks that it is
    one folder on every node, and a refusal there stops the run with the fix naming --output-dir."""
    from drmix.retrieval.ranks import Ranks

    seen: list = []

    class Two(FakeRanks):
        def check_shared(self, folder, *, what, fix):
            seen.append((folder, what, fix))
            if folder == str(tmp_path / "local"):
                raise ConfigError(f"{what} is not one folder on every node.", fix=fix)

        def close(self):
            seen.append("closed")

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(Ranks, "from_env", classmethod(lambda cls: Two(0)))
    with launch.launched_recipe(str(tmp_path / "run")) as ranks:
        assert ranks.world_size == 2 and launch.launched_state().root == tmp_path / "run" / "shards"
    assert seen == [(str(tmp_path / "run"), "the output directory", launch.SHARED_FIX), "closed"]
    assert launch.SHARED_FIX.startswith("put --output-dir on a filesystem every node mounts at the same path")
    with pytest.raises(ConfigError, match="Fix: put --output-dir on a filesystem"):
        with launch.launched_recipe(str(tmp_path / "local")):
            pytest.fail("a stage ran in a folder the nodes do not share")
    assert launch.launched_state() is None and seen[-1] == "closed"


def test_a_launch_of_one_process_joins_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with launch.launched_recipe(tmp_path) as ranks:
        assert ranks is None and launch.launched_state() is None


def test_a_follower_builds_the_synthetic_set_unwritten_without_the_llm(tmp_path, monkeypatch):
    """A rank other than 0 takes its part of the teacher's passes and writes nothing: no synthetic/, no LLM."""
    from drmix.recipes.adapt import synthetic

    calls: list = []
    monkeypatch.setattr(shards, "writes_here", lambda: False)
    monkeypatch.setattr(synthetic, "_llm_backend", lambda *a: pytest.fail("a follower started the LLM"))
    monkeypatch.setattr("drmix.model.encoder.load_encoder", lambda *a, **kw: "teacher")
    monkeypatch.setattr(synthetic, "teacher_ranker", lambda teacher, name: "rank")
    monkeypatch.setattr("drmix.data.beir.read_corpus", lambda path: {"d1": {"text": "t"}})
    monkeypatch.setattr("drmix.augment.synthetic.build_corpus_synthetic",
                        lambda name, corpus, rank, **kw: calls.append((name, rank, kw["backend"]))
                        or type("Made", (), {"stats": {"kept": 1}})())
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"_id": "d1", "text": "t"}) + "\n")
    from drmix.recipes.adapt import AdaptConfig

    cfg = AdaptConfig(corpus=[str(tmp_path / "a.jsonl")], data=[str(tmp_path)], llm="smollm2")
    corpora = {"a": tmp_path / "a.jsonl", "b": tmp_path / "b.jsonl"}
    assert synthetic.build_synthetic(cfg, tmp_path / "run", corpora) == {"a": {"kept": 1}, "b": {"kept": 1}}
    assert calls == [("a", "rank", None), ("b", "rank", None)] and not (tmp_path / "run").exists()


def test_which_process_follows(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launch.follower() is False
    for rank, world, follows in (("1", "2", True), ("0", "2", False), ("0", "1", False), ("x", "2", False)):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("WORLD_SIZE", world)
        assert launch.follower() is follows


def test_the_command_on_a_follower_neither_claims_nor_reports(monkeypatch, tmp_path):
    from drmix.cli import adapt as cli_adapt
    from drmix.cli import pipeline
    from drmix.recipes import adapt

    calls: list = []
    monkeypatch.setattr(adapt, "run_adapt", lambda config: calls.append(config.run.output_dir))
    monkeypatch.setattr(pipeline, "_run_recipe", lambda *a: pytest.fail("a follower claimed the output"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"query": "q", "positive": "p"}) + "\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "1", "text": "t"}) + "\n")
    cli_adapt.run_adapt_command(None, {"corpus": [str(corpus)], "data": [str(data)],
                                       "output_dir": str(tmp_path / "out")})
    assert calls == [str(tmp_path / "out")] and not (tmp_path / "out").exists()


def _adapt(cmd: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DRMIX_CACHE": str(tmp / "cache"), "DRMIX_EMBEDDING_CACHE": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [1, 2])
def test_two_gloo_processes_give_the_synthetic_set_and_the_selection_of_one(tmp_path, tiny_model_path, nodes):
    """One process, then two (torchrun, gloo on CPU; on one node, or on two nodes of one process each with their own
    DRMIX_CACHE, tests/nodes.py): the synthetic set byte for byte, the candidates' synthetic dev scores and the
    choice; rank 1 wrote nothing of its own, and no shard is left."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_adapt import make_config

    from drmix.recipes.adapt import parse_candidate

    make_config(tmp_path, tiny_model_path)  # the corpora and collections, written once for both runs
    helper = str(Path(__file__).resolve().parents[1] / "helpers" / "ddp_adapt.py")
    candidates = "uniform,size+synthetic,tdro:reweight,audit"       # audit: a recipe launched inside adapt
    one = _adapt([sys.executable, helper, tiny_model_path, str(tmp_path), str(tmp_path / "one"), candidates],
                 tmp_path)
    args = [tiny_model_path, str(tmp_path), str(tmp_path / "two"), candidates]
    if nodes == 1:
        printed = _adapt([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          helper, *args], tmp_path).stdout
    else:
        from nodes import two_nodes

        launched = two_nodes(tmp_path, [args], script=Path(helper), timeout=900)
        assert [n.returncode for n in launched] == [0, 0], launched[0].stderr[-3000:] + launched[1].stderr[-3000:]
        printed = launched[0].stdout + launched[1].stdout
        for n in launched:  # each node tokenised into its own cache
            assert list((n.cache / "tokenized").iterdir())
    chosen = one.stdout.split("RESULT ")[1].split()[0]
    assert printed.count("RESULT ") == 2 and f"RESULT {chosen}" in printed and "RESULT none" in printed
    assert _files(tmp_path / "two" / "synthetic") == _files(tmp_path / "one" / "synthetic")
    for label in candidates.split(","):
        folder = parse_candidate(label).folder
        a = json.loads((tmp_path / "one" / folder / "select-dev.json").read_text())
        b = json.loads((tmp_path / "two" / folder / "select-dev.json").read_text())
        assert a["results"], label
        for corpus, scores in a["results"].items():
            assert b["results"][corpus] == pytest.approx(scores, abs=1e-6), (label, corpus)
    assert not (tmp_path / "two" / "shards").exists()
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
