"""What a recipe's config checks when it is made: its mappings, against the typed models they stand for.

A recipe's config keeps two kinds of settings as mappings, so that its record (``pipeline.yaml``) and the stages'
resume checks see what the user wrote:

* a **strategy's options** (``dro:``, ``influence:``, ``idro:``, ``strategy_options:``; ``--dro KEY=VALUE``),
  typed by the options model the strategy registers (:class:`~drmix.mixture.registry.StrategySpec` ``options``:
  ``DROConfig``, ``InfDDSConfig``, ``IDROConfig``; one model per strategy family, as peft keeps one config class
  per method);
* a **stage's overrides** (``--stage1 max_steps=200``, ``--coco batch_size=64``), typed by the config class of
  that stage (``TrainConfig``, ``CocoConfig``): the stage's config is composed with them.

Both are checked when the config is made -- read from YAML and flags, or built in Python -- by the recipe's
validator, not when the stage runs: an error is one line naming the field and the fix, before anything is written.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from drmix.config import Config, format_validation
from drmix.config.train import STRATEGY_OPTIONS
from drmix.errors import ConfigError

T = TypeVar("T")


def options_fields(config: Config) -> list[str]:
    """The strategy-options mappings ``config``'s class declares (``dro``, ``influence``, ...)."""
    return [f for f in STRATEGY_OPTIONS if f in type(config).model_fields]


def check_options(config: Config, strategy: str | None = None) -> None:
    """Every strategy-options mapping ``config`` carries, by the options model of its strategy: ``strategy``'s own
    mapping by its model (a strategy without options refuses any), every other non-empty mapping by the model of
    the strategies it belongs to. A :class:`ConfigError` naming the option and the valid ones otherwise."""
    from drmix.mixture.registry import get_strategy, parse_options, registered_strategies

    fields = options_fields(config)
    own = None
    if strategy is not None:
        spec = get_strategy(strategy)
        own = spec.field
        parse_options(spec, getattr(config, own, None))
    for field in fields:
        values = getattr(config, field)
        owners = [s for s in registered_strategies().values() if s.field == field and s.options is not None]
        if field != own and values and owners:
            parse_options(owners[0], values)


def check_override(build: Callable[[], T], flag: str, cls: type[Config]) -> T:
    """``build()``, the config of a stage composed with its overrides ``flag KEY=VALUE`` (a ``cls``); an invalid
    override is one :class:`ConfigError` naming ``flag``, the field and where the fields are listed."""
    try:
        return build()
    except ValidationError as e:
        raise ConfigError(f"invalid {flag} override {format_validation(e, cls)}.",
                          fix=f"write {flag} KEY=VALUE with a field of `{cls.command} --help`.") from None
    except ConfigError as e:
        raise ConfigError(f"{flag}: {e.message}", fix=e.fix) from None


def refuse_unread(config: Config, unread: dict[str, tuple[Any, Any]], why: str, fix: str) -> None:
    """A one-line :class:`ConfigError` for the first field of ``unread`` (``{flat name: (value, default)}``) given
    another value than its default: ``why`` its stages do not read it (``{flag}`` and ``{value}`` in ``fix`` are
    filled in)."""
    for flat, (value, default) in unread.items():
        if value != default:
            flag = "--" + flat.replace("_", "-")
            raise ConfigError(f"{flag} ({flat}) is not used by {type(config).command} {why}.",
                              fix=fix.replace("{flag}", flag).replace("{value}", str(value)))
