"""Output folders: commands never delete or rename a user's files (drmix.outputs, drmix.io.atomic.atomic_dir)."""
from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from drmix.cli import app
from drmix.data.beir import write_beir
from drmix.errors import ConfigError
from drmix.io.atomic import atomic_dir, atomic_write_text
from drmix.outputs import check_output_dir, is_output_of

CORPUS = {"a": {"title": "A", "text": "alpha text"}, "b": {"title": "B", "text": "beta text"}}


def _beir(tmp_path):
    return write_beir(tmp_path / "scifact", CORPUS, {"q": "alpha"}, {"test": {"q": {"a": 1}}})


def test_index_into_its_own_corpus_is_refused_and_corpus_kept(tmp_path, tiny_model_path):
    data = _beir(tmp_path)
    before = sorted(p.name for p in data.iterdir())
    for extra in ([], ["--overwrite"]):  # overlap with the input is refused even with --overwrite
        r = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(data), "--model",
                                     tiny_model_path, *extra])
        assert isinstance(r.exception, ConfigError) and "overlaps the input" in str(r.exception)
    assert sorted(p.name for p in data.iterdir()) == before == ["corpus.jsonl", "qrels", "queries.jsonl"]


def test_index_output_file_refused_never_renamed(tmp_path, tiny_model_path):
    data = _beir(tmp_path)
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    r = CliRunner().invoke(app, ["index", "--corpus", str(data), "--output", str(f), "--model", tiny_model_path])
    assert isinstance(r.exception, ConfigError) and "is a file" in str(r.exception)
    assert f.read_text() == "mine" and not (tmp_path / ".notes.txt.old").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "scifact"]


def test_index_user_folder_needs_overwrite_then_own_index_is_replaced(tmp_path, tiny_model_path):
    data = _beir(tmp_path)
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_text("x")
    args = ["index", "--corpus", str(data), "--output", str(out), "--model", tiny_model_path]
    r = CliRunner().invoke(app, args)
    assert isinstance(r.exception, ConfigError) and "--overwrite" in str(r.exception)
    assert (out / "cat.jpg").read_text() == "x"
    r = CliRunner().invoke(app, [*args, "--overwrite"])
    assert r.exit_code == 0, r.output
    assert not (out / "cat.jpg").exists() and is_output_of(out, "index")
    r = CliRunner().invoke(app, args)  # an earlier index is drmix's own output: replaced without --overwrite
    assert r.exit_code == 0, r.output


def test_multicorpus_and_localdocs_refuse_user_folders(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "keep.txt").write_text("k")
    src = tmp_path / "src"
    src.mkdir()
    r = CliRunner().invoke(app, ["multicorpus", "build", str(src), str(user)])
    assert isinstance(r.exception, ConfigError) and "manifest.json" in str(r.exception)
    r = CliRunner().invoke(app, ["localdocs", "build", str(user), "--family", "stdlib"])
    assert isinstance(r.exception, ConfigError) and "stats.json" in str(r.exception)
    r = CliRunner().invoke(app, ["multicorpus", "build", str(src), str(src / "out")])
    assert isinstance(r.exception, ConfigError) and "overlaps the input" in str(r.exception)
    assert (user / "keep.txt").read_text() == "k"


def test_check_output_dir_kinds(tmp_path):
    assert check_output_dir(tmp_path / "new", "index") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty", "localdocs")
    lc = tmp_path / "lc"
    (lc / "train").mkdir(parents=True)
    (lc / "stats.json").write_text(json.dumps({"families": []}))
    check_output_dir(lc, "localdocs")
    with pytest.raises(ConfigError):  # a localdocs build is not an index
        check_output_dir(lc, "index")
    mc = tmp_path / "mc"
    mc.mkdir()
    (mc / "manifest.json").write_text(json.dumps({"format": "other/1"}))
    with pytest.raises(ConfigError):
        check_output_dir(mc, "multicorpus")
    (mc / "manifest.json").write_text(json.dumps({"format": "drmix-multicorpus/1"}))
    check_output_dir(mc, "multicorpus")


def test_atomic_dir_refuses_file_and_permission_errors_are_one_line(tmp_path, monkeypatch):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ConfigError):
        with atomic_dir(f):
            pass
    assert f.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["f"]

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr("tempfile.mkstemp", denied)
    with pytest.raises(ConfigError) as e:
        atomic_write_text(tmp_path / "x.json", "{}")
    assert "no permission" in str(e.value) and str(tmp_path) in str(e.value)


def test_run_finished_and_model_saved(tmp_path):
    from drmix.outputs import model_saved, run_finished

    run = tmp_path / "run"
    assert not run_finished(run)
    (run / "model").mkdir(parents=True)
    assert not run_finished(run) and not model_saved(run / "model")
    (run / "model" / "modules.json").write_text("[]")
    assert run_finished(run) and model_saved(run / "model")
    (run / "model" / "modules.json").unlink()
    (run / "model" / "modules.json").mkdir()                 # not a file: not saved
    assert not run_finished(run)


# ------------------------------------------------------------------- claim_output, case by case (drmix.outputs)
from drmix.outputs import KINDS, claim_output, claim_run, config_inputs  # noqa: E402


def _claim_error(*args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        claim_output(*args, **kwargs)
    return e.value


def _own(kind: str, folder):
    """Make ``folder`` hold drmix's own output of ``kind`` (the files its writer always produces)."""
    folder.mkdir(parents=True, exist_ok=True)
    make = {
        "index": lambda: ((folder / "vectors.npy").write_bytes(b""),
                          (folder / "meta.json").write_text(json.dumps({"format_version": 1}))),
        "multicorpus": lambda: (folder / "manifest.json").write_text(json.dumps({"format": "drmix-multicorpus/2"})),
        "localdocs": lambda: ((folder / "train").mkdir(), (folder / "stats.json").write_text('{"families": []}')),
        "model": lambda: ((folder / "modules.json").write_text("[]"), (folder / "drmix_prune.json").write_text("{}")),
        "train": lambda: (folder / "metrics.jsonl").write_text('{"step": 1}\n'),
        "recipe": lambda: (folder / "pipeline.yaml").write_text("seed: 1\n"),
        "demo": lambda: (folder / "demo.json").write_text("{}"),
        "eval": lambda: (folder / "eval.json").write_text('{"results": {}}'),
        "compare": lambda: (folder / "compare.json").write_text('{"baseline": "a"}'),
        "shift": lambda: (folder / "shift.json").write_text("{}"),
        "sweep": lambda: (folder / "results.json").write_text('[{"setting": "s"}]'),
        "shards": lambda: (folder / "shards.json").write_text('{"corpus_fingerprint": "0a"}'),
    }[kind]
    make()
    return folder


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "file"])
def test_each_kind_recognises_its_own_output_and_nothing_else(kind, tmp_path):
    folder = _own(kind, tmp_path / kind)
    assert is_output_of(folder, kind)
    assert [k for k in KINDS if k not in (kind, "recipe") and is_output_of(folder, k)] == []


@pytest.mark.parametrize("kind, content, own", [
    ("index", {"meta.json": '{"format_version": 1}', "index.faiss": ""}, True),
    ("index", {"meta.json": '{"version": 1}', "vectors.npy": ""}, False),            # not drmix's meta.json
    ("index", {"meta.json": '{"format_version": 1}'}, False),                        # no vectors
    ("index", {"meta.json": "[1]", "vectors.npy": ""}, False),                       # not a JSON object
    ("index", {"meta.json": "{broken", "vectors.npy": ""}, False),
    ("multicorpus", {"manifest.json": '{"format": "other-multicorpus/1"}'}, False),
    ("localdocs", {"stats.json": '{"families": []}'}, False),                        # no train/
    ("model", {"modules.json": "[]"}, False),                                        # a model, not a pruned one
    ("train", {"model/modules.json": "[]"}, True),                                   # a finished run
    ("train", {"checkpoints/step-1/x": ""}, True),                                   # an interrupted one
    ("train", {"metrics.jsonl": "[1]\n"}, False),
    ("train", {"metrics.jsonl": "not json\n"}, False),
    ("recipe", {"drama.yaml": ""}, True),
    ("recipe", {"summary.json": "{}"}, True),
    ("recipe", {"stage0/metrics.jsonl": '{"step": 1}\n'}, True),                     # a stage folder
    ("recipe", {"notes/readme.txt": ""}, False),
    ("eval", {"eval.json": '{"model": "m"}'}, False),
    ("compare", {"compare.json": '{"models": {}}'}, False),
    ("sweep", {"results.json": '[{"setting": "s"}, {"other": 1}]'}, False),
    ("sweep", {"results.json": '{"setting": "s"}'}, False),
    ("sweep", {"results.json": "{broken"}, False),
])
def test_markers_by_hand(kind, content, own, tmp_path):
    for name, text in content.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert is_output_of(tmp_path, kind) is own


def test_a_new_or_empty_output_is_created_and_an_own_one_follows_the_kinds_policy(tmp_path):
    assert claim_output(tmp_path / "new", "eval") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert claim_output(tmp_path / "empty", "eval") == tmp_path / "empty"
    for kind in ("index", "recipe"):                              # replace / continue: no flag needed
        assert claim_output(_own(kind, tmp_path / kind), kind) == tmp_path / kind
    ev = _own("eval", tmp_path / "ev")                            # overwrite: only with the flag
    e = _claim_error(ev, "eval", flag="--force")
    assert e.message == "the output folder holds an evaluation written by drmix eval (eval.json, eval.md)."
    assert (e.path, e.fix) == (str(ev), "pass --force to replace it, or choose another folder.")
    assert claim_output(ev, "eval", overwrite=True) == ev
    run = _own("train", tmp_path / "run")                         # resume: with --resume (or --overwrite)
    e = _claim_error(run, "train")
    assert e.message == "the output folder holds a drmix training run (metrics.jsonl, checkpoints/, model/)."
    assert e.fix == "pass --resume to continue it, or choose another folder."
    assert claim_output(run, "train", resume=True) == run and claim_output(run, "train", overwrite=True) == run


def test_an_interrupted_output_of_the_kinds_own_names_and_a_lock_are_taken_up_again(tmp_path):
    """A sharded drmix eval killed before eval.json leaves OUT/shards only (its own names, no marker): the same
    command continues it, with or without --overwrite; drmix's lock file (a run holding the folder) is no content
    either. A file of the user's beside them is still refused by name."""
    out = tmp_path / "ev"
    (out / "shards" / "0123456789abcdef").mkdir(parents=True)
    (out / "shards" / "0123456789abcdef" / "shards.json").write_text('{"corpus_fingerprint": "0a"}')
    assert claim_output(out, "eval") == out and claim_output(out, "eval", overwrite=True) == out
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / ".drmix.lock").write_text('{"pid": 1}')
    assert claim_output(locked, "shards") == locked and claim_output(locked, "index") == locked
    (out / "notes.txt").write_text("mine")
    assert _claim_error(out, "eval").message.startswith("the output folder holds files drmix did not write: notes.txt;")
    run = tmp_path / "run"                                        # a kind writing any name: still refused
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert _claim_error(run, "train").message.startswith("the output folder holds files drmix did not write")


def test_foreign_content_is_refused_with_what_is_there(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    for name in "abcdef":
        (user / f"{name}.txt").write_text(name)
    e = _claim_error(user, "index")
    assert e.message == ("the output folder is not empty and does not hold an index written by drmix index "
                         "(vectors.npy or index.faiss, meta.json): a.txt, b.txt, c.txt, d.txt, e.txt ....")
    assert e.fix == "choose a new or empty folder, or pass --overwrite to replace it (its contents are deleted)."
    assert claim_output(user, "index", overwrite=True) == user    # a whole folder may be replaced when asked
    e = _claim_error(user, "eval", overwrite=True)                # a command writing its own files never may
    assert e.message == ("the output folder holds files drmix did not write: a.txt, b.txt, c.txt, d.txt, e.txt ...; "
                         "it writes an evaluation written by drmix eval (eval.json, eval.md).")
    assert e.fix == "choose a new or empty folder (nothing in this one is touched)."
    own_and_more = _own("eval", tmp_path / "ev")
    (own_and_more / "mine.txt").write_text("x")                   # the kind's files plus a user's one
    assert _claim_error(own_and_more, "eval", overwrite=True).message.startswith(
        "the output folder holds files drmix did not write: mine.txt;")
    one = tmp_path / "one"
    one.mkdir()
    (one / "x").write_text("")
    assert _claim_error(one, "index").message.endswith("(vectors.npy or index.faiss, meta.json): x.")


def test_files_and_folders_in_the_wrong_place(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    e = _claim_error(f, "index")
    assert (e.message, e.fix) == ("the output path is a file; a folder is written here.",
                                  "choose a new folder (the file is left as it is).")
    e = _claim_error(tmp_path, "file")
    assert (e.message, e.fix) == ("the output path is a folder; a file is written here.",
                                  "name a file (the folder is left as it is).")
    e = _claim_error(f, "file")
    assert (e.message, e.fix) == (f"the output file exists ({f}).", "pass --overwrite to replace it, or choose "
                                                                   "another output file.")
    assert claim_output(f, "file", overwrite=True) == f
    side = tmp_path / "new.jsonl.stats.json"
    side.write_text("{}")
    e = _claim_error(tmp_path / "new.jsonl", "file", sidecars=[side], flag="--replace")
    assert (e.message, e.fix) == (f"the output file exists ({side}).",
                                  "pass --replace to replace it, or choose another output file.")
    assert claim_output(tmp_path / "other.jsonl", "file", sidecars=[tmp_path / "other.stats.json"]) \
        == tmp_path / "other.jsonl"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    e = _claim_error(link, "index")
    assert (e.message, e.fix) == ("the output path is a broken symbolic link.", "remove it or choose another path.")


def test_an_output_overlapping_an_input_is_refused_whatever_the_flags(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for out, how in ((data, "is"), (data / "sub" / "out", "lies inside"), (tmp_path, "contains")):
        e = _claim_error(out, "index", inputs=[None, tmp_path / "absent", data], overwrite=True)
        assert e.message == (f"the output overlaps the input {data} (it {how} it); writing it would overwrite the "
                             "input.")
        assert (e.path, e.fix) == (str(out), "choose an output outside the inputs.")
    assert claim_output(tmp_path / "beside", "index", inputs=[data]) == tmp_path / "beside"


def test_an_unreadable_output_folder_is_one_error(tmp_path, monkeypatch):
    from pathlib import Path

    (tmp_path / "locked").mkdir()
    monkeypatch.setattr(Path, "iterdir", lambda self: (_ for _ in ()).throw(PermissionError(13, "denied")))
    e = _claim_error(tmp_path / "locked", "index")
    assert (e.message, e.fix) == ("the output folder cannot be read.", "check its permissions or choose another folder.")
    assert e.path == str(tmp_path / "locked")


def test_claim_run_reads_the_configs_inputs_and_resume(tmp_path):
    from drmix.config import TrainConfig

    data = tmp_path / "c.jsonl"
    data.write_text('{"query": "q", "positive": "p"}\n')
    cfg = TrainConfig(data=[str(data), {"path": str(data), "name": "again"}], output_dir=str(tmp_path / "run"),
                      eval_data=[str(tmp_path / "absent")], model="org/hub-id")
    assert config_inputs(cfg) == [data, data]                     # a spec's path too; hub ids and absent paths not
    assert claim_run(cfg) == tmp_path / "run"
    _own("train", tmp_path / "run")
    with pytest.raises(ConfigError, match="pass --resume"):
        claim_run(cfg)
    assert claim_run(cfg.replace(**{"resume": True})) == tmp_path / "run"
    e = pytest.raises(ConfigError, claim_run, cfg.replace(**{"output_dir": str(data)})).value
    assert "overlaps the input" in e.message
    assert check_output_dir(tmp_path / "x", "index") == tmp_path / "x"


def test_every_refusal_names_the_output_path(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    five = tmp_path / "five"
    five.mkdir()
    for name in "abcde":
        (five / name).write_text("")
    run = _own("train", tmp_path / "run")
    cases = [(f, "index", {}), (tmp_path, "file", {}), (f, "file", {}), (link, "index", {}), (five, "index", {}),
             (five, "eval", {}), (run, "train", {})]
    for path, kind, kw in cases:
        assert _claim_error(path, kind, **kw).path == str(path), (path, kind)
    assert _claim_error(five, "index").message.endswith("meta.json): a, b, c, d, e.")    # five: none left out
    half = tmp_path / "half"                        # only a file of the kind's names, but not its marker
    half.mkdir()
    (half / "eval.md").write_text("")
    assert _claim_error(half, "eval").message == ("the output folder holds files drmix did not write; it writes an "
                                                  "evaluation written by drmix eval (eval.json, eval.md).")
    out, side = tmp_path / "o.jsonl", tmp_path / "o.stats.json"
    out.write_text("")
    side.write_text("")
    assert _claim_error(out, "file", sidecars=[side]).message == f"the output file exists ({out}, {side})."
    e = pytest.raises(ConfigError, check_output_dir, five, "index").value                   # the default flag
    assert e.fix == "choose a new or empty folder, or pass --overwrite to replace it (its contents are deleted)."
    assert pytest.raises(ConfigError, check_output_dir, five, "index", flag="--force").value.fix.startswith(
        "choose a new or empty folder, or pass --force")


def test_claim_run_of_a_config_without_resume_and_empty_paths(tmp_path):
    from types import SimpleNamespace

    run = _own("train", tmp_path / "run")
    with pytest.raises(ConfigError, match="pass --resume"):
        claim_run(SimpleNamespace(output_dir=str(run)))              # no resume field: not resuming
    assert config_inputs(SimpleNamespace(model="", data=["", str(run)])) == [run]    # "" is not the current folder


def test_a_multicorpus_build_owns_what_its_manifest_lists_and_nothing_more(tmp_path):
    out = tmp_path / "mc"
    (out / "amazon" / "qrels").mkdir(parents=True)
    (out / "train").mkdir()
    for f in ("amazon/corpus.jsonl", "amazon/queries.jsonl", "amazon/qrels/test.tsv", "train/a.jsonl"):
        (out / f).write_text("")
    (out / "manifest.json").write_text(json.dumps({"format": "drmix-multicorpus/2", "corpora": {"a": "amazon/"},
                                                    "train": {"a": "train/a.jsonl"}}))
    assert claim_output(out, "multicorpus") == out                        # its own build: replaced
    (out / "amazon" / "notes.txt").write_text("mine")                     # a user's file inside it
    (out / "train" / "b.jsonl").write_text("mine")
    e = _claim_error(out, "multicorpus")
    assert e.message.endswith("(manifest.json): amazon/notes.txt, train/b.jsonl.")
    assert claim_output(out, "multicorpus", overwrite=True) == out        # the user asked
    # a manifest that names nothing usable owns only itself
    for manifest in ({"format": "drmix-multicorpus/2", "corpora": ["amazon"], "train": "x"},
                     {"format": "drmix-multicorpus/2", "corpora": {"a": "deep/amazon", "b": ""}, "train": {"a": 3}}):
        (out / "manifest.json").write_text(json.dumps(manifest))
        assert _claim_error(out, "multicorpus").message.endswith("(manifest.json): amazon/, train/.")


def test_nested_names_own_files_below_a_folder_only(tmp_path):
    out = tmp_path / "ld"
    (out / "train").mkdir(parents=True)
    (out / "beir" / "stdlib" / "qrels").mkdir(parents=True)
    (out / "stats.json").write_text('{"families": []}')
    for f in ("train/stdlib.jsonl", "beir/stdlib/corpus.jsonl", "beir/stdlib/queries.jsonl",
              "beir/stdlib/qrels/test.tsv"):
        (out / f).write_text("")
    assert claim_output(out, "localdocs") == out
    (out / "beir" / "stdlib" / "qrels" / "deep").mkdir()                  # folders alone are not foreign
    assert claim_output(out, "localdocs") == out
    (out / "train" / "notes.md").write_text("mine")
    (out / "beir" / "stdlib" / "extra.txt").write_text("mine")
    (out / "beir" / "readme.txt").write_text("mine")
    assert _claim_error(out, "localdocs").message.endswith(
        "(train/, stats.json): beir/readme.txt, beir/stdlib/extra.txt, train/notes.md.")
    f = tmp_path / "ld2"
    f.mkdir()
    (f / "stats.json").write_text('{"families": []}')
    (f / "train").write_text("a file where the folder goes")              # not a folder: foreign as a whole
    (tmp_path / "elsewhere").mkdir()
    (f / "beir").symlink_to(tmp_path / "elsewhere")                       # a link: foreign, not followed
    assert _claim_error(f, "localdocs").message.endswith(": beir/, train.")


KEY = "0123456789abcdef" * 2 + "01234567"                                # a 40-digit digest (BLAKE2b-160)
EARLIER = "0123456789abcdef" * 4                                          # SHA-256: a cache of an earlier version


@pytest.mark.parametrize("content, is_cache", [
    ("", True),                                                           # empty: a cache not yet written
    ("\n\n", True),
    (json.dumps({"key": KEY, "text": "a"}) + "\n", True),
    (json.dumps({"key": KEY, "text": "a"}) + '\n{"key": "torn', True),   # a killed write's last line
    ("\n" + json.dumps({"key": KEY, "text": "a"}) + "\n", True),
    (json.dumps({"key": EARLIER, "text": "a"}) + "\n" + json.dumps({"key": KEY, "text": "b"}) + "\n", True),
    (json.dumps({"key": KEY.upper(), "text": "a"}) + "\n", False),        # not a hex digest
    (json.dumps({"key": KEY[:-1], "text": "a"}) + "\n", False),
    (json.dumps({"key": EARLIER[:-1], "text": "a"}) + "\n", False),
    (json.dumps({"key": KEY, "text": 3}) + "\n", False),
    (json.dumps({"key": KEY}) + "\n", False),
    (json.dumps([KEY, "a"]) + "\n", False),
    ("my notes\n", False),
    ('{"torn', False),                                                    # nothing complete, not empty
])
def test_llm_cache_is_recognised_by_its_records(content, is_cache, tmp_path):
    from drmix.outputs import is_llm_cache

    f = tmp_path / "c.jsonl"
    f.write_text(content)
    assert is_llm_cache(f) is is_cache


def test_llm_cache_checks_its_first_lines_only(tmp_path):
    from drmix.outputs import is_llm_cache

    f = tmp_path / "c.jsonl"
    good = json.dumps({"key": KEY, "text": "a"}) + "\n"
    f.write_text(good * 5 + "not json\n")
    assert is_llm_cache(f) and not is_llm_cache(f, lines=6)
    assert not is_llm_cache(tmp_path / "absent.jsonl") and not is_llm_cache(tmp_path)


def test_claim_cache_refuses_inputs_outputs_folders_and_a_users_file(tmp_path):
    from drmix.outputs import claim_cache

    data = tmp_path / "data"
    data.mkdir()
    (data / "c.jsonl").write_text("")
    for cache, how in ((data / "c.jsonl", "is"), (data / "new.jsonl", "lies inside")):
        e = pytest.raises(ConfigError, claim_cache, cache, inputs=[None, tmp_path / "absent", data / "c.jsonl"
                                                                     if how == "is" else data]).value
        assert e.message == (f"the LLM cache {how} the input {data / 'c.jsonl' if how == 'is' else data}; drmix "
                             "appends to its cache and would change the input.")
        assert (e.path, e.fix) == (str(cache), "choose a cache file outside the inputs (or leave --cache out).")
    out = tmp_path / "out.jsonl"
    e = pytest.raises(ConfigError, claim_cache, out, outputs=[tmp_path / "other", out]).value
    assert (e.message, e.path, e.fix) == ("the LLM cache is also an output file of this command.", str(out),
                                          "give --cache another file name (or leave it out).")
    e = pytest.raises(ConfigError, claim_cache, data).value
    assert (e.message, e.path, e.fix) == ("the LLM cache path is a folder; a JSONL file is written here.", str(data),
                                          "name a file such as run.llm-cache.jsonl.")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    e = pytest.raises(ConfigError, claim_cache, notes).value
    assert e.message == ("the LLM cache file exists and is not a drmix LLM cache (its lines are not {\"key\", "
                         "\"text\"} records); drmix appends to its cache.")
    assert (e.path, e.fix) == (str(notes), "choose a new cache file (the file is left as it is).")
    cache = tmp_path / "run.llm-cache.jsonl"
    assert claim_cache(cache, inputs=[data], outputs=[out]) == cache
    cache.write_text(json.dumps({"key": KEY, "text": "a"}) + "\n")
    assert claim_cache(cache) == cache and notes.read_text() == "my notes\n"


def test_a_shared_folder_marker_of_the_moment_is_not_an_entry(tmp_path):
    """Rank 0 writes a marker in a folder every node must share while another rank may still be claiming it as its
    output (drmix.retrieval.ranks.Ranks.check_shared): the claim sees an empty folder, not a foreign file."""
    from drmix.outputs import SHARED_MARKER, claim_output

    out = tmp_path / "run"
    out.mkdir()
    (out / SHARED_MARKER.format("0123456789abcdef")).write_text("0123456789abcdef")
    assert claim_output(out, "train") == out
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds files drmix did not write"):
        claim_output(out, "train")
