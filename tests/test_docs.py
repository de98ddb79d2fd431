"""Every CLI command and option is described in the guides of docs/ (the pages users read), and every page they
link to exists; docs/cli.md (generated from --help) is up to date."""
import re
from pathlib import Path

import pytest
import typer

from drmix.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def guides() -> dict[str, str]:
    """The hand-written guides: every page of docs/ but the references generated from --help (docs/cli.md) and
    from the config classes (docs/configuration.md)."""
    generated = {"cli.md", "configuration.md"}
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")) if p.name not in generated}


def walk(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group (typer ships its own click: isinstance(click.Group) is never true)
        for name, sub in cmd.commands.items():
            yield from walk(sub, path + (name,))


def undocumented(text: str) -> list[str]:
    """Commands and options of the CLI that ``text`` does not name (an option by its flag or its config field)."""
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
    return missing


def test_every_command_and_option_is_described_in_a_guide():
    pages = guides()
    assert len(pages) >= 10, sorted(pages)
    missing = undocumented("\n".join(pages.values()))
    assert not missing, "described in no guide of docs/ (docs/cli.md does not count): " + ", ".join(missing)


def test_the_check_fails_without_the_guides():
    """Only the generated reference: commands and options are missing (the check reads the guides)."""
    assert undocumented((DOCS / "cli.md").read_text(encoding="utf-8").replace("drmix", "")) != []
    without_drama = undocumented("\n".join(t for n, t in guides().items() if n != "drama.md"))
    assert "option --mlp-keep of drmix prune" in without_drama


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_linked_page_exists_and_every_guide_is_linked():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    linked, broken = set(), []
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):             # http:, https:, mailto:
                continue
            path = (page.parent / target).resolve()
            linked.add(path)
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "links to missing pages: " + ", ".join(broken)
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, "guides no page links to: " + ", ".join(unlinked)


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


def test_every_file_the_docs_cite_exists():
    """A test, benchmark or source file of drmix named in README.md or a guide (``tests/...py::name`` too) exists
    (``scripts/`` is left out: the guides also cite the papers' authors' scripts)."""
    cited = re.compile(r"\b((?:tests|benchmarks|src/drmix|examples)/[\w./-]+\.(?:py|yaml|sh))(?:::(\w+))?")
    missing = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for path, name in cited.findall(page.read_text(encoding="utf-8")):
            f = ROOT / path
            if not f.is_file() or (name and f"def {name}(" not in f.read_text(encoding="utf-8")):
                missing.append(f"{page.name}: {path}{'::' + name if name else ''}")
    assert not missing, "cited but not found: " + ", ".join(missing)


def test_named_mutants_apply_to_the_code_as_it_is():
    """docs/testing.md prints the table of ``scripts/named_mutants.py``: each hand-written departure must still be
    one replacement in today's code, and each test file it runs must exist (running them is the script's job)."""
    import runpy

    mutants = runpy.run_path(str(ROOT / "scripts" / "named_mutants.py"))["MUTANTS"]
    assert len(mutants) >= 18 and len({m.name for m in mutants}) == len(mutants)
    for m in mutants:
        text = (ROOT / m.path).read_text(encoding="utf-8")
        assert text.count(m.old) == 1, f"{m.name}: {m.old!r} occurs {text.count(m.old)} times in {m.path}"
        assert m.new != m.old and all((ROOT / t).is_file() for t in m.tests), m.name
        assert f"`{m.name}`" in (ROOT / "docs" / "testing.md").read_text(encoding="utf-8"), m.name


def _mutation_sample():
    import runpy

    return runpy.run_path(str(ROOT / "scripts" / "mutation_sample.py"))


def test_sampled_mutation_draw_interval_and_statuses_by_hand():
    m = _mutation_sample()
    low, high = m["wilson"](20, 25)                     # p = 0.8, z = 1.96: (0.8 + z²/50 ± z·sqrt(...)) / (1 + z²/25)
    assert (round(low, 4), round(high, 4)) == (0.6087, 0.9114)
    assert m["wilson"](25, 25)[1] == 1.0 and round(m["wilson"](0, 25)[1], 4) == 0.1332
    names = [f"f__mutmut_{i}" for i in range(1, 9)]
    assert m["draw"](names, 3, 0) == m["draw"](names[::-1], 3, 0) != m["draw"](names, 3, 1)
    assert len(m["draw"](names, 3, 0)) == 3 and m["draw"](names[:2], 3, 0) == names[:2]
    assert [m["status"](c) for c in (1, 3, 0, 33, 5, -24, -9, None)] == [
        "killed", "killed", "survived", "no tests", "no tests", "timeout", "timeout", "not checked"]


@pytest.mark.parametrize("run", ["mutation-sample-results.json", "mutation-sample-retest-results.json"])
def test_the_sampled_mutation_tables_of_docs_testing_are_the_scripts(run):
    """docs/testing.md prints scripts/mutation_sample.py's tables of the measured run and of its retest (their
    results.json stored in tests/benchmarks/fixtures); the retest keeps the run's sample."""
    import json

    fixtures = ROOT / "tests" / "benchmarks" / "fixtures"
    results = json.loads((fixtures / run).read_text(encoding="utf-8"))
    first = json.loads((fixtures / "mutation-sample-results.json").read_text(encoding="utf-8"))
    m = _mutation_sample()
    assert m["table"](results) in (DOCS / "testing.md").read_text(encoding="utf-8")
    assert set(results["files"]) == set(m["FILES"]) and results["seed"] == first["seed"]
    assert all(set(r["sampled"]) == set(first["files"][f]["sampled"]) for f, r in results["files"].items())


def _package_shape():
    import runpy

    return runpy.run_path(str(ROOT / "scripts" / "package_shape.py"))


def test_the_shape_table_of_docs_testing_is_the_scripts():
    """docs/testing.md prints scripts/package_shape.py's table of drmix.recipes.adapt: the measurement stored at
    596005d beside today's (rerun the command shown above the table after a change to the package)."""
    import json

    m = _package_shape()
    before = json.loads((ROOT / "tests" / "benchmarks" / "fixtures" / "adapt-shape-596005d.json").read_text())
    now = m["shape"](ROOT / "src" / "drmix" / "recipes" / "adapt")
    table = m["table"]({"before (596005d)": before, "now": now})
    assert table in (DOCS / "testing.md").read_text(encoding="utf-8"), (
        "docs/testing.md's shape table is stale: print it again with python scripts/package_shape.py "
        "src/drmix/recipes/adapt --before tests/benchmarks/fixtures/adapt-shape-596005d.json\n" + table)


def test_the_shape_of_a_made_up_package_by_hand(tmp_path):
    """Modules, import edges (lazy and relative ones too, not TYPE_CHECKING ones), the longest chain, private names
    imported from a sibling, and the modules a stage is declared over, on a package written here."""
    pkg = tmp_path / "drmix" / "toy"
    pkg.mkdir(parents=True)
    (tmp_path / "drmix" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from drmix.toy.runner import run\n\ndef go(extra: list[Stage] = ()):\n    pass\n")
    (pkg / "runner.py").write_text("from drmix.toy import stages\n\ndef run():\n    from .plan import _make\n")
    (pkg / "stages.py").write_text("from drmix.toy.plan import plan\n\ndef s():\n    return Stage('a', needs=())\n")
    (pkg / "plan.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from drmix.toy import runner\n"
                                 "def plan():\n    return StageWork('a', passages=1)\n")
    (pkg / "leaf.py").write_text("import drmix.toy.plan\n")
    s = _package_shape()["shape"](pkg)
    # __init__ -> runner -> stages -> plan, runner -> plan (lazy, relative, a private name), leaf -> plan
    assert (s["package"], s["modules"], s["import_edges"], s["layers"]) == ("drmix.toy", 5, 5, 4)
    assert s["private"] == ["runner -> plan._make"] and s["stage_declared_in"] == ["plan", "stages"]
    assert s["toy_stage_files"] == 1                                   # go() takes stages: the test's file alone
    (pkg / "__init__.py").write_text("from drmix.toy.runner import run\n")
    assert _package_shape()["shape"](pkg)["toy_stage_files"] == 3       # plan, stages and the test
