"""Package scanning: list a package's public submodules without importing them, import them (in a child
process by default) and collect the documented objects and distribution metadata."""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import os
import pkgutil
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from drmix.data.builders.localdocs.options import DocItem, LocalDocsOptions
from drmix.errors import DataError

log = logging.getLogger(__name__)

# Submodule name parts never imported: tests, command lines, converters, build helpers, deprecated shims.
_SKIP_PARTS = {
    "test", "tests", "testing", "conftest", "benchmarks", "benchmark", "__main__", "main", "setup", "cli",
    "commands", "distutils", "f2py", "compat", "core", "contrib", "conversion_mapping", "utils_test",
    "pyplot", "hub", "onnx", "_vendor", "vendor", "experimental", "lib2to3", "tkinter", "idlelib",
}
_SKIP_PREFIXES = ("convert", "test_", "check_")


def _skip_module(name: str) -> bool:
    for part in name.split(".")[1:]:
        if part.startswith("_") or part in _SKIP_PARTS or part.startswith(_SKIP_PREFIXES) or part.endswith("_test"):
            return True
    return False


def list_submodules(root: str, *, max_depth: int = 2, limit: int = 30) -> list[str]:
    """Public submodules of package ``root`` (root first), found on the file system without importing them.

    Sorted by depth then name, cut at ``limit`` names (the root included).
    """
    spec = importlib.util.find_spec(root)
    if spec is None:
        return []
    names: list[tuple[int, str]] = [(0, root)]
    locations = list(spec.submodule_search_locations or [])

    def walk(paths: list[str], prefix: str, depth: int) -> None:
        if depth > max_depth:
            return
        for info in pkgutil.iter_modules(paths):
            full = prefix + info.name
            if _skip_module(full):
                continue
            names.append((depth, full))
            if info.ispkg:
                finder_path = getattr(info.module_finder, "path", None)
                if finder_path:
                    walk([os.path.join(finder_path, info.name)], full + ".", depth + 1)

    if locations:
        walk(locations, root + ".", 1)
    return [n for _, n in sorted(set(names))][:limit]


_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")


def _signature(name: str, obj: Any, is_method: bool) -> str | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if is_method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    try:
        text = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    except (TypeError, ValueError):
        return None
    text = _ADDR.sub("", text)
    if len(text) > 300:
        text = text[:297] + "...)"
    return name + text


def _own_doc(obj: Any) -> str | None:
    doc = getattr(obj, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    return inspect.cleandoc(doc)


def _public_members(module: Any) -> list[tuple[str, Any]]:
    """Public attributes already present in the module's namespace, sorted by name.

    Only ``vars(module)`` is read, never ``getattr`` on a name of ``__all__`` that is not loaded yet: lazy
    packages (``transformers``) would otherwise import hundreds of submodules.
    """
    namespace = vars(module)
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)):
        names = list(namespace)
    wanted = {n for n in names if isinstance(n, str) and not n.startswith("_")}
    return [(n, namespace[n]) for n in sorted(wanted) if n in namespace]


def _owned(obj: Any, top: str, stdlib: set[str]) -> bool:
    """Whether ``obj`` is defined in package ``top`` (for the standard library: in any standard module,
    since e.g. ``os.path`` re-exports ``posixpath``)."""
    owner = getattr(obj, "__module__", None)
    if not isinstance(owner, str) or not owner:
        return False
    otop = owner.split(".")[0]
    return otop == top or (top in stdlib and otop in stdlib)


def _items_of_module(module: Any, family: str, root: str, seen: set[int], opts: LocalDocsOptions) -> list[DocItem]:
    """Module docstring, public functions and classes (and their methods) owned by ``root``'s package."""
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    items: list[DocItem] = []
    mname = module.__name__
    top = root.split(".")[0]
    doc = _own_doc(module)
    if doc and id(module) not in seen:
        seen.add(id(module))
        items.append(DocItem(family, root, "module", mname, doc))
    for attr, obj in _public_members(module):
        if not (inspect.isroutine(obj) or inspect.isclass(obj)) or id(obj) in seen:
            continue
        if not _owned(obj, top, stdlib):
            continue
        seen.add(id(obj))
        qual = f"{mname}.{attr}"
        d = _own_doc(obj)
        if d:
            kind = "class" if inspect.isclass(obj) else "function"
            items.append(DocItem(family, root, kind, qual, d, _signature(qual, obj, False)))
        if inspect.isclass(obj) and opts.max_methods_per_class:
            n = 0
            for mattr in sorted(vars(obj)):
                if mattr.startswith("_") or n >= opts.max_methods_per_class:
                    continue
                meth = vars(obj)[mattr]
                if isinstance(meth, (staticmethod, classmethod)):
                    meth = meth.__func__
                if not inspect.isroutine(meth) or id(meth) in seen:
                    continue
                md = _own_doc(meth)
                if not md:
                    continue
                seen.add(id(meth))
                n += 1
                mq = f"{qual}.{mattr}"
                items.append(DocItem(family, root, "method", mq, md, _signature(mq, meth, True)))
    return items


def _package_items(family: str, roots: list[str], dist_map: dict[str, list[str]]) -> list[DocItem]:
    items = []
    done: set[str] = set()
    for root in roots:
        for dist_name in sorted(dist_map.get(root.split(".")[0], [])):
            if dist_name.lower() in done:
                continue
            done.add(dist_name.lower())
            try:
                meta = importlib.metadata.metadata(dist_name)
            except importlib.metadata.PackageNotFoundError:
                continue
            summary = meta.get("Summary") or ""
            desc = meta.get_payload() if hasattr(meta, "get_payload") else ""
            desc = desc or meta.get("Description") or ""
            if summary.strip() and isinstance(desc, str) and desc.strip():
                items.append(DocItem(family, root, "package", dist_name, desc, summary=summary.strip()))
    return items


def extract_items(families: dict[str, list[str]], opts: LocalDocsOptions) -> tuple[list[DocItem], dict[str, dict]]:
    """Import the families' modules in this process and collect their documented objects.

    Returns the items and per-family walk statistics (modules imported / failed, truncated).
    Prefer :func:`collect_items`, which runs this in a child process.
    """
    stdlib = set(getattr(sys, "stdlib_module_names", ()))
    try:
        dist_map = importlib.metadata.packages_distributions()
    except Exception:  # noqa: BLE001 - broken metadata must not stop the walk
        dist_map = {}
    items: list[DocItem] = []
    walk_stats: dict[str, dict] = {}
    for family in sorted(families):
        start = time.monotonic()
        seen: set[int] = set()
        st = {"modules": 0, "failed": 0, "truncated": False}
        fam_items: list[DocItem] = []
        roots = sorted(dict.fromkeys(families[family]))
        for root in roots:
            top = root.split(".")[0]
            if top in stdlib:
                modules = [root]
            else:
                try:
                    modules = list_submodules(root, max_depth=opts.max_depth, limit=opts.max_modules_per_package)
                except Exception:  # noqa: BLE001 - a parent package that fails to import is skipped
                    modules = []
            for mname in modules:
                if time.monotonic() - start > opts.family_time_limit_s:
                    st["truncated"] = True
                    break
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        module = importlib.import_module(mname)
                except BaseException as e:  # noqa: BLE001 - any failing import is skipped (SystemExit included)
                    log.debug("skip %s: %s", mname, e)
                    st["failed"] += 1
                    continue
                st["modules"] += 1
                fam_items.extend(_items_of_module(module, family, root, seen, opts))
        fam_items.extend(_package_items(family, roots, dist_map))
        st["seconds"] = round(time.monotonic() - start, 2)
        walk_stats[family] = st
        items.extend(fam_items)
    return items, walk_stats


def collect_items(families: dict[str, list[str]], opts: LocalDocsOptions) -> tuple[list[DocItem], dict[str, dict]]:
    """:func:`extract_items`, in a child process when ``opts.isolate`` (see the module docstring)."""
    if not opts.isolate:
        return extract_items(families, opts)
    with tempfile.TemporaryDirectory(prefix="drmix-localdocs-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "items.json"
        spec_path.write_text(json.dumps({"families": families, "options": opts.model_dump(), "sys_path": sys.path}),
                             encoding="utf-8")
        limit = opts.family_time_limit_s * max(1, len(families)) + 120
        # The child sees exactly the modules this process can import.
        # PYTHONHASHSEED: set-valued defaults in signatures print in a fixed order.
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore", PYTHONHASHSEED="0",
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            proc = subprocess.run([sys.executable, "-m", "drmix.data.builders.localdocs", str(spec_path), str(out_path)],
                                  capture_output=True, text=True, timeout=limit, env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DataError(f"reading the installed packages' documentation took over {limit:.0f} s.",
                            fix="lower max_modules_per_package or choose fewer families.") from None
        if proc.returncode != 0 or not out_path.exists():
            tail = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
            raise DataError(f"the documentation reader process failed (exit {proc.returncode}: {tail[0][:200]}).",
                            fix="run with isolate=False to see the full error, or choose fewer families.")
        payload = json.loads(out_path.read_text(encoding="utf-8"))
    items = [DocItem(**d) for d in payload["items"]]
    return items, payload["walk"]


def _child_main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    sys.path[:] = spec["sys_path"]
    opts = LocalDocsOptions(**spec["options"])
    # Whatever imported modules print must not end up anywhere the parent reads.
    sys.stdout = sys.stderr
    items, walk = extract_items(spec["families"], opts)
    Path(argv[1]).write_text(json.dumps({"items": [vars(i) for i in items], "walk": walk}), encoding="utf-8")
    return 0

