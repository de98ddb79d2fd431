"""``drmix train``'s flags under the names other trainers use, its grouped help, and the argv checks made before
torch loads.

* ``--bf16`` / ``--fp16`` (transformers' ``TrainingArguments``): ``--mixed-precision bf16`` / ``fp16``;
* ``--train-group-size N`` (Tevatron, FlagEmbedding: the positive plus N - 1 hard negatives): ``--num-negatives N-1``;
* ``--per-device-batch-size B`` (transformers' ``per_device_train_batch_size``): ``--batch-size B x processes``
  (drmix's batch is global; processes from ``WORLD_SIZE``, as ``accelerate launch`` / ``torchrun`` set it);
* ``--deepspeed ds.json`` (transformers' ``deepspeed``): accelerate's DeepSpeed plugin with that config file, set
  the way ``accelerate launch --use_deepspeed --deepspeed_config_file`` sets it (its environment variables).

Each alias is turned into the drmix field it stands for (written to ``config.yaml`` under drmix's name); giving
both names with different values is refused.
"""
from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any, Optional

import click
import typer
from typer.core import TyperCommand

from drmix.errors import ConfigError, DataError


def alias_params() -> list[inspect.Parameter]:
    """The alias flags as typer parameters, each in the help panel of the field it sets."""
    def opt(name: str, decl: str, ann: Any, help_text: str, panel: str, default: Any = None) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann,
                                 default=typer.Option(default, decl, help=help_text, rich_help_panel=panel,
                                                      show_default=False))

    return [
        opt("bf16", "--bf16", bool, "transformers' name for --mixed-precision bf16. [default: off]",
            "Optimisation", False),
        opt("fp16", "--fp16", bool, "transformers' name for --mixed-precision fp16. [default: off]",
            "Optimisation", False),
        opt("train_group_size", "--train-group-size", Optional[int], "Tevatron / FlagEmbedding: the positive plus "
            "hard negatives per query, i.e. --num-negatives N-1.", "Batches and negatives"),
        opt("per_device_batch_size", "--per-device-batch-size", Optional[int], "transformers' "
            "per_device_train_batch_size: --batch-size is this times the processes (WORLD_SIZE; 1 without a "
            "launcher).", "Batches and negatives"),
        opt("deepspeed", "--deepspeed", Optional[Path], "A DeepSpeed config (ds.json) for accelerate's DeepSpeed "
            "plugin, as `accelerate launch --use_deepspeed --deepspeed_config_file` gives it; needs the deepspeed "
            "package. Several GPUs: run under accelerate launch / torchrun.", "Output, checkpoints and tracking"),
    ]


ALIASES = ("bf16", "fp16", "train_group_size", "per_device_batch_size", "deepspeed")


def _set(overrides: dict[str, Any], field: str, value: Any, alias: str) -> None:
    given = overrides.get(field)
    if given is not None and given != value:
        flag = "--" + field.replace("_", "-")
        raise ConfigError(f"{alias} means {flag} {value}, but {flag} {given} is given too.",
                          fix=f"pass one of {alias} and {flag}.")
    overrides[field] = value


def apply_aliases(overrides: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` (drmix fields given as flags) with the alias flags in ``values`` turned into their fields."""
    out = dict(overrides)
    if values.get("bf16") and values.get("fp16"):
        raise ConfigError("--bf16 and --fp16 ask for two precisions.", fix="pass one of them (or --mixed-precision).")
    for name in ("bf16", "fp16"):
        if values.get(name):
            _set(out, "mixed_precision", name, f"--{name}")
    group = values.get("train_group_size")
    if group is not None:
        if group < 1:
            raise ConfigError(f"--train-group-size {group}: the group counts the positive, so it is at least 1.",
                              fix="pass --train-group-size 1 + the hard negatives per query (e.g. 8 for 7).")
        _set(out, "num_negatives", group - 1, f"--train-group-size {group}")
    per_device = values.get("per_device_batch_size")
    if per_device is not None:
        if per_device < 1:
            raise ConfigError(f"--per-device-batch-size {per_device} must be at least 1.",
                              fix="pass the examples each process encodes per micro-step, e.g. 32.")
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        _set(out, "batch_size", per_device * world, f"--per-device-batch-size {per_device} on {world} process"
             + ("es" if world != 1 else ""))
    if values.get("deepspeed") is not None:
        use_deepspeed(Path(values["deepspeed"]))
    return out


def use_deepspeed(path: Path) -> None:
    """Check ``path`` (a JSON object) and the deepspeed package, then point accelerate's DeepSpeed plugin at it
    (the environment variables ``accelerate launch`` sets for ``--deepspeed_config_file``)."""
    import importlib.util

    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("DeepSpeed config file does not exist.", path=path,
                          fix="pass an existing ds.json to --deepspeed.") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"is not a JSON DeepSpeed config ({type(e).__name__}).", path=path,
                          fix="pass a ds.json as transformers' --deepspeed takes it.") from None
    if not isinstance(loaded, dict):
        raise ConfigError("a DeepSpeed config must be a JSON object.", path=path,
                          fix='write it as {"zero_optimization": {"stage": 2}, ...}.')
    if importlib.util.find_spec("deepspeed") is None:
        raise ConfigError("--deepspeed needs the deepspeed package, which is not installed.", path=path,
                          fix="pip install deepspeed, or drop --deepspeed.")
    os.environ["ACCELERATE_USE_DEEPSPEED"] = "true"
    os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"] = str(path.resolve())


# -- checks made before the training stack loads -------------------------------------------------------------
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".tsv", ".arrow", ".yaml", ".yml", ".gz")


def check_argv(config: Any) -> None:
    """Fail in a fraction of a second (before torch, transformers and datasets load) on what needs no model:
    no ``--data``, or a local-looking data path that does not exist."""
    from drmix.data.spec import CollectionSpec, split_suffix

    specs = config.data.collections
    if not specs:
        raise DataError("no training data given.",
                        fix="pass --data PATH (a collection file, folder, saved dataset, BEIR dir, YAML list or Hub id).")
    for spec in specs:
        raw = spec.path if isinstance(spec, CollectionSpec) else str(spec)
        path = raw if Path(raw).expanduser().exists() else split_suffix(raw)[0]
        p = Path(path).expanduser()
        looks_local = (path.startswith((".", "/", "~")) or path.count("/") > 1 or "\\" in path
                       or path.lower().endswith(_DATA_SUFFIXES)
                       or (p.parent != Path(".") and p.parent.is_dir()))    # owner/name, and owner/ is a folder here
        if looks_local and not p.exists():
            near = _nearest(p)
            raise DataError("collection path does not exist.", path=p,
                            fix=(f"did you mean {near}? " if near else "")
                            + "pass existing collection files or folders, or a Hub dataset id (owner/name).")


def _nearest(p: Path) -> str | None:
    """The closest existing name in ``p``'s folder (a typo's likely target), if any."""
    import difflib

    try:
        names = [c.name for c in p.parent.iterdir()]
    except OSError:
        return None
    close = difflib.get_close_matches(p.name, names, n=1, cutoff=0.6)
    return str(p.parent / close[0]) if close else None


# -- --resume [PATH] ---------------------------------------------------------------------------------------------
def resume_path_args(args: list[str]) -> list[str]:
    """``--resume PATH`` / ``--resume=PATH`` (transformers' ``resume_from_checkpoint`` takes True or a path) as
    ``--resume-from PATH``; a bare ``--resume`` stays the flag (the latest checkpoint). ``drmix train`` takes no
    positional argument, so a word after ``--resume`` can only be its value."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return out + args[i:]
        if arg.startswith("--resume="):
            out += ["--resume-from", arg.split("=", 1)[1]]
        elif arg == "--resume" and i + 1 < len(args) and not args[i + 1].startswith("-"):
            out += ["--resume-from", args[i + 1]]
            i += 1
        else:
            out.append(arg)
        i += 1
    paths = [out[j + 1] for j, a in enumerate(out[:-1]) if a == "--resume-from"]
    paths += [a.split("=", 1)[1] for a in out if a.startswith("--resume-from=")]
    if len(set(paths)) > 1:
        raise ConfigError(f"--resume / --resume-from name {len(set(paths))} checkpoints: {', '.join(paths)}.",
                          fix="pass one checkpoint: --resume PATH (or --resume-from PATH), or --resume for the "
                              "latest.")
    return out


# -- help in option groups -------------------------------------------------------------------------------------
class PanelCommand(TyperCommand):
    """Plain-text help with the options in sections, one per ``rich_help_panel`` (the config's parts), in order of
    first appearance; options without a panel under "Options". ``--resume PATH`` is read as ``--resume-from PATH``
    (:func:`resume_path_args`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, resume_path_args(list(args)))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            title = ("Arguments" if param.param_type_name == "argument"
                     else getattr(param, "rich_help_panel", None) or "Options")
            sections.setdefault(title, []).append(record)
        for title, records in sections.items():
            with formatter.section(title):
                formatter.write_dl(records)
