"""What a training run reports besides its JSONL logs: trackers (``report_to``), HF ``TrainerCallback``s,
per-collection losses, and at the end the model card and ``report.html``.

:class:`RunReporting` is the trainer's one handle on all of it (main process only; other ranks get a no-op
instance): :meth:`~RunReporting.record` sees every record the trainer logs, :meth:`~RunReporting.step_end`
runs the callbacks, :meth:`~RunReporting.finish` writes ``model/README.md`` (:mod:`drmix.report.card`) and
``report.html`` (:mod:`drmix.report.html`). :class:`CollectionLosses` sums per-example losses per collection
on the device between two logging steps (no host sync in between).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from drmix.train.tracking import HFCallbacks, Tracking

log = logging.getLogger(__name__)


class CollectionLosses:
    """Running sum and count of per-example losses per collection, read (and reset) every logging step."""

    def __init__(self, names: Sequence[str], device: Any) -> None:
        self.names = list(names)
        self.sums = torch.zeros(len(self.names), dtype=torch.float64, device=device)
        self.counts = torch.zeros(len(self.names), dtype=torch.float64, device=device)

    def add(self, losses: torch.Tensor, collection_ids: Any) -> None:
        ids = torch.as_tensor(collection_ids, device=self.sums.device, dtype=torch.long)
        values = losses.detach().to(torch.float64).reshape(-1)
        if values.numel() != ids.numel():  # a loss that is not per example (e.g. already reduced)
            return
        self.sums.index_add_(0, ids, values)
        self.counts.index_add_(0, ids, torch.ones_like(values))

    def read(self, reduce: Any = None) -> dict[str, float | None]:
        """``{collection: mean loss}`` since the last read (None where no example was drawn); resets.
        ``reduce(tensor)`` sums across processes."""
        both = torch.stack([self.sums, self.counts])
        if reduce is not None:
            both = reduce(both)
        sums, counts = both.cpu().tolist()
        self.sums.zero_()
        self.counts.zero_()
        return {n: (s / c if c else None) for n, s, c in zip(self.names, sums, counts)}


def eval_results_of(metrics_jsonl: Path) -> dict[str, dict[str, float]]:
    """The last periodic evaluation in ``metrics.jsonl`` as ``{dataset: {metric: value}}`` (no average)."""
    from drmix.io import iter_jsonl

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


class RunReporting:
    """Trackers, HF callbacks, card and report of one run (see the module docstring)."""

    def __init__(self, config: Any, out: Path, *, names: Sequence[str], sizes: Sequence[int],
                 hf: HFCallbacks | None = None, enabled: bool = True, card: dict | None = None) -> None:
        self.config = config
        self.out = Path(out)
        self.names = list(names)
        self.sizes = list(sizes)
        self.enabled = enabled
        self.card_overrides = dict(card or {})
        self.tracking = Tracking()
        self.hf = hf if enabled else None

    def start(self, step: int, model: Any) -> None:
        """After the output directory is prepared (and a checkpoint restored): open trackers, call back."""
        if not self.enabled:
            return
        self.tracking = Tracking.from_config(self.config.report_to, self.out, start_step=step,
                                             config=self.config.model_dump(mode="json"))
        if self.hf is not None:
            self.hf.train_begin(step, model)

    def record(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.tracking.record(record)
        if self.hf is not None and ("loss" in record or "eval" in record):
            self.hf.logged(record)

    def step_end(self, step: int, model: Any) -> bool:
        """HF callbacks' ``on_step_end``; True when one asked training to stop."""
        return bool(self.enabled and self.hf is not None and self.hf.step_end(step, model))

    def saved(self) -> None:
        if self.enabled and self.hf is not None:
            self.hf.saved()

    def finish(self, model: Any, weights: dict | None) -> None:
        """``model/README.md`` and ``report.html``; callbacks' ``on_train_end``; trackers closed."""
        if not self.enabled:
            return
        try:
            self.write_card(model, weights)
        except Exception as e:  # noqa: BLE001 - a card that cannot be rendered never loses the trained model
            log.warning("could not write the model card (%s: %s)", type(e).__name__, e)
        try:
            from drmix.report.html import check_report_target, write_report

            check_report_target(self.out)
            write_report(self.out)
        except Exception as e:  # noqa: BLE001 - nor does a report
            log.warning("could not write report.html (%s: %s)", type(e).__name__, e)
        if self.hf is not None:
            self.hf.train_end(model)
        self.close()

    def write_card(self, model: Any, weights: dict | None) -> Path:
        from drmix.report.card import info_from_train_config, write_model_card

        info = info_from_train_config(self.config, names=self.names, sizes=self.sizes, weights=weights,
                                      eval_results=eval_results_of(self.out / "metrics.jsonl"),
                                      eval_split=self.config.eval_split if self.config.eval_data else None)
        for key, value in self.card_overrides.items():
            setattr(info, key, value)
        return write_model_card(model, self.out / "model", info)

    def close(self) -> None:
        self.tracking.close()
