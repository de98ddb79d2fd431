"""Evaluation for queries whose relevant passages live in several corpora, and the policy sweep.

Specification: *Multi Distribution Dense Information Retrieval* (seed ``003_1da1604bae7d74b5.txt``),
section 5.3 and Table 3. The metrics (per-corpus credit recall ``pc_recall@k``, per-corpus MRR ``pc_mrr@k``,
standard metrics over the merged list) and their equations are in :mod:`.metrics`.

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
