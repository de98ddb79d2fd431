"""Configs made of parts: typed groups of fields, each field with one flat name and a role.

A config class (:class:`Config`) is a pydantic model whose fields are **parts** (:class:`Part` subclasses such
as ``model``, ``data``, ``optim``) and, for free-form option mappings, plain ``dict`` fields. Every field of every
part has a **flat name** -- its field name, or ``json_schema_extra={"flag": ...}`` where the two differ -- unique
within the config. The flat name is the CLI flag (``learning_rate`` -> ``--learning-rate``), the key of a stage
override (``--stage1 max_steps=200``), a keyword of the Python constructor (``TrainConfig(max_steps=10)``) and a
key a YAML file may give at its top level (drmix 0.1's layout, still read, with a warning). What drmix writes
(``config.yaml``) is the grouped layout.

Every field also has a **role** (``json_schema_extra={"role": ...}``), read by the resume check and the model
card instead of lists of their own:

* ``hyperparameter`` (the default) -- shapes what is trained: resuming with another value is refused, the model
  card lists it;
* ``input`` -- what is trained on or from (data, starting model, reference model): resuming with another value
  is refused; the card shows it as the base model and datasets, not as a hyperparameter;
* ``operational`` -- bookkeeping (output, logging, checkpoints, device, evaluation, input threads): may change
  on resume; not on the card.

Modelled on Tevatron's separate Model/Data/Training argument classes and peft's config class per method;
hand-written because pydantic has no flat aliases across nested models.
"""
from __future__ import annotations

import copy
import inspect
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo

from drmix.errors import ConfigError

log = logging.getLogger(__name__)

HYPERPARAMETER, INPUT, OPERATIONAL = "hyperparameter", "input", "operational"
ROLES = (HYPERPARAMETER, INPUT, OPERATIONAL)

C = TypeVar("C", bound="Config")


def setting(default: Any = ..., *, role: str = HYPERPARAMETER, flag: str | None = None,
          aliases: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """``pydantic.Field`` with drmix's metadata: the field's ``role``, its flat name (``flag``, when it differs
    from the field name) and older flat names it is still read under (``aliases``)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    extra: dict[str, Any] = {"role": role}
    if flag:
        extra["flag"] = flag
    if aliases:
        extra["aliases"] = list(aliases)
    if default is ... and "default_factory" in kwargs:
        return Field(json_schema_extra=extra, **kwargs)
    return Field(default, json_schema_extra=extra, **kwargs)


def _extra(info: FieldInfo) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def role_of(info: FieldInfo) -> str:
    """The role of a field (``hyperparameter`` unless tagged)."""
    return _extra(info).get("role", HYPERPARAMETER)


class Part(BaseModel):
    """One group of a config (``title`` is its heading in ``--help`` and the docs)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    title: ClassVar[str] = ""

    @classmethod
    def variant(cls, name: str, **changes: tuple[Any, ...]) -> type[Part]:
        """This part with other defaults: ``field=(default, description)`` or ``(default, description, type)``
        for each field changed (``RunConfig.variant("CocoRun", output_dir=("runs/coco", "Where ..."))``).

        Everything else of a changed field (its role, flat name, bounds) and every validator stay the base's, so a
        recipe changes a default without declaring the field again."""
        fields: dict[str, Any] = {}
        for field, change in changes.items():
            base = cls.model_fields[field]
            default, description, *annotation = change
            extra = dict(base.json_schema_extra) if isinstance(base.json_schema_extra, dict) else None
            kind = annotation[0] if annotation else base.annotation
            fields[field] = (Annotated[kind, *base.metadata] if base.metadata else kind,
                             Field(default, description=description, json_schema_extra=extra))
        module = sys._getframe(1).f_globals.get("__name__", cls.__module__)
        return create_model(name, __base__=cls, __module__=module, **fields)

    @classmethod
    def without(cls, name: str, *dropped: str) -> type[Part]:
        """This part without the fields ``dropped``: the part a recipe carries when its stages never read those
        fields (``MixtureConfig.without("TdroMixtureParts", "weights_file", ...)``).

        The kept fields are the base's (type, bounds, role, flat name, description, default) in its order, with
        its field validators of kept fields and its model validators; its ``title`` and docstring stay. The new
        part is no subclass of this one (pydantic cannot take a field away from a subclass): other methods are
        not carried."""
        unknown = [f for f in dropped if f not in cls.model_fields]
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
        fields = {n: (info.annotation, copy.copy(info)) for n, info in cls.model_fields.items() if n not in dropped}
        decorators = cls.__pydantic_decorators__
        validators: dict[str, Any] = {}
        for vname, dec in decorators.field_validators.items():
            kept = [f for f in dec.info.fields if f not in dropped]
            if kept:
                validators[vname] = field_validator(*kept, mode=dec.info.mode)(_function(dec.func))
        for vname, dec in decorators.model_validators.items():
            validators[vname] = model_validator(mode=dec.info.mode)(_function(dec.func))
        module = sys._getframe(1).f_globals.get("__name__", cls.__module__)
        part = create_model(name, __base__=Part, __module__=module, __doc__=cls.__doc__, __validators__=validators,
                            **fields)
        part.title = cls.title
        return part


def _function(func: Any) -> Any:
    """The plain function of a validator pydantic recorded (a classmethod's is bound to its class)."""
    return func.__func__ if inspect.ismethod(func) else func


@dataclass(frozen=True)
class FlatField:
    """Where a flat name lives: ``group`` (None: a top-level field of the config) and the field ``name``."""

    flat: str
    group: str | None
    name: str
    info: FieldInfo
    owner: type[BaseModel]

    @property
    def role(self) -> str:
        return role_of(self.info)

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(_extra(self.info).get("aliases", ()))


def _part_type(annotation: Any) -> type[Part] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, Part) else None


class Config(BaseModel):
    """A config made of parts (see the module docstring).

    ``command`` is the command whose ``--help`` lists the config's fields (what a config error's fix names).
    A config that carries only some of a larger config's fields (a recipe: the fine-tuning fields its stages
    read, of ``TrainConfig``'s) names that config ``narrows`` and says in ``left_out`` why each field it leaves
    out is not read and what to do instead, ``{flat name: (why, fix)}``: such a field given with a value other
    than its default is refused in one line naming the command and the option (:meth:`refuse_left_out`), not
    taken as an unknown key; given with its default (a record an earlier version wrote) it is dropped.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    command: ClassVar[str] = "drmix train"
    narrows: ClassVar[type[Config] | None] = None
    left_out: ClassVar[dict[str, tuple[str, str]]] = {}

    # -- the layout -------------------------------------------------------------------------------------------
    @classmethod
    def groups(cls) -> dict[str, type[Part]]:
        """The config's parts by field name."""
        return _groups(cls)

    @classmethod
    def flat_fields(cls) -> dict[str, FlatField]:
        """Every field by flat name (parts' fields and top-level fields), in declaration order."""
        return _flat_fields(cls)

    @classmethod
    def roles(cls) -> dict[str, str]:
        """``{flat name: role}`` of every field."""
        return {k: f.role for k, f in cls.flat_fields().items()}

    # -- reading: flat or grouped values -> grouped ----------------------------------------------------------
    @classmethod
    def nest(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Grouped values from any mix of grouped and flat keys (later keys win); unknown keys are kept, so
        validation names them."""
        out: dict[str, Any] = {}
        groups, fields, aliases = cls.groups(), cls.flat_fields(), _aliases(cls)
        for key, value in values.items():
            key = aliases.get(key, key)
            part = groups.get(key)
            if part is not None and _is_group_value(part, value):
                given = value.model_dump() if isinstance(value, BaseModel) else dict(value)
                out.setdefault(key, {}).update(given)
            elif key in fields and fields[key].group is not None:
                f = fields[key]
                out.setdefault(f.group, {})[f.name] = value
            else:
                out[key] = value
        return out

    @classmethod
    def flat_keys(cls, values: Mapping[str, Any]) -> list[str]:
        """The keys of ``values`` written flat or under an older name (what a migration warns about)."""
        groups, fields, aliases = cls.groups(), cls.flat_fields(), _aliases(cls)
        flat = []
        for key, value in values.items():
            if key in aliases:
                flat.append(key)
            elif key in groups and _is_group_value(groups[key], value):
                continue
            elif key in fields and fields[key].group is not None:
                flat.append(key)
        return flat

    @model_validator(mode="before")
    @classmethod
    def _nest_values(cls, data: Any) -> Any:
        return cls.nest(cls.refuse_left_out(data)) if isinstance(data, Mapping) else data

    # -- the fields of a larger config this one leaves out ---------------------------------------------------
    @classmethod
    def left_out_fields(cls) -> dict[str, FlatField]:
        """The fields of :attr:`narrows` this config does not carry, by flat name (the larger config's own)."""
        return _left_out(cls)

    @classmethod
    def refuse_left_out(cls, values: Mapping[str, Any], path: str | Path | None = None) -> dict[str, Any]:
        """``values`` (flat or grouped keys) without the left-out fields given at their defaults; a left-out field
        given another value is a :class:`ConfigError` naming :attr:`command`, the option and the fix (``path``:
        the file the values came from)."""
        left = cls.left_out_fields()
        if not left:
            return dict(values)
        ref = cls.narrows
        ref_groups, ref_aliases = ref.groups(), _aliases(ref)
        by_place = {(f.group, f.name): k for k, f in ref.flat_fields().items()}
        out: dict[str, Any] = {}
        for key, value in values.items():
            name = ref_aliases.get(key, key)
            if name in ref_groups and isinstance(value, Mapping):    # a part's values: its left-out fields
                inner = {}
                for field, v in value.items():
                    flat = by_place.get((name, field))
                    if flat in left:
                        _refuse(cls, left[flat], v, path)
                    else:
                        inner[field] = v
                out[key] = inner
            elif name in left and not (name in cls.groups() and isinstance(value, Part)):
                _refuse(cls, left[name], value, path)
            else:
                out[key] = value
        return out

    # -- writing ---------------------------------------------------------------------------------------------
    def flat(self, mode: str = "json") -> dict[str, Any]:
        """``{flat name: value}`` of every field."""
        dumped = self.model_dump(mode=mode)
        return {k: (dumped[f.group][f.name] if f.group else dumped[f.name]) for k, f in self.flat_fields().items()}

    @classmethod
    def flatten(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Flat values of a recorded config in either layout (no validation; unknown keys kept as they are)."""
        nested = cls.nest(values)
        groups, out = cls.groups(), {}
        by_place = {(f.group, f.name): k for k, f in cls.flat_fields().items()}
        for key, value in nested.items():
            if key in groups and isinstance(value, Mapping):
                for name, v in value.items():
                    out[by_place.get((key, name), name)] = v
            else:
                out[key] = value
        return out

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    # -- composing -------------------------------------------------------------------------------------------
    def replace(self: C, **flat: Any) -> C:
        """A validated copy with fields changed, by flat name (``cfg.replace(max_steps=10, model=path)``)."""
        cls = type(self)
        return cls.model_validate(merge(self.model_dump(), cls.nest(flat), cls.groups()))

    @classmethod
    def from_parts(cls: type[C], source: "Config", **flat: Any) -> C:
        """A ``cls`` made of the parts (and option mappings) it shares with ``source``, then ``flat`` changes:
        how a recipe composes a stage's config from its own."""
        shared = [n for n in cls.model_fields if n in type(source).model_fields]
        groups = cls.groups()
        values = {n: _dump(getattr(source, n), groups.get(n)) for n in shared}
        return cls.model_validate(merge(values, cls.nest(flat), cls.groups()))


def _dump(value: Any, part: type[Part] | None = None) -> Any:
    """A part's values for ``part`` (the fields a source's richer part has beyond it are left behind)."""
    if not isinstance(value, BaseModel):
        return value
    dumped = value.model_dump()
    return {k: v for k, v in dumped.items() if k in part.model_fields} if part is not None else dumped


def _is_group_value(part: type[Part], value: Any) -> bool:
    """Whether ``value`` is a whole part (a mapping of its fields, or an instance) rather than the flat value
    of the part's field of the same name (``model: path``, ``data: [...]``, ``mixture: uniform``)."""
    if isinstance(value, Part):
        return True
    return isinstance(value, Mapping) and set(value) <= set(part.model_fields)


def merge(base: dict[str, Any], update: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``update`` applied: parts (``groups``) merged field by field, anything else replaced."""
    out = dict(base)
    for key, value in update.items():
        if key in groups and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


@cache
def _groups(cls: type[Config]) -> dict[str, type[Part]]:
    return {n: p for n, f in cls.model_fields.items() if (p := _part_type(f.annotation)) is not None}


@cache
def _flat_fields(cls: type[Config]) -> dict[str, FlatField]:
    out: dict[str, FlatField] = {}
    for name, info in cls.model_fields.items():
        part = _part_type(info.annotation)
        items = ([(part, g, n, i) for g, n, i in ((name, n, i) for n, i in part.model_fields.items())]
                 if part is not None else [(cls, None, name, info)])
        for owner, group, fname, finfo in items:
            flat = _extra(finfo).get("flag", fname)
            if flat in out:
                raise TypeError(f"{cls.__name__}: flat name {flat!r} is used by two fields")
            out[flat] = FlatField(flat, group, fname, finfo, owner)
    return out


@cache
def _aliases(cls: type[Config]) -> dict[str, str]:
    return {a: k for k, f in cls.flat_fields().items() for a in f.aliases}


@cache
def _left_out(cls: type[Config]) -> dict[str, FlatField]:
    if cls.narrows is None:
        return {}
    ours = cls.flat_fields()
    left = {k: f for k, f in cls.narrows.flat_fields().items() if k not in ours}
    missing = sorted(set(left) - set(cls.left_out))
    if missing:
        raise TypeError(f"{cls.__name__} leaves out {missing} of {cls.narrows.__name__} without saying why (left_out)")
    return left


def _refuse(cls: type[Config], field: FlatField, value: Any, path: str | Path | None) -> None:
    """Nothing for a left-out field given at its default; else the one-line refusal."""
    if value == field.info.get_default(call_default_factory=True):
        return
    why, fix = cls.left_out[field.flat]
    flag = "--" + field.flat.replace("_", "-")
    raise ConfigError(f"{flag} ({field.flat}) is not used by {cls.command}: {why}.", path=path,
                      fix=fix.replace("{value}", str(value)))


# -- reading files ----------------------------------------------------------------------------------------------
def format_validation(e: ValidationError, cls: type[Config] | None = None, command: str | None = None) -> str:
    """One line per error, fields named by their flat names (``learning_rate: ...``); an unknown key is answered
    with the fields of ``cls`` (and ``command``'s ``--help``: default ``cls.command``)."""
    places = {(f.group, f.name): k for k, f in cls.flat_fields().items()} if cls is not None else {}
    parts = []
    for err in e.errors():
        loc = tuple(str(x) for x in err["loc"])
        if len(loc) >= 2 and (loc[0], loc[1]) in places:      # name a part's field by its flat name
            loc = (places[(loc[0], loc[1])], *loc[2:])
        elif len(loc) == 1 and (None, loc[0]) in places:
            loc = (places[(None, loc[0])],)
        msg = err["msg"].removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden" and cls is not None and loc:  # another library's name, a typo
            from drmix.config.names import explain_unknown

            msg = explain_unknown(loc[-1], cls.flat_fields(), command or cls.command)
        parts.append(f"{'.'.join(loc) or 'config'}: {msg}")
    return "; ".join(parts)


def read_yaml(path: str | Path) -> Any:
    """A config file's YAML document (:func:`drmix.io.read.read_yaml`); a folder is refused with the config file inside
    it, if any, as the fix."""
    from drmix.io.read import read_yaml as read_yaml_file

    path = Path(path)
    if path.is_dir():
        inside = [n for n in ("config.yaml", "drama.yaml", "pipeline.yaml") if (path / n).is_file()]
        raise ConfigError("is a folder, not a YAML config file.", path=path,
                          fix=(f"pass the config file inside it ({path / inside[0]})" if inside else
                               "pass a YAML file of config fields") + "; a data folder goes to --data.")
    return read_yaml_file(path, what="config file")


def load_config(model_cls: type[C], path: str | Path | None = None, overrides: dict[str, Any] | None = None, *,
                command: str | None = None) -> C:
    """A config from an optional YAML file (grouped or flat layout) and flat overrides (the CLI's flags, which
    win); paths stay as given. ``command``: the command run (its ``--help`` is the fix of an invalid field;
    default the config's own :attr:`Config.command`)."""
    command = command or getattr(model_cls, "command", None) or "drmix train"
    values: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml(path)
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError("config must be a mapping of field: value.", path=path,
                              fix=f"write fields of {model_cls.__name__} at the top level.")
        if issubclass(model_cls, Config):   # a field the config leaves out: refused before anything else is said
            raw = model_cls.refuse_left_out(raw, path)
        old = model_cls.flat_keys(raw) if issubclass(model_cls, Config) else []
        if old:
            log.warning("%s: %s written in drmix 0.1's flat layout; read into their groups. The grouped layout "
                        "(what every run writes to its config.yaml) is the current one; see docs/training.md",
                        path, ", ".join(old[:6]) + (f" and {len(old) - 6} more" if len(old) > 6 else ""))
        values = model_cls.nest(raw) if issubclass(model_cls, Config) else dict(raw)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if issubclass(model_cls, Config):
        values = merge(values, model_cls.nest(model_cls.refuse_left_out(given)), model_cls.groups())
    else:
        values.update(given)
    try:
        return model_cls.model_validate(values)
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {format_validation(e, model_cls, command)}.", path=path,
                          fix=f"see `{command} --help` or docs/configuration.md for the fields.") from None
