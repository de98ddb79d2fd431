"""The strategy registry: every mixture strategy registers itself, with its options model and its flags.

A strategy module ends with one call (peft's ``register_peft_method`` is the model)::

    register_strategy(StrategySpec(
        name="mystrategy", build=_build, options=MyOptions, help="one line for --help and docs",
        learns_weights=True))

``build(config, options, names, weights) -> Strategy`` is the one builder signature: ``config`` is the
:class:`~drmix.config.TrainConfig`, ``options`` the validated instance of the spec's pydantic ``options``
model (or None when the strategy takes none), ``names`` the training collections' names and ``weights``
their ``weight:`` keys (None where a collection has none). Options are written under the strategy's own key of the
config (``dro:``, ``influence:``, ``idro:``: ``options_field``; the older ``tdro:`` and ``infdds:`` are read too) or, for a strategy without one, under
``strategy_options:``; on the command line ``--tdro KEY=VALUE`` / ``--strategy-options KEY=VALUE``.
:class:`~drmix.config.TrainConfig` asks this registry to check the strategy name and its options when it
is loaded, before any model or collection is read.

Discovery: the modules of the :mod:`drmix.mixture` package are imported once, on the first lookup, so a
new module in that package registers itself without a list to edit; a strategy of another package
registers through the ``drmix.strategies`` entry-point group (each entry point names a module to import).
"""
from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from drmix.errors import ConfigError

if TYPE_CHECKING:  # the config imports this module lazily, from its validator
    from drmix.config import TrainConfig
    from drmix.mixture.base import Strategy

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "drmix.strategies"
#: TrainConfig field that holds the options of strategies that have no field of their own
GENERIC_OPTIONS_FIELD = "strategy_options"


@dataclass(frozen=True)
class StrategySpec:
    """One registered strategy.

    Attributes:
        name: the value of ``--strategy`` (lower case).
        build: ``build(config, options, names, weights) -> Strategy``.
        help: one line for ``--help`` and the docs.
        options: the pydantic model of the strategy's options (``extra="forbid"``), or None.
        options_field: the TrainConfig field holding the options (default: ``strategy_options``).
        family: strategies that share a module and an options model (``dro``, ``influence``).
        needs_reference: needs ``reference_model`` (a frozen reference's losses).
        learns_weights: learns collection weights that ``weights.json`` records for ``--transfer``.
        needs_dev: needs dev sets (``--dev``).
        requires_mixed_batches: measures every collection in each batch (``--batching mixed``).
        docs: where the options are documented.
    """

    name: str
    build: Callable[["TrainConfig", BaseModel | None, list[str], list[float | None]], "Strategy"]
    help: str
    options: type[BaseModel] | None = None
    options_field: str | None = None
    family: str = ""
    needs_reference: bool = False
    learns_weights: bool = False
    needs_dev: bool = False
    requires_mixed_batches: bool = False
    docs: str = "docs/mixture.md"

    @property
    def field(self) -> str:
        return self.options_field or GENERIC_OPTIONS_FIELD


_REGISTRY: dict[str, StrategySpec] = {}
_discovered = False


def register_strategy(spec: StrategySpec) -> StrategySpec:
    """Add ``spec`` to the registry (called at import time by the strategy's module); returns it."""
    name = spec.name.lower()
    old = _REGISTRY.get(name)
    if old is not None and old.build is not spec.build:
        raise ValueError(f"strategy {name!r} is already registered by {old.build.__module__}")
    _REGISTRY[name] = spec
    return spec


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    import drmix.mixture as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in ("base", "registry"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(ep.value.split(":")[0])
        except Exception as e:  # a broken plug-in must not break the built-in strategies
            log.warning("strategy plug-in %s could not be imported: %s", ep.name, e)


def registered_strategies() -> dict[str, StrategySpec]:
    """Every registered strategy by name, in name order."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def strategy_names(**flags: Any) -> tuple[str, ...]:
    """Names of the registered strategies whose attributes equal ``flags`` (e.g. ``family="dro"``)."""
    return tuple(n for n, s in registered_strategies().items() if all(getattr(s, k) == v for k, v in flags.items()))


def get_strategy(name: str) -> StrategySpec:
    """The spec of ``name`` (case-insensitive); a ConfigError listing the registered names otherwise."""
    specs = registered_strategies()
    spec = specs.get(str(name).lower())
    if spec is None:
        raise ConfigError(f"unknown strategy '{name}'.", fix=f"use one of: {', '.join(specs)}.")
    return spec


def option_fields() -> set[str]:
    """The TrainConfig fields that hold strategy options."""
    return {s.field for s in registered_strategies().values()} | {GENERIC_OPTIONS_FIELD}


def parse_options(spec: StrategySpec, values: dict[str, Any] | BaseModel | None) -> BaseModel | None:
    """``values`` validated by the spec's options model; a ConfigError naming the option otherwise."""
    if spec.options is None:
        if values:
            raise ConfigError(f"strategy '{spec.name}' takes no options, got {', '.join(map(str, values))}.",
                              fix=f"remove the `{spec.field}:` entries.")
        return None
    if isinstance(values, spec.options):
        return values
    try:
        return spec.options.model_validate(values or {})
    except ValidationError as e:
        msg = "; ".join(f"{'.'.join(map(str, err['loc'])) or spec.field}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"invalid {spec.field} option for strategy '{spec.name}': {msg}.",
                          fix=f"valid options: {', '.join(spec.options.model_fields)} (see {spec.docs}).") from None


def check_config(config: "TrainConfig") -> None:
    """Check the strategy name and its options (called when a TrainConfig is built)."""
    spec = get_strategy(config.mixture.strategy)
    parse_options(spec, getattr(config, spec.field))
    for other in option_fields() - {spec.field}:  # options given to a strategy family not selected: still checked
        values = getattr(config, other, None)
        owners = [s for s in registered_strategies().values() if s.field == other and s.options is not None]
        if values and owners:
            parse_options(owners[0], values)


def build_strategy(config: "TrainConfig", collection_names: list[str],
                   collection_weights: list[float | None] | None = None) -> "Strategy":
    """The strategy ``config.mixture.strategy`` names, built by its registered builder with its validated options
    (``collection_weights``: the collections' ``weight:`` keys, used by ``--mixture file`` without a file)."""
    spec = get_strategy(config.mixture.strategy)
    if config.mixture.transfer and spec.name != "static":
        raise ConfigError(f"--transfer applies learned weights to static training, not to strategy '{spec.name}'.",
                          fix="drop --strategy or --transfer.")
    names = list(collection_names)
    weights = list(collection_weights) if collection_weights is not None else [None] * len(names)
    return spec.build(config, parse_options(spec, getattr(config, spec.field)), names, weights)
