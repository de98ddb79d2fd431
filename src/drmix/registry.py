"""One registry idiom for everything drmix lets a module plug in: strategies, allocation policies,
augmentation steps and command-line areas.

Modelled on peft (``PEFT_TYPE_TO_CONFIG_MAPPING`` + ``register_peft_method``): each kind has one
:class:`Registry` holding *specs* (frozen dataclasses with at least a ``name``). A module registers its spec
at import time through its kind's ``register_<kind>`` function, which is :meth:`Registry.register` (the one
place where a name registered twice is refused and a reloaded module's spec replaces its own); the registry
imports an **explicit list of built-in modules** on first lookup (no directory scan, so what ships is
readable in one place), then the modules named by an optional entry-point group, so a package outside drmix
can add its own.

Hand-written: no library offers a typed, lazily loaded registry with entry points; it is a few lines.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from drmix.errors import ConfigError

log = logging.getLogger(__name__)

S = TypeVar("S")


class Registry(Generic[S]):
    """Specs of one kind, by name.

    Args:
        kind: what is registered, for messages ("strategy", "allocation policy", ...).
        builtin: the modules that register the built-in specs, imported on first lookup.
        entry_points: an entry-point group whose entries name modules to import (plug-ins), or None.
        order: sort key of :meth:`all` (default: registration order).
        identity: what makes two specs of one name the same registration (a module imported again), which
            replaces the first; default: the specs are equal.
        builtins_first: import the built-ins before registering anything else, so that a plug-in cannot take a
            built-in's name.
    """

    def __init__(self, kind: str, builtin: Sequence[str], *, entry_points: str | None = None,
                 order: Callable[[S], Any] | None = None, identity: Callable[[S], Any] | None = None,
                 builtins_first: bool = False) -> None:
        self.kind = kind
        self.builtin = tuple(builtin)
        self.entry_points = entry_points
        self.order = order
        self.identity = identity
        self.builtins_first = builtins_first
        self._specs: dict[str, S] = {}
        self._loaded = False
        self._loading = False

    def register(self, spec: S) -> S:
        """Add ``spec`` (called by its module at import time) and return it; a name already registered by another
        spec is a ValueError, the same registration again (see ``identity``) replaces the first in place."""
        if self.builtins_first:
            self.load()
        name = str(getattr(spec, "name")).lower()
        old = self._specs.get(name)
        if old is not None and old is not spec and self._identity(old) != self._identity(spec):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._specs[name] = spec
        return spec

    def _identity(self, spec: S) -> Any:
        return self.identity(spec) if self.identity is not None else spec

    def registered(self, name: str) -> S | None:
        """The spec registered as ``name`` so far, without importing the built-ins (None if none)."""
        return self._specs.get(str(name).lower())

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a plug-in replacing a spec, a test cleaning up); unknown names are ignored."""
        self._specs.pop(str(name).lower(), None)

    def load(self) -> None:
        """Import the built-in modules and the plug-ins (once)."""
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            for module in self.builtin:
                importlib.import_module(module)
            if self.entry_points:
                from importlib.metadata import entry_points

                for ep in entry_points(group=self.entry_points):
                    try:
                        importlib.import_module(ep.value.split(":")[0])
                    except Exception as e:  # a broken plug-in must not break the built-ins
                        log.warning("%s plug-in %s could not be imported: %s", self.kind, ep.name, e)
            self._loaded = True
        finally:
            self._loading = False

    def all(self) -> dict[str, S]:
        """Every registered spec by name (in ``order``, else registration order)."""
        self.load()
        specs = list(self._specs.items())
        if self.order is not None:
            specs = [kv for _, kv in sorted(enumerate(specs), key=lambda x: (self.order(x[1][1]), x[0]))]
        return dict(specs)

    def names(self, **flags: Any) -> tuple[str, ...]:
        """Names of the specs whose attributes equal ``flags`` (e.g. ``needs_labels=False``)."""
        return tuple(n for n, s in self.all().items() if all(getattr(s, k) == v for k, v in flags.items()))

    def get(self, name: str) -> S:
        """The spec of ``name`` (case-insensitive); a ConfigError listing the registered names otherwise."""
        specs = self.all()
        spec = specs.get(str(name).lower())
        if spec is None:
            raise ConfigError(f"unknown {self.kind} '{name}'.", fix=f"use one of: {', '.join(specs)}.")
        return spec

    def __contains__(self, name: object) -> bool:
        return str(name).lower() in self.all()

    def __iter__(self) -> Iterator[S]:
        return iter(self.all().values())

    def __len__(self) -> int:
        return len(self.all())
