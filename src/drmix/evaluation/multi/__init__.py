"""Evaluation for queries whose relevant passages live in several corpora, and the policy sweep.

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 5.3 and Table 3. Notation: a query ``q`` has relevance judgements in several corpora; ``C_q`` is
the set of corpora holding at least one relevant passage of ``q`` (grade > 0); ``R_{q,c}`` the relevant
passages of ``q`` in corpus ``c``; ``L_q`` the merged top-k list an allocation policy returns.

* **Per-corpus credit recall** ``pc_recall@k`` (the paper's Recall@k: "1 if both passages are retrieved,
  0.5 if one is retrieved and 0 otherwise")::

      credit(q) = 1/|C_q| * sum_{c in C_q} hit_c(q)
      hit_c(q)  = 1 if L_q[:k] contains any passage of R_{q,c}            (mode "any", the default)
                = |L_q[:k] ∩ R_{q,c}| / |R_{q,c}|                          (mode "fraction")

  The paper has exactly one relevant passage per corpus, where both modes agree. With several relevant
  passages in one corpus (an entity matched to two listings) "any" asks for one passage from every
  corpus, which is what a reader needs; "fraction" is stricter. ``pc_recall@k`` is the mean over queries
  with ``|C_q| > 0``; a query with no result list scores 0.
* **Per-corpus MRR** ``pc_mrr@k`` (the paper's MRR, "the reciprocal of the rank at which the true
  passage appears", made per-corpus like the recall)::

      pc_rr(q) = 1/|C_q| * sum_{c in C_q} 1 / rank of the first passage of R_{q,c} in L_q[:k]   (0 if absent)

* **Standard metrics** (nDCG, MRR, Recall, MAP) through :func:`drmix.evaluation.metrics.evaluate_run`
  (pytrec_eval) over the merged list. Documents are qualified as ``corpus/doc_id`` so ids never collide,
  and each hit's run score is ``len(L_q) - rank`` so that the policy's order, not the raw similarity, is
  what gets evaluated (a policy may put a lower raw score above a higher one).

The sweep evaluates many policies on candidates fetched once, chooses within each family (``fixed``
fractions, ``confidence`` thresholds, the label-free ``zscore``/``calibrated`` variants) on a validation
split disjoint from the evaluated one (overlap is an error), writes Table 3 as Markdown + JSON, and plots recall against k.

Layout: :mod:`.metrics` (per-corpus credit, reciprocal rank, standard metrics, loading judgements),
:mod:`.rule` (the dev rule), :mod:`.sweep` (the sweep), :mod:`.report` (table, JSON, plot).
"""
from drmix.evaluation.multi.metrics import (MultiQrels, evaluate_multi, flatten_qrels, flatten_run, load_multi_qrels,
                                            qualify, query_credit, query_rr)
from drmix.evaluation.multi.report import best_rows, format_table, load_sweep_json, plot_recall_vs_k, write_sweep
from drmix.evaluation.multi.rule import LABEL_FREE_ROW, check_disjoint, family_of, policy_for, tune_on_dev
from drmix.evaluation.multi.sweep import SweepResult, sweep_policies
from drmix.retrieval.multi import default_policy_specs  # the sweep's default policies

__all__ = ["LABEL_FREE_ROW", "MultiQrels", "SweepResult", "best_rows", "check_disjoint", "default_policy_specs",
           "evaluate_multi", "family_of", "flatten_qrels", "flatten_run", "format_table", "load_multi_qrels",
           "load_sweep_json", "plot_recall_vs_k", "policy_for", "qualify", "query_credit", "query_rr",
           "sweep_policies", "tune_on_dev", "write_sweep"]
