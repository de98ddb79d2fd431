"""The registry of command areas (drmix.cli.areas): explicit built-ins in help order, plug-ins after them."""
import pkgutil

import typer
from typer.testing import CliRunner

import drmix.cli as cli
from drmix.cli.areas import AREAS, BUILTIN, CommandArea
from drmix.registry import Registry


def test_every_command_module_is_a_listed_area_in_help_order():
    modules = {f"drmix.cli.{m.name}" for m in pkgutil.iter_modules(cli.__path__)}
    helpers = {"drmix.cli.areas", "drmix.cli.options", "drmix.cli.__main__",
               "drmix.cli.train_flags",   # shared helpers, and drmix train's flag aliases and argv checks
               "drmix.cli.encoding", "drmix.cli.sharded",   # the retrieval area's shared options and torchrun side
               "drmix.cli.backend_flags"}                  # and the index backends' choices and flags
    assert set(BUILTIN) == modules - helpers
    assert [a.register.__module__ for a in AREAS] == list(BUILTIN)  # cli.train imports cli.report first: order kept
    assert [a.name for a in AREAS][:3] == ["train", "retrieval", "demo"]


def test_a_plugin_area_follows_the_builtin_ones(monkeypatch, tmp_path):
    """A package outside drmix names a module in the drmix.commands entry-point group; that module registers."""
    import importlib.metadata as md
    import sys
    import types

    areas: Registry[CommandArea] = Registry("command area", AREAS.builtin, entry_points="drmix.commands",
                                            order=AREAS.order)
    for area in AREAS:
        areas.register(area)
    holder = types.ModuleType("drmix_test_area_holder")
    holder.areas, holder.CommandArea = areas, CommandArea
    monkeypatch.setitem(sys.modules, holder.__name__, holder)
    (tmp_path / "drmix_test_area_plugin.py").write_text(
        "from drmix_test_area_holder import areas, CommandArea\n"
        "def register(app):\n"
        "    app.command('hello')(lambda: print('hello from a plug-in'))\n"
        "areas.register(CommandArea('hello', register))\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class EP:
        name, value = "hello", "drmix_test_area_plugin"

    monkeypatch.setattr(md, "entry_points", lambda group: [EP()] if group == "drmix.commands" else [])
    assert [a.name for a in areas][-1] == "hello" and len(areas) == len(BUILTIN) + 1
    app = typer.Typer()
    for area in areas:
        area.register(app)
    out = CliRunner().invoke(app, ["hello"])
    assert out.exit_code == 0 and "hello from a plug-in" in out.output
