"""The ``drmix`` command line. Thin: it validates options and calls the Python API.

Errors a user can cause (:class:`~drmix.errors.DrmixError`) are printed as one line on stderr with
exit code 2, never as a traceback.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys

import typer
from rich.console import Console

from drmix import __version__
from drmix.errors import DrmixError

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="drmix",
    help="Train dense retrievers that stay good across domains: learned dataset mixtures, "
         "domain adaptation, multi-corpus retrieval, BEIR evaluation and FAISS search.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# One module per command or command group, named after it (retrieval: index, search, eval); each registers
# its commands. The order is the order of `drmix --help`. Modules that are not part of this build are skipped.
_AREAS = ("train", "retrieval", "demo", "localdocs", "mixture", "pipeline", "multicorpus", "mine", "pretrain",
          "analyze", "augment", "prune", "compare")


def _version(value: bool) -> None:
    if value:
        console.print(f"drmix {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output (-v info, -vv debug)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    from rich.logging import RichHandler

    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]",
                        handlers=[RichHandler(console=err_console, show_path=False, rich_tracebacks=False)],
                        force=True)
    if verbose < 2:  # model-loading bars of the libraries underneath; drmix shows its own progress
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    for noisy in ("httpx", "urllib3", "filelock", "datasets", "sentence_transformers", "transformers", "numba",
                  "faiss"):  # faiss.loader logs which CPU build it loaded at INFO
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _register_all() -> None:
    for area in _AREAS:
        try:
            module = importlib.import_module(f"drmix.cli.{area}")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("drmix.cli."):
                continue
            raise
        module.register(app)


_register_all()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``drmix`` console script."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        app(args=argv, prog_name="drmix", standalone_mode=True)
    except DrmixError as e:
        err_console.print(f"[bold red]error:[/bold red] {e.format()}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted; resume with --resume where the command supports it.")
        sys.exit(130)
