"""The generic registry (drmix.registry): explicit built-ins, entry points, order, lookups."""
from dataclasses import dataclass

import pytest

from drmix.errors import ConfigError
from drmix.registry import Registry


@dataclass(frozen=True)
class Spec:
    name: str
    order: int = 0
    flag: bool = False


def test_register_get_and_order():
    reg: Registry[Spec] = Registry("widget", builtin=(), order=lambda s: s.order)
    b = reg.register(Spec("B", order=2))
    a = reg.register(Spec("a", order=1, flag=True))
    reg.register(Spec("c", order=1))
    assert reg.get("b") is b and reg.get("A") is a
    assert list(reg.all()) == ["a", "c", "b"]          # by order, ties by registration
    assert reg.names(flag=True) == ("a",)
    assert "B" in reg and "z" not in reg and len(reg) == 3


def test_unknown_name_lists_the_registered_ones():
    reg: Registry[Spec] = Registry("widget", builtin=())
    reg.register(Spec("one"))
    with pytest.raises(ConfigError) as e:
        reg.get("two")
    assert "unknown widget 'two'" in e.value.message and "one" in e.value.fix


def test_a_name_registered_twice_by_another_spec_is_an_error():
    reg: Registry[Spec] = Registry("widget", builtin=())
    s = reg.register(Spec("x"))
    assert reg.register(s) is s                         # re-import of the same module: fine
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Spec("x", order=3))


def test_builtin_modules_are_imported_on_first_lookup(tmp_path, monkeypatch):
    import sys
    import types

    holder = types.ModuleType("drmix_test_registry_holder")
    holder.REG = Registry("widget", builtin=("drmix_test_plugin_mod",))
    holder.Spec = Spec
    monkeypatch.setitem(sys.modules, holder.__name__, holder)
    (tmp_path / "drmix_test_plugin_mod.py").write_text(
        "from drmix_test_registry_holder import REG, Spec\nREG.register(Spec('plugged'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert holder.REG.names() == ("plugged",)


def test_a_broken_plugin_is_skipped_with_a_warning(monkeypatch, caplog):
    class EP:
        name, value = "broken", "no_such_module_anywhere:x"

    import importlib.metadata as md

    monkeypatch.setattr(md, "entry_points", lambda group: [EP()])
    reg: Registry[Spec] = Registry("widget", builtin=(), entry_points="drmix.widgets")
    reg.register(Spec("kept"))
    assert reg.names() == ("kept",)
    assert "could not be imported" in caplog.text


def test_identity_decides_what_is_the_same_registration():
    reg: Registry[Spec] = Registry("widget", builtin=(), identity=lambda s: s.order)
    reg.register(Spec("x", order=1))
    reg.register(Spec("y"))
    again = reg.register(Spec("x", order=1, flag=True))      # same identity (a module reloaded): replaces in place
    assert reg.get("x") is again and list(reg.all()) == ["x", "y"]
    with pytest.raises(ValueError, match="widget 'x' is already registered"):
        reg.register(Spec("x", order=2))


def test_builtins_first_keeps_a_plugin_off_a_builtin_name(tmp_path, monkeypatch):
    import sys
    import types

    holder = types.ModuleType("drmix_test_registry_first")
    holder.REG = Registry("widget", builtin=("drmix_test_first_builtin",), builtins_first=True)
    holder.Spec = Spec
    monkeypatch.setitem(sys.modules, holder.__name__, holder)
    (tmp_path / "drmix_test_first_builtin.py").write_text(
        "from drmix_test_registry_first import REG, Spec\nREG.register(Spec('shipped', order=1))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="already registered"):
        holder.REG.register(Spec("shipped", order=9))          # the built-in was imported first
    assert holder.REG.get("shipped").order == 1
