"""The DRAMA recipe on a target corpus
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3 and Fig. 1): augment -> train a
small student -> evaluate student vs teacher vs the untuned student, one table.

1. **augment** each target corpus (no labels needed): cropped-sentence queries mined by the teacher (ranks
   1-10 positives, 30-50 hard negatives: the paper's ``k = 50, m = 10, n = 20``); with an LLM configured (``llm:``
   given, which turns ``generate`` and ``rerank`` on unless they are set) also LLM-generated queries for
   ``generate_max_docs`` documents (a seeded sample across the corpus), mined the same way, and the LLM's listwise
   rerank of their top-20 (top-1 positive, ranks 10-20 negatives: ``k = 20, n = 10``). Each is a registered step
   (:mod:`drmix.augment.steps`: crop, generate, rerank). Files: ``augment/<corpus>-<step>.jsonl``;
   LLM calls are cached in ``augment/llm-cache.jsonl``.
2. **student**: ``model`` (any SentenceTransformer), or, with ``prune_from`` set, a backbone pruned from a
   decoder LM by :mod:`drmix.model.prune` (``student-init/``), which is also the untuned student.
3. **train** the student on every augmented collection plus any ``data`` collections (labelled general-domain
   data, the paper's D_sft) (``train/``; all training fields apply, e.g. ``matryoshka_dims``;
   ``num_negatives`` defaults to the paper's 7).
4. **evaluate** teacher, untuned student and trained student on ``test_data`` (BEIR directories), every metric
   at full size and at each of ``dims`` (cached in ``eval/<label>/eval-<split>.json``,
   :mod:`drmix.evaluation.suite`); ``summary.md`` / ``summary.json`` hold the table.

Finished steps are reused on a rerun (files present, training finished) when they were made with the same settings
(the augmentation's and the pruning's fields as ``drama.yaml`` recorded them, the student's ``train/config.yaml``;
:mod:`drmix.recipes.stages`): a changed step is refused, or re-run with ``--resume-with-changes``, and an
interrupted run resumes.
Departures: the paper's teacher is an 8B LLM retriever and its LLM a 70B instruct model; here they are
whatever the user configures (the defaults, all-MiniLM-L6-v2 and SmolLM2-135M-Instruct, run on a laptop). The
paper's student is pruned with learned masks and continued pretraining (25B tokens); ``prune_from`` drops layers
without continued pretraining (:mod:`drmix.model.prune`), so a pruned student starts far weaker. Without an
``llm`` the recipe runs the cropped-sentence step only (``generate: true`` with no ``llm`` uses the packaged
SmolLM2).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, create_model, field_validator, model_validator

from drmix.config import (INPUT, ContrastiveConfig, ModelConfig, Part, PipelineRun, RecipeConfig, TrainConfig,
                          options_setting, setting)
from drmix.errors import ConfigError
from drmix.evaluation.suite import evaluate_suite, results_table
from drmix.io.atomic import atomic_write_json
from drmix.outputs import model_saved
from drmix.recipes.progress import estimate_device, training_work
from drmix.recipes.stages import Stage, run_stages, write_summary

log = logging.getLogger(__name__)


# DRAMA's student (Sec. 3.2, Table 4): a pruned decoder, bidirectional, mean pooling, every weight trained
DramaModel = ModelConfig.variant(
    "DramaModel", pooling=("mean", "Pooling of the student (DRAMA: mean)."),
    bidirectional=(True, "Bidirectional attention in a decoder student (DRAMA: on; encoders are bidirectional anyway)."),
    lora_r=(0, "LoRA rank of the student (DRAMA trains every weight: 0)."))
DramaContrastive = ContrastiveConfig.variant(
    "DramaContrastive", num_negatives=(7, "Hard negatives per query in the student's training (DRAMA: 7 for its 0.1B "
                                          "and 0.3B students, 3 for the 1B)."))
DramaRun = PipelineRun.variant("DramaRun", output_dir=("runs/drama", "Root directory of the recipe's files."))


class DramaRecipe(Part):
    """Target corpora, teacher, student, LLM and which augmentation steps run."""

    title: ClassVar[str] = "DRAMA recipe"

    corpus: list[str] = setting(default_factory=list, role=INPUT, description="Target corpora to augment: BEIR "
                                "directories or corpus .jsonl files (labels are not read).")
    teacher: str | None = setting(None, role=INPUT, description="Teacher retriever that mines positives and negatives "
                                                                "(default: bundled all-MiniLM-L6-v2).")
    prune_from: str | None = setting(None, role=INPUT, description="Build the student by pruning this causal LM "
                                     "(folder, hub id, .gguf, or 'smollm2' for the packaged one) instead of --model.")
    prune_layers: str | None = setting(None, description="Layers the pruned student keeps (0-based, e.g. 0,10,20,29).")
    prune_keep_layers: int | None = setting(6, ge=1, description="Or: how many layers to keep, first and last "
                                                                 "included, the rest evenly spaced.")
    prune_mlp_keep: int | None = setting(None, ge=1, description="Narrow the pruned MLPs to this many channels.")
    max_docs: int | None = setting(None, ge=1, description="Documents sampled per corpus for augmentation (seeded).")
    positive_ranks: str = setting("1:10", description="Teacher ranks that become positives (1-based, inclusive).")
    negative_ranks: str = setting("30:50", description="Teacher ranks that become hard negatives.")
    generate: bool | None = setting(None, description="Also generate queries with the LLM (see llm); default: on when "
                                                      "an llm is configured (DRAMA's recipe), off otherwise.")
    rerank: bool | None = setting(None, description="Also rerank the generated queries' top-20 with the LLM; default: "
                                                    "on when an llm is configured, off otherwise.")
    llm: dict[str, Any] = setting(default_factory=dict, description="LLM backend options (backend, model, base_url, "
                                                                    "timeout, ...; see docs/drama.md).")
    dims: list[int] = setting(default_factory=list, description="Also evaluate at these truncated sizes.")

    @model_validator(mode="after")
    def _llm_steps(self) -> "DramaRecipe":
        """DRAMA's recipe is the LLM augmentation: with an ``llm`` configured, generation and reranking are on
        unless set; without one they are off (an explicit ``generate: true`` uses the packaged local model)."""
        for step in ("generate", "rerank"):
            if getattr(self, step) is None:
                object.__setattr__(self, step, bool(self.llm))
        return self

    @field_validator("llm")
    @classmethod
    def _llm_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        """The ``llm`` mapping holds :class:`~drmix.llm.factory.LLMConfig` fields: checked when the config is
        read (a misspelt key is one config error before any work, not a traceback at the LLM step)."""
        from pydantic import ValidationError

        from drmix.llm.factory import LLMConfig

        try:
            LLMConfig.model_validate(v)
        except ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(x) for x in err["loc"]) or "llm"
            keys = f" (the keys are {', '.join(LLMConfig.model_fields)})" if err["type"] == "extra_forbidden" else ""
            raise ValueError(f"{key}: {err['msg']}{keys}") from None
        return v


class AugmentOptions(Part):
    """The options of every registered augmentation step (:mod:`drmix.augment.steps`), one part."""

    title: ClassVar[str] = "DRAMA augmentation steps"


def _augment_part() -> type[Part]:
    """The augmentation steps' options, as one part: a step's options model is the only place they are written."""
    from drmix.augment.steps import registered_steps

    fields: dict[str, Any] = {}
    for step in registered_steps().values():
        for name, info in step.options.model_fields.items():
            fields[name] = (info.annotation, info)
    return create_model("AugmentStepOptions", __base__=AugmentOptions, **fields)


_Augment = _augment_part()


class DramaConfig(RecipeConfig):
    """``drmix pipeline drama`` options: the student's fine-tuning parts (DRAMA's model and negatives defaults), the
    recipe's output folder, the final evaluation, the recipe's part and the augmentation steps' options. The
    student's TrainConfig is composed from these parts by :func:`student_config`: it trains with any strategy, so
    every strategy's options are carried (checked by their models when the config is made)."""

    command: ClassVar[str] = "drmix pipeline drama"

    model: DramaModel = Field(default_factory=DramaModel)  # type: ignore[valid-type]
    contrastive: DramaContrastive = Field(default_factory=DramaContrastive)  # type: ignore[valid-type]
    run: DramaRun = Field(default_factory=DramaRun)  # type: ignore[valid-type]
    dro: dict[str, Any] = options_setting("dro")
    influence: dict[str, Any] = options_setting("influence")
    idro: dict[str, Any] = options_setting("idro")
    strategy_options: dict[str, Any] = options_setting("strategy_options")
    recipe: DramaRecipe = Field(default_factory=DramaRecipe)
    augment: _Augment = Field(default_factory=_Augment)  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _typed(self) -> "DramaConfig":
        from drmix.recipes.options import check_options

        check_options(self, self.mixture.strategy)   # the student trains with any strategy: its options, typed
        return self


#: Fields (flat names) of the pruned student's initialisation (``student-init/``).
PRUNE_FIELDS = ("prune_from", "prune_layers", "prune_keep_layers", "prune_mlp_keep", "doc_max_length")


def augment_fields() -> list[str]:
    """Fields (flat names) the augmentation files depend on: the recipe's part but the evaluation sizes and the
    pruning, every step's options, plus the seed and how the teacher is loaded."""
    fields = DramaConfig.flat_fields()
    own = [k for k, f in fields.items() if f.group in ("recipe", "augment") and k != "dims" and k not in PRUNE_FIELDS]
    return own + ["seed", "torch_dtype", "attn_implementation", "trust_remote_code"]


def _corpus_name(path: str) -> str:
    p = Path(path).expanduser()
    return p.name if p.is_dir() else p.stem


def _corpus_of(path: str) -> tuple[str, dict[str, dict[str, str]]]:
    from drmix.data.beir import read_corpus

    p = Path(path).expanduser()
    f = p / "corpus.jsonl" if p.is_dir() else p
    return (p.name if p.is_dir() else p.stem), read_corpus(f)


def augment_corpus(name: str, corpus: dict[str, dict[str, str]], teacher: Any, cfg: DramaConfig, out: Path,
                   backend: Any = None) -> dict[str, Any]:
    """Run every enabled augmentation step (:mod:`drmix.augment.steps`) on this corpus into ``out``; a step
    whose file exists is skipped. Returns the files and each step's counts."""
    from drmix.augment import examples
    from drmix.augment.steps import AugmentContext, enabled_steps, sample_ids, step_file, step_options
    from drmix.data.beir import doc_text

    r = cfg.recipe

    def mine(rows: list[dict[str, Any]]):
        return examples.mine_examples(rows, ctx.texts, teacher, positives=r.positive_ranks,
                                      negatives=r.negative_ranks, teacher_name=r.teacher or "default")

    ctx = AugmentContext(name, corpus, {d: doc_text(doc) for d, doc in corpus.items()},
                          sample_ids(list(corpus), r.max_docs, cfg.optim.seed), cfg.optim.seed, teacher, backend, mine,
                          out, examples.read_query_rows)
    info: dict[str, Any] = {"documents": len(ctx.ids), "files": []}
    for step in enabled_steps(r):
        path = step_file(out, name, step.name)
        if not path.exists():
            rows, stats = step.build(ctx, step_options(step, cfg.augment))
            examples.write_collection(path, rows, why=ctx.why.get(step.name))
            ctx.rows[step.name] = rows
            info[step.name] = stats
        info["files"].append(str(path))
    return info


def _student_init(cfg: DramaConfig, root: Path) -> str:
    r = cfg.recipe
    if r.prune_from is None:
        return cfg.model.name_or_path or "default"
    from drmix.recipes.prune import prune_to_sentence_transformer

    out = root / "student-init"
    if not model_saved(out):
        src = None if r.prune_from.lower() in ("smollm2", "default") else r.prune_from
        prune_to_sentence_transformer(src, out, layers=r.prune_layers,
                                      keep_layers=None if r.prune_layers else r.prune_keep_layers,
                                      mlp_keep=r.prune_mlp_keep, max_seq_length=cfg.data.doc_max_length)
    return str(out)


def summary_table(results: dict[str, dict[str, dict[str, float]]], metrics: list[str]) -> str:
    """Markdown: one row per (dataset, metric), one column per model, the student's share of the teacher."""
    return results_table(results, metrics, deltas=False, average=False, share=("student", "teacher"))


def _train(config: TrainConfig) -> Any:
    from drmix import api

    return api.train(config)


def _augment(cfg: DramaConfig, aug: Path) -> dict[str, Any]:
    """The augment stage: every enabled step on every corpus (each step's file reused when made); the counts."""
    from drmix.augment.steps import enabled_steps
    from drmix.model.backbone import BackboneOptions
    from drmix.model.encoder import load_encoder

    r = cfg.recipe
    aug.mkdir(parents=True, exist_ok=True)
    teacher = load_encoder(r.teacher, model_kwargs=BackboneOptions.from_config(cfg.model).model_kwargs())
    backend = None
    if any(step.needs_llm for step in enabled_steps(r)):
        from drmix.llm.factory import LLMConfig, build_backend

        backend = build_backend(LLMConfig.model_validate(r.llm), cache_path=aug / "llm-cache.jsonl")
    augment: dict[str, Any] = {}
    for path in r.corpus:
        name, corpus = _corpus_of(path)
        augment[name] = augment_corpus(name, corpus, teacher, cfg, aug, backend)
    return augment


def _untuned(cfg: DramaConfig) -> str:
    """The student before training: the pruned ``student-init/`` with ``prune_from``, else ``model``."""
    root = Path(cfg.run.output_dir)
    return str(root / "student-init") if cfg.recipe.prune_from is not None else cfg.model.name_or_path or "default"


def student_config(cfg: DramaConfig) -> TrainConfig:
    """The student stage's TrainConfig, composed from the recipe's parts: the untuned student, every augmented
    collection of every enabled step (then ``data``), in ``output_dir/train``. Nothing is written."""
    from drmix.augment.steps import enabled_steps, step_file

    root, r = Path(cfg.run.output_dir), cfg.recipe
    aug = root / "augment"
    files: list[Any] = [str(step_file(aug, _corpus_name(path), step.name)) for path in r.corpus
                        for step in enabled_steps(r)]
    if cfg.data.format != "auto" or cfg.data.columns:  # --format / --columns describe the user's data, not drmix's
        files = [{"path": f, "format": "drmix", "columns": {}} for f in files]
    return TrainConfig.from_parts(cfg, model=_untuned(cfg), data=files + list(cfg.data.collections),
                                  output_dir=str(root / "train"), resume=True)


def run_drama_pipeline(cfg: DramaConfig) -> dict[str, Any]:
    """Run the recipe (see the module docstring); returns the summary dictionary."""
    r = cfg.recipe
    if not r.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR (a BEIR directory or corpus.jsonl).")
    root = Path(cfg.run.output_dir)
    aug = root / "augment"

    # Every step's settings first: the earlier run's files are reused only when made with these settings.
    train_cfg = student_config(cfg)
    student0 = _untuned(cfg)
    values = cfg.flat()
    stages = [Stage("augment", {k: values[k] for k in augment_fields()}, output_dir=aug, record=root / "drama.yaml",
                    outputs=[p for p in sorted(aug.glob("*")) if p.name != "llm-cache.jsonl"], kind=DramaConfig,
                    part="recipe", run=lambda res: _augment(cfg, aug), done=lambda out: False,
                    what="every enabled step on every corpus (each step's file reused when made)")]
    if r.prune_from is not None:
        stages.append(Stage("student-init", {k: values[k] for k in PRUNE_FIELDS}, output_dir=root / "student-init",
                            record=root / "drama.yaml", kind=DramaConfig, part="recipe",
                            run=lambda res: _student_init(cfg, root), done=model_saved))
    stages.append(Stage("student", train_cfg, part="optim", needs=tuple(s.name for s in stages),
                        run=lambda res: _train(train_cfg), work=training_work("student", train_cfg)))
    results = run_stages(stages, root=root, record=("drama.yaml", cfg), allow_changes=cfg.run.resume_with_changes,
                         overwrite=cfg.run.overwrite, device=estimate_device(cfg.run.device), recipe="drama")
    augment: dict[str, Any] = results["augment"].value
    train_dir = root / "train"
    models = {"teacher": r.teacher or "default", "untuned": student0, "student": str(train_dir / "model")}
    summary: dict[str, Any] = {"augment": augment, "models": models}
    t = cfg.test
    if t.test_data:
        from drmix.evaluation.matryoshka import dim_suffix

        results = evaluate_suite(models, t.test_data, cache_dirs={lb: root / "eval" / lb for lb in models},
                                 split=t.test_split, max_queries=t.test_max_queries, max_docs=t.test_max_docs,
                                 seed=cfg.optim.seed, max_length=cfg.data.doc_max_length, dims=r.dims,
                                 query_instructions=cfg.eval.query_instructions).results
        metrics = ["ndcg@10"] + [dim_suffix("ndcg@10", d) for d in r.dims] + ["recall@100"]
        summary["results"] = results
        summary["table"] = summary_table(results, metrics)
        write_summary(root, "# DRAMA recipe\n\n" + summary["table"], summary)
    else:
        atomic_write_json(root / "summary.json", summary)
    return summary
