"""``drmix mixture audit``: which training collections help the dev sets, which hurt, how sure, and weights to
train with.

For k collections and the user's labelled dev sets (never a test split), per seed:

1. **the reference** (:mod:`~drmix.recipes.audit.plan`): short fine-tuning runs of ``--budget-steps`` steps from
   ``--model`` -- the uniform mixture of all k, and each of the k mixtures without one collection
   (leave-one-out); with ``--add-one-in`` also each collection alone. k + 1 runs a seed in one process, sharing
   the loaded collections and their pre-tokenised ids; each is a stage of :mod:`drmix.recipes.stages` (a rerun
   reuses finished runs, resumes an interrupted one, refuses a changed one; ``provenance.json``);
2. **the cheap signals** drmix already computes, read from runs of the same audit: tDRO's stage-1 weights and
   DoReMi's excess loss (stage 1 with the seed's whole-mixture model as reference; GroupDRO's weights with
   ``--signals groupdro``), and each collection's Inf-DDS influence on the dev sets and gradient alignment with
   them, measured inside the whole-mixture run (:mod:`~drmix.recipes.audit.probe`);
3. **the answer** (:mod:`~drmix.recipes.audit.values`, :mod:`~drmix.recipes.audit.agreement`,
   :mod:`~drmix.recipes.audit.verdict`): each collection's leave-one-out value on the dev nDCG@10 with its 95%
   interval, Kendall's tau of every signal against it, a verdict (keep / down-weight / drop) by a rule stated
   in advance, the recommended weights (``weights.json``, read by ``drmix train --mixture file --weights-file``)
   and the learned methods refused for this mixture (:mod:`~drmix.recipes.audit.report`: ``summary.md``,
   ``report.html``, ``audit.png``).

``--estimate`` prints every stage's work and time and runs nothing (:func:`estimate_audit`).
"""
from drmix.recipes.audit.config import DEFAULT_SIGNALS, SIGNALS, AuditConfig, AuditOptions, AuditRun
from drmix.recipes.audit.runner import AuditResult, estimate_audit, run_audit

__all__ = ["DEFAULT_SIGNALS", "SIGNALS", "AuditConfig", "AuditOptions", "AuditResult", "AuditRun",
           "estimate_audit", "run_audit"]
