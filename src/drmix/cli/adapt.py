"""``drmix adapt``: a retriever for a new corpus without labels, in one command (:mod:`drmix.recipes.adapt`).

Thin: loads :class:`~drmix.recipes.adapt.AdaptConfig` (every field is a flag), runs the recipe under the output
contract, prints the summary; ``--estimate`` prints the stages' estimated time and exits.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.cli.options import config_command, load_checked, paragraphs

ADAPT_HELP = """Adapt a retriever to target corpora without labels: build a synthetic train / dev / test set
from --corpus alone (cropped-sentence pseudo-queries, LLM-generated ones with --llm, kept when the teacher
retrieves their source passage in its top --filter-k, split by passage), run COCO on the corpora, fine-tune the
COCO model on --data under every --candidates mixture (uniform, size, tDRO transfers, Inf-DDS rewarded on the
synthetic dev; +synthetic adds the synthetic train set), choose the best on the synthetic dev, and report the
base model, uniform fine-tuning, COCO -> uniform and the adapted model on the synthetic test and on any labelled
--eval-data (read only for that final table), with paired tests and Kendall's tau of the candidates' rankings
(summary.md, report.html; the adapted model with its card is OUTPUT_DIR/model). A user with a few labelled
queries per corpus passes them as --dev-labels: the choice is then made on them (--select-on labels, the
default with them; synthetic; or both), and the report shows both choices with the labelled test score of each.

--preset cpu|medium|gpu fills the settings it names that are not given (docs/adapt.md). Each stage is a folder
of --output-dir: a rerun reuses the stages made with the same settings from the same inputs (corpora, --data,
--model compared by content) and resumes an interrupted one; a changed stage is refused unless
--resume-with-changes (re-run it and the stages built on it) or --overwrite (re-run every stage). --estimate
prints each stage's estimated time, and the hours of the whole run on one GPU and on --estimate-gpus GPUs, and
exits. On N GPUs: torchrun --nproc-per-node N -m drmix adapt ... (or accelerate launch): every corpus pass is
split over the GPUs in shards and the training stages are data-parallel; rank 0 writes (docs/adapt.md).
"""

_ESTIMATE = inspect.Parameter(
    "estimate", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
    default=typer.Option(False, "--estimate", help="Print every stage's work and estimated time (on --device, or "
                                                   "a GPU for --preset gpu) and exit without running anything: at "
                                                   "the rates measured here first (a few batches of encoding and two "
                                                   "training steps with the run's model and lengths: seconds), or "
                                                   "assumed where they cannot be; each rate says which."))
_ESTIMATE_GPUS = inspect.Parameter(
    "estimate_gpus", inspect.Parameter.KEYWORD_ONLY, annotation=int,
    default=typer.Option(8, "--estimate-gpus", min=1, help="With --estimate: also state the hours on this many GPUs "
                                                         "(beside one GPU)."))


def run_adapt_command(config_path: Path | None, overrides: dict[str, Any], estimate: bool = False,
                      estimate_gpus: int = 8) -> None:
    from drmix.cli import console
    from drmix.cli.pipeline import _finish, _run_recipe
    from drmix.recipes.adapt import AdaptConfig, estimate_table, run_adapt

    config = load_checked(AdaptConfig, config_path, overrides)
    if estimate:
        console.print(estimate_table(config, gpus=estimate_gpus), highlight=False, soft_wrap=True, markup=False,
                      emoji=False)
        return
    from drmix.recipes.launch import follower

    if follower():  # under torchrun, a rank other than 0: its part of each stage; rank 0 claims, writes, reports
        run_adapt(config)
        return
    result = _run_recipe(config, run_adapt)
    _finish(result.table, result.output_dir / "summary.md", result.output_dir, config)
    if result.index:
        from drmix.recipes.adapt.index import search_command

        command = search_command(result.index, result.output_dir)
        console.print(f"every target corpus is indexed in {result.output_dir / 'index'}; search it with:",
                      highlight=False, soft_wrap=True, markup=False)
        console.print(command, highlight=False, soft_wrap=True, markup=False, emoji=False)


def register(app: typer.Typer) -> None:
    from drmix.recipes.adapt import AdaptConfig

    app.command("adapt", help=paragraphs(ADAPT_HELP), no_args_is_help=True)(
        config_command(AdaptConfig, run_adapt_command, extra=[_ESTIMATE, _ESTIMATE_GPUS]))


register_area(CommandArea("adapt", register))
