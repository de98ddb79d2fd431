"""Record what the lowest sentence-transformers and transformers that pyproject.toml allows provide of what
drmix imports from them, into tests/dependency_floor.json (read by tests/test_dependency_floor.py, offline).

    pip download --no-deps sentence-transformers==5.4.0 transformers==4.45.0 -d /tmp/floor
    python scripts/dependency_floor.py /tmp/floor/*.whl

For every ``from PKG.MOD import NAME`` in src/drmix (PKG: sentence_transformers, transformers) it records
whether the floor wheel has ``PKG/MOD.py`` (or ``PKG/MOD/__init__.py``) and whether NAME occurs in that file (as a
definition, an import or -- transformers' lazy modules -- a string of its import structure), or is a submodule.
"""
from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"sentence_transformers": "sentence-transformers", "transformers": "transformers"}
OUT = ROOT / "tests" / "dependency_floor.json"


def drmix_imports(src: Path = ROOT / "src" / "drmix") -> dict[str, set[str]]:
    """``{module: {names}}`` of every ``from <dependency>... import ...`` in ``src`` (``import X`` gives no names)."""
    out: dict[str, set[str]] = {}
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] in PACKAGES:
                    out.setdefault(node.module, set()).update(a.name for a in node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PACKAGES:
                        out.setdefault(a.name, set())
    return out


def module_source(wheel: zipfile.ZipFile, module: str) -> str | None:
    base = module.replace(".", "/")
    for name in (f"{base}.py", f"{base}/__init__.py"):
        try:
            return wheel.read(name).decode("utf-8")
        except KeyError:
            continue
    return None


def main(wheels: list[str]) -> None:
    imports = drmix_imports()
    record: dict[str, dict] = {}
    for w in wheels:
        dist, version = Path(w).name.split("-")[:2]
        package = dist.replace("-", "_")
        if package not in PACKAGES:
            continue
        with zipfile.ZipFile(w) as wheel:
            modules = {}
            for module, names in sorted(imports.items()):
                if module.split(".")[0] != package:
                    continue
                text = module_source(wheel, module)
                modules[module] = None if text is None else {
                    n: bool(re.search(rf"\b{re.escape(n)}\b", text)) or module_source(wheel, f"{module}.{n}") is not None
                    for n in sorted(names)}
        record[PACKAGES[package]] = {"version": version, "modules": modules}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
