"""Every CLI command and option is described in docs/ (the reference users read)."""
from pathlib import Path

import typer

from drmix.cli import app

DOCS = Path(__file__).resolve().parents[1] / "docs"


def walk(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group (typer ships its own click: isinstance(click.Group) is never true)
        for name, sub in cmd.commands.items():
            yield from walk(sub, path + (name,))


def test_every_command_and_option_is_documented():
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    missing = []
    for path, cmd in walk(typer.main.get_command(app)):
        if path and f"drmix {' '.join(path)}" not in text:
            missing.append(f"command: drmix {' '.join(path)}")
        for param in cmd.params:
            if getattr(param, "param_type_name", "") != "option" or param.name in ("help", "version"):
                continue
            names = [o for o in param.opts if o.startswith("--")] + [param.name]
            if not any(n in text for n in names):
                missing.append(f"option {param.opts[0]} of drmix {' '.join(path)}")
    assert not missing, "undocumented in docs/: " + ", ".join(missing)


def test_cli_reference_is_up_to_date():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_cli_docs", DOCS.parent / "scripts" / "gen_cli_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == gen.render(), \
        "docs/cli.md is out of date: run python scripts/gen_cli_docs.py"


def test_configuration_reference_is_up_to_date():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_config_docs", DOCS.parent / "scripts" / "gen_config_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.render()
    assert (DOCS / "configuration.md").read_text(encoding="utf-8") == text, \
        "docs/configuration.md is out of date: run python scripts/gen_config_docs.py"
    from drmix.config import TrainConfig

    for flat in TrainConfig.flat_fields():     # every field, with its flag, is in the table
        assert f"`--{flat.replace('_', '-')}`" in text, flat
