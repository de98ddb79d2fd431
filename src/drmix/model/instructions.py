"""Per-dataset query instructions, in training, in evaluation and in the saved model folder.

The tDRO paper (seeds/000, Settings: "prompt instructions are added on the query side for multitasks during
training and evaluation", after E5-Mistral and INSTRUCTOR) prefixes every query with its task's instruction;
documents get none. drmix keeps them as sentence-transformers *named prompts*: a trained model folder's
``config_sentence_transformers.json`` holds ``prompts = {"query": ..., "<dataset>": "<query prompt><instruction> "}``
so ``SentenceTransformer(path).encode(queries, prompt_name="scifact")`` sees exactly the text training saw.

Which query prompt an evaluation uses for a dataset (first that applies): the model's ``query`` prompt followed
by an explicit instruction (``--query-instruction``) or by the dataset's entry in a prompts mapping
(``--prompts FILE`` / ``query_instructions``); the model folder's prompt named after the dataset; the model's
``query`` prompt. Training composes a collection's queries the same way (query prompt, instruction, query).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from drmix.errors import ConfigError


def prompt_text(instruction: str) -> str:
    """An instruction as a literal prefix: followed by a space unless it ends in whitespace (as
    :func:`drmix.data.collections.apply_instruction` joins them in training)."""
    return instruction if not instruction or instruction[-1].isspace() else instruction + " "


def read_prompts_file(path: str | Path) -> dict[str, str]:
    """``{dataset: instruction}`` from a YAML or JSON mapping file."""
    from drmix.io.read import read_yaml

    path = Path(path)
    if path.suffix == ".json":
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError("prompts file not found.", path=path, fix="check the path.") from None
        except json.JSONDecodeError as e:
            raise ConfigError(f"invalid JSON ({e.msg}).", path=path, line=e.lineno, fix="fix the JSON syntax.") from None
    else:
        raw = read_yaml(path, what="prompts file")
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ConfigError("a prompts file maps dataset names to instruction texts.", path=path,
                          fix='write e.g. scifact: "Given a scientific claim, retrieve documents that support or '
                              'refute it"')
    return dict(raw)


def query_prompt_for(model: Any, dataset: str | None, *, explicit: str | None = None,
                     instructions: Mapping[str, str] | None = None) -> str | None:
    """The query prompt for ``dataset`` (see the module docstring); ``None`` = the model's default."""
    from drmix.model.encoder import query_prompt

    if explicit is not None:
        return query_prompt(model) + prompt_text(explicit)
    if dataset is not None and instructions and dataset in instructions:
        return query_prompt(model) + prompt_text(instructions[dataset])
    prompts = getattr(model, "prompts", None) or {}
    if dataset is not None and dataset in prompts:
        return prompts[dataset]
    return None


def record_prompts(model: Any, instructions: Mapping[str, str]) -> dict[str, str]:
    """Add ``{dataset: query prompt + instruction}`` to the model's named prompts (saved with the folder)."""
    from drmix.model.encoder import query_prompt

    base = query_prompt(model)
    added = {name: base + prompt_text(text) for name, text in instructions.items() if text}
    clash = sorted(set(added) & {"query", "document", "passage"})
    if clash:
        raise ConfigError(f"a dataset named {clash[0]!r} would replace the model's own {clash[0]} prompt.",
                          fix="rename the collection (name: in the data list).")
    if added:
        model.prompts = {**(model.prompts or {}), **added}
    return added
