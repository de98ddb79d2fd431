"""The allocation-policy registry: each policy module registers itself; parsing, help and sweeps read it.

A policy is one module in :mod:`drmix.retrieval.multi.policies` whose dataclass (a subclass of
:class:`~drmix.retrieval.multi.base.AllocationPolicy`) is decorated with :func:`register_policy`. The
registration holds everything the rest of drmix needs to know about the policy:

* ``name`` -- the policy string's name (``fixed`` in ``fixed:0.5``);
* the **typed parameters** -- the dataclass's fields (their annotations say how a string argument is
  converted: ``float``, ``int``, ``str``, ``tuple[float, ...]``, optional); ``positional`` names the
  fields that positional arguments fill (the last may be ``variadic``), ``aliases`` maps short keys to
  field names, ``required`` lists fields the string must give;
* the **builder** -- :meth:`PolicyInfo.build` ``(params) -> AllocationPolicy``, the same signature for
  every policy (the class called with the converted parameters);
* ``usage`` / ``help`` -- the short and long help text (``--allocation`` and error messages);
* flags: ``needs_labels`` (reads relevance judgements: evaluation only), ``tunable`` (a grid of its
  specs is tuned on a labelled dev split: one ``"<name> (dev-tuned)"`` sweep row), ``label_free``
  (needs neither labels nor tuning: a candidate of the ``label-free (dev-chosen)`` row);
* its **sweep grammar** -- ``sweep_range``: its first positional parameter accepts ``lo..hi[/step]`` in
  sweep policy lists; ``sweep_simplex``: ``name:simplex[/step]`` expands to every split of the budget over
  ``n`` corpora on a grid (one fraction per corpus); ``sweep``: the specs it adds to the default sweep,
  placed by ``sweep_order``.

The built-in policy modules are listed in :data:`BUILTIN` and imported on first use, so adding a policy is
one new file and one line there (plus its docs and tests); a policy of another package registers through the
``drmix.policies`` entry-point group. The registry is a :class:`drmix.registry.Registry` (the one idiom of
strategies, policies, augmentation steps and command areas, modelled on peft's ``register_peft_method``).
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from drmix.errors import ConfigError
from drmix.registry import Registry
from drmix.retrieval.multi.base import AllocationPolicy

#: the modules that register the built-in policies (help order is each policy's ``order``, not this list's)
BUILTIN = tuple(f"drmix.retrieval.multi.policies.{m}" for m in (
    "calibrated", "confidence", "coverage", "crcs", "equal", "fixed", "naive", "oracle", "redde", "zscore"))


@dataclass(frozen=True)
class PolicyInfo:
    """One registered allocation policy (see the module docstring for each field)."""

    name: str
    cls: type[AllocationPolicy]
    usage: str
    help: str
    order: int = 100
    positional: tuple[str, ...] = ()
    variadic: bool = False
    aliases: tuple[tuple[str, str], ...] = ()
    required: tuple[str, ...] = ()
    needs_labels: bool = False
    tunable: bool = False
    label_free: bool = False
    sweep_range: bool = False
    sweep_simplex: bool = False
    sweep: tuple[str, ...] = ()
    sweep_order: int | None = None

    def build(self, params: dict[str, Any]) -> AllocationPolicy:
        """The builder, one signature for every policy: typed parameters in, policy out."""
        return self.cls(**params)

    @property
    def params(self) -> dict[str, Any]:
        """Parameter name -> type annotation (the dataclass fields that are part of ``__init__``)."""
        hints = typing.get_type_hints(self.cls)
        return {f.name: hints[f.name] for f in dataclasses.fields(self.cls) if f.init} \
            if dataclasses.is_dataclass(self.cls) else {}


#: every allocation policy, by name, in help order (``order``, then name)
POLICIES: Registry[PolicyInfo] = Registry("allocation policy", BUILTIN, entry_points="drmix.policies",
                                          order=lambda i: (i.order, i.name), identity=lambda i: i.cls)
#: names that no longer exist -> (message, fix) raised when a policy string names one (``rrf``)
_REMOVED: dict[str, tuple[str, str]] = {}


def register_policy(name: str, *, usage: str, help: str, **flags: Any) -> Callable[[type], type]:
    """Class decorator: register an :class:`AllocationPolicy` dataclass under ``name``.

    Sets the class's ``name`` and ``needs_relevance`` (= ``needs_labels``) so that they cannot disagree
    with the registration. A name registered twice is an error.
    """

    def deco(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, AllocationPolicy)):
            raise TypeError(f"{cls!r} is not an AllocationPolicy")
        info = PolicyInfo(name=name, cls=cls, usage=usage, help=help, **flags)
        unknown = (set(info.positional) | {f for _, f in info.aliases} | set(info.required)) - set(info.params)
        if unknown:
            raise ValueError(f"policy {name!r} names unknown parameters {sorted(unknown)}")
        POLICIES.register(info)  # the same class registered again (a module reloaded) replaces its entry
        cls.name = name
        cls.needs_relevance = info.needs_labels
        return cls

    return deco


def register_removed(name: str, message: str, fix: str) -> None:
    """A policy name that no longer exists: parsing it raises ``message`` with ``fix``."""
    _REMOVED[name] = (message, fix)


def load_policies() -> None:
    """Import the built-in policy modules (:data:`BUILTIN`) and the plug-ins (each registers its policy)."""
    POLICIES.load()


def registered_policies() -> list[PolicyInfo]:
    """Every registered policy, in help order."""
    return list(POLICIES)


def policy_info(name: str | AllocationPolicy) -> PolicyInfo:
    """The registration of a policy name (or of a policy object's name)."""
    key = name.name if isinstance(name, AllocationPolicy) else str(name).strip().lower()
    if key not in POLICIES:
        raise ConfigError(f"unknown allocation policy {key!r}.", fix=policy_help())
    return POLICIES.get(key)


def policy_help() -> str:
    """One sentence listing every policy's syntax (the ``fix`` of every parsing error)."""
    parts = [i.help for i in registered_policies()]
    if len(parts) > 1:
        return "use " + ", ".join(parts[:-1]) + ", or " + parts[-1] + "."
    return "use " + "".join(parts) + "."


def search_policy_usage() -> str:
    """The short syntax of every policy ``drmix search`` accepts (all but those that need labels)."""
    return ", ".join(i.usage for i in registered_policies() if not i.needs_labels)


def default_policy_specs() -> list[str]:
    """The default sweep: every policy's ``sweep`` specs, ordered by ``sweep_order`` (ranges unexpanded)."""
    infos = sorted(registered_policies(), key=lambda i: (i.order if i.sweep_order is None else i.sweep_order,
                                                         i.name))
    return [s for i in infos for s in i.sweep]


# ------------------------------------------------------------------------------------------ parsing


def _split_args(text: str) -> tuple[list[str], dict[str, str]]:
    pos: list[str] = []
    kw: dict[str, str] = {}
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        if "=" in part:
            key, value = part.split("=", 1)
            kw[key.strip().lower()] = value.strip()
        else:
            pos.append(part)
    return pos, kw


def _convert(value: str, annotation: Any, what: str, spec: str) -> Any:
    """Convert one string argument to the parameter's annotated type (float, int, str, or optional)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _convert(value, inner[0], what, spec)
    if annotation in (float, int):
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"allocation policy {spec!r}: {what} {value!r} is not a number.",
                              fix=policy_help()) from None
        if annotation is int:
            if not math.isfinite(number):
                raise ConfigError(f"allocation policy {spec!r}: {what} {value!r} is not a number.",
                                  fix=policy_help())
            return int(number)
        return number
    return value


def parse_args(info: PolicyInfo, pos: Sequence[str], kw: dict[str, str], spec: str) -> dict[str, Any]:
    """Typed parameters of ``info`` from positional and ``key=value`` arguments (aliases resolved)."""
    params = info.params
    aliases = dict(info.aliases)
    allowed = set(params) | set(aliases)
    extra = set(kw) - allowed
    if extra:
        raise ConfigError(f"allocation policy {spec!r}: unknown option(s) {sorted(extra)}.", fix=policy_help())
    out: dict[str, Any] = {}
    for key, value in kw.items():
        field_name = aliases.get(key, key)
        if field_name not in out:          # the first spelling given wins (temperature= before t=)
            out[field_name] = (key, value)
    canonical = {k: v for k, v in kw.items() if k in params}
    for key, value in canonical.items():  # a canonical name beats its alias
        out[key] = (key, value)
    typed: dict[str, Any] = {}
    if pos:
        if not info.positional:
            raise ConfigError(f"allocation policy {spec!r} takes no arguments.", fix=policy_help())
        if info.variadic:
            head, last = info.positional[:-1], info.positional[-1]
            for name, value in zip(head, pos):
                out.setdefault(name, (name, value))
            rest = list(pos[len(head):])
            if rest and last not in canonical:
                ann = params[last]
                inner = typing.get_args(ann)[0] if typing.get_args(ann) else str
                typed[last] = tuple(_convert(v, inner, last.rstrip("s"), spec) for v in rest)
        else:
            if len(pos) > len(info.positional):
                raise ConfigError(f"allocation policy {spec!r} takes at most {len(info.positional)} "
                                  f"positional argument(s).", fix=policy_help())
            for name, value in zip(info.positional, pos):
                out.setdefault(name, (name, value))
    for name, (key, value) in out.items():
        if name in typed:
            continue
        ann = params[name]
        if typing.get_origin(ann) is tuple:
            inner = typing.get_args(ann)[0]
            typed[name] = tuple(_convert(v, inner, name, spec) for v in value.split(";"))
        else:
            typed[name] = _convert(value, ann, _WHAT.get(name, name), spec)
    missing = [r for r in info.required if r not in typed]
    if missing:
        raise ConfigError(f"allocation policy {spec!r} needs {' and '.join(missing)}.", fix=policy_help())
    return typed


_WHAT = {"p": "threshold"}


def parse_policy(spec: str | AllocationPolicy) -> AllocationPolicy:
    """Build a policy from ``name[:args]``, e.g. ``naive``, ``fixed:0.5``, ``confidence:0.9,temperature=0.1``."""
    if isinstance(spec, AllocationPolicy):
        return spec
    text = spec.strip()
    name, _, rest = text.partition(":")
    name = name.strip().lower()
    if name in _REMOVED:
        message, fix = _REMOVED[name]
        raise ConfigError(message, fix=fix)
    if name not in POLICIES:
        raise ConfigError(f"unknown allocation policy {text!r}.", fix=policy_help())
    info = POLICIES.get(name)
    pos, kw = _split_args(rest)
    return info.build(parse_args(info, pos, kw, text))


_RANGE = re.compile(r"\s*([A-Za-z_][\w-]*):([0-9.]+)\.\.([0-9.]+)(?:/([0-9.]+))?\s*")
_SIMPLEX = re.compile(r"\s*([A-Za-z_][\w-]*):simplex(?:/([0-9.]+))?\s*")


def simplex_grid(n: int, step: float = 0.1) -> list[tuple[float, ...]]:
    """Every ``n``-vector of multiples of ``step`` summing to 1 (first coordinate largest first)."""
    m = int(round(1 / step))
    if n < 1 or m < 1 or not math.isclose(m * step, 1.0):
        raise ConfigError(f"a simplex grid needs 1/step to be a whole number, got step {step}.",
                          fix="write fixed:simplex/0.1 or fixed:simplex/0.25.")
    out: list[tuple[float, ...]] = []

    def rec(prefix: tuple[int, ...], left: int) -> None:
        if len(prefix) == n - 1:
            out.append(tuple(i / m for i in prefix + (left,)))
            return
        for i in range(left, -1, -1):
            rec(prefix + (i,), left - i)

    rec((), m)
    return out


def expand_policy_specs(specs: Iterable[str], n_corpora: int | None = None) -> list[str]:
    """Expand ranges of policies with a sweep range: ``fixed:0.0..1.0`` -> ``fixed:0``, ``fixed:0.1``, ...
    ``fixed:1`` (step 0.1, or ``/0.25``); ``fixed:simplex[/step]`` -> every split over ``n_corpora`` corpora
    (step 0.1 by default: 66 specs for three corpora); other specs are kept (stripped)."""
    policies = POLICIES.all()
    out: list[str] = []
    for spec in specs:
        s = _SIMPLEX.fullmatch(spec)
        if s and s.group(1) in policies and policies[s.group(1)].sweep_simplex:
            if not n_corpora:
                raise ConfigError(f"{spec!r} needs the number of corpora.", fix="use it in drmix multicorpus sweep.")
            out.extend(f"{s.group(1)}:" + ",".join(f"{f:g}" for f in g)
                       for g in simplex_grid(n_corpora, float(s.group(2) or 0.1)))
            continue
        m = _RANGE.fullmatch(spec)
        info = policies.get(m.group(1)) if m else None
        if not m or info is None or not info.sweep_range:
            out.append(spec.strip())
            continue
        lo, hi, step = float(m.group(2)), float(m.group(3)), float(m.group(4) or 0.1)
        if step <= 0 or hi < lo:
            raise ConfigError(f"bad range {spec!r}.", fix="write fixed:0.0..1.0 or fixed:0..1/0.25.")
        n = int(math.floor((hi - lo) / step + 1e-9))
        out.extend(f"{m.group(1)}:{round(lo + i * step, 6):g}" for i in range(n + 1))
    return out
