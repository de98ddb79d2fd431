"""The Markdown helpers under their former name: they live in :mod:`drmix.markdown`, below every package
that writes Markdown (data, evaluation, analysis, recipes, reports)."""
from __future__ import annotations

from drmix.markdown import md_cell, md_code, md_entities, md_fence, render_html

__all__ = ["md_cell", "md_code", "md_entities", "md_fence", "render_html"]
