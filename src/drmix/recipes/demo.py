"""``drmix demo``: an end-to-end run on data every drmix installation already has.

1. Build training collections and held-out BEIR directories from the documentation of the installed
   Python packages (:mod:`drmix.data.builders.localdocs`: one collection per library family).
2. Evaluate the base model on every family's held-out test split (nDCG@10 and the other default metrics).
3. Train twice from the base model on the *same batches* (mixed batching: every batch holds an equal
   share of every family; same seed): once with **uniform** weights and once with weights **learned**
   during training by GroupDRO (:mod:`drmix.mixture.dro`, ``q_g <- q_g * exp(eta * loss_g)``: the
   families the model finds hardest get more weight in the loss), and evaluate both. Because the batches
   are identical, every difference between the two models comes from the learned weights alone.
4. Write ``results.md`` / ``results.json`` (per family and average nDCG@10: base / uniform / learned,
   the learned weights next to each family's mean training loss, the time each phase took) and say
   where everything is.

An earlier version compared a uniform with a temperature mixture under homogeneous batching: after 15
steps the seeded sampler drew the same families for both and the two models came out identical, which
showed nothing. GroupDRO's step size is raised from the paper's 0.01 (sized for thousands of steps) to
``dro_lr`` = 0.1 so that the weights move visibly within the demo's 30 steps.

The defaults are sized to finish in minutes on a small CPU with the bundled all-MiniLM-L6-v2:
short training sequences (query 32 / document 64 tokens; 128 in evaluation), batch 16 with one hard
negative, 30 steps per run, 30 test queries and a 150-document corpus per family (docs/demo.md has a
measured run); ``steps`` is what to change to trade time for training.
Training checkpoints are deleted once a run has finished (the trained models stay), so the output
folder holds three small things per run: ``model/``, ``metrics.jsonl`` and ``weights.json``.
This module logs; the CLI (:mod:`drmix.cli.demo`) draws the table.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from drmix.data.builders.localdocs import LocalDocsData, LocalDocsOptions, build_localdocs, stats_table
from drmix.errors import ConfigError
from drmix.io.atomic import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)

MIXTURES = ("uniform", "learned")
#: what each run is, in the tables
LABELS = {"uniform": "uniform weights", "learned": "learned weights (GroupDRO)"}
METRIC = "ndcg@10"
QUICK_FAMILIES = ["stdlib", "tooling"]
_OWNED = ("data", "runs", "eval", "results.md", "results.json", "demo.json")


def _demo_data_options() -> LocalDocsOptions:
    return LocalDocsOptions(max_pairs_per_collection=3000, test_queries=30, dev_queries=15, distractors=120,
                            num_negatives=1, max_words=100)


class DemoOptions(BaseModel):
    """Options of :func:`run_demo` (defaults: the full demo; docs/demo.md has a measured run)."""

    steps: int = Field(30, ge=1, description="Training steps of each of the two runs.")
    batch_size: int = Field(16, ge=2, description="Training batch size.")
    learning_rate: float = Field(5e-5, gt=0, description="Peak learning rate of both runs.")
    seed: int = Field(0, description="Seed of the data build, sampling and training.")
    model: str | None = Field(None, description="Base model (default: the bundled all-MiniLM-L6-v2).")
    max_pairs: int = Field(3000, ge=1, description="Cap on training pairs per family.")
    families: list[str] | None = Field(None, description="Families to build (default: every installed one).")
    dro_lr: float = Field(0.1, gt=0, description="GroupDRO step size eta of the learned run (paper: 0.01).")
    query_max_length: int = Field(32, ge=4, description="Max query tokens in training.")
    doc_max_length: int = Field(64, ge=4, description="Max document tokens in training.")
    eval_max_length: int = Field(128, ge=4, description="Max tokens per query and document in evaluation.")
    quick: bool = Field(False, description="A smaller demo: families stdlib and tooling, 12 steps, 20 test queries.")
    overwrite: bool = Field(False, description="Replace the outputs of a previous demo in the same folder.")
    show_progress: bool = Field(True, description="Show progress bars.")
    data: LocalDocsOptions = Field(default_factory=_demo_data_options,
                                   description="Options of the documentation collections.")

    def resolved(self) -> "DemoOptions":
        """Apply ``quick`` (only to values left at their defaults)."""
        if not self.quick:
            return self
        upd: dict[str, Any] = {}
        if "steps" not in self.model_fields_set:
            upd["steps"] = 12
        if "families" not in self.model_fields_set:
            upd["families"] = QUICK_FAMILIES
        if "data" not in self.model_fields_set:
            upd["data"] = self.data.model_copy(update={"test_queries": 20, "dev_queries": 10, "distractors": 60})
        return self.model_copy(update=upd)


@dataclass
class DemoResult:
    """What :func:`run_demo` produced. ``table[family][run]`` is nDCG@10; the last row is ``average``."""

    output_dir: Path
    data: LocalDocsData
    table: dict[str, dict[str, float]]
    weights: dict[str, dict[str, float]]
    results_md: Path
    results_json: Path
    run_dirs: dict[str, Path] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)

    @property
    def explanation(self) -> str:
        return explanation(self.weights, self.losses, int(json.loads(self.results_json.read_text())["steps"]))

    @property
    def columns(self) -> list[str]:
        return ["base", *MIXTURES]


def _prepare_output(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError("the demo output path is a file.", path=out, fix="choose a folder with --output.")
    if not out.exists() or not any(out.iterdir()):
        return
    if not (out / "demo.json").exists():
        raise ConfigError("the demo output folder is not empty and holds no earlier demo.", path=out,
                          fix="choose a new or empty folder with --output.")
    if not overwrite:
        raise ConfigError("the demo output folder holds an earlier demo.", path=out,
                          fix="pass --overwrite to replace it, or choose another --output.")
    for name in _OWNED:  # only what a demo writes; anything else the user put there stays
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _train_config(opts: DemoOptions, data: LocalDocsData, run: str, out_dir: Path):
    """Both runs: mixed batching (the same batches, same seed); ``learned`` weighs the loss by GroupDRO."""
    from drmix.config import TrainConfig

    learned = {"strategy": "groupdro", "dro": {"lr": opts.dro_lr}} if run == "learned" else {}
    return TrainConfig(
        model=opts.model, data=[str(data.train_dir)], output_dir=str(out_dir), max_steps=opts.steps,
        batch_size=opts.batch_size, learning_rate=opts.learning_rate, warmup_ratio=0.1, num_negatives=1,
        query_max_length=opts.query_max_length, doc_max_length=opts.doc_max_length, mixture="uniform",
        batching="mixed", seed=opts.seed, save_every=opts.steps, keep_checkpoints=1,
        log_every=max(1, opts.steps // 10), show_progress=opts.show_progress, **learned)


def mean_training_loss(run_dir: Path, names: list[str]) -> dict[str, float]:
    """Mean per-family training loss over a GroupDRO run (its ``weights.jsonl``: ``proxy_loss`` per step)."""
    sums = dict.fromkeys(names, 0.0)
    counts = dict.fromkeys(names, 0)
    path = run_dir / "weights.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            for n, v in (rec.get("proxy_loss") or {}).items():
                if n in sums and v is not None:
                    sums[n] += v
                    counts[n] += 1
    return {n: sums[n] / counts[n] for n in names if counts[n]}


def explanation(weights: dict[str, dict[str, float]], losses: dict[str, float], steps: int) -> str:
    """One paragraph saying what the learned weights did and why (from the numbers of this run)."""
    learned = weights.get("learned", {})
    if not learned:
        return ""
    from drmix.report.markdown import md_cell

    order = sorted(learned, key=learned.get, reverse=True)
    top, low = order[0], order[-1]
    t, lo = md_cell(top), md_cell(low)
    text = (f"Both runs trained on the same {steps} batches (each holds every family equally); only the loss "
            f"weights differ. GroupDRO raised the weight of the families with the highest training loss: "
            f"{t} ended at {learned[top]:.3f} and {lo} at {learned[low]:.3f} (uniform: "
            f"{1 / len(learned):.3f} each).")
    if losses.get(top) is not None and losses.get(low) is not None:
        text += (f" Mean training loss: {t} {losses[top]:.3f}, {lo} {losses[low]:.3f}.")
    text += (" The difference between the uniform and learned columns is the effect of these weights in one "
             "seeded run on a few dozen test queries per family, not a significance test.")
    return text


def _evaluate(model: Any, data: LocalDocsData, name: str, out: Path, opts: DemoOptions) -> dict[str, float]:
    """Every metric of ``model`` on each family's test split, cached in ``eval/<name>/eval-test.json``."""
    from drmix.evaluation.suite import evaluate_suite

    dirs = [data.beir_dirs[f] for f in data.families]
    suite = evaluate_suite({name: model}, dirs, cache_dirs={name: out / "eval" / name}, split="test",
                           max_length=opts.eval_max_length, show_progress=opts.show_progress)
    scores = {fam: suite.results[name][d.name][METRIC] for fam, d in zip(data.families, dirs)}
    log.info("%s: average %s = %.4f", name, METRIC, sum(scores.values()) / len(scores))
    return scores


def results_markdown(result_table: dict[str, dict[str, float]], weights: dict[str, dict[str, float]],
                     sizes: dict[str, int], *, steps: int, model: str, losses: dict[str, float] | None = None) -> str:
    """The demo's results page: nDCG@10 per family and on average, then the weights and why they moved."""
    from drmix.report.markdown import md_cell, md_code

    cols = ["base", *MIXTURES]
    losses = losses or {}
    lines = ["# drmix demo results", "",
             f"Model {md_code(model)}, {steps} training steps per run; held-out test split of each family; "
             f"{METRIC} (higher is better). base: before training; uniform: trained with equal family "
             f"weights; learned: trained on the same batches with family weights learned by GroupDRO.", "",
             "| family | " + " | ".join(cols) + " | learned - uniform |", "|---|" + "---:|" * (len(cols) + 1)]
    for fam, row in result_table.items():
        lines.append(f"| {md_cell(fam)} | " + " | ".join(f"{row[c]:.4f}" for c in cols)
                     + f" | {row['learned'] - row['uniform']:+.4f} |")
    lines += ["", "Family weights in the training loss (uniform run, and the learned run's final weights), "
              "with each family's training pairs and mean training loss in the learned run:", "",
              "| family | pairs | mean training loss | uniform | learned |", "|---|---:|---:|---:|---:|"]
    for fam, n in sizes.items():
        loss = f"{losses[fam]:.3f}" if fam in losses else ""
        lines.append(f"| {md_cell(fam)} | {n} | {loss} | " + " | ".join(f"{weights[m].get(fam, 0.0):.3f}" for m in MIXTURES)
                     + " |")
    text = explanation(weights, losses, steps)
    if text:
        lines += ["", text]
    return "\n".join(lines) + "\n"


def run_demo(output_dir: str | Path = "demo-output", *, options: DemoOptions | None = None,
             **overrides: Any) -> DemoResult:
    """Run the demo into ``output_dir``; keyword overrides are :class:`DemoOptions` fields.

    Example: ``run_demo("demo-output", steps=30, batch_size=16)``.
    Raises :class:`~drmix.errors.ConfigError` for invalid options or an output folder that holds
    something else (or an earlier demo, unless ``overwrite=True``).
    """
    try:
        given = options.model_dump(exclude_unset=True) if options is not None else {}
        opts = DemoOptions.model_validate({**given, **overrides})
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"invalid demo option ({bad}).", fix="see `drmix demo --help`.") from None
    opts = opts.resolved()
    out = Path(output_dir).expanduser()
    _prepare_output(out, opts.overwrite)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "demo.json", {"status": "running", "options": opts.model_dump(mode="json")})
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()

    t0 = time.perf_counter()
    data = build_localdocs(out / "data", seed=opts.seed, max_pairs_per_collection=opts.max_pairs,
                           families=opts.families, options=opts.data)
    seconds["data"] = time.perf_counter() - t0
    log.info("documentation collections in %s:\n%s", data.root, stats_table(data))

    t0 = time.perf_counter()
    scores = {"base": _evaluate(opts.model, data, "base", out, opts)}
    seconds["eval_base"] = time.perf_counter() - t0

    from drmix.api import train

    run_dirs: dict[str, Path] = {}
    weights: dict[str, dict[str, float]] = {}
    for mixture in MIXTURES:
        t0 = time.perf_counter()
        log.info("training with %s (%d steps)", LABELS[mixture], opts.steps)
        res = train(_train_config(opts, data, mixture, out / "runs" / mixture))
        shutil.rmtree(res.output_dir / "checkpoints", ignore_errors=True)
        run_dirs[mixture] = res.output_dir
        saved = json.loads((res.output_dir / "weights.json").read_text(encoding="utf-8"))
        weights[mixture] = saved.get("final") or dict(zip(saved["collections"], saved["weights"]))
        seconds[f"train_{mixture}"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores[mixture] = _evaluate(str(res.model_dir), data, mixture, out, opts)
        seconds[f"eval_{mixture}"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_all

    table = {fam: {run: scores[run][fam] for run in scores} for fam in data.families}
    table["average"] = {run: sum(s.values()) / len(s) for run, s in scores.items()}
    sizes = {s["family"]: s["train_pairs"] for s in data.stats}
    model_label = opts.model or "all-MiniLM-L6-v2 (bundled)"
    losses = mean_training_loss(run_dirs["learned"], data.families)
    md = results_markdown(table, weights, sizes, steps=opts.steps, model=model_label, losses=losses)
    md += "\nTime (s): " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()) + "\n"
    atomic_write_text(out / "results.md", md)
    payload = {"metric": METRIC, "model": model_label, "steps": opts.steps, "families": data.families,
               "table": table, "weights": weights, "train_pairs": sizes, "mean_training_loss": losses,
               "explanation": explanation(weights, losses, opts.steps),
               "seconds": {k: round(v, 1) for k, v in seconds.items()},
               "outputs": {"data": str(data.root), "eval": str(out / "eval"),
                           **{f"model_{m}": str(d / "model") for m, d in run_dirs.items()}}}
    atomic_write_json(out / "results.json", payload)
    atomic_write_json(out / "demo.json", {"status": "done", "options": opts.model_dump(mode="json")})
    log.info("demo finished in %.0f s; results in %s", seconds["total"], out / "results.md")
    return DemoResult(out, data, table, weights, out / "results.md", out / "results.json", run_dirs, seconds,
                      losses)
