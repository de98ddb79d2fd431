"""``drmix report RUN_DIR`` (rebuild report.html) and ``drmix push RUN_DIR REPO_ID`` (upload to the Hub)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area

REPORT_HELP = """Rebuild RUN_DIR/report.html: one self-contained page (figures inline, no network) with the
configuration, loss / learning-rate / throughput curves, per-collection losses, periodic evaluation, mixture
weights, the evaluation and comparison tables and links to every file. RUN_DIR is a run (drmix train), a
pipeline or demo folder (every run below it gets a section). The tables are read from the folder and from its
eval/ and compare/ folders (what `drmix eval --output RUN_DIR` and `drmix compare --output RUN_DIR` write);
a run's model card (model/README.md) gets their evaluation results too. Training writes the page itself at the
end; this command rebuilds it, e.g. while a run is going.
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
        raise ConfigError("the folder holds no run (no metrics.jsonl, weights.jsonl or trainer_state.json in it "
                          "or in the folders below it).", path=run_dir,
                          fix="pass the --output-dir of drmix train, a pipeline or the demo, or the output_dir of "
                              "a sentence-transformers run.")
    check_report_target(run_dir, overwrite=overwrite)
    for run in sub_runs(run_dir):
        check_report_target(run, overwrite=overwrite)
        write_report(run)
    path = write_report(run_dir)
    card = _refresh_card(run_dir)
    console.print(f"wrote {path}" + (f" and {card}" if card else ""))


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


def _refresh_card(run_dir: Path) -> Path | None:
    """The run's model card re-rendered with the evaluations found in it (None when there are none)."""
    import logging

    from drmix.report.card import refresh_card

    try:
        return refresh_card(run_dir)
    except Exception as e:  # noqa: BLE001 - the report is written; a card that cannot be rendered is only logged
        logging.getLogger(__name__).warning("could not update the model card (%s: %s)", type(e).__name__, e)
        return None


#: what the folder a ``--output`` names is, when eval/compare write into a sub-folder of it instead
RUN_KINDS = ("train", "recipe")


def into_run(output: Path | None, sub: str) -> tuple[Path | None, Path | None]:
    """``(where to write, the run)`` for ``drmix eval|compare --output OUTPUT``: a training run or pipeline
    folder gets its ``sub`` folder (``RUN/eval``, ``RUN/compare``, where ``drmix report`` reads them); any other
    output is used as it is (run None)."""
    from drmix.outputs import is_output_of

    if output is None or not output.is_dir() or not any(is_output_of(output, k) for k in RUN_KINDS):
        return output, None
    from drmix.cli import err_console

    err_console.print(f"{output} is a drmix run: writing into {output / sub} (where drmix report reads it).",
                      highlight=False, soft_wrap=True)
    return output / sub, output


def refresh_run(run: Path | None) -> None:
    """After eval/compare wrote into ``run``: its report.html and model card (when drmix wrote them)."""
    if run is None:
        return
    from drmix.cli import console
    from drmix.report.html import REPORT, is_drmix_report, write_report

    if not (run / REPORT).exists() or is_drmix_report(run / REPORT):
        console.print(f"report: {write_report(run)}")
    card = _refresh_card(run)
    if card is not None:
        console.print(f"model card: {card}")


def _weights_line(run: Path) -> str | None:
    import json

    try:
        weights = json.loads((run / "weights.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(weights, dict):
        return None
    cols, w = weights.get("collections"), weights.get("weights")
    if not (isinstance(cols, list) and isinstance(w, list) and len(cols) == len(w)):
        return None
    shown = ", ".join(f"{c} {float(v):.4f}" for c, v in zip(cols, w) if v is not None)
    return f"({weights.get('strategy', 'static')}): {shown}"


def print_outcome(folder: str | Path, *, data: list | None = None, model: str | Path | None = None) -> None:
    """What a training command ends with: the final mixture weights (of the run, or of each run of a pipeline),
    the report's path and the next command (``drmix eval --model MODEL --data ...``, MODEL default ``folder``)."""
    from drmix.cli import console
    from drmix.report.html import REPORT, sub_runs

    folder = Path(folder)
    line = _weights_line(folder)
    if line is not None:
        console.print(f"final weights {line}", highlight=False, soft_wrap=True)
    else:
        for run in sub_runs(folder) if folder.is_dir() else []:
            line = _weights_line(run)
            if line is not None:
                console.print(f"final weights of {run.relative_to(folder).as_posix()} {line}", highlight=False,
                              soft_wrap=True)
    if (folder / REPORT).is_file():
        console.print(f"report: {folder / REPORT}", highlight=False, soft_wrap=True)
    target = " ".join(f"--data {d}" for d in (data or [])) or "--data BEIR_DIR"
    model = Path(model) if model is not None else folder
    console.print(f"next: drmix eval --model {model} {target} --output {model / 'eval'}", highlight=False,
                  soft_wrap=True)


def before_run(config) -> None:
    """What a training command checks first: a ``--push-to-hub`` that cannot succeed fails before training."""
    if config.run.push_to_hub:
        from drmix.hub import check_can_push

        check_can_push(config.run.push_to_hub, config.run.output_dir)


def after_run(output_dir: str | Path, config, *, pipeline: bool = False) -> None:
    """A pipeline's ``report.html`` (runs write their own) and the ``--push-to-hub`` upload: by global rank 0 alone
    under a launcher (the other ranks write nothing)."""
    from drmix.cli import console
    from drmix.retrieval.ranks import main_process

    if not main_process():
        return

    if pipeline:
        from drmix.report.html import check_report_target, write_report

        check_report_target(output_dir)
        write_report(output_dir)  # its "report:" line is print_outcome's, which every pipeline command calls next
    if config is not None and config.run.push_to_hub:
        from drmix.hub import push_to_hub

        result = push_to_hub(output_dir, config.run.push_to_hub)
        console.print(f"pushed {len(result.files)} files to {result.url}")


def register(app: typer.Typer) -> None:
    app.command("report", help=REPORT_HELP)(report_command)
    app.command("push", help=PUSH_HELP)(push_command)


register_area(CommandArea("report", register))
