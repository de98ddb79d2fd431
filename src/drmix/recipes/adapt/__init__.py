"""``drmix adapt``: a retriever for a new corpus without labels -- synthetic dev/test from the corpus, COCO on it,
fine-tuning with the mixture chosen on the synthetic dev, one report.

The user has target corpora (``--corpus``, no queries, no judgements), training collections (``--data``) and a
model. Every choice is made on a dev set built from the corpora alone (or, given ``--dev-labels``, on a few
labelled dev queries of the user's); labelled data (``--eval-data``) is read only for the final table. The stages, each a folder of ``output_dir`` reused on a rerun only when made with the
same settings (:mod:`drmix.recipes.stages`):

1. ``synthetic/`` -- pseudo-queries of each target corpus (cropped sentences, DRAMA arXiv:2502.18460 Sec. 3.1;
   with ``--llm`` also LLM-written queries, InPars arXiv:2202.05144), kept only when the teacher retrieves their
   source passage in its top ``filter_k`` (round-trip filter: Promptagator arXiv:2209.11755, in the spirit of
   InPars' and GPL's (arXiv:2112.07577) filtering of generated queries), split by passage into train / dev / test
   (:mod:`drmix.augment.synthetic`): ``synthetic/<corpus>/`` is a BEIR folder (dev and test qrels),
   ``synthetic/train/synthetic-<corpus>.jsonl`` a training collection, ``synthetic/stats.json`` the counts.
2. ``coco/`` -- COCO continuous contrastive pretraining on the target corpora (COCO-DR, Yu et al., EMNLP 2022,
   arXiv:2210.15212, Sec. 4.1; :mod:`drmix.pretrain.runner`).
3. ``base-uniform/`` -- the baseline: uniform fine-tuning of the base model on ``--data`` (no COCO, no synthetic
   data).
4. ``coco-<candidate>/`` -- fine-tuning of the COCO model under each candidate mixture (``candidates``):
   ``uniform`` (always a candidate: COCO -> uniform), ``size``, ``temperature``, ``tdro:TRANSFER`` (tDRO, Ma et
   al., AAAI 2025, arXiv:2408.10613: stage 1 ``tdro-stage1[-synthetic]/`` learns weights with the matching uniform
   candidate as its reference, the transfer top:K / reweight / loss fine-tunes), ``infdds`` (Inf-DDS: a sampling
   policy rewarded by the look-ahead influence of each collection on the *synthetic dev*, ``--dev`` = the
   synthetic BEIR folders), ``audit`` (the weights ``drmix mixture audit`` recommends: its leave-one-out short runs
   from the COCO model scored on the *synthetic dev*, one stage ``audit[-synthetic]/``,
   :mod:`~drmix.recipes.adapt.audit`); ``+synthetic`` adds the synthetic train collections to the candidate's
   data.
5. **selection** -- (with ``--dev-labels``, first ``dev-labels/``: the user's labelled dev queries as a BEIR
   folder per corpus, and every candidate on them; the choice is then made on them, ``--select-on``:
   :mod:`~drmix.recipes.adapt.labels`) every candidate on the synthetic dev split (nDCG@10 averaged over the corpora; cached as
   ``select-dev.json`` in its folder); the best is the adapted model, copied to ``output_dir/model`` with a model
   card saying how it was made. Ties go to the earlier candidate (``uniform`` first).
6. **report** -- the base model, uniform fine-tuning, COCO -> uniform and the adapted model on the synthetic test
   split and on every ``--eval-data`` directory (its ``eval_split``; opened here for the first time), with paired
   tests over queries (:mod:`drmix.evaluation.compare`), the learned weights, and, with labels, Kendall's tau
   between the candidates' synthetic-dev ranking and their labelled ranking (``scipy.stats.kendalltau``):
   ``summary.md``, ``summary.json``, ``report.html``.

``--preset cpu|medium|gpu`` fills every setting it names that the user did not give (:data:`PRESETS`); a
progress line per stage gives its estimated time (:func:`plan_work`: examples trained and passages encoded, at
the throughput measured by the earlier stages of the run, or an assumed one before the first), and
``drmix adapt --estimate`` prints the plan without running it.

The package, by concern: :mod:`~drmix.recipes.adapt.config` (the parts and presets), ``candidates`` (the
candidate mixtures), ``plan`` (every stage's configuration), ``stages`` (every stage declared once: its record,
part, needs, run, done and work), ``estimate`` (the work of each kind of stage, the time estimate),
``synthetic`` (stage 1), ``labels`` (``--dev-labels``: a few labelled dev queries the choice is made on,
``--select-on``), ``selection`` (the choice and the evaluations), ``index`` (the index of the adapted model),
``report`` with ``headline`` and ``figure`` (summary, model copy, card), ``runner`` (the run and the estimate)
and ``launch`` (the run under torchrun / accelerate launch: rank 0 runs the recipe, the other ranks take their
shard of every corpus pass and their part of the data-parallel training).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from drmix.recipes.adapt.candidates import STATIC_SCHEMES, SYNTHETIC, Candidate, candidate_plan, parse_candidate
from drmix.recipes.adapt.config import (PRESETS, SELECT_MAX_DOCS, AdaptConfig, AdaptEval, AdaptRun, AdaptStages,
                                        AdaptTarget, SyntheticOptions, select_max_docs, synthetic_fields)
from drmix.recipes.adapt.estimate import estimate_device, gpu_hours
from drmix.recipes.adapt.plan import AdaptPlan, plan_adapt
from drmix.recipes.adapt.report import ADAPTED_MARKER
from drmix.recipes.adapt.runner import estimate_table, plan_work
from drmix.recipes.adapt.runner import run_adapt as _run
from drmix.recipes.adapt.selection import (BASE, COCO_UNIFORM, LABELLED_SEED, UNIFORM, AdaptResult,
                                           final_labelled_evaluation, kendall_tau, select_candidate)
from drmix.recipes.adapt.stages import adapt_stages
from drmix.recipes.adapt.synthetic import build_synthetic, read_synthetic_stats, teacher_ranker
from drmix.recipes.progress import ASSUMED_RATES, Progress, StageWork
from drmix.recipes.stages import Stage

__all__ = ["ADAPTED_MARKER", "ASSUMED_RATES", "BASE", "COCO_UNIFORM", "LABELLED_SEED", "PRESETS", "SELECT_MAX_DOCS",
           "STATIC_SCHEMES", "SYNTHETIC", "UNIFORM", "AdaptConfig", "AdaptEval", "AdaptPlan", "AdaptResult",
           "AdaptRun", "AdaptStages", "AdaptTarget", "Candidate", "Progress", "StageWork", "SyntheticOptions",
           "adapt_stages", "build_synthetic", "candidate_plan", "estimate_device", "estimate_table",
           "final_labelled_evaluation", "gpu_hours", "kendall_tau", "parse_candidate", "plan_adapt", "plan_work",
           "read_synthetic_stats", "run_adapt", "select_candidate", "select_max_docs", "synthetic_fields",
           "teacher_ranker"]


def run_adapt(config: AdaptConfig, *, progress: Callable[[str], None] | None = None,
              extra: Sequence[Stage] = ()) -> AdaptResult | None:
    """Run every stage (reusing the finished ones made with the same settings) and write the report; see the
    module docstring. ``progress`` receives the progress lines (default: the log); ``extra``: stages run beside
    the recipe's own (:mod:`drmix.recipes.adapt.stages`). The labelled directories are read by this package's
    :func:`final_labelled_evaluation` only (:func:`drmix.recipes.adapt.runner.run_adapt`). Under torchrun every
    rank calls it; the ranks other than 0 return None (:mod:`drmix.recipes.launch`)."""
    return _run(config, progress=progress, labelled=final_labelled_evaluation, extra=extra)
