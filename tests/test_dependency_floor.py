"""The lowest sentence-transformers and transformers pyproject.toml allows provide every module and name drmix
imports from them (recorded from their wheels in tests/dependency_floor.json by scripts/dependency_floor.py), and
the installed versions do too."""
from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import runpy
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
FLOOR = json.loads((ROOT / "tests" / "dependency_floor.json").read_text(encoding="utf-8"))
IMPORTS = runpy.run_path(str(ROOT / "scripts" / "dependency_floor.py"))["drmix_imports"]()


def _pyproject_floor(dist: str) -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(rf'"{re.escape(dist)}>=([0-9.]+)', text)
    assert m, f"pyproject.toml states no floor for {dist}"
    return m.group(1)


@pytest.mark.parametrize("dist", sorted(FLOOR))
def test_recorded_floor_is_pyprojects(dist):
    assert Version(FLOOR[dist]["version"]) == Version(_pyproject_floor(dist))


@pytest.mark.parametrize("dist", sorted(FLOOR))
def test_installed_version_meets_the_floor(dist):
    assert Version(importlib.metadata.version(dist)) >= Version(_pyproject_floor(dist))


def test_every_dependency_import_is_recorded_and_present_at_the_floor():
    recorded = {m: names for rec in FLOOR.values() for m, names in rec["modules"].items()}
    assert "MultiDatasetDefaultBatchSampler" in IMPORTS["sentence_transformers.base.sampler"]  # the scan sees them
    for module, names in IMPORTS.items():
        assert module in recorded, f"{module}: not recorded; rerun scripts/dependency_floor.py on the floor wheels"
        assert recorded[module] is not None, f"{module} does not exist at the floor: raise it in pyproject.toml"
        for n in names:
            assert recorded[module].get(n), f"{module}.{n} is missing at the floor: raise it in pyproject.toml"


def test_every_dependency_import_resolves_in_the_installed_version():
    for module, names in IMPORTS.items():
        mod = importlib.import_module(module)
        for n in names:
            assert hasattr(mod, n) or importlib.util.find_spec(f"{module}.{n}") is not None, f"{module}.{n}"
