"""drmix env: the versions, devices, model path, caches (with their sizes) and extras an issue report needs, as
Markdown and as JSON, creating nothing."""
from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import pytest

from cli_helpers import run
from drmix.cli import env as env_mod


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HOME, DRMIX_CACHE and HF_HOME in an empty folder; a cache with 2 files in embedding-cache."""
    for name in list(os.environ):
        if name.startswith(("HF_", "HUGGINGFACE_", "DRMIX_", "XDG_CACHE")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    (tmp_path / "home").mkdir()
    part = tmp_path / "cache" / "embedding-cache"
    part.mkdir(parents=True)
    (part / "a.npy").write_bytes(b"x" * 1500)
    (part / "sub").mkdir()
    (part / "sub" / "b.json").write_bytes(b"y" * 500)
    (part / "link").symlink_to(part / "a.npy")  # not followed: counted once
    return tmp_path


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_env_prints_versions_devices_model_and_cache_sizes_and_creates_nothing(home):
    """A fresh interpreter (so every import it makes is seen), HOME and every cache in an empty folder."""
    import subprocess

    before = _tree(home)
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run([sys.executable, "-m", "drmix", "env"], capture_output=True, text=True, cwd=home / "home",
                          env={**os.environ, "PYTHONPATH": src}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _tree(home) == before  # read-only: no cache, no log, no folder made
    out = done.stdout
    import drmix
    from drmix.model.paths import default_model_path

    text = " ".join(out.split())
    for dist in ("torch", "transformers", "sentence-transformers", "accelerate", "peft", "datasets", "faiss-cpu"):
        assert f"| {dist} | {metadata.version(dist)} |" in text, dist
    assert f"- drmix: {drmix.__version__} (`{Path(drmix.__file__).resolve().parent}`" in text
    assert f"- Python: {sys.version.split()[0]} " in text
    assert f"`{default_model_path()}`" in text
    assert f"| drmix cache ($DRMIX_CACHE) | `{home / 'cache'}` | 2.0 kB | 2 |" in text  # 1,500 + 500 bytes
    assert f"| $DRMIX_CACHE/embedding-cache | `{home / 'cache' / 'embedding-cache'}` | 2.0 kB | 2 |" in text
    assert f"`{home / 'hf' / 'hub'}` | not created yet |" in text
    assert f"- `DRMIX_CACHE={home / 'cache'}`" in text


def test_env_json_holds_exact_sizes_extras_and_the_bf16_units(home, capsys, monkeypatch):
    from drmix import device

    monkeypatch.setattr(device, "cpu_bf16", lambda: {"avx512_bf16": True, "amx": False, "arm_bf16": False,
                                                     "fast": False})
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    monkeypatch.setenv("WANDB_API_KEY", "k3y")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    code, out, err = run(["env", "--json"], capsys)
    assert code == 0, err
    info = json.loads(out)
    caches = {c["name"]: c for c in info["caches"]}
    assert (caches["drmix cache ($DRMIX_CACHE)"]["bytes"], caches["drmix cache ($DRMIX_CACHE)"]["files"]) == (2000, 2)
    assert caches["$DRMIX_CACHE/embedding-cache"]["about"].startswith("embeddings reused")
    assert caches["datasets cache (HF_DATASETS_CACHE)"]["path"] == str(home / "hf" / "datasets")
    assert info["devices"]["cpu"]["bf16"]["fast"] is False
    assert info["devices"]["auto_precision"]["training"] == ("no" if not info["devices"]["cuda"]["gpus"] else
                                                             info["devices"]["auto_precision"]["training"])
    for extra, packages in info["extras"].items():
        for dist, ver in packages.items():
            assert ver == env_mod.version(dist)
    assert info["environment"]["HF_TOKEN"] == "(set)" and info["environment"]["WANDB_API_KEY"] == "(set)"
    assert info["environment"]["TOKENIZERS_PARALLELISM"] == "false"  # a TOKEN inside a word is no secret
    assert "hf_secret_value" not in out and "k3y" not in out
    code, out, _ = run(["env"], capsys)
    assert "hf_secret_value" not in out
    assert "AVX512-BF16; bf16 autocast is usually slower than fp32 here" in " ".join(out.split())


def test_env_escapes_what_it_prints(home, capsys, monkeypatch):
    """A cache path with Markdown in it stays one literal code span; a missing extra names its install."""
    odd = home / "a|b *c*`d"
    odd.mkdir()
    monkeypatch.setenv("DRMIX_CACHE", str(odd))
    monkeypatch.setattr(env_mod, "EXTRAS", {"nothere": ("surely-not-a-package-drmix-knows",)})
    code, out, _ = run(["env"], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("| drmix cache"))
    assert f"``{odd}``" in row
    assert "| nothere | `no: pip install 'drmix[nothere]'` | surely-not-a-package-drmix-knows missing |" in out


def test_extras_are_pyprojects():
    import tomllib

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    import re

    names = {k: tuple(re.split(r"[<>=;\s\[]", r)[0] for r in v) for k, v in extras.items() if k != "test"}
    assert names == env_mod.EXTRAS


def test_folder_size_counts_files_once_and_skips_what_it_cannot_read(tmp_path):
    assert env_mod.folder_size(tmp_path / "nope") == {"path": str(tmp_path / "nope"), "exists": False, "bytes": 0,
                                                      "files": 0}
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"1234567")
    (tmp_path / "d" / "l").symlink_to(tmp_path / "d" / "f")
    (tmp_path / "d" / "dl").symlink_to(tmp_path, target_is_directory=True)  # a loop, were links followed
    assert env_mod.folder_size(tmp_path / "d")["bytes"] == 7 and env_mod.folder_size(tmp_path)["files"] == 1
    assert [env_mod.human_bytes(n) for n in (999, 1000, 2_500_000, 3 * 10**12)] == ["999 B", "1.0 kB", "2.5 MB",
                                                                                   "3.0 TB"]
