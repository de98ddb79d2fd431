"""The run report as a trainer listener: at the end of a run, ``model/README.md`` (the model card,
:mod:`drmix.report.card`) and ``report.html`` (:mod:`drmix.report.html`), on the main process."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from drmix.listener import Listener

log = logging.getLogger(__name__)


def eval_results_of(metrics_jsonl: Path) -> dict[str, dict[str, float]]:
    """The last periodic evaluation in ``metrics.jsonl`` as ``{dataset: {metric: value}}`` (no average)."""
    from drmix.io.read import iter_jsonl

    last: dict | None = None
    if metrics_jsonl.is_file():
        for _, rec in iter_jsonl(metrics_jsonl):
            if isinstance(rec.get("eval"), dict):
                last = rec["eval"]
    out: dict[str, dict[str, float]] = {}
    for key, value in (last or {}).items():
        dataset, _, metric = str(key).rpartition("/")
        if dataset and dataset != "avg" and isinstance(value, (int, float)):
            out.setdefault(dataset, {})[metric] = float(value)
    return out


class RunReport(Listener):
    """Writes the model card and ``report.html`` when the final model is saved; neither failing loses the model."""

    def on_finish(self, trainer: Any, model: Any, weights: dict | None) -> None:
        if not trainer.is_main:
            return
        try:
            self.plot_weights(trainer)
        except Exception as e:  # noqa: BLE001 - a plot that cannot be drawn never loses the trained model
            log.warning("could not draw weights.png (%s: %s)", type(e).__name__, e)
        try:
            self.write_card(trainer, model, weights)
        except Exception as e:  # noqa: BLE001 - a card that cannot be rendered never loses the trained model
            log.warning("could not write the model card (%s: %s)", type(e).__name__, e)
        try:
            from drmix.report.html import check_report_target, write_report

            check_report_target(trainer.out)
            write_report(trainer.out)
        except Exception as e:  # noqa: BLE001 - nor does a report
            log.warning("could not write report.html (%s: %s)", type(e).__name__, e)

    @staticmethod
    def plot_weights(trainer: Any) -> None:
        """``weights.png`` from the run's ``weights.jsonl``, for strategies that change weights."""
        from drmix.report.plots import plot_weights

        traj = Path(trainer.out) / "weights.jsonl"
        if traj.is_file() and traj.stat().st_size:
            plot_weights(traj, Path(trainer.out) / "weights.png", names=trainer.strategy.weight_names)

    @staticmethod
    def write_card(trainer: Any, model: Any, weights: dict | None) -> Path:
        """``model/README.md``, and the card's facts in ``card.json`` (re-rendered with later evaluations by
        :func:`drmix.report.card.refresh_card`)."""
        from drmix.io.atomic import atomic_write_json
        from drmix.report.card import CARD_FACTS, eval_results_from, info_from_train_config, write_model_card

        config, out = trainer.config, Path(trainer.out)
        periodic = eval_results_of(out / "metrics.jsonl")
        if config.eval.eval_max_queries:  # a seeded sample of each dev set: not the full dataset's task
            periodic = {f"{d} (sample: at most {config.eval.eval_max_queries:,} queries)": v
                        for d, v in periodic.items()}
        info = info_from_train_config(config, names=trainer.names, sizes=trainer.sizes, weights=weights,
                                      eval_results=periodic,
                                      eval_split=config.eval.eval_split if config.eval.eval_data else None,
                                      sources=[getattr(c, "source", None) for c in trainer.collections])
        for key, value in trainer.objective.card().items():
            setattr(info, key, value)
        atomic_write_json(out / CARD_FACTS, info.to_json())
        later, split = eval_results_from(out)   # a resumed run's folder may hold drmix eval's results already
        if later:
            info.eval_results = {**info.eval_results, **later}
            info.eval_split = split or info.eval_split
        return write_model_card(model, out / "model", info)
