"""The registry of command areas: one module per command or command group, each registering itself.

A command area is a module of :mod:`drmix.cli` named after its command or group (``retrieval`` holds
``index``, ``search`` and ``eval``) that ends with::

    register_area(CommandArea("mine", register))

where ``register(app)`` adds its commands to the main Typer app. The built-in areas are listed in
:data:`BUILTIN`, in the order of ``drmix --help``; a package outside drmix adds commands through the
``drmix.commands`` entry-point group (its areas follow the built-in ones). The registry is a
:class:`drmix.registry.Registry`, the one idiom of strategies, allocation policies, augmentation steps, losses,
data formats and command areas.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import typer

from drmix.registry import Registry

#: the built-in areas, in the order of ``drmix --help``
BUILTIN = tuple(f"drmix.cli.{name}" for name in (
    "train", "retrieval", "demo", "localdocs", "mixture", "pipeline", "adapt", "multicorpus", "mine", "pretrain", "analyze",
    "augment", "prune", "compare", "report", "env"))


@dataclass(frozen=True)
class CommandArea:
    """One command area: its name and ``register(app)``, which adds its commands to the main app."""

    name: str
    register: Callable[[typer.Typer], None]


def _help_order(area: CommandArea) -> int:
    module = area.register.__module__
    return BUILTIN.index(module) if module in BUILTIN else len(BUILTIN)


#: every command area, in help order (the built-ins in :data:`BUILTIN` order, then the plug-ins)
AREAS: Registry[CommandArea] = Registry("command area", BUILTIN, entry_points="drmix.commands", order=_help_order)


def register_area(area: CommandArea) -> CommandArea:
    """Add a command area (called by its module at import time; :meth:`drmix.registry.Registry.register`)."""
    return AREAS.register(area)
