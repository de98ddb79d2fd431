"""``drmix eval``'s four modes as one library call: a model on BEIR directories
(:func:`drmix.evaluation.evaluate.evaluate_model`), run files scored as they are
(:func:`drmix.evaluation.runfile.evaluate_run_files`), a built index of any backend
(:func:`drmix.evaluation.index_eval.evaluate_index`), or MTEB tasks (:func:`drmix.evaluation.mteb.evaluate_mteb`).

:class:`EvalRequest` holds what was asked; :attr:`EvalRequest.mode` picks the mode and refuses, in one line naming
the options, what the mode cannot honour (``--dims`` with a run file: nothing is encoded; ``--max-docs`` with an
index: it holds the corpus as it was encoded; ``--k`` with MTEB: it evaluates by its own protocol); :meth:`run`
evaluates and returns the :class:`~drmix.evaluation.evaluate.EvalReport` every mode gives.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from drmix.errors import ConfigError
from drmix.evaluation.metrics import DEFAULT_METRICS

Mode = Literal["model", "runs", "index", "mteb"]


def _refuse(unsupported: list[str], why: str, fix: str) -> None:
    if unsupported:
        raise ConfigError(f"{', '.join(unsupported)} cannot be used with {why}", fix=f"drop {', '.join(unsupported)}"
                                                                                    f", or {fix}")


@dataclass
class EvalRequest:
    """What ``drmix eval`` was asked (its options by name; None / empty: not given)."""

    data: list[Path] = field(default_factory=list)
    model: str | None = None
    mteb: list[str] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)
    index: str | None = None
    split: str | None = None
    k: int = 100
    batch_size: int = 64
    max_length: int | None = None
    metrics: tuple[str, ...] = DEFAULT_METRICS
    precision: str = "auto"
    dims: str | None = None
    query_instruction: str | None = None
    prompts: Path | None = None
    torch_dtype: str | None = None
    attn_implementation: str | None = None
    max_queries: int | None = None
    max_docs: int | None = None
    seed: int = 0

    @property
    def mode(self) -> Mode:
        """The mode asked for; a combination it cannot honour is a ConfigError naming the options."""
        if self.mteb and self.runs:
            raise ConfigError("--run and --mteb cannot be combined.", fix="score a run file with --run and --data DIR.")
        if self.index is not None and self.runs:
            raise ConfigError("--run and --index cannot be combined.",
                              fix="score a run file with --run, or a built index with --index.")
        if self.index is not None:
            self._check_index()
            return "index"
        if self.mteb:
            self._check_mteb()
            return "mteb"
        if not self.data:
            raise ConfigError("no dataset given.", fix="pass --data DIR (a BEIR directory) or --mteb TASK.")
        if self.runs:
            _refuse([flag for flag, given in (
                ("--model", self.model), ("--max-length", self.max_length), ("--dims", self.dims),
                ("--precision", self.precision != "auto"), ("--query-instruction", self.query_instruction),
                ("--prompts", self.prompts), ("--torch-dtype", self.torch_dtype),
                ("--attn-implementation", self.attn_implementation), ("--max-docs", self.max_docs)) if given],
                "--run: a run file is scored as it is, no model encodes anything.", "evaluate a model without --run.")
            return "runs"
        return "model"

    def _check_index(self) -> None:
        _refuse([flag for flag, given in (("--mteb", self.mteb), ("--dims", self.dims is not None),
                                          ("--max-queries", self.max_queries), ("--max-docs", self.max_docs),
                                          ("--max-length", self.max_length)) if given],
                "--index: the index holds the corpus as it was encoded.", "evaluate without --index.")
        if len(self.data) != 1:
            raise ConfigError(f"--index is scored against one dataset; {len(self.data)} --data given.",
                              fix="pass one --data DIR: the BEIR directory whose queries and qrels match the index.")

    def _check_mteb(self) -> None:
        if self.data:
            raise ConfigError("--data and --mteb cannot be combined.",
                              fix="evaluate BEIR directories with --data, or pass them to --mteb to run them as "
                                  "local MTEB tasks.")
        _refuse([flag for flag, given in (("--k", self.k != 100), ("--precision", self.precision != "auto"),
                                          ("--dims", self.dims is not None),
                                          ("--query-instruction", self.query_instruction is not None),
                                          ("--prompts", self.prompts is not None),
                                          ("--max-queries", self.max_queries), ("--max-docs", self.max_docs))
                 if given],
                "--mteb: MTEB evaluates by its own protocol (its top 1000, full corpora, the model's own prompts, "
                "fp32).", "evaluate BEIR directories with --data.")

    def inputs(self) -> list[Path | None]:
        """What the evaluation reads (an output may not overlap it)."""
        if self.mode == "mteb":
            from drmix.evaluation.mteb import parse_task_list

            return [Path(t) for t in parse_task_list(self.mteb) if Path(t).expanduser().exists()]
        if self.mode == "index":
            from drmix.retrieval.search import location_path

            return [*self.data, location_path(self.index)]
        return [*self.data, *self.runs]

    def model_kwargs(self) -> dict[str, Any]:
        from drmix.model.backbone import BackboneOptions

        return BackboneOptions(torch_dtype=self.torch_dtype,
                               attn_implementation=self.attn_implementation).model_kwargs()

    def instructions(self, names: list[str]) -> dict[str, str]:
        """Query instruction per dataset name: ``--prompts``' file, ``--query-instruction`` over it."""
        from drmix.model.instructions import read_prompts_file

        out = read_prompts_file(self.prompts) if self.prompts is not None else {}
        if self.query_instruction is not None:
            out.update({name: self.query_instruction for name in names})
        return out

    def run(self, output: Path | None = None) -> Any:
        """Evaluate as :attr:`mode` says; the report (MTEB writes its result files into ``output`` itself)."""
        mode = self.mode
        if mode == "runs":
            from drmix.evaluation.runfile import evaluate_run_files

            return evaluate_run_files(self.runs, self.data, split=self.split or "test", k=self.k, metrics=self.metrics,
                                      max_queries=self.max_queries, seed=self.seed)
        if mode == "index":
            return self._run_index()
        if mode == "mteb":
            from drmix.evaluation.mteb import evaluate_mteb, parse_task_list

            return evaluate_mteb(self.model, parse_task_list(self.mteb), output=output, batch_size=self.batch_size,
                                 max_length=self.max_length, metrics=self.metrics,
                                 model_name=self.model or "default", split=self.split,
                                 model_kwargs=self.model_kwargs())
        from drmix.evaluation.evaluate import evaluate_model
        from drmix.evaluation.matryoshka import parse_dims

        return evaluate_model(self.model, self.data, split=self.split or "test", k=self.k,
                              batch_size=self.batch_size, max_length=self.max_length, metrics=self.metrics,
                              model_name=self.model or "default", precision=self.precision,
                              dims=parse_dims(self.dims), model_kwargs=self.model_kwargs(),
                              max_queries=self.max_queries, max_docs=self.max_docs, seed=self.seed,
                              query_instructions=self.instructions([Path(d).expanduser().name for d in self.data]))

    def _run_index(self) -> Any:
        from drmix.evaluation.index_eval import evaluate_index
        from drmix.retrieval.search import open_searched

        searched, encoder = open_searched(self.index, self.model, self.model_kwargs())
        return evaluate_index(encoder, searched, self.index, self.data[0], split=self.split or "test", k=self.k,
                              batch_size=self.batch_size, metrics=self.metrics, precision=self.precision,
                              model_name=self.model or str(searched.metadata.get("model", "default")),
                              query_instructions=self.instructions([Path(self.data[0]).expanduser().name]))
