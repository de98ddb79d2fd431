"""The ``audit`` candidate of ``drmix adapt``: the weights ``drmix mixture audit`` recommends
(:mod:`drmix.recipes.audit`), measured on adapt's own label-free dev set.

The audit is one stage of the recipe (``mixture audit``, ``mixture audit (+synthetic)`` for ``audit+synthetic``;
its folder ``audit/`` or ``audit-synthetic/``), run by the audit's own runner
(:func:`drmix.recipes.audit.run_audit`): its short runs start from the COCO model every candidate starts from and
train on the candidate's collections (``--data``, and with ``+synthetic`` the synthetic train collections), each
collection left out once; they are scored on the synthetic dev queries built from the target corpora (the
``dev`` split of ``synthetic/<corpus>``, never the labelled ``--eval-data``). Its ``weights.json`` (a dropped
collection weighs 0, a down-weighted one ``down_weight`` of its share) is the candidate's ``--mixture file
--weights-file``. A finished audit is reused, an interrupted one resumes run by run (its short runs are stages of
the audit's runner), a changed ``--audit`` option is refused or, with ``--resume-with-changes``, re-run with the
candidate built on it. Under torchrun every rank runs the audit stage: the audit announces its own stages to
the other ranks (:mod:`drmix.recipes.launch`), so its short runs train over every rank as adapt's fine-tunings do.

Its budget is ``--audit KEY=VALUE`` (the fields of ``drmix mixture audit``'s "Audit" part), over
:func:`audit_defaults`: ``budget_steps`` 100 (the presets: 20 / 100 / 150), one seed, the two cheap signals the
whole-mixture run measures without another run (``infdds``, ``gradalign``), and the selection's corpus cap
(``--select-max-docs``) on the dev corpus.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import ValidationError

from drmix.errors import ConfigError
from drmix.recipes.adapt.config import select_max_docs

#: the audit's budget inside ``drmix adapt`` unless ``--audit`` (or a preset) says otherwise: short runs, one
#: seed, and only the signals the whole-mixture run's probe measures (no stage-1 runs, no mining)
AUDIT_DEFAULTS: dict[str, Any] = {"budget_steps": 100, "seeds": 1, "signals": ["infdds", "gradalign"]}


def audit_dir(root: Path, synthetic: bool) -> Path:
    """The audit's folder: ``audit/`` on ``--data``, ``audit-synthetic/`` with the synthetic train collections."""
    return root / ("audit-synthetic" if synthetic else "audit")


def audit_stage_name(synthetic: bool) -> str:
    """The name of the audit stage (on the data with the synthetic train set or without)."""
    return f"mixture audit{' (+synthetic)' if synthetic else ''}"


def audit_defaults(config: Any) -> dict[str, Any]:
    """The audit options before ``--audit``: :data:`AUDIT_DEFAULTS`, the selection's corpus cap on the dev corpus,
    and the synthetic set's teacher as the miner of stage 1's negatives (when a stage-1 signal is asked for)."""
    return {**AUDIT_DEFAULTS, "dev_max_docs": select_max_docs(config), "stage1_miner": config.synthetic.teacher}


def audit_config(config: Any, root: Path, coco_model: str, data: list[Any], synthetic_dirs: list[str],
                 synthetic: bool) -> Any:
    """The audit's configuration (an :class:`~drmix.recipes.audit.AuditConfig`): adapt's training parts, the COCO
    model, ``data``, the synthetic dev sets (split ``dev``) and the options (:func:`audit_defaults` under
    ``--audit``)."""
    from drmix.config import format_validation
    from drmix.recipes.audit import AuditConfig

    options = {**audit_defaults(config), **config.stages.audit}
    try:
        return AuditConfig.from_parts(config, model=coco_model, data=list(data), dev=list(synthetic_dirs),
                                      dev_split="dev", output_dir=str(audit_dir(root, synthetic)), **options)
    except ValidationError as e:
        raise ConfigError(f"invalid audit configuration: {format_validation(e, AuditConfig)}.",
                          fix="fix --audit KEY=VALUE (the fields of drmix mixture audit's Audit part).") from None


def audited_collections(data: list[Any]) -> int:
    """How many collections the audit leaves out one at a time: a folder counts its files (as the audit takes
    them), anything else one (a synthetic train file that is not written yet included)."""
    from drmix.config import CollectionSpec
    from drmix.data.collections import collection_folder_entries

    n = 0
    for spec in data:
        path = spec.path if isinstance(spec, CollectionSpec) else spec.get("path") if isinstance(spec, dict) else spec
        entries = collection_folder_entries(str(path)) if Path(str(path)).is_dir() else None
        n += len(entries) if entries else 1
    return n


def audit_work(name: str, acfg: Any, sizes: Mapping[str, int], dev_queries: int) -> Any:
    """The audit's work, counted as its own stages count theirs without loading anything (the collections and the
    dev sets may not be written yet): every short run (:func:`~drmix.recipes.progress.training_work`), the probe
    (:func:`~drmix.recipes.audit.stages.probe_work`), the stage-1 runs, and every model on the capped dev sets."""
    from drmix.recipes.audit.plan import DRO_SIGNALS
    from drmix.recipes.audit.probe import probe_steps
    from drmix.recipes.audit.stages import probe_work
    from drmix.recipes.progress import StageWork, training_examples

    a = acfg.audit
    k = audited_collections(acfg.data.collections)
    runs = 1 + k + (k if a.add_one_in else 0)
    per_run = training_examples(a.budget_steps, acfg.contrastive.batch_size, acfg.contrastive.num_negatives or 0)
    probe = probe_work(acfg, SimpleNamespace(sources=[None] * k, probe_points=probe_steps(a.budget_steps,
                                                                                          a.probe_points)))
    stage1 = sum(1 for s in a.signals if s in DRO_SIGNALS) * training_examples(  # the authors' seven negatives
        a.stage1_steps or max(1, a.budget_steps // 2), a.stage1_batch_size or acfg.contrastive.batch_size, 7)
    queries = min(dev_queries, a.dev_max_queries or dev_queries)
    dev = sum(queries + min(n, a.dev_max_docs or n) for n in sizes.values())
    models = runs + (1 if a.add_one_in else 0)
    return StageWork(name, examples=a.seeds * (runs * per_run + probe + stage1), passages=a.seeds * models * dev)


def run_audit_stage(acfg: Any) -> Any:
    """The audit, by its own runner (its short runs reused or resumed one by one); returns its result."""
    from drmix.recipes.audit import run_audit

    return run_audit(acfg)


def audit_done(folder: Path, results: Any = None) -> bool:
    """Whether the audit in ``folder`` finished: its weights and its summary are written (last of all)."""
    return (folder / "weights.json").is_file() and (folder / "summary.json").is_file()
