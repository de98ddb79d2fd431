"""The allocation-policy registry: registration, typed parsing, help, sweep grammar (drmix.retrieval.multi.registry)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from drmix.errors import ConfigError
from drmix.evaluation.multi import family_of
from drmix.retrieval.multi import registry
from drmix.retrieval.multi.base import AllocationPolicy
from drmix.retrieval.multi.merge import merge_top_k, raw_keys
from drmix.retrieval.multi.registry import (
    default_policy_specs,
    expand_policy_specs,
    parse_policy,
    policy_help,
    policy_info,
    register_policy,
    search_policy_usage,
)


@pytest.fixture
def scratch_registry():
    """The registry, which a test may add to; what it added is removed afterwards."""
    before = set(registry.POLICIES.all())
    yield registry.POLICIES
    for name in set(registry.POLICIES.all()) - before:
        registry.POLICIES.unregister(name)


def test_the_builtin_policies_are_an_explicit_list():
    """Every built-in policy's module is named in BUILTIN, and every module of the package is in it."""
    import pkgutil

    from drmix.retrieval.multi import policies

    assert {i.cls.__module__ for i in registry.registered_policies()} == set(registry.BUILTIN)
    assert {f"{policies.__name__}.{m.name}" for m in pkgutil.iter_modules(policies.__path__)} == set(registry.BUILTIN)


def test_a_new_policy_is_one_registration(scratch_registry):
    @register_policy("lastfirst", usage="lastfirst:W", help="lastfirst:W[,bonus=B]", order=35, positional=("w",),
                     aliases=(("b", "bonus"),), label_free=True, sweep=("lastfirst:1", "lastfirst:2"))
    @dataclass(repr=False)
    class LastFirst(AllocationPolicy):
        w: float = 1.0
        bonus: int | None = None

        def allocate(self, cands, k, relevant=None):
            return merge_top_k(cands, raw_keys(cands), k)

    p = parse_policy("lastfirst:2.5,b=3")
    assert isinstance(p, LastFirst) and p.w == 2.5 and p.bonus == 3 and p.name == "lastfirst"
    assert "lastfirst:W[,bonus=B]" in policy_help()
    assert policy_help().index("zscore") < policy_help().index("lastfirst") < policy_help().index("calibrated")
    assert "lastfirst:W" in search_policy_usage() and "oracle" not in search_policy_usage()
    specs = default_policy_specs()
    assert specs.index("crcs") < specs.index("lastfirst:1") == specs.index("lastfirst:2") - 1 < specs.index("coverage")
    assert family_of("lastfirst:1") == "label-free"
    with pytest.raises(ValueError, match="allocation policy .lastfirst. is already registered"):
        register_policy("lastfirst", usage="x", help="x")(type("Other", (LastFirst,), {}))
    with pytest.raises(ValueError, match="unknown parameters"):
        register_policy("broken", usage="x", help="x", positional=("nope",))(LastFirst)


def test_parsing_converts_to_the_parameters_types():
    c = parse_policy("confidence:0.7,t=0.1,n=50.0")
    assert (c.p, c.temperature, c.depth) == (0.7, 0.1, 50) and isinstance(c.depth, int)
    assert parse_policy("confidence:p=0.3").p == 0.3
    assert parse_policy("fixed:0.5,0.3,0.2").fractions == (0.5, 0.3, 0.2)
    assert parse_policy("oracle:fraction").mode == "fraction"
    assert parse_policy("calibrated:gauss,ref=20").spec == "calibrated:method=gauss,ref=20"
    assert parse_policy(" Naive ").spec == "naive"


@pytest.mark.parametrize("spec,message", [
    ("naive:3", "takes no arguments"),
    ("fixed", "needs fractions"),
    ("fixed:abc", "fraction 'abc' is not a number"),
    ("confidence:0.9,bogus=1", "unknown option"),
    ("confidence:0.9,0.8", "at most 1 positional"),
    ("confidence:x", "threshold 'x' is not a number"),
    ("oracle:mode=best", "mode must be any or fraction"),
    ("zscore:source=nope", "unknown zscore source"),
    ("bogus", "unknown allocation policy"),
    ("rrf", "round-robin"),
])
def test_bad_specs_name_the_fix(spec, message):
    with pytest.raises(ConfigError, match=message) as ei:
        parse_policy(spec)
    assert ei.value.fix


def test_sweep_ranges_only_for_policies_with_a_sweep_range():
    assert expand_policy_specs(["confidence:0.1..0.5/0.2", "zscore"]) == \
        ["confidence:0.1", "confidence:0.3", "confidence:0.5", "zscore"]
    assert expand_policy_specs(["zscore:1..2"]) == ["zscore:1..2"]   # not a sweep range: left to the parser
    assert policy_info("fixed").sweep_range and not policy_info("zscore").sweep_range


def test_flags_of_the_builtin_policies():
    tunable = {i.name for i in registry.registered_policies() if i.tunable}
    label_free = {i.name for i in registry.registered_policies() if i.label_free}
    needs = {i.name for i in registry.registered_policies() if i.needs_labels}
    assert tunable == {"fixed", "confidence"}
    assert {"equal", "redde", "crcs", "coverage"} <= label_free
    assert {"zscore", "calibrated"} <= label_free and not label_free & (tunable | needs)
    assert needs == {"oracle"} and parse_policy("oracle").needs_relevance


def test_simplex_grid_expands_for_n_corpora():
    specs = expand_policy_specs(["fixed:simplex/0.5", "naive"], n_corpora=3)
    assert specs == ["fixed:1,0,0", "fixed:0.5,0.5,0", "fixed:0.5,0,0.5", "fixed:0,1,0", "fixed:0,0.5,0.5",
                     "fixed:0,0,1", "naive"]
    assert len(expand_policy_specs(["fixed:simplex"], n_corpora=3)) == 66       # C(12, 2)
    assert expand_policy_specs(["fixed:simplex/0.25"], n_corpora=2) == \
        ["fixed:1,0", "fixed:0.75,0.25", "fixed:0.5,0.5", "fixed:0.25,0.75", "fixed:0,1"]
    with pytest.raises(ConfigError, match="number of corpora"):
        expand_policy_specs(["fixed:simplex"])
    with pytest.raises(ConfigError, match="whole number"):
        expand_policy_specs(["fixed:simplex/0.3"], n_corpora=2)
