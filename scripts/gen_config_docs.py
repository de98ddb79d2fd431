"""Regenerate docs/configuration.md, the table of every configuration part and field, from the config classes.

    .venv/bin/python scripts/gen_config_docs.py          # writes docs/configuration.md
    .venv/bin/python scripts/gen_config_docs.py --check  # exits 1 if it is out of date (tests run this)
"""
from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

HEADER = """# Configuration

Generated from the config classes by `scripts/gen_config_docs.py`.

A configuration is made of **parts**: typed groups of fields (`model`, `data`, `contrastive`, `mixture`,
`optim`, `eval`, `run`, and a recipe's own parts), plus the option mappings of the strategies (`dro`,
`influence`, `idro`, `strategy_options`), each checked by the options model its strategy registers. A recipe's
config carries only the training fields and option mappings its stages read: the others are listed under each
recipe below, with why, and given a value they are refused in one line. A YAML file writes the parts as mappings:

```yaml
# train.yaml
model: {name_or_path: null}       # default: bundled all-MiniLM-L6-v2
data: {collections: [collections/]}
contrastive: {batch_size: 64}
mixture: {scheme: temperature, mixture_temperature: 2.0}
optim: {max_steps: 2000, learning_rate: 2.0e-5}
eval: {eval_data: [beir/scifact], eval_every: 500}
run: {output_dir: runs/mix}
dro: {lr: 0.02}                   # options of tdro / doremi / groupdro
```

Every field also has one **flat name**, unique across the parts: the CLI flag (`--learning-rate`), the key of a
stage override (`--stage1 max_steps=200`, `--coco batch_size=64`), a keyword of the Python constructor
(`TrainConfig(max_steps=2000, data=["collections/"])`) and a key a YAML file may still give at its top level
(the layout of drmix 0.1: read into the parts, with a warning; `tdro:` and `infdds:` are read as `dro:` and
`influence:`). Every run writes its resolved configuration in the grouped layout (`config.yaml`).

Each field has a **role**. `hyperparameter`: shapes what is trained; `--resume` refuses a change (unless
`--resume-with-changes`) and the model card lists it. `input`: what is trained on or from; `--resume` refuses a
change; the card shows it as base model or datasets. `operational`: bookkeeping (output, logging, checkpoints,
device, evaluation during training, input threads); may change on resume; not on the card.
"""


def _default(info) -> str:
    value = info.get_default(call_default_factory=True)
    text = "—" if value in (None, [], {}) else str(value)
    return text.replace("|", "\\|")


def table(cls, title: str, *, only: set[str] | None = None, fields: set[str] | None = None) -> str:
    """The rows of ``cls``'s fields: of the parts (or top-level fields) in ``only``, or the flat names in ``fields``."""
    lines = [f"## {title}", "", "| part | field | flag | default | role | description |", "|---|---|---|---|---|---|"]
    for flat, f in cls.flat_fields().items():
        if only is not None and (f.group or flat) not in only or fields is not None and flat not in fields:
            continue
        part = f.group or "—"
        desc = " ".join((f.info.description or "").split()).replace("|", "\\|")
        lines.append(f"| `{part}` | `{f.name}` | `--{flat.replace('_', '-')}` | {_default(f.info)} | {f.role} | "
                     f"{desc} |")
    return "\n".join(lines) + "\n"


def left_out_table(cls) -> str:
    """The rows of the TrainConfig fields ``cls`` leaves out: why its stages never read them, and what to do."""
    lines = [f"Training fields `{cls.command}` does not take (its stages never read them; given a value, each is "
             "refused in one line):", "", "| flag | field | why | instead |", "|---|---|---|---|"]
    for flat in cls.left_out_fields():
        why, fix = (" ".join(t.split()).replace("|", "\\|") for t in cls.left_out[flat])
        lines.append(f"| `--{flat.replace('_', '-')}` | `{flat}` | {why} | {fix} |")
    return "\n".join(lines) + "\n"


def changed_fields(cls, base) -> set[str]:
    """The flat names of the fields ``cls`` adds to ``base`` or declares with another default or description (a
    recipe's own parts, and what its variants of the shared parts change)."""
    ours, theirs = cls.flat_fields(), base.flat_fields()
    return {k for k, f in ours.items() if k not in theirs or theirs[k].group != f.group
            or (f.info.description, _default(f.info)) != (theirs[k].info.description, _default(theirs[k].info))}


def render() -> str:
    from drmix.config import RecipeConfig, TrainConfig
    from drmix.pretrain.runner import CocoConfig
    from drmix.recipes.adapt import AdaptConfig
    from drmix.recipes.audit import AuditConfig
    from drmix.recipes.coco import CocoPipelineConfig
    from drmix.recipes.drama import DramaConfig
    from drmix.recipes.tdro import PipelineConfig

    parts = [HEADER,
             table(TrainConfig, "`drmix train`, `drmix mixture optimize` (TrainConfig)"),
             "A recipe's config (`RecipeConfig`) is composed of the fine-tuning parts of `TrainConfig` (every training "
             "stage's config is composed from them) less the fields its stages never read, the option mappings of the "
             "strategies its stages run, the recipe's output folder and the final evaluation below, and the recipe's "
             "own parts; the tables after it list each recipe's own fields, every default it changes and the "
             "training fields it does not take. A stage's overrides (`--stage1 KEY=VALUE`, `--coco KEY=VALUE`) and the "
             "strategies' options are checked by their typed models when the config is read.\n",
             table(RecipeConfig, "Every recipe (`drmix pipeline tdro`, `coco`, `drama`): output folder and final "
                                 "evaluation", fields=changed_fields(RecipeConfig, TrainConfig)),
             table(PipelineConfig, "`drmix pipeline tdro`: its own parts",
                   fields=changed_fields(PipelineConfig, RecipeConfig)), left_out_table(PipelineConfig),
             table(CocoPipelineConfig, "`drmix pipeline coco`: its own parts",
                   fields=changed_fields(CocoPipelineConfig, RecipeConfig)), left_out_table(CocoPipelineConfig),
             table(DramaConfig, "`drmix pipeline drama`: its own parts", fields=changed_fields(DramaConfig, RecipeConfig)),
             left_out_table(DramaConfig),
             table(AdaptConfig, "`drmix adapt`: its own parts (its training parts are TrainConfig's, without "
                                "`mixture`: the candidates set it)",
                   only={"eval", "run", "target", "synthetic", "stages", "search", "labels", "dro", "influence"}),
             left_out_table(AdaptConfig),
             table(AuditConfig, "`drmix mixture audit`: its own parts (its training parts are TrainConfig's less the "
                                "fields below, which the audit sets itself)",
                   fields=changed_fields(AuditConfig, TrainConfig)),
             left_out_table(AuditConfig),
             table(CocoConfig, "`drmix pretrain coco` (CocoConfig): its own parts", only={"optim", "run", "coco"})]
    return "\n".join(parts)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docgen import write_or_check

    return write_or_check(DOC, render(), "gen_config_docs.py")


if __name__ == "__main__":
    sys.exit(main())
