"""Turn a pydantic config model into typer options, so every config field is also a CLI flag.

``drmix train config.yaml --batch-size 64 --data a.jsonl --data b.jsonl`` reads the YAML file and
overrides its fields with the flags given. Scalars map to typed options, booleans to
``--flag/--no-flag``, lists to repeatable options, and free-form mapping fields (strategy options) to
repeatable ``--tdro KEY=VALUE`` options whose values are parsed as YAML scalars.
Hand-written: typer builds commands from function signatures, so the signature is generated here.
"""
from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Optional

import typer
import yaml
from pydantic import BaseModel

from drmix.errors import ConfigError


def paragraphs(text: str) -> str:
    """Help text with hard line breaks inside paragraphs removed (the terminal wraps it)."""
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _annotation(field_type: Any) -> tuple[Any, str]:
    """(typer annotation, kind) for a pydantic field type; kind is scalar | bool | list | mapping."""
    origin = typing.get_origin(field_type)
    args = [a for a in typing.get_args(field_type) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        if len(args) == 1:
            return _annotation(args[0])
        return Optional[str], "scalar"
    if field_type is bool:
        return Optional[bool], "bool"
    if origin is list:
        inner = args[0] if args else str
        inner_t = inner if inner in (int, float) else str
        return Optional[list[inner_t]], "list"
    if origin is dict:
        return Optional[list[str]], "mapping"
    if origin is typing.Literal:
        return Optional[str], "scalar"
    if field_type in (int, float, str):
        return Optional[field_type], "scalar"
    return Optional[str], "scalar"


#: the example a mapping flag's error shows (a training field's override for the others: --stage1, --coco)
MAPPING_EXAMPLES = {
    "--query-instructions": "scifact='Given a scientific claim, retrieve documents that support or refute it'",
    "--tdro": "lr=0.02", "--idro": "clusters=16", "--infdds": "update_every=50", "--strategy-options": "lr=0.02",
    "--llm": "backend=openai",
}


def _parse_mapping(items: list[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            example = MAPPING_EXAMPLES.get(flag, "max_steps=200")
            raise ConfigError(f"{flag} expects KEY=VALUE, got '{item}'.", fix=f"write e.g. {flag} {example}.")
        k, v = item.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


def config_params(model_cls: type[BaseModel], *, skip: set[str] = frozenset(),
                  help_panel: str | None = None) -> tuple[list[inspect.Parameter], dict[str, str]]:
    """typer parameters for every field of ``model_cls`` (default None = "not given on the command line").

    For a config of parts (:class:`drmix.config.Config`) every part's field is a flag under its flat name, in a
    help panel titled after the part, and a field's older names (``aliases``) are accepted as flags too."""
    from drmix.config import Config

    hidden: set[str] = set()
    if isinstance(model_cls, type) and issubclass(model_cls, Config):
        groups = model_cls.groups()
        fields = [(flat, f.info, (groups[f.group].title or f.group.title()) if f.group else help_panel, f.aliases)
                  for flat, f in model_cls.flat_fields().items()]
        # the fields of a larger config this one leaves out: not listed, refused in one line when given
        left = model_cls.left_out_fields()
        fields += [(flat, f.info, None, f.aliases) for flat, f in left.items()]
        hidden = set(left)
    else:
        fields = [(name, info, help_panel, ()) for name, info in model_cls.model_fields.items()]
    params, kinds = [], {}
    for name, field, panel, aliases in fields:
        if name in skip:
            continue
        ann, kind = _annotation(field.annotation)
        kinds[name] = kind
        help_text = field.description or ""
        if kind == "mapping":
            help_text += " Repeat as KEY=VALUE."
        default = field.get_default(call_default_factory=True)
        if default not in (None, [], {}):
            help_text += f" [default: {default}]"
        names = [name, *aliases]
        decls = ([_flag(n) for n in names] if kind != "bool" else
                 [f"{_flag(n)}/--no-{n.replace('_', '-')}" for n in names])
        opt = typer.Option(None, *decls, help=help_text, show_default=False, rich_help_panel=panel,
                           hidden=name in hidden)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann))
    return params, kinds


#: the command line being run (``drmix pipeline coco``), set by :func:`config_command`: the command a config
#: error's fix names (``see `drmix pipeline coco --help```)
RUNNING: ContextVar[str | None] = ContextVar("drmix_command", default=None)


def load_checked(model_cls: type[BaseModel], path: Path | None, overrides: dict[str, Any]) -> Any:
    """The config a command runs with (:func:`drmix.config.load_config`), its strategy and the strategy's options
    checked by the registry before anything loads; errors name the config file, and their fixes the command that
    is running (:data:`RUNNING`)."""
    from drmix.config import load_config

    try:
        config = load_config(model_cls, path, overrides, command=RUNNING.get())
    except ConfigError as e:   # raised while the config was made (a recipe's checks): the file it came from
        if e.path is None and path is not None:
            raise ConfigError(e.message, path=path, fix=e.fix) from None
        raise
    mixture = getattr(model_cls, "groups", dict)().get("mixture")
    if mixture is not None and "strategy" in mixture.model_fields:      # a config that names a strategy
        from drmix.mixture.registry import check_config

        try:
            check_config(config)
        except ConfigError as e:
            if e.path is None and path is not None:
                raise ConfigError(e.message, path=path, fix=e.fix) from None
            raise
    return config


def overrides_from_kwargs(kwargs: dict[str, Any], kinds: dict[str, str]) -> dict[str, Any]:
    """CLI values that were given (not None / not empty), mapping options parsed."""
    out = {}
    for name, kind in kinds.items():
        v = kwargs.get(name)
        if v is None or (kind in ("list", "mapping") and not v):
            continue
        out[name] = _parse_mapping(v, _flag(name)) if kind == "mapping" else v
    return out


def config_command(model_cls: type[BaseModel], run: Callable[..., Any], *, extra: list[inspect.Parameter] = (),
                   config_help: str = "YAML config file (any fields; flags override it).",
                   skip: set[str] = frozenset(), trailing: list[inspect.Parameter] = ()) -> Callable[..., Any]:
    """A function typer can register: ``CONFIG`` argument + extra params + one option per field (+ ``trailing``
    params, listed after the fields in help).

    ``run(config_path, overrides, **extra_values)`` is called with the YAML path (or None), the dict of
    field values given as flags, and the extra (and trailing) parameters.
    """
    params, kinds = config_params(model_cls, skip=skip, help_panel="Configuration fields")
    cfg_param = inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                  default=typer.Argument(None, help=config_help, show_default=False),
                                  annotation=Optional[Path])
    ctx_param = inspect.Parameter("drmix_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    extra_names = [p.name for p in (*extra, *trailing)]

    def command(**kwargs: Any) -> Any:
        ctx = kwargs.pop("drmix_ctx", None)
        config_path = kwargs.pop("config", None)
        extra_values = {n: kwargs.pop(n) for n in extra_names}
        token = RUNNING.set(_command_line(ctx))
        try:
            return run(config_path, overrides_from_kwargs(kwargs, kinds), **extra_values)
        finally:
            RUNNING.reset(token)

    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [cfg_param, *extra, *params, *trailing, ctx_param])
    return command


def _command_line(ctx: Any) -> str | None:
    """``drmix pipeline coco`` for the running command (its name path under the ``drmix`` program)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["drmix", *reversed(names)]) if names else None


# -- options every encoding command shares (drmix.model.backbone / drmix.model.instructions; docs/llm.md) --------
TORCH_DTYPE_HELP = "dtype the model's weights are loaded in: bf16, fp16 or fp32 (default: transformers' choice)."
ATTN_HELP = "Attention kernel: sdpa, flash_attention_2 or eager (default: transformers' choice)."
QUERY_INSTRUCTION_HELP = ("Instruction prepended to every query (a space is added unless it ends in one); "
                          "overrides --prompts and the model folder's prompts.")
PROMPTS_HELP = ("YAML/JSON file mapping dataset name -> query instruction (default: the model folder's prompt "
                "named after the dataset, else its query prompt).")


def model_kwargs(torch_dtype: str | None, attn_implementation: str | None) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments of --torch-dtype / --attn-implementation (checked)."""
    from drmix.model.backbone import BackboneOptions

    return BackboneOptions(torch_dtype=torch_dtype, attn_implementation=attn_implementation).model_kwargs()


def report_output_option(files: str, folder: str, readers: str) -> Any:
    """``--output`` of a command that writes ``files`` into a folder, or into the ``folder``/ subfolder of a drmix
    run or pipeline folder, where ``readers`` read them (``drmix eval``, ``drmix compare``)."""
    return typer.Option(None, "--output", "-o", help=f"Directory for {files}; a drmix run or pipeline folder gets "
                                                     f"them in its {folder}/ folder (where {readers} them).")


def report_overwrite_option(files: str, command: str) -> Any:
    """``--overwrite`` of such a command: replace the ``files`` an earlier ``drmix <command>`` wrote there."""
    return typer.Option(False, "--overwrite", help=f"Replace the {files} of an earlier drmix {command} in --output.")
