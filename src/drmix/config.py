"""Configuration models (pydantic). Defaults follow common practice for contrastive retriever fine-tuning.

A YAML config file holds any subset of :class:`TrainConfig` fields; every field is also a CLI flag
(``--batch-size 64``), and flags override the file. The resolved config is written next to a run's
outputs (``config.yaml``) so every run can be reproduced.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from drmix.data.spec import FormatName, CollectionSpec, parse_columns  # noqa: F401  (CollectionSpec: public here too)
from drmix.errors import ConfigError


class TrainConfig(BaseModel):
    """Everything ``drmix train`` needs. Field descriptions double as CLI help."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: str | None = Field(None, description="SentenceTransformer folder or hub id (default: bundled all-MiniLM-L6-v2).")
    data: list[str | CollectionSpec] = Field(default_factory=list, description="Training collections (paths or specs).")
    format: FormatName = Field("auto", description="Layout of the training rows: drmix | st (sentence-transformers) | "
                               "tevatron | flag (FlagEmbedding) | beir | auto (detected from each file's first record "
                               "or columns); a collection's own format: in a YAML list wins (docs/data.md).")
    columns: dict[str, str] | str = Field(default_factory=dict, description="Column mapping ROLE=COLUMN,... for the training "
                                    "rows, e.g. query=question,positive=answer,negatives=hard (roles: query, positive, "
                                    "negatives, score, positive_scores, negative_scores, prompt; COL1+COL2 joins "
                                    "columns; ROLE= ignores one); a collection's own columns: wins.")
    output_dir: str = Field("runs/train", description="Where the model, logs and checkpoints go.")
    max_steps: int = Field(1000, ge=1, description="Optimiser steps to train for.")
    batch_size: int = Field(32, ge=1, description="Global batch size per micro-step (split across processes).")
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-steps per optimiser step.")
    learning_rate: float = Field(2e-5, gt=0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (not applied to biases and LayerNorm).")
    warmup_ratio: float = Field(0.1, ge=0, le=1, description="Fraction of steps with linear warm-up.")
    scheduler: Literal["linear", "cosine", "constant"] = Field("linear", description="Decay after warm-up.")
    max_grad_norm: float = Field(1.0, ge=0, description="Gradient clipping norm (0 = off).")
    temperature: float = Field(0.05, gt=0, description="InfoNCE temperature (scores are divided by it; the tDRO paper uses 0.002 on normalised last-token embeddings).")
    num_negatives: int = Field(1, ge=0, description="Hard negatives per query taken from the data (0 = none).")
    in_batch_negatives: bool = Field(True, description="Use the other examples' documents as negatives.")
    cross_device_negatives: bool = Field(True, description="Gather documents from all processes as negatives (DDP).")
    query_max_length: int = Field(64, ge=4, description="Max tokens per query.")
    doc_max_length: int = Field(256, ge=4, description="Max tokens per document.")
    batching: Literal["homogeneous", "mixed"] = Field(
        "homogeneous", description="homogeneous: one collection per global batch; mixed: every collection in each batch.")
    mixture: Literal["uniform", "size", "temperature", "file"] = Field(
        "uniform", description="Initial collection weights: uniform, size-proportional, |D|^(1/tau), or file "
                   "(weights_file, or else each collection's weight: key).")
    mixture_temperature: float = Field(2.0, gt=0, description="tau for mixture='temperature'.")
    weights_file: str | None = Field(None, description="weights.json (from a strategy run) or a {name: weight} JSON/YAML file.")
    transfer: str | None = Field(None, description="How learned weights are used: top:K (e.g. top:0.7), reweight, or loss.")
    strategy: str = Field("static", description="A registered strategy: static | tdro | doremi | groupdro | infdds | "
                                                "multidds | idro (docs/mixture.md); checked when the config is read.")
    reference_model: str | None = Field(None, description="Frozen reference model for tDRO/DoReMi.")
    dev: list[str] = Field(default_factory=list, description="BEIR directories whose dev split strategies use (Inf-DDS).")
    dev_split: str = Field("dev", description="Qrels split of the --dev directories.")
    eval_data: list[str] = Field(default_factory=list, description="BEIR directories evaluated every eval_every steps.")
    query_instructions: dict[str, str] = Field(default_factory=dict, description="Query instruction per evaluation dataset (dataset name -> text), used by every evaluation and saved in the model folder's prompts (see docs/llm.md).")
    eval_every: int = Field(0, ge=0, description="Evaluate on eval_data every N steps (0 = only at the end if eval_data).")
    eval_split: str = Field("dev", description="Qrels split used by the periodic evaluation.")
    eval_max_queries: int | None = Field(None, ge=1, description="Cap on queries per periodic evaluation set.")
    seed: int = Field(42, description="Seed for sampling, initialisation and dropout.")
    save_every: int = Field(200, ge=1, description="Checkpoint every N optimiser steps.")
    keep_checkpoints: int = Field(2, ge=1, description="How many recent checkpoints to keep.")
    log_every: int = Field(10, ge=1, description="Write a metrics record every N steps.")
    resume: bool = Field(False, description="Continue from the latest checkpoint in output_dir.")
    resume_with_changes: bool = Field(False, description="With resume: accept training fields that differ from the checkpoint's (logged in metrics.jsonl).")
    max_nonfinite_steps: int = Field(20, ge=1, description="Stop after this many consecutive steps skipped for a non-finite loss or gradient.")
    show_progress: bool = Field(True, description="Show a progress bar.")
    mixed_precision: Literal["auto", "no", "fp16", "bf16"] = Field(
        "auto", description="auto: bf16 on GPUs that support it, else fp16 with loss scaling; fp32 (no) on CPU.")
    grad_cache_chunk: int = Field(0, ge=0, description="GradCache: encode each batch in chunks of N examples with full-batch gradients (0 = off).")
    lora_r: int | None = Field(None, ge=0, description="LoRA rank (0 = train all weights); saves model/ merged and adapter/. Default: 8 (tDRO) for a decoder LM, 0 otherwise.")
    lora_alpha: float = Field(32.0, gt=0, description="LoRA scaling alpha (update scaled by alpha / r).")
    lora_dropout: float = Field(0.1, ge=0, lt=1, description="Dropout on the LoRA branch.")
    lora_targets: list[str] = Field(default_factory=list, description="Module names to adapt (default: peft's choice for the architecture).")
    input_prefetch: int = Field(2, ge=0, description="Batches tokenised ahead on background threads (0 = tokenise in the loop).")
    input_workers: int = Field(1, ge=0, description="Threads preparing batches ahead (0 = tokenise in the loop).")
    pretokenize: bool = Field(True, description="Tokenise each collection once into stored token ids (cached under "
                              "DRMIX_CACHE/tokenized, keyed by tokenizer, lengths, prompts and content) so a step "
                              "only pads; models whose preprocessing is not plain tokenisation train from text.")
    tokenize_num_proc: int | None = Field(None, ge=1, description="Processes that tokenise a collection for "
                                                                   "--pretokenize (default: one).")
    matryoshka_dims: list[int] = Field(default_factory=list, description="Also train truncated embeddings of these sizes.")
    # The backbone (drmix.model.backbone; docs/llm.md): decoder LMs as the tDRO and DRAMA papers train them.
    pooling: Literal["lasttoken", "mean", "cls"] | None = Field(
        None, description="Pooling of token states: lasttoken | mean | cls. Default: the model folder's Pooling; lasttoken for a bare decoder LM, mean for a bare encoder.")
    append_eos: bool | None = Field(None, description="Make the tokenizer append EOS to every text (once). Default: on for last-token pooling.")
    normalize: bool = Field(True, description="L2-normalise embeddings (adds a Normalize module): training and the saved folder both score cosines; off: both score dot products.")
    bidirectional: bool = Field(False, description="Run a Llama-family decoder with bidirectional attention (DRAMA; rewritten exactly as Gemma).")
    torch_dtype: Literal["bf16", "fp16", "fp32"] | None = Field(None, description="dtype the weights are loaded in (bf16 halves memory). Default: transformers' choice for the folder.")
    attn_implementation: Literal["sdpa", "flash_attention_2", "eager"] | None = Field(None, description="Attention kernel. Default: transformers' choice (sdpa).")
    gradient_checkpointing: bool = Field(False, description="Activation checkpointing on the backbone (recompute layers in backward; less memory).")
    compile: bool = Field(False, description="torch.compile the encoder's backbone for training (in place: checkpoints and the saved model keep plain parameter names). The first steps compile; see docs/benchmarks.md for the measured speed.")
    compile_backend: str = Field("inductor", description="torch.compile backend of --compile: inductor (needs a C/C++ compiler on CPU) or another of torch._dynamo.list_backends(), e.g. aot_eager.")
    trust_remote_code: bool = Field(False, description="Allow custom model code from the model folder / hub.")
    device: str | None = Field(None, description="Device override (default: cuda if available, else cpu).")
    max_collection_size: int | None = Field(None, ge=1, description="Cap each collection at this many examples (seeded).")
    report_to: list[str] = Field(default_factory=list, description="Also send the logged scalars to tensorboard "
                                 "(event files in output_dir/tensorboard) and/or wandb (offline unless WANDB_MODE "
                                 "says otherwise); repeat for several; none = only metrics.jsonl.")
    push_to_hub: str | None = Field(None, description="After the run, upload model/, its card and report.html to "
                                    "this Hugging Face Hub repository (USER/NAME); see drmix push.")
    # Strategy options: mappings checked, when the config is read, by the options model each strategy registers
    # (drmix.mixture.registry); written as given, so config.yaml and resume checks see what the user wrote.
    tdro: dict[str, Any] = Field(default_factory=dict, description="Options of the DRO strategies (see docs/mixture.md).")
    infdds: dict[str, Any] = Field(default_factory=dict, description="Options of Inf-DDS / MultiDDS (see docs/influence.md).")
    idro: dict[str, Any] = Field(default_factory=dict, description="Options of iDRO (see docs/coco.md).")
    strategy_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of a registered strategy that has no field of its own (docs/mixture.md).")

    @field_validator("data", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, (str, dict)) else v

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, v: Any) -> Any:
        return parse_columns(v)

    @field_validator("report_to", mode="before")
    @classmethod
    def _trackers(cls, v: Any) -> Any:
        from drmix.train.tracking import TRACKERS

        values = [v] if isinstance(v, str) else list(v or [])
        names = [n.strip().lower() for x in values for n in str(x).split(",") if n.strip()]
        bad = [n for n in names if n not in TRACKERS]
        if bad:
            raise ValueError(f"unknown tracker {bad[0]!r}; use {', '.join(TRACKERS)}")
        return [n for n in dict.fromkeys(names) if n != "none"]

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _yaml_no(cls, v: Any) -> Any:
        return "no" if v is False else v  # YAML 1.1 reads `mixed_precision: no` as false

    @field_validator("matryoshka_dims")
    @classmethod
    def _positive_dims(cls, v: list[int]) -> list[int]:
        bad = [d for d in v if d < 1]
        if bad:
            raise ValueError(f"dimensions must be positive, got {bad}")
        return v

    @model_validator(mode="after")
    def _check_strategy(self) -> "TrainConfig":
        from drmix.mixture.registry import check_config

        check_config(self)  # the strategy exists and its options are valid, before any model or data loads
        return self

    def dump_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


class PipelineBaseConfig(TrainConfig):
    """The training fields plus the final evaluation every pipeline (tdro, coco, drama) ends with."""

    test_data: list[str] = Field(default_factory=list, description="BEIR directories evaluated at the end.")
    test_split: str = Field("test", description="Qrels split of the final evaluation.")
    test_max_queries: int | None = Field(None, ge=1, description="Cap on test queries per dataset (seeded subsample).")
    test_max_docs: int | None = Field(None, ge=1, description="Cap on corpus size per dataset (judged documents kept).")
    overwrite: bool = Field(False, description="Re-run every stage, replacing the earlier run's outputs in output_dir "
                                               "(without it a rerun reuses the stages made with the same settings and "
                                               "refuses changed ones unless --resume-with-changes re-runs them).")


def _format_validation(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        parts.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists():
        raise ConfigError("config file not found.", path=path, fix="check the path.")
    if path.is_dir():
        inside = [n for n in ("config.yaml", "drama.yaml", "pipeline.yaml") if (path / n).is_file()]
        raise ConfigError("is a folder, not a YAML config file.", path=path,
                          fix=(f"pass the config file inside it ({path / inside[0]})" if inside else
                               "pass a YAML file of config fields") + "; a data folder goes to --data.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError("config file is not valid UTF-8.", path=path, fix="re-encode it as UTF-8.") from None
    except OSError as e:
        raise ConfigError(f"config file cannot be read ({e.strerror}).", path=path,
                          fix="check the path and its permissions.") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"invalid YAML ({getattr(e, 'problem', e)}).", path=path,
                          line=(mark.line + 1) if mark else None, fix="fix the YAML syntax.") from None


def load_config(model_cls: type[BaseModel], path: str | Path | None = None, overrides: dict[str, Any] | None = None):
    """Build a config from an optional YAML file and CLI overrides (overrides win); paths stay as given."""
    values: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml(path)
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError("config must be a mapping of field: value.", path=path,
                              fix=f"write fields of {model_cls.__name__} at the top level.")
        values.update(raw)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return model_cls.model_validate(values)
    except ValidationError as e:
        raise ConfigError(f"invalid configuration: {_format_validation(e)}.", path=path,
                          fix="see `drmix train --help` or docs/training.md for the fields.") from None
    except ConfigError as e:  # the strategy registry's check: name the config file it came from
        if e.path is None and path is not None:
            raise ConfigError(e.message, path=path, fix=e.fix) from None
        raise
