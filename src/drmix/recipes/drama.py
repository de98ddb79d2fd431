"""The DRAMA recipe on a target corpus
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3 and Fig. 1): augment -> train a
small student -> evaluate student vs teacher vs the untuned student, one table.

1. **augment** each target corpus (no labels needed): cropped-sentence queries mined by the teacher (ranks
   1-10 positives, 30-50 hard negatives); with an LLM configured (``generate: true``) also LLM-generated
   queries for ``generate_max_docs`` documents (a seeded sample across the corpus), mined the same way, and (``rerank: true``) the LLM's listwise
   rerank of their top-20 (top-1 positive, ranks 10-20 negatives). Each is a registered step
   (:mod:`drmix.augment.steps`: crop, generate, rerank). Files: ``augment/<corpus>-<step>.jsonl``;
   LLM calls are cached in ``augment/llm-cache.jsonl``.
2. **student**: ``model`` (any SentenceTransformer), or, with ``prune_from`` set, a backbone pruned from a
   decoder LM by :mod:`drmix.model.prune` (``student-init/``), which is also the untuned student.
3. **train** the student on every augmented collection plus any ``data`` collections (labelled general-domain
   data, the paper's D_sft) (``train/``; all training fields apply, e.g. ``matryoshka_dims``,
   ``num_negatives`` -- the paper uses 7).
4. **evaluate** teacher, untuned student and trained student on ``test_data`` (BEIR directories), every metric
   at full size and at each of ``dims`` (cached in ``eval/<label>/eval-<split>.json``,
   :mod:`drmix.evaluation.suite`); ``summary.md`` / ``summary.json`` hold the table.

Finished steps are skipped on a rerun (files present, training finished), so an interrupted run resumes.
Departures: the paper's teacher is an 8B LLM retriever and its LLM a 70B instruct model; here they are
whatever the user configures (the defaults, all-MiniLM-L6-v2 and SmolLM2-135M-Instruct, run on a laptop).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, create_model, field_validator

from drmix.config import INPUT, OPERATIONAL, ModelConfig, Part, PipelineBaseConfig, RunConfig, TrainConfig, setting
from drmix.errors import ConfigError
from drmix.evaluation.suite import evaluate_suite, results_table
from drmix.io import atomic_write_json
from drmix.outputs import model_saved
from drmix.recipes.stages import record_config, train_stage, write_summary

log = logging.getLogger(__name__)


class DramaModel(ModelConfig):
    # DRAMA's student (Sec. 3.2, Table 4): a pruned decoder, bidirectional, mean pooling, every weight trained
    pooling: Literal["lasttoken", "mean", "cls"] | None = setting("mean", description="Pooling of the student (DRAMA: mean).")
    bidirectional: bool = setting(True, description="Bidirectional attention in a decoder student (DRAMA: on; encoders are bidirectional anyway).")
    lora_r: int | None = setting(0, ge=0, description="LoRA rank of the student (DRAMA trains every weight: 0).")


class DramaRun(RunConfig):
    output_dir: str = setting("runs/drama", role=OPERATIONAL, description="Root directory of the recipe's files.")


class DramaRecipe(Part):
    """Target corpora, teacher, student, LLM and which augmentation steps run."""

    title: ClassVar[str] = "DRAMA recipe"

    corpus: list[str] = setting(default_factory=list, role=INPUT, description="Target corpora to augment: BEIR "
                                                                            "directories or corpus .jsonl files (labels are not read).")
    teacher: str | None = setting(None, role=INPUT, description="Teacher retriever that mines positives and negatives "
                                                              "(default: bundled all-MiniLM-L6-v2).")
    prune_from: str | None = setting(None, role=INPUT, description="Build the student by pruning this causal LM (folder, "
                                                                 "hub id, .gguf, or 'smollm2' for the packaged one) instead of --model.")
    prune_layers: str | None = setting(None, description="Layers the pruned student keeps (0-based, e.g. 0,10,20,29).")
    prune_keep_layers: int | None = setting(6, ge=1, description="Or: how many layers to keep, first and last "
                                                               "included, the rest evenly spaced.")
    prune_mlp_keep: int | None = setting(None, ge=1, description="Narrow the pruned MLPs to this many channels.")
    max_docs: int | None = setting(None, ge=1, description="Documents sampled per corpus for augmentation (seeded).")
    positive_ranks: str = setting("1:10", description="Teacher ranks that become positives (1-based, inclusive).")
    negative_ranks: str = setting("30:50", description="Teacher ranks that become hard negatives.")
    generate: bool = setting(False, description="Also generate queries with the LLM (see llm).")
    rerank: bool = setting(False, description="Also rerank the generated queries' top-20 with the LLM.")
    llm: dict[str, Any] = setting(default_factory=dict, description="LLM backend options (backend, model, base_url, "
                                                                  "timeout, ...; see docs/drama.md).")
    dims: list[int] = setting(default_factory=list, description="Also evaluate at these truncated sizes.")

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


class DramaConfig(PipelineBaseConfig):
    """``drmix pipeline drama`` options: the student's training parts, the recipe's part, the augmentation steps'
    options and the final evaluation."""

    model: DramaModel = Field(default_factory=DramaModel)
    run: DramaRun = Field(default_factory=DramaRun)
    recipe: DramaRecipe = Field(default_factory=DramaRecipe)
    augment: _Augment = Field(default_factory=_Augment)  # type: ignore[valid-type]


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
    from drmix.augment.steps import StepContext, enabled_steps, sample_ids, step_file, step_options
    from drmix.data.beir import doc_text

    def mine(rows: list[dict[str, Any]]):
        return examples.mine_examples(rows, ctx.texts, teacher, positives=cfg.recipe.positive_ranks,
                                      negatives=cfg.recipe.negative_ranks, teacher_name=cfg.recipe.teacher or "default")

    ctx = StepContext(name, corpus, {d: doc_text(doc) for d, doc in corpus.items()},
                      sample_ids(list(corpus), cfg.recipe.max_docs, cfg.optim.seed), cfg.optim.seed, teacher, backend, mine, out,
                      examples.read_query_rows)
    info: dict[str, Any] = {"documents": len(ctx.ids), "files": []}
    for step in enabled_steps(cfg.recipe):
        path = step_file(out, name, step.name)
        if not path.exists():
            rows, stats = step.build(ctx, step_options(step, cfg.augment))
            examples.write_collection(path, rows, why=ctx.why.get(step.name))
            ctx.rows[step.name] = rows
            info[step.name] = stats
        info["files"].append(str(path))
    return info


def _student_init(cfg: DramaConfig, root: Path) -> str:
    if cfg.recipe.prune_from is None:
        return cfg.model.name_or_path or "default"
    from drmix.model.prune import prune_to_sentence_transformer

    out = root / "student-init"
    if not model_saved(out):
        src = None if cfg.recipe.prune_from.lower() in ("smollm2", "default") else cfg.recipe.prune_from
        prune_to_sentence_transformer(src, out, layers=cfg.recipe.prune_layers,
                                      keep_layers=None if cfg.recipe.prune_layers else cfg.recipe.prune_keep_layers,
                                      mlp_keep=cfg.recipe.prune_mlp_keep, max_seq_length=cfg.data.doc_max_length)
    return str(out)


def summary_table(results: dict[str, dict[str, dict[str, float]]], metrics: list[str]) -> str:
    """Markdown: one row per (dataset, metric), one column per model, the student's share of the teacher."""
    return results_table(results, metrics, deltas=False, average=False, share=("student", "teacher"))


def run_drama_pipeline(cfg: DramaConfig) -> dict[str, Any]:
    """Run the recipe (see the module docstring); returns the summary dictionary."""
    from drmix.model.backbone import BackboneOptions
    from drmix.model.encoder import load_encoder

    if not cfg.recipe.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR (a BEIR directory or corpus.jsonl).")
    root = Path(cfg.run.output_dir)
    aug = root / "augment"
    aug.mkdir(parents=True, exist_ok=True)
    record_config(root, "drama.yaml", cfg)
    teacher = load_encoder(cfg.recipe.teacher, model_kwargs=BackboneOptions.from_config(cfg.model).model_kwargs())
    backend = None
    from drmix.augment.steps import enabled_steps

    if any(step.needs_llm for step in enabled_steps(cfg.recipe)):
        from drmix.llm.factory import LLMConfig, build_backend

        backend = build_backend(LLMConfig.model_validate(cfg.recipe.llm), cache_path=aug / "llm-cache.jsonl")
    augment: dict[str, Any] = {}
    files: list[str] = []
    for path in cfg.recipe.corpus:
        name, corpus = _corpus_of(path)
        augment[name] = augment_corpus(name, corpus, teacher, cfg, aug, backend)
        files += augment[name]["files"]
    del teacher
    student0 = _student_init(cfg, root)
    train_dir = root / "train"
    train_stage("student", TrainConfig.from_parts(cfg, model=student0, data=files + list(cfg.data.collections),
                                                  output_dir=str(train_dir), resume=True))
    models = {"teacher": cfg.recipe.teacher or "default", "untuned": student0, "student": str(train_dir / "model")}
    summary: dict[str, Any] = {"augment": augment, "models": models}
    if cfg.test.test_data:
        from drmix.evaluation.matryoshka import dim_suffix

        results = evaluate_suite(models, cfg.test.test_data, cache_dirs={lb: root / "eval" / lb for lb in models},
                                 split=cfg.test.test_split, max_queries=cfg.test.test_max_queries, max_docs=cfg.test.test_max_docs,
                                 seed=cfg.optim.seed, max_length=cfg.data.doc_max_length, dims=cfg.recipe.dims,
                                 query_instructions=cfg.eval.query_instructions).results
        metrics = ["ndcg@10"] + [dim_suffix("ndcg@10", d) for d in cfg.recipe.dims] + ["recall@100"]
        summary["results"] = results
        summary["table"] = summary_table(results, metrics)
        write_summary(root, "# DRAMA recipe\n\n" + summary["table"], summary)
    else:
        atomic_write_json(root / "summary.json", summary)
    return summary
