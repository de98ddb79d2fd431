"""The ``drmix`` command line. Thin: it validates options and calls the Python API.

Errors a user can cause (:class:`~drmix.errors.DrmixError`) are printed as one line on stderr with
exit code 2, never as a traceback; so is a full disk (or file size limit) hit by a writer underneath.
SIGTERM (what schedulers and ``kill`` send) is handled like Ctrl-C (SIGINT): the command stops the way an
interrupt stops it (an LLM run writes its ``stats.json``, training names the checkpoint to resume from), and
the exit code is 128 + the signal (130 for SIGINT, 143 for SIGTERM).
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from typing import Any

import typer
from rich.console import Console
from typer.core import TyperGroup

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

#: the main options a user may also write after the subcommand (``drmix train -v ...``)
_ROOT_FLAGS = ("--verbose", "--quiet")


def _is_root_flag(token: str) -> bool:
    return token in _ROOT_FLAGS or token == "-q" or (len(token) > 1 and token[0] == "-" and set(token[1:]) == {"v"})


def hoist_root_flags(group: Any, ctx: Any, args: list[str]) -> list[str]:
    """``args`` with ``-v``/``-vv``/``--verbose``/``-q``/``--quiet`` written after the (sub)command moved in front
    of it, where the main callback reads them -- unless that command has an option of the same name (``drmix
    search -q TEXT`` keeps its ``--query``) or the token is the value of the option before it. Nothing after a
    ``--`` moves."""
    i, cmd = 0, group
    while i < len(args) and hasattr(cmd, "get_command"):  # a group (typer vendors its own click)
        if args[i].startswith("-"):
            i += 1
            continue
        sub = cmd.get_command(ctx, args[i])
        if sub is None:
            return args
        cmd, i = sub, i + 1
    if cmd is group:
        return args
    own: set[str] = set()
    takes_value: set[str] = set()
    for param in getattr(cmd, "params", []):
        if getattr(param, "param_type_name", "") == "option":
            names = [*param.opts, *param.secondary_opts]
            own.update(names)
            if not param.is_flag and not param.count:
                takes_value.update(names)
    moved, kept = [], list(args[:i])
    for j, tok in enumerate(args[i:], start=i):
        if tok == "--":
            kept.extend(args[j:])
            break
        prev = args[j - 1] if j > i else ""
        if _is_root_flag(tok) and tok not in own and prev not in takes_value:
            moved.append(tok)
        else:
            kept.append(tok)
    return moved + kept


class _DrmixGroup(TyperGroup):
    """The main group: accepts the verbosity flags after the subcommand too (:func:`hoist_root_flags`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_root_flags(self, ctx, list(args)))


app = typer.Typer(
    cls=_DrmixGroup,
    name="drmix",
    help="Train dense retrievers that stay good across domains: learned dataset mixtures, "
         "domain adaptation, multi-corpus retrieval, BEIR evaluation and FAISS search.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)



def _version(value: bool) -> None:
    if value:
        console.print(f"drmix {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More log output (-v: libraries' warnings "
                                "and datasets' progress bars too; -vv debug); also accepted after the command."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and errors (also accepted after the "
                               "command, except where the command has its own -q)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(level=level, handlers=[_between_bars(_log_handler())], force=True)
    if verbose < 2:  # model-loading bars of the libraries underneath; drmix shows its own progress
        when_imported("transformers", _transformers_bars_off)
    # datasets' "Map" / "Saving the dataset" bars of every conversion and cache write: only with -v
    _datasets_bars(bool(verbose))
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


def _datasets_bars(on: bool) -> None:
    """Switch ``datasets``' progress bars for this process (an environment variable the user set wins)."""
    if "datasets" not in sys.modules:  # set when it loads: importing it here delays every argv check by seconds
        when_imported("datasets", lambda: _datasets_bars(on))
        return
    import warnings


    import datasets

    with warnings.catch_warnings():  # enabling warns when HF_DATASETS_DISABLE_PROGRESS_BARS is set: it wins
        warnings.simplefilter("ignore", UserWarning)
        (datasets.enable_progress_bars if on else datasets.disable_progress_bars)()


def _transformers_bars_off() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


class _AfterImport:
    """A ``sys.meta_path`` finder that runs ``fn`` right after module ``name`` is first imported."""

    def __init__(self, name: str, fn: Any) -> None:
        self.name, self.fn = name, fn

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, fn = spec.loader.exec_module, self.fn

        def exec_module(module: Any) -> None:
            run(module)
            fn()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def when_imported(name: str, fn: Any) -> None:
    """Run ``fn`` now if module ``name`` is imported, else right after it is (the library settings of the main
    options, without importing the libraries before a command's argv is checked); the latest ``fn`` wins."""
    if name in sys.modules:
        fn()
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _AfterImport) and f.name == name)]
    sys.meta_path.insert(0, _AfterImport(name, fn))


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
    """Every command area (:mod:`drmix.cli.areas`: one module per command or group) adds its commands."""
    from drmix.cli.areas import AREAS

    for area in AREAS:
        area.register(app)
    _plain_help(app)


def _plain_help(typer_app: typer.Typer) -> None:
    """Help as plain text in every command group: rich markup would eat "[default: 32]" and "drmix[onnx]"."""
    typer_app.rich_markup_mode = None
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _plain_help(group.typer_instance)


_register_all()


_SIGNALS: list[int] = []  # SIGTERMs received by this process


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM stops the command as Ctrl-C does: it is passed on as SIGINT, so whatever handles Ctrl-C where
    the command is (Python's KeyboardInterrupt, asyncio's runner cancelling its task) handles it the same."""
    _SIGNALS.append(signum)
    if callable(signal.getsignal(signal.SIGINT)):
        signal.raise_signal(signal.SIGINT)
    else:  # SIGINT ignored (a background job of a script): nothing would answer it, so interrupt here
        raise KeyboardInterrupt


def _install_signal_handlers() -> None:
    """SIGTERM is handled whatever SIGINT's disposition (a background job of a non-interactive shell starts
    with SIGINT ignored; its SIGTERM must still stop it cleanly); a SIGTERM handler someone else set is kept."""
    sigterm = getattr(signal, "SIGTERM", None)
    if sigterm is None:
        return
    try:
        if signal.getsignal(sigterm) == signal.SIG_DFL:
            signal.signal(sigterm, _on_sigterm)
    except ValueError:  # not the main thread (drmix called from a thread): leave the handlers alone
        pass


def interrupt_exit_code() -> int:
    """The exit code of an interrupted command: 128 + the signal (130 Ctrl-C / SIGINT, 143 SIGTERM)."""
    return 128 + int(_SIGNALS[-1] if _SIGNALS else signal.SIGINT)


def interrupt_name() -> str:
    """``"interrupted"`` (Ctrl-C) or ``"terminated (SIGTERM)"``: how an interrupt message starts."""
    return "terminated (SIGTERM)" if _SIGNALS else "interrupted"


def _interrupted(e: BaseException) -> bool:
    """Whether the exit ``e`` is typer's silent answer to a KeyboardInterrupt (not a command's own exit that
    already said where to resume: those raise ``from None``)."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        if isinstance(x, KeyboardInterrupt):
            return True
        seen.add(id(x))
        x = x.__cause__ if x.__cause__ is not None else (None if x.__suppress_context__ else x.__context__)
    return False


def _disk_full_line(e: BaseException) -> str | None:
    """One line for a full disk hit outside drmix's own writers (an appended log, a library's file)."""
    from drmix.io.checks import disk_full_error, is_disk_full

    if not is_disk_full(e):
        return None
    filename = None
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen and filename is None:
        seen.add(id(x))
        filename = getattr(x, "filename", None)
        x = x.__cause__ or x.__context__
    return disk_full_error(e, filename or os.getcwd(), unchanged=False).format()


def _close_bars() -> None:
    """End the progress bars still drawn (a library's loop that raised leaves its bar open, its line unfinished):
    each is left as it stopped, on its own line, so that what follows starts on a line of its own."""
    std = sys.modules.get("tqdm.std")
    for bar in list(getattr(getattr(std, "tqdm", None), "_instances", ())):
        with contextlib.suppress(Exception):
            bar.leave = True
            bar.close()


def _between_bars(handler: logging.Handler) -> logging.Handler:
    """``handler`` writing each record on a line of its own while progress bars are drawn: the bars are cleared
    for the record and drawn again below it (tqdm's ``external_write_mode``)."""
    emit = handler.emit

    def emit_between_bars(record: logging.LogRecord) -> None:
        std = sys.modules.get("tqdm.std")
        if std is None or not len(getattr(std.tqdm, "_instances", ())):
            emit(record)
            return
        with std.tqdm.external_write_mode(file=sys.stderr):
            emit(record)

    handler.emit = emit_between_bars  # type: ignore[method-assign]
    return handler


def _error_line(line: str) -> None:
    """drmix's one error line, on a line of its own."""
    _close_bars()
    err_console.print(f"[bold red]error:[/bold red] {line}", highlight=False, soft_wrap=True)


def _record_for_launcher(error: BaseException, line: str) -> None:
    """Under torchrun / accelerate launch: the error file its elastic agent reads (``TORCHELASTIC_ERROR_FILE``,
    torch.distributed.elastic's record format), so that the launcher's failure summary quotes drmix's line where it
    would say "To enable traceback see ...". Hand-written: torch's ``ErrorHandler.record_exception`` records a
    traceback, which an error the user can fix never shows. The launcher still prints its own ``ChildFailedError``
    report after the line (docs/evaluation.md)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    import json
    import time

    record = {"message": {"message": f"{type(error).__name__}: {line}",
                          "extraInfo": {"timestamp": str(int(time.time()))}}}
    with contextlib.suppress(OSError):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)


def _exit_on_signal(signum: int, frame: object) -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(128 + signum)


def _signals_end_the_process() -> None:
    """Once the command is over, SIGTERM or Ctrl-C ends the process at once, with exit code 128 + the signal:
    while the interpreter shuts down (joining threads, running the libraries' exit hooks) a KeyboardInterrupt
    could only print a traceback from inside a hook. A handler someone else set, and an ignored SIGINT, stay."""
    for name in ("SIGTERM", "SIGINT"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            if signal.getsignal(sig) in (_on_sigterm, signal.default_int_handler, signal.SIG_DFL):
                signal.signal(sig, _exit_on_signal)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``drmix`` console script (``argv`` None: the process's own command line, and the
    process ends with the command)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _install_signal_handlers()
    try:
        app(args=argv, prog_name="drmix", standalone_mode=True)
    except DrmixError as e:
        _error_line(e.format())
        _record_for_launcher(e, e.format())
        sys.exit(2)
    except KeyboardInterrupt:
        _close_bars()
        err_console.print(f"{interrupt_name()}; run the same command again to continue where it can "
                          "(training: with --resume; LLM runs reuse their cache).")
        sys.exit(interrupt_exit_code())
    except SystemExit as e:
        if e.code in (1, 130) and _interrupted(e):  # typer/click turned the interrupt into an exit
            _close_bars()
            err_console.print(f"{interrupt_name()}; run the same command again to continue where it can "
                              "(training: with --resume; LLM runs reuse their cache).")
            sys.exit(interrupt_exit_code())
        if e.code == 130 and _SIGNALS:  # a command that said where to resume itself, after a SIGTERM
            sys.exit(interrupt_exit_code())
        raise
    except Exception as e:
        line = _disk_full_line(e)
        if line is None:
            raise
        _error_line(line)
        _record_for_launcher(e, line)
        sys.exit(2)
    finally:
        if argv is None:
            _signals_end_the_process()
