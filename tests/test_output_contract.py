"""The output contract (drmix.outputs, docs/outputs.md): every writing command against every situation.

Each command is run through the CLI with its output pointed at a user's file, a folder with foreign content,
one of its inputs, a folder inside an input, a folder containing an input, and (where the command replaces
or resumes only with a flag) its own earlier output. Every case must end in a one-line error before any
work starts, and every byte that existed before must still be there, unchanged.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drmix.cli import app
from drmix.data.beir import write_beir
from drmix.errors import DrmixError
from drmix.io.atomic import atomic_dir

CORPUS = {"a": {"title": "A", "text": "alpha text here"}, "b": {"title": "B", "text": "beta text there"}}


def _world(tmp: Path) -> dict[str, Path]:
    """Inputs every command can read: a BEIR folder, a collection, two evaluations, an index folder, a model."""
    w = {"data": write_beir(tmp / "data", CORPUS, {"q": "alpha"}, {"test": {"q": {"a": 1}}})}
    w["coll"] = tmp / "coll.jsonl"
    w["coll"].write_text(json.dumps({"query": "alpha", "positive": "alpha text here", "negatives": ["beta"]}) + "\n")
    w["coll2"] = tmp / "coll2.jsonl"
    w["coll2"].write_text(json.dumps({"query": "beta", "positive": "beta text there"}) + "\n")
    for name in ("ea", "eb"):
        (tmp / name).mkdir()
        (tmp / name / "eval.json").write_text(json.dumps({"model": name, "split": "test", "results": {"d": {}},
                                                          "per_query": {"d": {"q": {"ndcg@10": 0.5}}}}))
        w[name] = tmp / name
    w["idx"] = tmp / "idx"
    w["idx"].mkdir()
    (w["idx"] / "meta.json").write_text("{}")
    w["queries"] = tmp / "queries.txt"
    w["queries"].write_text("alpha\n")
    w["lm"] = tmp / "lm"
    w["lm"].mkdir()
    (w["lm"] / "config.json").write_text("{}")
    w["src"] = tmp / "src"
    w["src"].mkdir()
    (w["src"] / "tableA.csv").write_text("id,title\n1,x\n")
    return w


# name -> (argv builder, "dir" | "file", the input an output may not overlap, own-kind maker or None)
def _own_train(p: Path) -> None:
    (p / "checkpoints" / "step-1").mkdir(parents=True)
    (p / "metrics.jsonl").write_text('{"step": 1}\n')


def _own_file(name: str, content: dict):
    def make(p: Path) -> None:
        (p / name).write_text(json.dumps(content))
    return make


def _own_recipe(record: str, stage_record: str, stage_output: str, setting: str):
    """An earlier pipeline run whose stage was made with another setting (its record says so): a rerun may not
    reuse it silently; it is refused before anything is written."""
    def make(p: Path) -> None:
        (p / record).write_text("seed: 42\n")
        (p / stage_record).parent.mkdir(parents=True, exist_ok=True)
        (p / stage_record).write_text(setting + "\n")
        (p / stage_output).parent.mkdir(parents=True, exist_ok=True)
        (p / stage_output).write_text("[]")
    return make


def _own_prune(p: Path) -> None:
    (p / "modules.json").write_text("[]")
    (p / "drmix_prune.json").write_text("{}")


M = "tiny-model-never-loaded"
COMMANDS = {
    "train": (lambda w, o: ["train", "--data", w["coll"], "--output-dir", o, "--model", M], "dir", "coll", _own_train),
    "pretrain coco": (lambda w, o: ["pretrain", "coco", "--corpus", w["data"], "--output-dir", o, "--model", M],
                      "dir", "data", _own_train),
    "mixture optimize": (lambda w, o: ["mixture", "optimize", "--data", w["coll"], "--output-dir", o, "--model", M,
                                       "--reference-model", w["lm"]], "dir", "lm", _own_train),
    "mixture audit": (lambda w, o: ["mixture", "audit", "--data", w["coll"], "--data", w["coll2"], "--dev", w["data"],
                                    "--dev-split", "test", "--output-dir", o, "--model", M], "dir", "data",
                      _own_recipe("audit.yaml", "runs/seed42/all/config.yaml", "runs/seed42/all/model/modules.json",
                                  "learning_rate: 0.5")),
    "pipeline tdro": (lambda w, o: ["pipeline", "tdro", "--data", w["coll"], "--test-data", w["data"],
                                    "--output-dir", o, "--model", M], "dir", "data",
                      _own_recipe("pipeline.yaml", "stage0-reference/config.yaml", "stage0-reference/model/modules.json",
                                  "learning_rate: 0.5")),
    "pipeline coco": (lambda w, o: ["pipeline", "coco", "--corpus", w["data"], "--data", w["coll"], "--test-data",
                                    w["data"], "--output-dir", o, "--model", M], "dir", "data",
                      _own_recipe("pipeline.yaml", "coco/coco.yaml", "coco/model/modules.json", "max_steps: 7")),
    "pipeline drama": (lambda w, o: ["pipeline", "drama", "--corpus", w["data"], "--output-dir", o], "dir", "data",
                       _own_recipe("drama.yaml", "drama.yaml", "augment/data-crop.jsonl", "max_per_doc: 9")),
    "eval": (lambda w, o: ["eval", "--data", w["data"], "--model", M, "--output", o], "dir", "data",
             _own_file("eval.json", {"results": {}})),
    "compare": (lambda w, o: ["compare", w["ea"], w["eb"], "--output", o], "dir", "ea",
                _own_file("compare.json", {"baseline": "ea"})),
    "index": (lambda w, o: ["index", "--corpus", w["data"], "--output", o, "--model", M], "dir", "data", None),
    "search": (lambda w, o: ["search", "--index", w["idx"], "--queries", w["queries"], "--output", o], "file", "idx",
               None),
    "mine": (lambda w, o: ["mine", "--data", w["coll"], "--output", o], "file", "coll", None),
    "mine teacher": (lambda w, o: ["mine", "--mode", "teacher", "--queries", w["coll"], "--corpus", w["data"],
                                   "--output", o], "file", "data", None),
    "augment crop": (lambda w, o: ["augment", "crop", "--corpus", w["data"], "--output", o], "file", "data", None),
    "augment mine": (lambda w, o: ["augment", "mine", "--queries", w["coll"], "--corpus", w["data"], "--output", o],
                     "file", "data", None),
    "augment generate": (lambda w, o: ["augment", "generate", "--corpus", w["data"], "--output", o], "file", "data",
                         None),
    "augment rerank": (lambda w, o: ["augment", "rerank", "--input", w["coll"], "--corpus", w["data"], "--output", o],
                       "file", "data", None),
    "prune": (lambda w, o: ["prune", "--model", w["lm"], "--output", o], "dir", "lm", _own_prune),
    "analyze shift": (lambda w, o: ["analyze", "shift", "--source", w["coll"], "--target", w["data"],
                                    "--output-dir", o], "dir", "data", _own_file("shift.json", {})),
    "multicorpus build": (lambda w, o: ["multicorpus", "build", w["src"], o], "dir", "src", None),
    "multicorpus sweep": (lambda w, o: ["multicorpus", "sweep", "--corpus", f"a={w['data']}", "--output", o],
                          "dir", "data", _own_file("results.json", [{"setting": "s"}])),
    "localdocs build": (lambda w, o: ["localdocs", "build", o, "--family", "stdlib"], "dir", None, None),
    "demo": (lambda w, o: ["demo", "--output", o], "dir", None, _own_file("demo.json", {})),
}
SITUATIONS = ("user file", "foreign folder", "input", "inside input", "containing input", "own kind")


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _output(tmp: Path, w: dict[str, Path], layout: str, situation: str, input_key: str | None, own) -> Path | None:
    if situation == "user file":
        p = tmp / "notes.txt"
        p.write_text("my notes")
        return p
    if situation == "foreign folder":
        p = tmp / "photos"
        p.mkdir()
        (p / "cat.jpg").write_bytes(b"\xff\xd8 a cat")
        (tmp / ".photos.old").mkdir()             # a sibling atomic_dir once deleted
        (tmp / ".photos.old" / "keep.txt").write_text("keep")
        return p
    if input_key is None:
        return None
    src = w[input_key]
    if situation == "input":
        return src
    if situation == "inside input":
        return (src / "out.jsonl" if layout == "file" else src / "out") if src.is_dir() else None
    if situation == "containing input":
        return tmp if layout == "dir" else None
    return None


@pytest.mark.parametrize("situation", SITUATIONS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_writing_command_refuses_and_keeps_every_byte(command, situation, tmp_path):
    build, layout, input_key, own = COMMANDS[command]
    w = _world(tmp_path)
    if situation == "own kind":
        if own is None:
            pytest.skip("this command replaces or continues its own output without a flag (documented)")
        out = tmp_path / "earlier"
        out.mkdir()
        own(out)
    else:
        out = _output(tmp_path, w, layout, situation, input_key, own)
        if out is None:
            pytest.skip("no such situation for this command (no input of that shape)")
    before = _snapshot(tmp_path)
    r = CliRunner().invoke(app, [str(a) for a in build(w, out)])
    assert r.exit_code != 0 and isinstance(r.exception, DrmixError), (r.exception, r.output)
    message = str(r.exception).lower()
    assert any(s in message for s in ("--overwrite", "--resume", "overlap", "folder", "file", "demo")), message
    assert _snapshot(tmp_path) == before


def test_own_output_is_replaced_with_the_flag_and_only_it(tmp_path):
    """compare --overwrite replaces its earlier files; a user's file beside them stays."""
    w = _world(tmp_path)
    out = tmp_path / "cmp"
    r = CliRunner().invoke(app, ["compare", str(w["ea"]), str(w["eb"]), "--output", str(out)])
    assert r.exit_code == 0, r.output
    first = (out / "compare.json").read_bytes()
    r = CliRunner().invoke(app, ["compare", str(w["ea"]), str(w["eb"]), "--output", str(out)])
    assert isinstance(r.exception, DrmixError) and "--overwrite" in str(r.exception)
    r = CliRunner().invoke(app, ["compare", str(w["ea"]), str(w["eb"]), "--output", str(out), "--overwrite"])
    assert r.exit_code == 0, r.output
    assert (out / "compare.json").read_bytes() == first
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare.md"]


def test_atomic_dir_leaves_a_users_dot_old_sibling_alone(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "v1").write_text("1")
    old = tmp_path / ".out.old"
    old.mkdir()
    (old / "mine.txt").write_text("the user's")
    with atomic_dir(target) as tmp:
        (tmp / "v2").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["v2"]
    assert (old / "mine.txt").read_text() == "the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]


def test_report_refuses_a_users_report_html_and_keeps_every_byte(tmp_path):
    """drmix report writes report.html into the run it reads: a report.html drmix did not write is refused."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (run / "report.html").write_text("<html>my own page</html>")
    before = _snapshot(tmp_path)
    r = CliRunner().invoke(app, ["report", str(run)])
    assert isinstance(r.exception, DrmixError) and "--overwrite" in str(r.exception)
    assert _snapshot(tmp_path) == before


# -- every file drmix writes: a user's file inside an earlier output of a folder kind, and the LLM cache ---------
def _own_index(p: Path) -> None:
    (p / "vectors.npy").write_bytes(b"\x93NUMPY")
    (p / "meta.json").write_text(json.dumps({"format_version": 2}))
    (p / "ids.json").write_text("[]")


def _own_multicorpus(p: Path) -> None:
    (p / "manifest.json").write_text(json.dumps({"format": "drmix-multicorpus/1", "corpora": {"a": "a"},
                                                 "train": {"a": "train/a.jsonl"}}))
    (p / "a" / "qrels").mkdir(parents=True)
    (p / "a" / "corpus.jsonl").write_text("{}\n")
    (p / "train").mkdir()
    (p / "train" / "a.jsonl").write_text("{}\n")


def _own_localdocs(p: Path) -> None:
    (p / "train").mkdir()
    (p / "train" / "stdlib.jsonl").write_text("{}\n")
    (p / "beir" / "stdlib" / "qrels").mkdir(parents=True)
    (p / "stats.json").write_text(json.dumps({"families": []}))


FOLDER_KINDS = {
    "index": (_own_index, ["notes.txt"], lambda w, o: ["index", "--corpus", w["data"], "--output", o, "--model", M]),
    "multicorpus build": (_own_multicorpus, ["notes.txt", "train/my_extra_pairs.txt", "a/qrels/mine.tsv.bak"],
                          lambda w, o: ["multicorpus", "build", w["src"], o]),
    "localdocs build": (_own_localdocs, ["train/my_pairs.txt", "beir/stdlib/notes.md"],
                        lambda w, o: ["localdocs", "build", o, "--family", "stdlib"]),
}


@pytest.mark.parametrize("command", list(FOLDER_KINDS))
def test_a_users_file_inside_an_earlier_output_is_refused_and_named(command, tmp_path):
    """A command that replaces its earlier output without a flag first checks every file in it: a file the
    user put there (at the top or in a sub-folder the command writes) is refused, named, and kept."""
    own, foreign, build = FOLDER_KINDS[command]
    w = _world(tmp_path)
    out = tmp_path / "earlier"
    out.mkdir()
    own(out)
    for rel in foreign:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("the user's")
    before = _snapshot(tmp_path)
    r = CliRunner().invoke(app, [str(a) for a in build(w, out)])
    assert isinstance(r.exception, DrmixError), (r.exception, r.output)
    for rel in foreign:
        assert rel in str(r.exception), (rel, str(r.exception))
    assert _snapshot(tmp_path) == before


CACHE_CASES = ("an input", "inside an input", "a user's file", "the output", "the stats file", "a folder")


@pytest.mark.parametrize("case", CACHE_CASES)
@pytest.mark.parametrize("command", ["augment generate", "augment rerank"])
def test_the_llm_cache_is_an_output_too(command, case, tmp_path):
    """--cache is appended to: it may not be an input, lie inside one, be a user's file, or be another output."""
    w = _world(tmp_path)
    out = tmp_path / "gen.jsonl"
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"my": "data"}\n')
    cache = {"an input": w["coll"] if command == "augment rerank" else w["data"] / "corpus.jsonl",
             "inside an input": w["data"] / "cache.jsonl", "a user's file": notes, "the output": out,
             "the stats file": tmp_path / "gen.jsonl.stats.json", "a folder": w["src"]}[case]
    argv = (["augment", "generate", "--corpus", w["data"]] if command == "augment generate"
            else ["augment", "rerank", "--input", w["coll"], "--corpus", w["data"]])
    before = _snapshot(tmp_path)
    r = CliRunner().invoke(app, [str(a) for a in [*argv, "--output", out, "--cache", cache]])
    assert isinstance(r.exception, DrmixError), (r.exception, r.output)
    assert "cache" in str(r.exception).lower() and str(cache) in str(r.exception)
    assert _snapshot(tmp_path) == before


def test_an_earlier_llm_cache_is_reused(tmp_path):
    from drmix.outputs import claim_cache, is_llm_cache

    cache = tmp_path / "run.llm-cache.jsonl"
    cache.write_text(json.dumps({"key": "a" * 64, "model": "m", "text": "Query: x"}) + "\n" + '{"key": "b')
    assert is_llm_cache(cache)  # a torn last line (a killed write) is still drmix's cache
    assert claim_cache(cache) == cache
    cache.write_text('{"_id": "d1", "text": "a corpus line"}\n')
    assert not is_llm_cache(cache)
