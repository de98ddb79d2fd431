"""The strategy registry: every mixture strategy registers itself, with its options model and its flags.

A strategy module ends with one call (peft's ``register_peft_method`` is the model)::

    register_strategy(StrategySpec(
        name="mystrategy", build=_build, options=MyOptions, help="one line for --help and docs",
        paper=MY_PAPER, card_text="learned by MyStrategy: ...", learns_weights=True))

and its module is added to :data:`BUILTIN`. The spec is the one place drmix reads about a strategy: the
model card prints its ``paper`` and ``card_text``, the trainer's preflight
(:func:`drmix.train.preflight.check_strategy`) reads ``needs_reference``, ``needs_dev`` and
``requires_mixed_batches``.

``build(config, options, names, weights) -> Strategy`` is the one builder signature: ``config`` is the
:class:`~drmix.config.TrainConfig`, ``options`` the validated instance of the spec's pydantic ``options``
model (or None when the strategy takes none), ``names`` the training collections' names and ``weights``
their ``weight:`` keys (None where a collection has none). Options are written under the strategy's own key of the
config (``dro:``, ``influence:``, ``idro:``: ``options_field``; the older ``tdro:`` and ``infdds:`` are read too) or, for a strategy without one, under
``strategy_options:``; on the command line ``--tdro KEY=VALUE`` / ``--strategy-options KEY=VALUE``.
:class:`~drmix.config.TrainConfig` asks this registry to check the strategy name and its options when it
is loaded, before any model or collection is read.

Discovery: the built-in strategy modules are listed in :data:`BUILTIN` (one line to add for a new one) and
imported on the first lookup; a strategy of another package registers through the ``drmix.strategies``
entry-point group (each entry point names a module to import). The registry is a
:class:`drmix.registry.Registry`, the one idiom of strategies, allocation policies, augmentation steps and
command areas; the functions below are its strategy-specific face.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from drmix.errors import ConfigError
from drmix.papers import Paper
from drmix.registry import Registry

if TYPE_CHECKING:  # the config imports this module lazily, from its validator
    from drmix.config import TrainConfig
    from drmix.mixture.base import Strategy

ENTRY_POINT_GROUP = "drmix.strategies"
#: the modules that register the built-in strategies
BUILTIN = ("drmix.mixture.static", "drmix.mixture.dro", "drmix.mixture.influence.strategy", "drmix.mixture.idro")
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
        paper: the paper the strategy implements (the model card cites it), or None.
        card_text: how the model card says the collection weights were set ("learned by ...").
        needs_reference: needs ``reference_model`` (a frozen reference's losses) with its default options.
        reference_needed: ``reference_needed(options) -> bool`` where the options decide it (DRO's
            ``measurement``); None: ``needs_reference``.
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
    paper: Paper | None = None
    card_text: str = ""
    needs_reference: bool = False
    reference_needed: Callable[[BaseModel | None], bool] | None = None
    learns_weights: bool = False
    needs_dev: bool = False
    requires_mixed_batches: bool = False
    docs: str = "docs/mixture.md"

    @property
    def field(self) -> str:
        return self.options_field or GENERIC_OPTIONS_FIELD

    def needs_reference_with(self, options: BaseModel | None) -> bool:
        """Whether training with ``options`` (validated) needs ``reference_model``."""
        return self.reference_needed(options) if self.reference_needed is not None else self.needs_reference


#: every strategy, by name (in name order)
STRATEGIES: Registry[StrategySpec] = Registry("strategy", BUILTIN, entry_points=ENTRY_POINT_GROUP,
                                              order=lambda spec: spec.name)


def register_strategy(spec: StrategySpec) -> StrategySpec:
    """Add ``spec`` to the registry (called at import time by the strategy's module); returns it."""
    return STRATEGIES.register(spec)


def unregister_strategy(name: str) -> None:
    """Remove a registered strategy (for tests and plug-ins that replace one)."""
    STRATEGIES.unregister(name)


def registered_strategies() -> dict[str, StrategySpec]:
    """Every registered strategy by name, in name order."""
    return STRATEGIES.all()


def strategy_names(**flags: Any) -> tuple[str, ...]:
    """Names of the registered strategies whose attributes equal ``flags`` (e.g. ``family="dro"``)."""
    return STRATEGIES.names(**flags)


def get_strategy(name: str) -> StrategySpec:
    """The spec of ``name`` (case-insensitive); a ConfigError listing the registered names otherwise."""
    return STRATEGIES.get(name)


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


def strategy_of(config: "TrainConfig") -> tuple[StrategySpec, BaseModel | None]:
    """The spec ``config.mixture.strategy`` names and its validated options (none given where the config does
    not carry the strategy's options field: a recipe's config carries only those its stages read)."""
    spec = get_strategy(config.mixture.strategy)
    return spec, parse_options(spec, getattr(config, spec.field, None))


def check_config(config: "TrainConfig") -> None:
    """Check the strategy name and its options (called when a TrainConfig is built)."""
    spec = get_strategy(config.mixture.strategy)
    parse_options(spec, getattr(config, spec.field, None))
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
    return spec.build(config, strategy_of(config)[1], names, weights)
