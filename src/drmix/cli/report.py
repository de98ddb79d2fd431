"""``drmix report RUN_DIR`` (rebuild report.html) and ``drmix push RUN_DIR REPO_ID`` (upload to the Hub)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import AREAS, CommandArea

REPORT_HELP = """Rebuild RUN_DIR/report.html: one self-contained page (figures inline, no network) with the
configuration, loss / learning-rate / throughput curves, per-collection losses, periodic evaluation, mixture
weights, the evaluation and comparison tables and links to every file. RUN_DIR is a run (drmix train), a
pipeline or demo folder (every run below it gets a section). Training writes the page itself at the end; this
command rebuilds it, e.g. while a run is going or after drmix compare wrote into the folder.
"""

PUSH_HELP = """Upload a finished run's model (with its model card) and report.html to the Hugging Face Hub.

RUN_DIR is a run or pipeline folder (its model/ is uploaded) or a model folder. The model's files go to the
repository root, so SentenceTransformer("REPO_ID") loads it; the run's configuration, metrics and evaluation
tables go under drmix/. The repository is created when missing. Authentication: HF_TOKEN, `hf auth login`,
or --token.
"""


def report_command(
    run_dir: Path = typer.Argument(..., help="A run, pipeline or demo output folder.", show_default=False),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a report.html that drmix did not write."),
) -> None:
    from drmix.cli import console
    from drmix.errors import ConfigError
    from drmix.report.html import check_report_target, is_run, sub_runs, write_report

    if not run_dir.is_dir():
        raise ConfigError("no such folder.", path=run_dir, fix="pass the output folder of drmix train or a pipeline.")
    if not is_run(run_dir) and not sub_runs(run_dir):
        raise ConfigError("the folder holds no run (no metrics.jsonl in it or in the folders below it).",
                          path=run_dir, fix="pass the --output-dir of drmix train, a pipeline or the demo.")
    check_report_target(run_dir, overwrite=overwrite)
    for run in sub_runs(run_dir):
        check_report_target(run, overwrite=overwrite)
        write_report(run)
    path = write_report(run_dir)
    console.print(f"wrote {path}")


def push_command(
    run_dir: Path = typer.Argument(..., help="A run or pipeline folder, or a model folder.", show_default=False),
    repo_id: str = typer.Argument(..., help="Hub repository, USER/NAME or ORG/NAME.", show_default=False),
    private: Optional[bool] = typer.Option(None, "--private/--public", help="Visibility of a repository this "
                                           "creates (default: the Hub's default, public)."),
    token: Optional[str] = typer.Option(None, "--token", help="Hub token (default: HF_TOKEN or the saved login).",
                                        show_default=False),
    revision: Optional[str] = typer.Option(None, "--revision", help="Branch to commit to (default: main)."),
) -> None:
    from drmix.cli import console
    from drmix.hub import push_to_hub

    result = push_to_hub(run_dir, repo_id, token=token, private=private, revision=revision)
    console.print(f"pushed {len(result.files)} files to {result.url}")


def before_run(config) -> None:
    """What a training command checks first: a ``--push-to-hub`` that cannot succeed fails before training."""
    if config.run.push_to_hub:
        from drmix.hub import check_can_push

        check_can_push(config.run.push_to_hub, config.run.output_dir)


def after_run(output_dir: str | Path, config, *, pipeline: bool = False) -> None:
    """A pipeline's ``report.html`` (runs write their own) and the ``--push-to-hub`` upload."""
    from drmix.cli import console

    if pipeline:
        from drmix.report.html import check_report_target, write_report

        check_report_target(output_dir)
        console.print(f"report: {write_report(output_dir)}")
    if config is not None and config.run.push_to_hub:
        from drmix.hub import push_to_hub

        result = push_to_hub(output_dir, config.run.push_to_hub)
        console.print(f"pushed {len(result.files)} files to {result.url}")


def register(app: typer.Typer) -> None:
    app.command("report", help=REPORT_HELP)(report_command)
    app.command("push", help=PUSH_HELP)(push_command)


AREAS.register(CommandArea("report", register))
