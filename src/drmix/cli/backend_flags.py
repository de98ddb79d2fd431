"""The index backends' choices, parameters and help as ``drmix index`` / ``search`` / ``eval`` options, read from the
backend registry (:data:`drmix.retrieval.backends.base.BACKENDS`) when the commands are registered, so a backend
added by a package (the ``drmix.index_backends`` entry-point group) is a ``--backend`` choice with its own flags.

Each field of a backend's parameter model (:attr:`~drmix.retrieval.backends.base.BackendSpec.params`) is one flag
(``--`` + its name with ``-`` for ``_``, or its ``json_schema_extra["flag"]``); a name several backends take is
one flag whose help names them and each one's default. Every such flag defaults to "not given" (None): the
chosen backend's own default applies, and a flag only another backend takes is refused
(:func:`drmix.retrieval.build.check_own_params`).
Hand-written: typer builds commands from function signatures, so these signatures are generated here.
"""
from __future__ import annotations

import inspect
import re
import types
import typing
from enum import Enum
from typing import Any, Optional

import typer

from drmix.retrieval.backends.base import BACKENDS, DEFAULT_BACKEND, BackendSpec

#: the prefix of a backend parameter's name among a command's arguments (kept apart from the command's own)
PREFIX = "backend__"


def choices(name: str, values: list[str]) -> type[Enum]:
    """A str Enum of ``values`` (typer shows and checks them as choices)."""
    return Enum(name, {re.sub(r"\W", "_", v) or "_": v for v in values}, type=str)  # type: ignore[return-value]


def backend_enum() -> type[Enum]:
    return choices("IndexBackend", [s.name for s in BACKENDS])


def kind_enum() -> type[Enum]:
    return choices("IndexKind", list(dict.fromkeys(k for s in BACKENDS for k in s.kinds)))


def backend_help() -> str:
    return "Where the index lives: " + "; ".join(f"{s.name}: {s.help.rstrip('.')}" for s in BACKENDS) + "."


def kind_help() -> str:
    return ("Index type. " + "; ".join(f"{s.name}: {s.kinds[0]} (default)" + "".join(f", {k}" for k in s.kinds[1:])
                                       for s in BACKENDS) + " (docs/evaluation.md).")


def location_help() -> str:
    """What ``--index`` takes: a folder or a file written by drmix index (naming their backends), or a location
    of a backend that writes to a URI (its own description)."""
    parts = []
    for target in ("folder", "file"):
        names = [s.name for s in BACKENDS if s.target == target]
        if names:
            parts.append(f"a {target} written by drmix index ({', '.join(names)})")
    parts += [s.location_help or f"a {s.name} location" for s in BACKENDS if s.target == "uri"]
    return "An index: " + ", or ".join(parts) + "."


def uri_help() -> str:
    parts = [f"{s.name}: {s.target_help or 'its URI'}" for s in BACKENDS if s.target == "uri"]
    return "Backends that write a collection at a URI -- " + ("; ".join(parts) or "none is installed") + "."


def collection_help() -> str:
    names = ", ".join(s.name for s in BACKENDS if s.target == "uri") or "backends that write to a URI"
    return f"{names}: the collection to write (default: the corpus folder's name)."


def output_help() -> str:
    names = ", ".join(s.name for s in BACKENDS if s.target != "uri")
    return (f"The folder (or file) to write the index to ({names}; replaced atomically; a non-empty folder that "
            "is not an index is refused).")


def _annotation(field_type: Any) -> Any:
    args = [a for a in typing.get_args(field_type) if a is not type(None)]
    if typing.get_origin(field_type) in (typing.Union, types.UnionType) and len(args) == 1:
        field_type = args[0]
    return Optional[field_type] if field_type in (int, float, bool, str) else Optional[str]


def _bound(field: Any, kind: str) -> Any:
    return next((getattr(m, kind) for m in field.metadata if hasattr(m, kind)), None)


def _defaults(entries: list[tuple[BackendSpec, Any]]) -> str:
    by_value: dict[str, list[str]] = {}
    for spec, field in entries:
        if field.default is not None:
            by_value.setdefault(str(field.default), []).append(spec.name)
    if not by_value:
        return ""
    if len(by_value) == 1 and sum(map(len, by_value.values())) == len(entries):
        return f"  [default: {next(iter(by_value))}]"
    return "  [default: " + ", ".join(f"{v} ({', '.join(names)})" for v, names in by_value.items()) + "]"


def param_options() -> list[inspect.Parameter]:
    """One keyword-only typer parameter (named ``backend__<field>``) per parameter name any backend takes."""
    fields: dict[str, list[tuple[BackendSpec, Any]]] = {}
    for spec in BACKENDS:
        for name, field in spec.params.model_fields.items():
            fields.setdefault(name, []).append((spec, field))
    out = []
    for name, entries in fields.items():
        field = entries[0][1]
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flag = extra.get("flag") or "--" + name.replace("_", "-")
        help_text = (f"{', '.join(s.name for s, _ in entries)}: {field.description or name}"
                     + _defaults(entries))
        option = typer.Option(None, flag, help=help_text, show_default=False, min=_bound(field, "ge"),
                              max=_bound(field, "le"))
        out.append(inspect.Parameter(PREFIX + name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                     annotation=_annotation(field.annotation)))
    return out


def with_backend_options(fn: Any) -> Any:
    """``fn`` with the backend parameters appended to its signature (they reach it as ``params``: the given ones
    by field name), its ``backend`` a choice of the registered backends and its ``kind`` of their index kinds."""
    sig = inspect.signature(fn, eval_str=True)
    own = []
    for p in sig.parameters.values():
        if p.name == "params":
            continue
        if p.name == "backend":
            p = p.replace(annotation=backend_enum(), default=typer.Option(DEFAULT_BACKEND, "--backend",
                                                                        help=backend_help()))
        elif p.name == "kind":
            p = p.replace(annotation=Optional[kind_enum()], default=typer.Option(None, "--kind", help=kind_help()))
        elif p.name == "output":
            p = p.replace(default=typer.Option(None, "--output", "-o", help=output_help()))
        elif p.name == "uri":
            p = p.replace(default=typer.Option(None, "--uri", help=uri_help()))
        elif p.name == "collection":
            p = p.replace(default=typer.Option(None, "--collection", help=collection_help()))
        own.append(p)
    extra = param_options()

    def command(**kwargs: Any) -> Any:
        params = {k[len(PREFIX):]: kwargs.pop(k) for k in list(kwargs) if k.startswith(PREFIX)}
        for name in ("backend", "kind"):
            if isinstance(kwargs.get(name), Enum):
                kwargs[name] = kwargs[name].value
        return fn(**kwargs, params={k: v for k, v in params.items() if v is not None})

    command.__signature__ = inspect.Signature(own + extra)  # type: ignore[attr-defined]
    command.__doc__ = fn.__doc__
    command.__name__ = fn.__name__
    return command
