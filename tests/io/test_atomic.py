"""drmix.io.atomic: the folder swap killed between every pair of filesystem operations, the recovery of what a
killed swap leaves, a full disk while writing, symbolic links and loops, and the grouped atomic files."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from drmix.errors import ConfigError, DiskFullError
from drmix.io import atomic
from drmix.io.atomic import AtomicFiles, atomic_dir, atomic_write_bytes, atomic_write_text, recover_swap, swap_leftovers

SRC = str(Path(atomic.__file__).resolve().parents[2])
EXCHANGE_STEPS = ("created", "built", "exchanged", "removing")
FALLBACK_STEPS = ("created", "built", "marked-new", "moved-old", "moved-new", "removing")

# A child process that replaces OUT (holding old.txt) by a folder holding new.txt, killed with os._exit at one
# step: "removing" kills half-way through deleting the previous folder.
CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from drmix.io import atomic
    out, step, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    atomic._USE_EXCHANGE = mode == "exchange"
    def fault(name):
        if name == step:
            os._exit(137)
    atomic._fault_point = fault
    if step == "removing":
        def remove(p):
            files = sorted(f for f in p.rglob("*") if f.is_file())
            if files:
                files[0].unlink()
            os._exit(137)
        atomic._remove = remove
    with atomic.atomic_dir(out) as tmp:
        (tmp / "new.txt").write_text("new")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "more.txt").write_text("more")
    """)


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


OLD = {"old.txt": "old", "sub/keep.txt": "keep"}
NEW = {"new.txt": "new", "sub/more.txt": "more"}


def _old_output(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "old.txt").write_text("old")
    (out / "sub" / "keep.txt").write_text("keep")
    (tmp_path / ".out.old").mkdir()  # the user's own hidden sibling: never touched
    (tmp_path / ".out.old" / "mine.txt").write_text("mine")
    return out


def _kill_at(out: Path, step: str, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    r = subprocess.run([sys.executable, "-c", CHILD, str(out), step, mode], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 137, r.stderr


@pytest.mark.parametrize("step", EXCHANGE_STEPS)
def test_exchange_swap_killed_at_every_step_leaves_the_old_or_the_new_folder(tmp_path, step):
    out = _old_output(tmp_path)
    _kill_at(out, step, "exchange")
    # no recovery needed: the path holds one complete folder right after the kill
    assert _tree(out) == (OLD if step in ("created", "built") else NEW)
    leftovers = swap_leftovers(out)
    assert len(leftovers) == 1 and leftovers[0][1] == "tmp"
    assert recover_swap(out) is None and _tree(out) == (OLD if step in ("created", "built") else NEW)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]
    assert (tmp_path / ".out.old" / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize("step", FALLBACK_STEPS)
def test_rename_fallback_killed_at_every_step_is_recovered_to_the_old_or_the_new_folder(tmp_path, step):
    out = _old_output(tmp_path)
    _kill_at(out, step, "fallback")
    if step != "moved-old":  # the one instant without a folder at the path (the exchange has none)
        assert _tree(out) == (OLD if step in ("created", "built", "marked-new") else NEW)
    else:
        assert not out.exists()
    recover_swap(out)
    # the folder at the path stays; a missing one is put back from the complete new folder, else the old one
    assert _tree(out) == (OLD if step in ("created", "built", "marked-new") else NEW)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]
    assert (tmp_path / ".out.old" / "mine.txt").read_text() == "mine"


def test_next_swap_removes_leftovers_and_replaces(tmp_path, monkeypatch):
    out = _old_output(tmp_path)
    _kill_at(out, "exchanged", "exchange")
    first = swap_leftovers(out)
    _kill_at(out, "built", "exchange")  # the second run removed the first's leftover before its own swap
    second = swap_leftovers(out)
    assert len(first) == len(second) == 1 and first[0][0] != second[0][0] and not first[0][0].exists()
    legacy = tmp_path / ".out.ab12cd_9.old"  # what an earlier drmix (mkdtemp names) left
    legacy.mkdir()
    with atomic_dir(out) as tmp:
        (tmp / "v3.txt").write_text("3")
    assert _tree(out) == {"v3.txt": "3"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]


def test_a_live_swap_is_left_alone_by_another_process_recovery(tmp_path):
    out = _old_output(tmp_path)
    with atomic_dir(out) as tmp:
        (tmp / "x").write_text("x")
        assert swap_leftovers(out) == []  # locked: a running swap is not a leftover
        code = f"from drmix.io.atomic import recover_swap; recover_swap({str(out)!r})"
        subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, check=True, timeout=120)
        assert (tmp / "x").is_file()
    assert _tree(out) == {"x": "x"}


def test_missing_path_with_only_an_unfinished_folder_is_not_recovered(tmp_path):
    out = tmp_path / "fresh"
    _kill_at(out, "built", "exchange")  # a first build killed before its rename: nothing complete existed
    assert not out.exists() and len(swap_leftovers(out)) == 1
    assert recover_swap(out) is None
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_swap_into_a_symlink_writes_through_it_and_keeps_the_link(tmp_path):
    """The user's link stays a link; its target (reached through a chain of links too) is replaced."""
    target = tmp_path / "data" / "real"
    target.mkdir(parents=True)
    (target / "a.txt").write_text("a")
    hop = tmp_path / "hop"
    hop.symlink_to(target)
    link = tmp_path / "link"
    link.symlink_to(hop)
    with atomic_dir(link) as tmp:
        (tmp / "b.txt").write_text("b")
    assert link.is_symlink() and os.readlink(link) == str(hop) and hop.is_symlink()
    assert _tree(target) == {"b.txt": "b"} and _tree(link) == {"b.txt": "b"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "hop", "link"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["real"]  # no hidden leftover beside the target


def test_swap_into_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "later")
    with atomic_dir(link) as tmp:
        (tmp / "b.txt").write_text("b")
    assert link.is_symlink() and _tree(tmp_path / "later") == {"b.txt": "b"}


@pytest.mark.parametrize("how", ["atomic_write_bytes", "AtomicFiles"])
def test_an_atomic_file_write_to_a_symlink_writes_its_target(tmp_path, how):
    target = tmp_path / "keep" / "real.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    if how == "atomic_write_bytes":
        atomic_write_bytes(link, b"new")
    else:
        with AtomicFiles() as files:
            files.write_bytes(link, b"new")
    assert link.is_symlink() and target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "out.json"]


def test_a_symlink_loop_is_one_error_naming_the_path(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    for write in (lambda: atomic_write_bytes(loop, b"x"), lambda: atomic_dir(loop).__enter__(),
                  lambda: atomic_write_bytes(loop / "inside.json", b"x")):
        with pytest.raises(ConfigError) as e:
            write()
        assert str(loop) in str(e.value) and "symbolic link" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


def test_disk_full_while_building_names_the_output_and_keeps_the_old(tmp_path):
    out = _old_output(tmp_path)
    with pytest.raises(DiskFullError) as e:
        with atomic_dir(out) as tmp:
            (tmp / "a").write_text("a")
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "a"))
    assert str(out) in str(e.value) and ".tmp" not in str(e.value) and "left as it was" in str(e.value)
    assert _tree(out) == OLD and sorted(p.name for p in tmp_path.iterdir()) == [".out.old", "out"]


def test_file_size_limit_in_a_child_process_ends_in_one_error(tmp_path):
    """ulimit -f (SIGXFSZ ignored, as Python does): a write past the limit is a DiskFullError naming the file,
    and the earlier file is left as it was."""
    target = tmp_path / "big.json"
    target.write_text("earlier")
    code = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
        from drmix.errors import DiskFullError
        from drmix.io.atomic import atomic_write_text
        try:
            atomic_write_text({str(target)!r}, "x" * 5000)
        except DiskFullError as e:
            print(e.format())
            sys.exit(3)
        """)
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert r.stdout.startswith(f"{target}: no room to write") and "ulimit -f: 1000 bytes" in r.stdout
    assert target.read_text() == "earlier" and sorted(p.name for p in tmp_path.iterdir()) == ["big.json"]


def test_atomic_files_replace_all_or_none(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.md"
    a.write_text("old a")
    b.write_text("old b")
    with pytest.raises(DiskFullError) as e:
        with AtomicFiles() as files:
            files.write_json(a, {"new": 1})
            raise OSError(errno.ENOSPC, "No space left on device")  # as the second file's write would
    assert str(a) in str(e.value)
    assert a.read_text() == "old a" and b.read_text() == "old b"
    with AtomicFiles() as files:
        files.write_json(a, {"new": 1})
        files.write_text(b, "new b")
    assert json.loads(a.read_text()) == {"new": 1} and b.read_text() == "new b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.md"]


def test_atomic_write_of_text_with_a_surrogate_is_not_reached(tmp_path):
    """The rule is applied where text enters; a surrogate that still reached a writer is a plain error."""
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(tmp_path / "x", "\ud800")
    assert list(tmp_path.iterdir()) == []


def test_a_permission_error_names_the_folder_not_the_temporary_file(tmp_path):
    """drmix report into a run folder that became read-only after the checks: the error names the folder."""
    code = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from drmix.errors import ConfigError
        from drmix.io.atomic import atomic_write_text
        os.setgroups([]); os.setegid(65534); os.seteuid(65534)
        try:
            atomic_write_text(Path(sys.argv[1]) / "report.html", "x")
        except ConfigError as e:
            print(e.format()); sys.exit(3)
        """)
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to nobody")
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="drmix-ro-"))
    try:
        top.chmod(0o555)
        r = subprocess.run([sys.executable, "-c", code, str(top)], env={**os.environ, "PYTHONPATH": SRC},
                           capture_output=True, text=True, timeout=120)
    finally:
        top.chmod(0o755)
        top.rmdir()
    assert r.returncode == 3, r.stderr[-2000:]
    assert r.stdout.startswith(f"{top}: no permission") and ".tmp" not in r.stdout
