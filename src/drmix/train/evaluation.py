"""Evaluation during training under its former name: it lives in :mod:`drmix.evaluation.periodic`."""
from __future__ import annotations

from drmix.evaluation.periodic import (EVALUATOR_NAMES, PeriodicEvaluation, build_evaluator, evaluator_name,
                                       evaluator_scores)

__all__ = ["EVALUATOR_NAMES", "PeriodicEvaluation", "build_evaluator", "evaluator_name", "evaluator_scores"]
