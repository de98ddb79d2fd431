"""``drmix pipeline tdro|coco|drama``: the multi-stage recipes of :mod:`drmix.recipes`.

Thin: each command loads its recipe's pydantic config (every field is a flag) and prints the summary table.
The ``pipeline`` group is created here, once; a new recipe adds its command to :func:`register`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.options import config_command, load_checked, paragraphs
from drmix.cli.report import after_run, before_run
from drmix.outputs import claim_run

TDRO_HELP = """Run the tDRO recipe end to end: stage 0 (uniform reference, unless --reference-model),
stage 1 (learned weights), stage 2 (fine-tuning with each --transfers entry) and evaluation of the uniform
baseline and every transfer on --test-data (BEIR directories), ending with one table.

Every training field listed applies to all stages; --stage0/--stage1/--stage2 KEY=VALUE override a field of
`drmix train` for one stage (e.g. --stage1 max_steps=200, --stage0 mixture=size). Each stage sets its own
weights and batches (uniform; stage 1 mixed batches, stage 2 each transfer), so the recipe takes no --mixture,
--weights-file, --transfer or --batching of its own. Each stage writes a subdirectory of --output-dir; rerunning the command
reuses the stages made with the same settings from the same inputs and resumes an interrupted one; a stage
made with other settings, or from an input changed at the same path (a collection, corpus or model folder,
compared by content: provenance.json), is refused naming the change, unless --resume-with-changes (re-run it
and the stages built on it) or --overwrite (re-run every stage). The table is saved as summary.md / summary.json,
with paired tests of every transfer against uniform. Every stage's configuration, transfer and path is
checked before stage 0 trains. --select-on DEV_BEIR_DIR chooses among uniform and the transfers on that
dev split only and keeps the best as output_dir/model (warning about transfers below uniform); without it
the result is uniform (--default-selection).
"""


COCO_PIPELINE_HELP = """Run the COCO-DR recipe: COCO on --corpus, fine-tuning on --data (--strategy static or
idro) from the COCO model and, for comparison, the same fine-tuning from --model without COCO; then
nDCG@10 of both on --test-data with a paired t-test over queries, as one table (summary.md / summary.json).

Training fields apply to the fine-tuning (--mixture, --weights-file and --transfer to static weights only:
iDRO samples the collections uniformly); --coco KEY=VALUE overrides a field of the COCO stage (e.g. --coco
max_steps=2000 --coco batch_size=256). Rerunning reuses the stages made with the same settings from the same
inputs (compared by content) and resumes an interrupted one; a stage whose settings or inputs changed is refused
unless --resume-with-changes or --overwrite re-runs it.
"""


DRAMA_HELP = ("Run the DRAMA recipe: augment --corpus (crop + teacher mining; LLM generate / rerank with "
                 "--generate / --rerank), train the student (--model, or one pruned from --prune-from), then "
                 "evaluate teacher, untuned and trained student on --test-data at full size and at --dims, in one "
                 "table (summary.md). A rerun reuses the steps made with the same settings from the same inputs "
                 "(compared by content); one whose settings or inputs changed is refused unless "
                 "--resume-with-changes or --overwrite re-runs it.")



def _run_recipe(config: Any, run: Any) -> Any:
    """The output contract (drmix.outputs) and the run hooks around one recipe; returns the recipe's result."""
    claim_run(config, "recipe")         # before any stage
    before_run(config)
    return run(config)


def _finish(table: Any, summary: Path, output_dir: Any, config: Any) -> None:
    from drmix.cli import console
    from drmix.cli.report import print_outcome

    if table is not None:   # as written: no markup, no emoji (a transfer "top:0.7" is not ":top:")
        console.print(table, highlight=False, soft_wrap=True, markup=False, emoji=False)
    console.print(f"summary: {summary}")
    after_run(output_dir, config, pipeline=True)
    print_outcome(output_dir, data=_test_data(config))


def _test_data(config: Any) -> list:
    """The BEIR directories a recipe evaluated on (for the next command it prints)."""
    flat = config.flat(mode="python") if hasattr(config, "flat") else {}
    return [str(d) for d in (flat.get("test_data") or [])]


def run_tdro(config_path: Path | None, overrides: dict[str, Any]) -> None:
    from drmix.recipes.tdro import PipelineConfig, run_tdro_pipeline

    config = load_checked(PipelineConfig, config_path, overrides)
    result = _run_recipe(config, run_tdro_pipeline)
    _finish(result.table, result.output_dir / "summary.md", result.output_dir, config)


def run_coco_recipe(config_path: Path | None, overrides: dict[str, Any]) -> None:
    from drmix.recipes.coco import CocoPipelineConfig, run_coco_pipeline

    config = load_checked(CocoPipelineConfig, config_path, overrides)
    result = _run_recipe(config, run_coco_pipeline)
    _finish(result.table, result.output_dir / "summary.md", result.output_dir, config)


def run_drama(config_path: Path | None, overrides: dict[str, Any]) -> None:
    from drmix.recipes.drama import DramaConfig, run_drama_pipeline

    config = load_checked(DramaConfig, config_path, overrides)
    summary = _run_recipe(config, run_drama_pipeline)
    _finish(summary.get("table"), Path(config.run.output_dir) / "summary.json", config.run.output_dir, config)


def register(app: typer.Typer) -> None:
    from drmix.recipes.coco import CocoPipelineConfig
    from drmix.recipes.drama import DramaConfig
    from drmix.recipes.tdro import PipelineConfig

    pipeline = typer.Typer(help="Multi-stage recipes.", no_args_is_help=True)
    pipeline.command("tdro", help=paragraphs(TDRO_HELP), no_args_is_help=True)(
        config_command(PipelineConfig, run_tdro))
    pipeline.command("coco", help=paragraphs(COCO_PIPELINE_HELP), no_args_is_help=True)(
        config_command(CocoPipelineConfig, run_coco_recipe))
    pipeline.command("drama", help=DRAMA_HELP, no_args_is_help=True)(config_command(DramaConfig, run_drama))
    app.add_typer(pipeline, name="pipeline")


register_area(CommandArea("pipeline", register))
