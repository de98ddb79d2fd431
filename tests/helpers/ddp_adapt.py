"""Run by tests/recipes/test_launch.py under torchrun (or directly for one process): a tiny drmix adapt
whose corpus passes use sort chunks of 4 texts (so that two ranks each get a part of the 8-passage corpora)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))

import drmix.retrieval.encode as encode  # noqa: E402
from drmix.report import html  # noqa: E402
from drmix.recipes.adapt import run_adapt  # noqa: E402
from test_adapt import make_config  # noqa: E402

encode._SORT_CHUNK = 4
html._line_figure = html._weights_figure = lambda *a, **kw: None
model, tmp, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
candidates = sys.argv[4].split(",")
cfg = make_config(tmp, model, output_dir=out, candidates=candidates, eval_data=[],
                  audit={"budget_steps": 2, "probe_points": 1, "probe_draws": 1})
result = run_adapt(cfg)
print("RESULT", "none" if result is None else result.selected)
