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



def make_console(*, stderr: bool = False) -> Console:
    """A rich console; when the output is not a terminal (a pipe, a file, CI) lines are never wrapped at 80
    columns (one message, one line) and tables take their natural width instead of COLUMNS."""
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, soft_wrap=True, width=max(c.width, 400))
    return c


console = make_console()
err_console = make_console(stderr=True)

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
_AREAS = ("train", "retrieval", "demo", "localdocs", "mixture", "pipeline", "adapt", "multicorpus", "mine", "pretrain",
          "analyze", "augment", "prune", "compare", "report")


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
    logging.basicConfig(level=level, handlers=[_log_handler()], force=True)
    if verbose < 2:  # model-loading bars of the libraries underneath; drmix shows its own progress
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    for noisy in ("httpx", "urllib3", "filelock", "datasets", "numba",
                  "faiss"):  # faiss.loader logs which CPU build it loaded at INFO
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    # transformers' per-load "LOAD REPORT" and the libraries' deprecation notices are for -v
    library_level = logging.WARNING if verbose else logging.ERROR
    for lib in ("sentence_transformers", "transformers", "peft", "accelerate", "torch"):
        logging.getLogger(lib).setLevel(max(level, library_level))
    if not verbose:
        import warnings

        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category)


def _log_handler() -> logging.Handler:
    """Rich's handler on a terminal; elsewhere (pipes, files, CI) one plain line per record."""
    if err_console.is_terminal:
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False,
                                               log_time_format="[%X]")
        handler.setFormatter(logging.Formatter("%(message)s"))
        return handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"))
    return handler


def _register_all() -> None:
    for area in _AREAS:
        try:
            module = importlib.import_module(f"drmix.cli.{area}")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("drmix.cli."):
                continue
            raise
        module.register(app)
    _plain_help(app)


def _plain_help(typer_app: typer.Typer) -> None:
    """Help as plain text in every command group: rich markup would eat "[default: 32]" and "drmix[onnx]"."""
    typer_app.rich_markup_mode = None
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _plain_help(group.typer_instance)


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
