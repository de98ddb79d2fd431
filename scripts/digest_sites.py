"""Where drmix computes hashes, and how ``drmix.io`` is cut: read from the source with ``ast``.

    python scripts/digest_sites.py [src/drmix]                        # one line per hash call: module, line, hash
    python scripts/digest_sites.py --json [src/drmix] > measure.json  # the measure as JSON
    python scripts/digest_sites.py --table BEFORE.json [src/drmix]    # Markdown: BEFORE's measure beside today's

A hash call is a call of a ``hashlib`` constructor (``hashlib.blake2b(...)``, ``hashlib.sha256(...)``, ...), named
with its digest size in bits where it is given (``blake2b-160``). The measure: the modules that call one, the calls,
the hashes in use, and the modules and the longest module of ``drmix.io``.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

HASHES = ("blake2b", "blake2s", "md5", "sha1", "sha224", "sha256", "sha384", "sha512", "new")
BITS = {"blake2b": 512, "blake2s": 256}


def _constants(tree: ast.Module) -> dict[str, list[int]]:
    """Module-level names bound to an int or to a dict of ints: ``{name: [values]}``."""
    out: dict[str, list[int]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name) or value is None:
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            out[target.id] = [value.value]
        elif isinstance(value, ast.Dict) and value.values and all(
                isinstance(v, ast.Constant) and isinstance(v.value, int) for v in value.values):
            out[target.id] = sorted({v.value for v in value.values})
    return out


def _hash_name(call: ast.Call, constants: dict[str, list[int]]) -> str:
    """``sha256``, or a BLAKE2 hash with its digest size in bits (``blake2b-160``; several when the size is looked
    up in a module's table: ``blake2b-96/128``)."""
    name = call.func.attr  # type: ignore[attr-defined]
    if name not in BITS:
        return name
    size = next((k.value for k in call.keywords if k.arg == "digest_size"), None)
    if size is None:
        return f"{name}-{BITS[name]}"
    if isinstance(size, ast.Subscript):
        size = size.value
    if isinstance(size, ast.Constant) and isinstance(size.value, int):
        sizes = [size.value]
    elif isinstance(size, ast.Name) and size.id in constants:
        sizes = constants[size.id]
    else:
        return f"{name}-?"
    return f"{name}-" + "/".join(str(s * 8) for s in sizes)


def hash_calls(root: Path) -> list[tuple[str, int, str]]:
    """``(module path under root's parent, line, hash)`` of every hashlib constructor call under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        constants = _constants(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "hashlib"
                    and node.func.attr in HASHES):
                out.append((path.relative_to(root.parent).as_posix(), node.lineno, _hash_name(node, constants)))
    return sorted(out)


def measure(root: Path) -> dict[str, object]:
    """The numbers the table shows (see the module docstring)."""
    calls = hash_calls(root)
    io = [root / "io.py"] if (root / "io.py").is_file() else sorted((root / "io").glob("*.py"))
    lines = {p.relative_to(root.parent).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in io}
    return {"modules": sorted({m for m, _, _ in calls}), "calls": len(calls),
            "hashes": sorted({h for _, _, h in calls}), "io_modules": len(lines),
            "io_longest": max(lines.values()) if lines else 0}


def table(before: dict, after: dict) -> str:
    """Markdown: ``before``'s measure beside ``after``'s."""
    rows = [("modules that call a hash function", len(before["modules"]), len(after["modules"])),
            ("hash calls", before["calls"], after["calls"]),
            ("hashes in use", ", ".join(before["hashes"]), ", ".join(after["hashes"])),
            ("`drmix.io`: modules", before["io_modules"], after["io_modules"]),
            ("`drmix.io`: lines of the longest module", before["io_longest"], after["io_longest"])]
    out = ["| measure | before | after |", "|---|---|---|"]
    out += [f"| {name} | {b} | {a} |" for name, b, a in rows]
    out.append(f"| the modules after | | {', '.join(f'`{m}`' for m in after['modules'])} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="src/drmix", type=Path)
    ap.add_argument("--json", action="store_true", help="print the measure as JSON")
    ap.add_argument("--table", type=Path, metavar="BEFORE.json", help="print a Markdown table of BEFORE's measure "
                                                                       "beside today's")
    args = ap.parse_args()
    if args.table is not None:
        sys.stdout.write(table(json.loads(args.table.read_text(encoding="utf-8")), measure(args.root)))
    elif args.json:
        print(json.dumps(measure(args.root), indent=2))
    else:
        for module, line, name in hash_calls(args.root):
            print(f"{module}:{line}: {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
