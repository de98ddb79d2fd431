"""Faults and hostile input, re-run as tests (issue #29's probe class): every folder-replacing command killed at
each step of its swap, lone surrogates in every input and in LLM answers, a full disk (a file size limit in a
child process), a read-only folder, an output under a file, a DRMIX_CACHE that is read-only or full, an output
that is a symbolic link (or a loop of them), SIGTERM (also with SIGINT ignored, as in a script's background job),
TensorBoard after a resume.

Each case ends in success or in one DrmixError line naming the real path, and leaves every earlier output
usable."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drmix.cli import app
from drmix.data.beir import write_beir
from drmix.errors import ConfigError, DiskFullError, DrmixError

TESTS = Path(__file__).resolve().parent
SRC = str(TESTS.parent / "src")
SURROGATE = "\ud800"  # json.dumps writes it as the escape "\ud800": valid JSON, no Unicode text


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(TESTS)]), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _invoke(args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def _ok(r) -> None:
    assert r.exit_code == 0, (r.exception, r.output)


# -- the swap, killed between every pair of filesystem operations, per command --------------------------------
EXCHANGE = "created,built,exchanged,removing"
FALLBACK = "created,built,marked-new,moved-old,moved-new,removing"


def _em_source(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    (src / "tableA.csv").write_text("id,title,price\n1,apple pie,3\n2,banana bread,4\n3,cherry cake,5\n")
    (src / "tableB.csv").write_text("id,title,price\n1,apple pie x,3\n2,banana loaf,4\n3,cherry tart,5\n")
    for split in ("train", "valid", "test"):
        (src / f"{split}.csv").write_text("ltable_id,rtable_id,label\n1,1,1\n2,2,1\n3,3,1\n")
    return src


def _swap_case(name: str, tmp: Path, tiny_model_path: str) -> tuple[list[str], str]:
    out = tmp / "out"
    if name == "multicorpus build":
        return ["multicorpus", "build", str(_em_source(tmp)), str(out), "--names", "a,b"], "multicorpus"
    if name == "localdocs build":
        return ["localdocs", "build", str(out), "--family", "stdlib", "--max-pairs", "40", "--test-queries", "5",
                "--dev-queries", "2", "--distractors", "5"], "localdocs"
    if name == "index":
        corpus = write_beir(tmp / "c", {"a": {"title": "", "text": "alpha"}, "b": {"title": "", "text": "beta"}},
                            {"q": "alpha"}, {"test": {"q": {"a": 1}}})
        return ["index", "--corpus", str(corpus), "--output", str(out), "--model", tiny_model_path], "index"
    from tiny_llama import build_tiny_llama

    lm = build_tiny_llama(tmp / "lm", layers=2)
    return ["prune", "--model", str(lm), "--output", str(out), "--keep-layers", "1", "--overwrite"], "model"


@pytest.mark.parametrize("command,mode", [("multicorpus build", "exchange"), ("multicorpus build", "fallback"),
                                          ("localdocs build", "exchange"), ("index", "exchange"),
                                          ("prune", "exchange")])
def test_a_swap_killed_at_every_step_leaves_a_usable_output(command, mode, tmp_path, tiny_model_path):
    """kill -9 (os._exit) after each filesystem operation of the replacement: the output path holds the complete
    earlier build (with the exchange, at once; with the rename fallback, after the recovery the next run makes),
    and the next complete run removes every hidden leftover."""
    argv, check = _swap_case(command, tmp_path, tiny_model_path)
    steps = EXCHANGE if mode == "exchange" else FALLBACK
    r = subprocess.run([sys.executable, str(TESTS / "helpers" / "swap_kill.py"), str(tmp_path / "out"), check, mode,
                        steps, "--", *argv], env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["first"] == 0
    for kill in report["kills"]:
        assert kill["rc"] == 137, kill
        assert kill["state"] in ("ok", "recovered:ok"), kill
        assert kill["same"], kill
        if mode == "exchange":
            assert kill["state"] == "ok", kill  # usable at once: no instant without a complete folder
    assert [k["step"] for k in report["kills"] if k["state"] != "ok"] == (["moved-old"] if mode == "fallback" else [])
    assert report["last"] == 0 and report["last_state"] == "ok" and report["last_same"]
    assert report["hidden_after"] == []


# -- the output contract covers every file ---------------------------------------------------------------------
def test_multicorpus_build_refuses_a_users_files_inside_an_earlier_build(tmp_path):
    src = _em_source(tmp_path)
    out = tmp_path / "bench"
    _ok(_invoke(["multicorpus", "build", src, out, "--names", "a,b"]))
    _ok(_invoke(["multicorpus", "build", src, out, "--names", "a,b"]))  # its own earlier build: replaced
    (out / "notes.txt").write_text("mine")
    (out / "train" / "my_extra_pairs.txt").write_text("mine too")
    (out / "a" / "qrels" / "extra.txt").write_text("and mine")
    before = _snapshot(tmp_path)
    r = _invoke(["multicorpus", "build", src, out, "--names", "a,b"])
    assert isinstance(r.exception, ConfigError), r.output
    for name in ("notes.txt", "train/my_extra_pairs.txt", "a/qrels/extra.txt"):
        assert name in str(r.exception)
    assert _snapshot(tmp_path) == before
    _ok(_invoke(["multicorpus", "build", src, out, "--names", "a,b", "--overwrite"]))  # the user asked
    assert not (out / "notes.txt").exists()


def test_localdocs_build_refuses_a_users_file_inside_its_folders(tmp_path):
    out = tmp_path / "ld"
    (out / "train").mkdir(parents=True)
    (out / "train" / "stdlib.jsonl").write_text("{}\n")
    (out / "stats.json").write_text(json.dumps({"families": []}))
    (out / "train" / "mine.txt").write_text("mine")
    before = _snapshot(tmp_path)
    r = _invoke(["localdocs", "build", out, "--family", "stdlib"])
    assert isinstance(r.exception, ConfigError) and "train/mine.txt" in str(r.exception), r.output
    assert _snapshot(tmp_path) == before


# -- text is text: a lone surrogate where text enters, per command --------------------------------------------
def _surrogate_corpus(tmp: Path) -> Path:
    """A BEIR folder whose JSON holds lone surrogates as escapes (json.dumps' default; write_beir cannot)."""
    root = tmp / "sc"
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "title": "T" + SURROGATE, "text": "alpha beta gamma. delta " + SURROGATE
             + " epsilon zeta eta theta."},
            {"_id": "d2", "title": "", "text": "iota kappa lambda mu. nu xi omicron pi rho."}]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "alpha " + SURROGATE}) + "\n"
                                        + json.dumps({"_id": "q2", "text": "iota"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    assert "\\ud800" in (root / "corpus.jsonl").read_text()
    return root


def _surrogate_collection(tmp: Path) -> Path:
    p = tmp / "coll.jsonl"
    rows = [{"query": f"query {i} {SURROGATE}", "positive": f"positive {i} text {SURROGATE}",
             "negatives": [f"negative {i}"]} for i in range(8)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert "\\ud800" in p.read_text(encoding="utf-8")
    return p


def test_surrogates_train(tmp_path, tiny_model_path):
    coll = _surrogate_collection(tmp_path)
    r = _invoke(["train", "--data", coll, "--model", tiny_model_path, "--output-dir", tmp_path / "run",
                 "--max-steps", "1", "--batch-size", "4", "--device", "cpu", "--no-show-progress"])
    _ok(r)
    assert f"{coll}:1: 16 lone surrogate(s)" in r.output  # counted and logged once for the file


def test_surrogates_augment_crop(tmp_path):
    out = tmp_path / "crop.jsonl"
    _ok(_invoke(["augment", "crop", "--corpus", _surrogate_corpus(tmp_path), "--output", out, "--min-words", "2"]))
    text = out.read_text(encoding="utf-8")
    assert "\ufffd" in text and "\\ud800" not in text


def test_surrogates_index_search_and_eval(tmp_path, tiny_model_path):
    corpus = _surrogate_corpus(tmp_path)
    idx = tmp_path / "idx"
    _ok(_invoke(["index", "--corpus", corpus, "--output", idx, "--model", tiny_model_path]))
    assert "\ufffd" in (idx / "docs.jsonl").read_text(encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"_id": "x", "text": "alpha " + SURROGATE}) + "\n")
    hits = tmp_path / "hits.jsonl"
    _ok(_invoke(["search", "--index", idx, "--queries", queries, "--output", hits]))
    assert json.loads(hits.read_text(encoding="utf-8").splitlines()[0])["query"] == "alpha \ufffd"
    _ok(_invoke(["eval", "--data", corpus, "--model", tiny_model_path, "--output", tmp_path / "ev"]))
    assert (tmp_path / "ev" / "eval.json").is_file()


def test_surrogates_mine(tmp_path, tiny_model_path):
    out = tmp_path / "mined.jsonl"
    _ok(_invoke(["mine", "--data", _surrogate_collection(tmp_path), "--output", out, "--model", tiny_model_path,
                 "--ranks", "1:8"]))
    assert "\ufffd" in out.read_text(encoding="utf-8")


def test_surrogates_in_llm_answers_augment_generate(tmp_path, capsys):
    from loopback_llm import LoopbackServer, chat

    from drmix.cli import main

    corpus = write_beir(tmp_path / "c", {f"d{i}": {"title": "", "text": f"note {i} about cats"} for i in range(3)},
                        {"q": "cats"}, {"test": {"q": {"d0": 1}}})
    answers = ["Query: cats " + SURROGATE + " and dogs", SURROGATE * 3, "Query: plain cats"]
    server = LoopbackServer(lambda body, n: (200, chat(answers[int(body["messages"][-1]["content"]
                                                                   .split("note ")[1][0])])))
    out = tmp_path / "gen.jsonl"
    try:
        with pytest.raises(SystemExit) as e:
            main(["augment", "generate", "--corpus", str(corpus), "--output", str(out), "--backend", "openai",
                  "--base-url", server.url, "--llm-model", "m", "--concurrency", "1", "--max-retries", "0"])
    finally:
        server.close()
    assert e.value.code in (0, None), capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["query"] for r in rows) == ["cats \ufffd and dogs", "plain cats"]
    stats = json.loads((tmp_path / "gen.jsonl.stats.json").read_text())
    assert stats["failures"] == {"unparsable": 1}
    cache = (tmp_path / "gen.jsonl.llm-cache.jsonl").read_text(encoding="utf-8")
    assert "\\ud800" not in cache and "\ufffd" in cache


# -- disk full: a file size limit in a child process (SIGXFSZ ignored, as Python does) -------------------------
LIMITED = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    from drmix.cli import main
    main(sys.argv[2:])
    """)


def _limited(limit: int, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LIMITED, str(limit), *map(str, argv)], env=_env(),
                          capture_output=True, text=True, timeout=600)


def _one_error_line(r: subprocess.CompletedProcess, path: Path) -> str:
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert str(path) in lines[0] and ".tmp" not in lines[0], lines[0]
    return lines[0]


def test_disk_full_index_is_refused_before_encoding(tmp_path, tiny_model_path):
    corpus = write_beir(tmp_path / "c", {f"d{i}": {"title": "", "text": "word " * 50} for i in range(50)},
                        {"q": "word"}, {"test": {"q": {"d0": 1}}})
    r = _limited(4000, "index", "--corpus", corpus, "--output", tmp_path / "idx", "--model", tiny_model_path)
    line = _one_error_line(r, tmp_path / "idx")
    assert "ulimit -f" in line and "nothing was written" in line
    assert not (tmp_path / "idx").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["c"]


def test_disk_full_eval_overwrite_keeps_the_earlier_files(tmp_path, tiny_model_path):
    corpus = write_beir(tmp_path / "c", {f"d{i}": {"title": "", "text": f"doc {i}"} for i in range(4)},
                        {f"q{i}": f"doc {i}" for i in range(40)}, {"test": {f"q{i}": {"d0": 1} for i in range(40)}})
    ev = tmp_path / "ev"
    _ok(_invoke(["eval", "--data", corpus, "--model", tiny_model_path, "--output", ev]))
    before = _snapshot(ev)
    r = _limited(2000, "eval", "--data", corpus, "--model", tiny_model_path, "--output", ev, "--overwrite")
    _one_error_line(r, ev / "eval.json")
    assert _snapshot(ev) == before


def test_disk_full_augment_crop_overwrite_keeps_the_earlier_files(tmp_path):
    corpus = write_beir(tmp_path / "c", {f"d{i}": {"title": "", "text": "one two three four. " * 20}
                                         for i in range(20)}, {"q": "one"}, {"test": {"q": {"d0": 1}}})
    out = tmp_path / "crop.jsonl"
    out.write_text("earlier\n")
    (tmp_path / "crop.jsonl.stats.json").write_text("{}")
    before = _snapshot(tmp_path)
    r = _limited(3000, "augment", "crop", "--corpus", corpus, "--output", out, "--overwrite")
    _one_error_line(r, out)
    assert _snapshot(tmp_path) == before


def test_disk_full_train_checkpoint_is_one_line(tmp_path, tiny_model_path):
    coll = tmp_path / "c.jsonl"
    coll.write_text("".join(json.dumps({"query": f"q {i}", "positive": f"p {i}"}) + "\n" for i in range(8)))
    run = tmp_path / "run"
    r = _limited(200_000, "train", "--data", coll, "--model", tiny_model_path, "--output-dir", run, "--max-steps",
                 "2", "--save-every", "1", "--batch-size", "4", "--device", "cpu", "--no-show-progress")
    line = _one_error_line(r, run)
    assert "no room to write" in line
    ckpt = run / "checkpoints"
    assert not ckpt.exists() or not [p for p in ckpt.iterdir() if p.name.startswith("step-")]


# -- read-only folder, an output under a file: refused before the work -------------------------------------------
def test_output_under_a_file_is_refused_before_the_work(tmp_path, tiny_model_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("n")
    corpus = write_beir(tmp_path / "c", {"a": {"title": "", "text": "alpha"}}, {"q": "alpha"},
                        {"test": {"q": {"a": 1}}})
    for argv in (["index", "--corpus", corpus, "--output", notes / "idx", "--model", "never-loaded"],
                 ["eval", "--data", corpus, "--model", "never-loaded", "--output", notes / "ev"],
                 ["augment", "crop", "--corpus", corpus, "--output", notes / "x.jsonl"],
                 ["multicorpus", "build", _em_source(tmp_path), notes / "b"]):
        r = _invoke(argv)
        assert isinstance(r.exception, ConfigError), (argv, r.output)
        assert "lies under a file" in str(r.exception) and str(notes) in str(r.exception)
    assert notes.read_text() == "n"


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_read_only_folder_is_refused_before_the_work():
    """A folder without write permission, as an unprivileged user sees it (root drops to nobody in a child)."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="drmix-ro-"))  # outside pytest's 0700 folders: nobody can reach it
    try:
        _read_only_case(top)
    finally:
        for p in (top, *top.rglob("*")):
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(top)


def _read_only_case(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    ro = tmp_path / "ro"
    ro.mkdir()
    corpus = write_beir(tmp_path / "c", {"a": {"title": "", "text": "alpha beta gamma delta"}}, {"q": "alpha"},
                        {"test": {"q": {"a": 1}}})
    for p in corpus.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    corpus.chmod(0o755)
    ro.chmod(0o555)
    # the libraries are imported first (the interpreter may live where "nobody" cannot read), then the
    # effective ids drop to nobody's: the filesystem checks the folder as it would for a plain user
    code = textwrap.dedent("""
        import os, sys, tempfile
        import unicodedata, glob, datasets, transformers.utils.logging, drmix.cli, drmix.outputs, drmix.io
        if os.geteuid() == 0:
            os.setgroups([]); os.setegid(65534); os.seteuid(65534)
        drmix.cli.main(sys.argv[1:])
        """)
    r = subprocess.run([sys.executable, "-c", code, "augment", "crop", "--corpus", str(corpus), "--output",
                        str(ro / "crop.jsonl")], env={**_env(), "HOME": str(tmp_path)}, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "no permission" in r.stderr and str(ro) in r.stderr and "Traceback" not in r.stderr
    assert list(ro.iterdir()) == []


# -- DRMIX_CACHE that cannot be written: one line naming the cache and the fix --------------------------------------
def _cache_fails(monkeypatch, cache: Path, err: int, sub: str) -> None:
    """Creating anything under ``cache / sub`` fails with ``err`` (EROFS: a read-only filesystem; ENOSPC: full)."""
    import errno as errnos

    real_mkdir = os.mkdir

    def mkdir(path, *a, **kw):
        if str(Path(path).absolute()).startswith(str(cache / sub)):
            raise OSError(err, os.strerror(err), str(path))
        return real_mkdir(path, *a, **kw)

    monkeypatch.setenv("DRMIX_CACHE", str(cache))
    monkeypatch.setattr(os, "mkdir", mkdir)
    assert err in (errnos.EROFS, errnos.ENOSPC)


@pytest.mark.parametrize("err,sub,error_type,says", [(30, "", ConfigError, "cannot be written"),
                                                     (28, "", DiskFullError, "no room in drmix's cache"),
                                                     (30, "tokenized", ConfigError, "cannot be written")])
def test_train_with_a_cache_that_cannot_be_written_is_one_line(tmp_path, tiny_model_path, monkeypatch, err, sub,
                                                                error_type, says):
    """The collections' conversion cache first, then the stored token ids (which --no-pretokenize skips)."""
    coll = tmp_path / "c.jsonl"
    coll.write_text("".join(json.dumps({"query": f"q {i}", "positive": f"p {i}"}) + "\n" for i in range(8)))
    cache = tmp_path / "ro-cache"
    _cache_fails(monkeypatch, cache, err, sub)
    r = _invoke(["train", "--data", coll, "--model", tiny_model_path, "--output-dir", tmp_path / "run", "--max-steps",
                 "1", "--batch-size", "4", "--device", "cpu", "--no-show-progress"])
    assert isinstance(r.exception, error_type), (r.exception, r.output)
    e = r.exception
    assert says in e.message and e.path == str(cache), e.format()
    assert "DRMIX_CACHE" in e.fix and ("--no-pretokenize" in e.fix) == (sub == "tokenized")


def test_a_full_cache_names_the_cache_not_the_current_folder(tmp_path, tiny_model_path, monkeypatch):
    """datasets' writer reports a full disk without a file name: the error names the cache it was writing."""
    import datasets

    coll = tmp_path / "c.jsonl"
    coll.write_text("".join(json.dumps({"query": f"q {i}", "positive": f"p {i}"}) + "\n" for i in range(8)))
    cache = tmp_path / "cache"
    monkeypatch.setenv("DRMIX_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)

    def full(self, *a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", full)
    r = _invoke(["train", "--data", coll, "--model", tiny_model_path, "--output-dir", tmp_path / "run", "--max-steps",
                 "1", "--batch-size", "4", "--device", "cpu", "--no-show-progress"])
    assert isinstance(r.exception, DiskFullError), (r.exception, r.output)
    assert r.exception.path == str(cache) and "DRMIX_CACHE" in r.exception.fix


# -- an output that is a symbolic link: written through, the link kept; a loop of links: one line ----------------
def test_index_output_that_is_a_link_is_written_into_its_target(tmp_path, tiny_model_path):
    corpus = write_beir(tmp_path / "c", {"a": {"title": "", "text": "alpha"}, "b": {"title": "", "text": "beta"}},
                        {"q": "alpha"}, {"test": {"q": {"a": 1}}})
    target = tmp_path / "disk" / "idx"
    target.mkdir(parents=True)  # (a link to nothing is refused: tests/test_outputs.py)
    link = tmp_path / "idx"
    link.symlink_to(target)
    for extra in ([], ["--overwrite"]):  # an empty target, then an earlier index replaced
        _ok(_invoke(["index", "--corpus", corpus, "--output", link, "--model", tiny_model_path, *extra]))
        assert link.is_symlink() and os.readlink(link) == str(target)
        assert target.is_dir() and any(target.iterdir())
        assert sorted(p.name for p in target.parent.iterdir()) == ["idx"]
    hits = _invoke(["search", "--index", link, "--query", "alpha", "--model", tiny_model_path])
    _ok(hits)


def test_eval_output_into_a_symlink_loop_is_one_line(tmp_path):
    corpus = write_beir(tmp_path / "c", {"a": {"title": "", "text": "alpha"}}, {"q": "alpha"},
                        {"test": {"q": {"a": 1}}})
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for out in (loop, loop / "ev"):
        r = _invoke(["eval", "--data", corpus, "--model", "never-loaded", "--output", out])
        assert isinstance(r.exception, ConfigError), (r.exception, r.output)
        assert str(out) in str(r.exception) and "loop of symbolic links" in str(r.exception)
    assert loop.is_symlink()


# -- SIGTERM is handled like Ctrl-C ---------------------------------------------------------------------------
def test_sigterm_during_an_llm_run_writes_stats_and_exits_143(tmp_path):
    """A scheduler's SIGTERM while answers arrive: stats.json is written (finished: false), the answers so far
    are in the cache, the exit code is 143, and no traceback."""
    from loopback_llm import LoopbackServer, chat, wait_until

    corpus = write_beir(tmp_path / "c", {f"d{i}": {"title": "", "text": f"note {i}"} for i in range(50)},
                        {"q": "x"}, {"test": {"q": {"d0": 1}}})
    release = __import__("threading").Event()

    def reply(body, n):
        if n > 3:
            release.wait(60)  # the fourth answer never comes before the signal
        return 200, chat(f"Query: q{n}")

    server = LoopbackServer(reply)
    out = tmp_path / "gen.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "drmix", "augment", "generate", "--corpus", str(corpus),
                             "--output", str(out), "--backend", "openai", "--base-url", server.url, "--llm-model",
                             "m", "--concurrency", "1", "--llm-batch-size", "1"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cache = tmp_path / "gen.jsonl.llm-cache.jsonl"
        assert wait_until(lambda: cache.is_file() and cache.read_text().count("\n") >= 3, 120)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        release.set()
        server.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err
    stats = json.loads((tmp_path / "gen.jsonl.stats.json").read_text())
    assert stats["finished"] is False and stats["error"] == "KeyboardInterrupt"
    assert cache.read_text().count("\n") >= 3  # the answers that arrived are kept for the rerun
    assert not out.exists()  # the output is written at the end (docs/outputs.md)
    assert "stopped before the end" in err and "terminated (SIGTERM)" in err


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell starts


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_during_training_names_the_checkpoint_and_exits_143(tmp_path, tiny_model_path, sigint):
    """Also when the run started with SIGINT ignored (``drmix train ... &`` in a script): SIGTERM still stops it
    the same way."""
    coll = tmp_path / "c.jsonl"
    coll.write_text("".join(json.dumps({"query": f"q {i}", "positive": f"p {i}"}) + "\n" for i in range(16)))
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "drmix", "train", "--data", str(coll), "--model", tiny_model_path,
                             "--output-dir", str(run), "--max-steps", "100000", "--save-every", "1", "--batch-size",
                             "4", "--device", "cpu", "--no-show-progress", "--keep-checkpoints", "1"], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint if sigint == "ignored" else None)
    from loopback_llm import wait_until

    try:
        assert wait_until(lambda: (run / "checkpoints" / "latest").is_file(), 300)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM): the last checkpoint is" in err and "--resume" in err and "Traceback" not in err


SHUTDOWN = textwrap.dedent("""
    import atexit, pathlib, sys, time
    exiting = pathlib.Path(sys.argv[1])
    def slow_exit_hook():   # a library's exit hook that takes its time (Milvus Lite stopping its server)
        exiting.write_text("exiting")
        time.sleep(120)
    atexit.register(slow_exit_hook)
    sys.argv = ["drmix", "--version"]
    from drmix.cli import main
    main()
    """)


def test_sigterm_while_the_process_shuts_down_ends_it_without_a_traceback(tmp_path):
    """The command is over and the interpreter runs its exit hooks: a SIGTERM then (a scheduler's, or the launcher
    stopping the other ranks) ends the process with 143 and what it printed, not a KeyboardInterrupt traceback
    from inside a hook."""
    from loopback_llm import wait_until

    exiting = tmp_path / "exiting"
    proc = subprocess.Popen([sys.executable, "-c", SHUTDOWN, str(exiting)], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: exiting.exists() or proc.poll() is not None, 120)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert out.startswith("drmix ")   # what the command printed is kept


def test_a_failing_command_under_torchrun_shows_drmixs_line_and_the_launcher_quotes_it(tmp_path):
    """Two gloo processes of a command that fails: each prints drmix's one line; torchrun's own ChildFailedError
    report (printed by the launcher, which drmix does not run) names the root cause with that line, not a link
    to "enable traceback", and no traceback of drmix's code appears."""
    corpus = tmp_path / "absent.jsonl"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "drmix", "index", "--corpus", str(corpus), "--output", str(tmp_path / "ix")],
                       env={**_env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    err = r.stderr
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert lines and all(f"{corpus}: corpus file not found" in ln for ln in lines), err[-3000:]
    root_cause = err.split("Root Cause", 1)[1]
    assert f"DataError: {corpus}: corpus file not found" in " ".join(root_cause.split()), err[-3000:]
    assert "To enable traceback" not in err
    package = str(Path(__import__("drmix").__file__).resolve().parent)
    assert f'File "{package}' not in err, err[-3000:]    # the only traceback is torchrun's own
    assert not (tmp_path / "ix").exists() and not (tmp_path / "ix.shards").exists()


# -- TensorBoard after a resume -------------------------------------------------------------------------------
@pytest.mark.parametrize("save_every,kill_after", [(2, 3), (3, 5)])
def test_tensorboard_after_resume_shows_each_step_once(tmp_path, tiny_model_path, save_every, kill_after):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from train_helpers import config, make_collections

    from drmix.train.trainer import Trainer

    data = make_collections(tmp_path / "data", n=16)

    class Killed(Exception):
        pass

    def kill(ctx):
        if ctx.step == kill_after + 1:
            raise Killed

    cfg = dict(max_steps=6, save_every=save_every, report_to=["tensorboard"])
    with pytest.raises(Killed):
        Trainer(config(tiny_model_path, data, tmp_path / "run", **cfg), callbacks=[kill]).train()
    Trainer(config(tiny_model_path, data, tmp_path / "run", resume=True, **cfg)).train()
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == [1, 2, 3, 4, 5, 6]
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "run" / "metrics.jsonl") if '"loss"' in line]
    assert [round(e.value, 5) for e in acc.Scalars("train/loss")] == [round(v, 5) for v in losses]
