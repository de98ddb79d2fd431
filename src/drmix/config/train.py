"""``TrainConfig``: what ``drmix train`` needs, as parts. Defaults follow common practice for contrastive
retriever fine-tuning.

A YAML config file holds any subset of the fields, grouped (``optim: {learning_rate: 1e-4}``) or flat
(``learning_rate: 1e-4``, drmix 0.1's layout); every field is also a CLI flag (``--learning-rate 1e-4``), and
flags override the file. The resolved config is written next to a run's outputs (``config.yaml``, grouped) so
every run can be reproduced. Fields, groups and roles: :mod:`drmix.config.parts`; the table of every field:
docs/training.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from drmix.config.parts import INPUT, OPERATIONAL, Config, Part, setting
from drmix.data.spec import CollectionSpec, FormatName, format_name, parse_columns

#: ``report_to`` values (drmix.train.tracking implements them)
TRACKERS = ("none", "tensorboard", "wandb")


class ModelConfig(Part):
    """The backbone: which model, how it pools, its precision and attention, LoRA."""

    title: ClassVar[str] = "Model"

    name_or_path: str | None = setting(None, role=INPUT, flag="model", description="SentenceTransformer folder or hub id (default: bundled all-MiniLM-L6-v2).")
    pooling: Literal["lasttoken", "mean", "cls"] | None = setting(
        None, description="Pooling of token states: lasttoken | mean | cls. Default: the model folder's Pooling; lasttoken for a bare decoder LM, mean for a bare encoder.")
    append_eos: bool | None = setting(None, description="Make the tokenizer append EOS to every text (once). Default: on for last-token pooling.")
    normalize: bool = setting(True, description="L2-normalise embeddings (adds a Normalize module): training and the saved folder both score cosines; off: both score dot products.")
    bidirectional: bool = setting(False, description="Run a Llama-family decoder with bidirectional attention (DRAMA; rewritten exactly as Gemma).")
    torch_dtype: Literal["bf16", "fp16", "fp32"] | None = setting(None, description="dtype the weights are loaded in (bf16 halves memory). Default: transformers' choice for the folder.")
    attn_implementation: Literal["sdpa", "flash_attention_2", "eager"] | None = setting(None, description="Attention kernel. Default: transformers' choice (sdpa).")
    gradient_checkpointing: bool = setting(False, role=OPERATIONAL, description="Activation checkpointing on the backbone (recompute layers in backward; less memory).")
    trust_remote_code: bool = setting(False, role=OPERATIONAL, description="Allow custom model code from the model folder / hub.")
    lora_r: int | None = setting(None, ge=0, description="LoRA rank (0 = train all weights); saves model/ merged and adapter/. Default: 8 (tDRO) for a decoder LM, 0 otherwise.")
    lora_alpha: float = setting(32.0, gt=0, description="LoRA scaling alpha (update scaled by alpha / r).")
    lora_dropout: float = setting(0.1, ge=0, lt=1, description="Dropout on the LoRA branch.")
    lora_targets: list[str] = setting(default_factory=list, description="Module names to adapt (default: peft's choice for the architecture).")


class DataConfig(Part):
    """The training collections and how their text becomes model input."""

    title: ClassVar[str] = "Data"

    collections: list[str | CollectionSpec] = setting(default_factory=list, role=INPUT, flag="data", description="Training collections (paths or specs).")
    format: FormatName = setting("auto", description="Layout of the training rows: drmix | st (sentence-transformers) | "
                                 "tevatron | flag (FlagEmbedding) | beir | auto (detected from each file's first record "
                                 "or columns); a collection's own format: in a YAML list wins (docs/data.md).")
    columns: dict[str, str] | str = setting(default_factory=dict, description="Column mapping ROLE=COLUMN,... for the training "
                                    "rows, e.g. query=question,positive=answer,negatives=hard (roles: query, positive, "
                                    "negatives, score, positive_scores, negative_scores, prompt; COL1+COL2 joins "
                                    "columns; ROLE= ignores one); a collection's own columns: wins.")
    max_collection_size: int | None = setting(None, ge=1, description="Cap each collection at this many examples (seeded).")
    query_max_length: int = setting(64, ge=4, description="Max tokens per query.")
    doc_max_length: int = setting(256, ge=4, description="Max tokens per document.")
    pretokenize: bool = setting(True, role=OPERATIONAL, description="Tokenise each collection once into stored token ids (cached under "
                              "DRMIX_CACHE/tokenized, keyed by tokenizer, lengths, prompts and content) so a step "
                              "only pads; models whose preprocessing is not plain tokenisation train from text.")
    tokenize_num_proc: int | None = setting(None, ge=1, role=OPERATIONAL, description="Processes that tokenise a collection for "
                                                                   "--pretokenize (default: one).")
    input_prefetch: int = setting(2, ge=0, role=OPERATIONAL, description="Batches tokenised ahead on background threads (0 = tokenise in the loop).")
    input_workers: int = setting(1, ge=0, role=OPERATIONAL, description="Threads preparing batches ahead (0 = tokenise in the loop).")
    # prompts as sentence-transformers' prompts={"query": ..., "document": ...} (E5's "query: " / "passage: ")
    query_prompt: str | None = setting(None, description="Text prepended to every training query (E5: 'query: '; "
                                       "BGE: its instruction), before a collection's own instruction; saved as the "
                                       "model folder's 'query' prompt. Default: the model folder's query prompt.")
    document_prompt: str | None = setting(None, description="Text prepended to every training document (E5: "
                                          "'passage: '), before a collection's own document_prompt; saved as the "
                                          "model folder's 'document' prompt. Default: the model folder's document "
                                          "prompt.")

    @field_validator("collections", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, (str, dict)) else v

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, v: Any) -> Any:
        return parse_columns(v)

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, v: Any) -> Any:
        return format_name(v)   # --format sentence-transformers / FlagEmbedding: drmix's st / flag


CACHED_MNRL_CHUNK = 32   # CachedMultipleNegativesRankingLoss's default mini_batch_size


class ContrastiveConfig(Part):
    """The training objective: batches, negatives, temperature, Matryoshka sizes, the loss."""

    title: ClassVar[str] = "Batches and negatives"

    batch_size: int = setting(32, ge=1, description="Global batch size per micro-step (split across processes).")
    gradient_accumulation_steps: int = setting(1, ge=1, description="Micro-steps per optimiser step.")
    batching: Literal["homogeneous", "mixed"] = setting(
        "homogeneous", description="homogeneous: one collection per global batch; mixed: every collection in each batch.")
    num_negatives: int = setting(1, ge=0, description="Hard negatives per query taken from the data (0 = none).")
    in_batch_negatives: bool = setting(True, description="Use the other examples' documents as negatives.")
    cross_device_negatives: bool = setting(True, description="Gather documents from all processes as negatives (DDP).")
    temperature: float = setting(0.05, gt=0, description="InfoNCE temperature (scores are divided by it; the tDRO paper uses 0.002 on normalised last-token embeddings).")
    matryoshka_dims: list[int] = setting(default_factory=list, description="Also train truncated embeddings of these sizes.")
    grad_cache_chunk: int = setting(0, ge=0, description="GradCache: encode each batch in chunks of N examples with full-batch gradients (0 = off; loss=cached_mnrl: 32, CachedMultipleNegativesRankingLoss's mini_batch_size).")
    mask_duplicates: bool = setting(True, description="Mask false negatives of InfoNCE: an in-batch or hard negative "
                                    "whose text equals the example's positive, and the positive of another example "
                                    "with the same query, leave the softmax (compared by hash; off: every other "
                                    "document is a negative, drmix 0.1's loss).")
    batch_sampler: Literal["default", "no_duplicates"] = setting(
        "default", description="How rows fill a batch: default (drawn in order of each collection's shuffled epoch) "
                               "| no_duplicates (no two rows of a batch share a text: query, positive or negative; "
                               "a row that would is drawn in a later batch), as sentence-transformers' batch_sampler "
                               "BatchSamplers.NO_DUPLICATES.")
    loss: str = setting("infonce", description="The training loss, a registered objective: infonce (contrastive) | "
                        "margin_mse (MarginMSE on teacher score margins) | kl (KL divergence to the teacher's "
                        "softmax over positive and hard negatives); margin_mse and kl read the collections' "
                        "positive_scores / negative_scores (docs/training.md, Distillation) | mnrl "
                        "(sentence-transformers' MultipleNegativesRankingLoss, scale 1/temperature) | cached_mnrl "
                        "(the same with --grad-cache-chunk, 32 when not given) | cosent / angle "
                        "(sentence-transformers' CoSENTLoss / AnglELoss on scored pairs: sentence1, sentence2, "
                        "score rows); the sentence-transformers losses give one loss per batch, so they train "
                        "under --strategy static only.")
    teacher_temperature: float = setting(1.0, gt=0, description="loss=kl: teacher scores are divided by it before "
                                         "their softmax (the student's scores by temperature).")

    @field_validator("loss", mode="before")
    @classmethod
    def _loss_name(cls, v: Any) -> Any:
        return str(v).strip().lower().replace("-", "_") if v is not None else v

    @model_validator(mode="after")
    def _cached_mnrl_chunk(self) -> "ContrastiveConfig":
        if self.loss == "cached_mnrl" and not self.grad_cache_chunk:
            self.__dict__["grad_cache_chunk"] = CACHED_MNRL_CHUNK   # not assigned: that would validate again
        return self

    @field_validator("matryoshka_dims")
    @classmethod
    def _positive_dims(cls, v: list[int]) -> list[int]:
        bad = [d for d in v if d < 1]
        if bad:
            raise ValueError(f"dimensions must be positive, got {bad}")
        return v


class MixtureConfig(Part):
    """How much of each collection: initial weights, a strategy that learns them, their transfer."""

    title: ClassVar[str] = "Mixture"

    scheme: Literal["uniform", "size", "temperature", "file"] = setting(
        "uniform", flag="mixture", description="Initial collection weights: uniform, size-proportional, |D|^(1/tau), or file "
                   "(weights_file, or else each collection's weight: key).")
    mixture_temperature: float = setting(2.0, gt=0, description="tau for mixture='temperature'.")
    weights_file: str | None = setting(None, role=INPUT, description="weights.json (from a strategy run) or a {name: weight} JSON/YAML file.")
    transfer: str | None = setting(None, description="How learned weights are used: top:K (e.g. top:0.7), reweight, or loss.")
    strategy: str = setting("static", description="A registered strategy: static | tdro | doremi | groupdro | infdds | "
                                                "multidds | idro (docs/mixture.md); checked before any model or data loads.")
    reference_model: str | None = setting(None, role=INPUT, description="Frozen reference model for tDRO/DoReMi.")
    dev: list[str] = setting(default_factory=list, role=INPUT, description="BEIR directories whose dev split strategies use (Inf-DDS).")
    dev_split: str = setting("dev", description="Qrels split of the --dev directories.")


class OptimConfig(Part):
    """The optimiser and its schedule, precision, the non-finite guard."""

    title: ClassVar[str] = "Optimisation"

    max_steps: int = setting(1000, ge=1, description="Optimiser steps to train for (--epochs, when given, sets it).")
    epochs: float | None = setting(None, gt=0, description="Train for this many passes over the data instead of "
                                   "--max-steps: max_steps = ceil(epochs x examples / (batch_size x "
                                   "gradient_accumulation_steps)), examples summed over the collections after "
                                   "max_collection_size (the mixture draws that many rows per epoch, the same "
                                   "total whatever the weights); logged and written to config.yaml.")
    learning_rate: float = setting(2e-5, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = setting(0.01, ge=0, description="AdamW weight decay (not applied to biases and LayerNorm).")
    warmup_ratio: float = setting(0.1, ge=0, le=1, description="Fraction of steps with linear warm-up.")
    warmup_steps: int | None = setting(None, ge=0, description="Steps of linear warm-up; given, it replaces "
                                       "warmup_ratio (as in transformers' TrainingArguments).")
    scheduler: Literal["linear", "cosine", "constant"] = setting("linear", description="Decay after warm-up.")
    max_grad_norm: float = setting(1.0, ge=0, description="Gradient clipping norm (0 = off).")
    seed: int = setting(42, description="Seed for sampling, initialisation and dropout.")
    mixed_precision: Literal["auto", "no", "fp16", "bf16"] = setting(
        "auto", description="auto: bf16 on GPUs that support it, else fp16 with loss scaling; fp32 (no) on CPU.")
    max_nonfinite_steps: int = setting(20, ge=1, role=OPERATIONAL, description="Stop after this many consecutive steps skipped for a non-finite loss or gradient.")
    compile: bool = setting(False, role=OPERATIONAL, description="torch.compile the encoder's backbone for training (in place: checkpoints and the saved model keep plain parameter names). The first steps compile; see docs/benchmarks.md for the measured speed.")
    compile_backend: str = setting("inductor", role=OPERATIONAL, description="torch.compile backend of --compile: inductor (needs a C/C++ compiler on CPU) or another of torch._dynamo.list_backends(), e.g. aot_eager.")

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _yaml_no(cls, v: Any) -> Any:
        return "no" if v is False else v  # YAML 1.1 reads `mixed_precision: no` as false


class EvalConfig(Part):
    """Evaluation during training and the query instructions every evaluation uses."""

    title: ClassVar[str] = "Evaluation during training"

    eval_data: list[str] = setting(default_factory=list, role=OPERATIONAL, description="BEIR directories evaluated every eval_every steps.")
    eval_every: int = setting(0, ge=0, role=OPERATIONAL, description="Evaluate on eval_data every N steps (0 = only at the end if eval_data).")
    eval_split: str = setting("dev", role=OPERATIONAL, description="Qrels split used by the periodic evaluation.")
    eval_max_queries: int | None = setting(None, ge=1, role=OPERATIONAL, description="Cap on queries per periodic evaluation set.")
    evaluator: list[str] = setting(default_factory=list, role=OPERATIONAL, description="sentence-transformers evaluators run with the periodic evaluation (every eval_every steps): nanobeir (all 13 NanoBEIR datasets, from the Hugging Face Hub) or nanobeir:NAME,NAME (e.g. nanobeir:msmarco,nfcorpus); their scores go to metrics.jsonl and the report. Evaluator objects: drmix.train(..., evaluator=...).")
    query_instructions: dict[str, str] = setting(default_factory=dict, description="Query instruction per evaluation dataset (dataset name -> text), used by every evaluation and saved in the model folder's prompts (see docs/llm.md).")


_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"}


def _is_path(value: Any) -> bool:
    """``resume: PATH``: a string that is not one of the words pydantic reads as a boolean."""
    return isinstance(value, (str, Path)) and str(value).strip().lower() not in _BOOL_WORDS


class RunConfig(Part):
    """Where the run writes, checkpoints, logging, resuming, trackers, the device."""

    title: ClassVar[str] = "Output, checkpoints and tracking"

    output_dir: str = setting("runs/train", role=OPERATIONAL, description="Where the model, logs and checkpoints go.")
    save_every: int = setting(200, ge=1, role=OPERATIONAL, description="Checkpoint every N optimiser steps.")
    keep_checkpoints: int = setting(2, ge=1, role=OPERATIONAL, description="How many recent checkpoints to keep.")
    log_every: int = setting(10, ge=1, role=OPERATIONAL, description="Write a metrics record every N steps.")
    resume: bool = setting(False, role=OPERATIONAL, description="Continue from the latest checkpoint in output_dir; "
                           "--resume PATH (or resume: PATH in YAML) continues from that checkpoint, as "
                           "--resume-from PATH does (transformers' resume_from_checkpoint takes True or a path).")
    resume_with_changes: bool = setting(False, role=OPERATIONAL, description="With resume: accept training fields that differ from the checkpoint's (logged in metrics.jsonl); in a recipe: re-run the stages whose settings or inputs changed, and those built on them.")
    resume_from: str | None = setting(None, role=OPERATIONAL, description="Continue from this checkpoint folder of "
                                      "the run in output_dir (e.g. RUN/checkpoints/step-400) instead of the latest; "
                                      "implies resume. Later checkpoints and log records are dropped.")
    save_final_checkpoint: bool = setting(True, role=OPERATIONAL, description="Also keep a checkpoint (optimiser "
                                          "and sampler state, about 3x the model's size) of the last step, so a "
                                          "finished run can be continued with --resume and a larger --max-steps; "
                                          "off: a finished run keeps only model/ and the periodic checkpoints.")
    checkpoint_naming: Literal["drmix", "hf"] = setting("drmix", role=OPERATIONAL, description="Checkpoint folder "
                                                        "names: drmix (checkpoints/step-N) | hf (checkpoints/"
                                                        "checkpoint-N, transformers' Trainer's names); --resume "
                                                        "reads both.")
    show_progress: bool = setting(True, role=OPERATIONAL, description="Show a progress bar.")
    device: str | None = setting(None, role=OPERATIONAL, description="Device override (default: cuda if available, else cpu).")
    report_to: list[str] = setting(default_factory=list, role=OPERATIONAL, description="Also send the logged scalars to tensorboard "
                                 "(event files in output_dir/tensorboard) and/or wandb (offline unless WANDB_MODE "
                                 "says otherwise); repeat for several; none = only metrics.jsonl.")
    push_to_hub: str | None = setting(None, role=OPERATIONAL, description="After the run, upload model/, its card and report.html to "
                                    "this Hugging Face Hub repository (USER/NAME); see drmix push.")

    @model_validator(mode="before")
    @classmethod
    def _resume_from_resumes(cls, data: Any) -> Any:
        if isinstance(data, dict) and _is_path(data.get("resume")):
            given, path = data.get("resume_from"), str(data["resume"])
            if given and str(given) != path:
                raise ValueError(f"resume names {path} and resume_from {given}; pass one checkpoint")
            data = {**data, "resume_from": path}
        if isinstance(data, dict) and data.get("resume_from"):
            data = {**data, "resume": True}
        return data

    @field_validator("report_to", mode="before")
    @classmethod
    def _trackers(cls, v: Any) -> Any:
        values = [v] if isinstance(v, str) else list(v or [])
        names = [n.strip().lower() for x in values for n in str(x).split(",") if n.strip()]
        bad = [n for n in names if n not in TRACKERS]
        if bad:
            raise ValueError(f"unknown tracker {bad[0]!r}; use {', '.join(TRACKERS)}")
        return [n for n in dict.fromkeys(names) if n != "none"]


class TrainingParts(Config):
    """The parts every training config starts with (``drmix train``, ``drmix pretrain coco``): the model, the data
    and the batches."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    contrastive: ContrastiveConfig = Field(default_factory=ContrastiveConfig)


#: the strategy-options mappings: field -> (older flat names, description); a config declares those it reads
#: with :func:`options_setting`
STRATEGY_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "dro": (("tdro",), "Options of the DRO strategies tdro, doremi, groupdro (see docs/mixture.md)."),
    "influence": (("infdds",), "Options of Inf-DDS / MultiDDS (see docs/influence.md)."),
    "idro": ((), "Options of iDRO (see docs/coco.md)."),
    "strategy_options": ((), "Options of a registered strategy that has no field of its own (docs/mixture.md)."),
}


def options_setting(field: str, description: str | None = None) -> Any:
    """The setting of the strategy-options mapping ``field`` (``dro``, ``influence``, ``idro``,
    ``strategy_options``), as :class:`TrainConfig` declares it (``description``: another text for a recipe).

    A mapping, kept as given so ``config.yaml`` and the resume checks see what the user wrote; the options model
    each strategy registers (:mod:`drmix.mixture.registry`) checks it when the config is loaded (a recipe's
    config: when it is made, :mod:`drmix.recipes.options`)."""
    aliases, text = STRATEGY_OPTIONS[field]
    return setting(default_factory=dict, aliases=aliases, description=description or text)


class FineTuningParts(TrainingParts):
    """The parts a fine-tuning reads: ``drmix train``'s config (:class:`TrainConfig`), and the parts of a recipe's
    config (:class:`RecipeConfig`) every one of its training stages is composed from (``TrainConfig.from_parts``).
    The strategy-options mappings are declared by each config that reads them (:func:`options_setting`)."""

    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    run: RunConfig = Field(default_factory=RunConfig)


class TrainConfig(FineTuningParts):
    """Everything ``drmix train`` needs: the fine-tuning parts and every strategy's options. Field descriptions
    double as CLI help.

    Strategy options are mappings checked by the options model each strategy registers
    (:mod:`drmix.mixture.registry`) before any model or data loads; they are kept as given, so ``config.yaml``
    and resume checks see what the user wrote.
    """

    dro: dict[str, Any] = options_setting("dro")
    influence: dict[str, Any] = options_setting("influence")
    idro: dict[str, Any] = options_setting("idro")
    strategy_options: dict[str, Any] = options_setting("strategy_options")


class TestConfig(Part):
    """The final evaluation every recipe (tdro, coco, drama) ends with."""

    title: ClassVar[str] = "Final evaluation"

    test_data: list[str] = setting(default_factory=list, role=INPUT, description="BEIR directories evaluated at the end.")
    test_split: str = setting("test", description="Qrels split of the final evaluation.")
    test_max_queries: int | None = setting(None, ge=1, description="Cap on test queries per dataset (seeded subsample).")
    test_max_docs: int | None = setting(None, ge=1, description="Cap on corpus size per dataset (judged documents kept).")


class PipelineRun(RunConfig.without("PipelineRunParts", "resume", "resume_from")):
    """A recipe's output folder: its stages' subfolders, reused or re-run. No ``resume`` / ``resume_from``: a rerun
    of the recipe continues it by itself, each stage from its own latest checkpoint."""

    overwrite: bool = setting(False, role=OPERATIONAL, description="Re-run every stage, replacing the earlier run's "
                              "outputs in output_dir (without it a rerun reuses the stages made with the same settings "
                              "from the same inputs and refuses changed ones unless --resume-with-changes re-runs them).")


#: why a recipe leaves out fields of TrainConfig every recipe leaves out: ``{flat name: (why, fix)}``
#: (:attr:`drmix.config.parts.Config.left_out`)
RECIPE_LEFT_OUT: dict[str, tuple[str, str]] = {
    "resume": ("a rerun of the same command continues the recipe by itself: each finished stage is reused and an "
               "interrupted one resumes from its latest checkpoint",
               "drop --resume and run the same command again (--resume-with-changes re-runs the stages whose "
               "settings changed, --overwrite every stage)."),
    "resume_from": ("it picks a checkpoint of one training run, and a recipe resumes each of its stages from that "
                    "stage's latest checkpoint by itself", "drop --resume-from and run the same command again."),
    # a recipe declares the strategy-options mappings its stages read (options_setting); the others are left out
    **dict.fromkeys(STRATEGY_OPTIONS, ("no stage of the recipe trains with a strategy that reads these options",
                                       "drop it.")),
}


class RecipeConfig(FineTuningParts):
    """What every multi-stage recipe's config is made of (``drmix pipeline tdro|coco|drama``): the fine-tuning parts
    its training stages are composed from, its output folder (:class:`PipelineRun`) and the final evaluation; each
    recipe replaces the parts whose defaults it changes, leaves out the fields its stages never read (parts
    without them, ``Part.without``; the strategy-options mappings it does not declare) and adds its own. Not a
    :class:`TrainConfig`: a stage's TrainConfig is composed from these parts by the recipe's plan.

    The fields of TrainConfig a recipe leaves out are refused in one line when given (``left_out``, with why and
    the fix; :meth:`~drmix.config.parts.Config.refuse_left_out`), never accepted and carried into its stages."""

    command: ClassVar[str] = "drmix pipeline"
    narrows: ClassVar[type[Config] | None] = TrainConfig
    left_out: ClassVar[dict[str, tuple[str, str]]] = RECIPE_LEFT_OUT

    run: PipelineRun = Field(default_factory=PipelineRun)
    test: TestConfig = Field(default_factory=TestConfig)
