"""``drmix adapt``'s configuration: its parts, the presets, the fields the synthetic set depends on."""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from drmix.config import INPUT, OPERATIONAL, Config, OptimConfig, Part, PipelineRun, TrainConfig, setting
from drmix.config.train import RECIPE_LEFT_OUT, TrainingParts
from drmix.errors import ConfigError
from drmix.recipes.adapt.candidates import parse_candidate
from drmix.retrieval.backends.base import DEFAULT_BACKEND

#: the candidates are compared on a sub-corpus of this many documents per corpus (the dev queries' passages and
#: a seeded sample of distractors): six candidates on two corpora encode 1.2M passages, about 2 minutes on one
#: GPU at the assumed 10,000 passages/s, whatever the corpus size (docs/adapt.md)
SELECT_MAX_DOCS = 100_000


PRESETS: dict[str, dict[str, Any]] = {
    # minutes on a laptop's CPU: enough to see every stage run, not to move a model
    "cpu": dict(max_steps=40, batch_size=16, learning_rate=5e-5, query_max_length=16, doc_max_length=64,
                max_collection_size=300, num_negatives=0, max_docs=400, dev_queries=50, test_queries=50,
                coco=dict(max_steps=20, batch_size=16, learning_rate=5e-5, max_documents=300, span_max_length=32),
                stage1=dict(max_steps=20), influence=dict(warmup_steps=10, update_every=10, subset_size=4),
                audit=dict(budget_steps=20),
                candidates=["uniform", "uniform+synthetic", "infdds+synthetic"],
                eval_max_queries=100, eval_max_docs=500),
    # the scale of benchmarks/bench_coco.py --preset medium (COCO's +0.026 nDCG@10 there), every candidate
    "medium": dict(max_steps=300, batch_size=32, learning_rate=5e-5, query_max_length=8, doc_max_length=24,
                   max_collection_size=1500, num_negatives=0, max_docs=1500, dev_queries=100, test_queries=100,
                   coco=dict(max_steps=100, batch_size=32, learning_rate=5e-5, max_documents=300, span_max_length=24),
                   stage1=dict(max_steps=100), influence=dict(subset_size=4), audit=dict(budget_steps=100),
                   candidates=["uniform", "uniform+synthetic", "size+synthetic", "tdro:reweight+synthetic",
                               "tdro:top:0.7+synthetic", "infdds+synthetic"],
                   eval_max_queries=100, eval_max_docs=800),
    # one 10-minute command on one H100 for two BEIR-sized targets (drmix adapt --preset gpu --estimate); the
    # pseudo-queries of at most 20,000 documents a corpus (all of a BEIR-sized target's) keep the synthetic set's
    # size and its round-trip search bounded on a corpus of millions
    "gpu": dict(max_steps=400, batch_size=64, learning_rate=2e-5, query_max_length=64, doc_max_length=256,
                max_collection_size=None, num_negatives=1, max_docs=20_000, dev_queries=300, test_queries=300,
                coco=dict(max_steps=400, batch_size=128, learning_rate=1e-4, span_max_length=128),
                stage1=dict(max_steps=150), audit=dict(budget_steps=150),
                candidates=["uniform", "uniform+synthetic", "size+synthetic", "tdro:reweight+synthetic",
                            "tdro:top:0.7+synthetic", "infdds+synthetic"],
                eval_max_queries=None, eval_max_docs=None),
}



AdaptRun = PipelineRun.variant("AdaptRun", output_dir=("runs/adapt", "Root directory; each stage writes a subdirectory, "
                                                                   "the adapted model is model/."))


class AdaptTarget(Part):
    """The target corpora and the preset."""

    title: ClassVar[str] = "Target corpora"

    corpus: list[str] = setting(default_factory=list, role=INPUT, description="Target corpora: BEIR directories or "
                                "corpus .jsonl files; only the corpus is read (never queries or qrels).")
    preset: Literal["cpu", "medium", "gpu"] | None = setting(
        None, role=OPERATIONAL, description="Fill every setting the preset names that is not given: cpu (minutes, a "
                                            "smoke run), medium (the measured CPU scale of docs/adapt.md), gpu (one "
                                            "10-minute command on one H100); see docs/adapt.md.")


class SyntheticOptions(Part):
    """How the synthetic train / dev / test set is made from the corpora."""

    title: ClassVar[str] = "Synthetic dev/test (from the corpus alone)"

    max_docs: int | None = setting(1000, ge=1, description="Documents sampled per corpus as sources of cropped-"
                                                          "sentence queries (seeded; none = all).")
    min_words: int = setting(4, ge=1, description="Shortest sentence kept as a cropped query, in words.")
    max_per_doc: int | None = setting(1, ge=1, description="Cropped queries per sampled document at most.")
    teacher: str | None = setting(None, role=INPUT, description="Retriever of the round-trip filter, of the synthetic "
                                  "train set's hard negatives and of tDRO's missing negatives (default: the bundled "
                                  "all-MiniLM-L6-v2).")
    filter_k: int = setting(3, ge=1, description="Keep a pseudo-query only when the teacher retrieves its source "
                                                 "passage in its top k from the whole corpus.")
    negative_ranks: str = setting("30:50", description="Teacher ranks that become hard negatives of the synthetic "
                                                       "train queries (DRAMA's 30:50).")
    dev_queries: int = setting(100, ge=1, description="Synthetic dev queries per corpus (whole passages: none shared "
                                                      "with another split).")
    test_queries: int = setting(100, ge=1, description="Synthetic test queries per corpus.")
    llm: str | None = setting(None, role=INPUT, description="Also generate queries with an LLM: smollm2 (the packaged "
                              "GGUF), a model folder, .gguf file or hub id, or an OpenAI-compatible endpoint "
                              "http(s)://HOST/v1 (then --llm-model names the served model).")
    llm_model: str | None = setting(None, description="The served model name at an --llm endpoint.")
    llm_options: dict[str, Any] = setting(default_factory=dict, role=OPERATIONAL, description="More LLM options "
                                          "(timeout, max_retries, concurrency, batch_size, device, api_key_env; "
                                          "docs/llm.md).")
    generate_max_docs: int = setting(200, ge=1, description="Sampled documents per corpus the LLM writes a query "
                                                            "for (with --llm).")

    @field_validator("negative_ranks")
    @classmethod
    def _window(cls, v: str) -> str:
        from drmix.augment.mine import RankWindow

        try:
            return str(RankWindow.parse(v))
        except ConfigError as e:
            raise ValueError(e.message) from None

    @field_validator("llm_options")
    @classmethod
    def _llm_options(cls, v: dict[str, Any]) -> dict[str, Any]:
        from drmix.llm.factory import LLMConfig

        bad = sorted(set(v) - (set(LLMConfig.model_fields) - {"backend", "model", "base_url"}))
        if bad:
            raise ValueError(f"unknown LLM option {bad[0]!r} (use timeout, max_retries, concurrency, batch_size, "
                             "device, api_key_env; --llm and --llm-model name the model)")
        return v


class AdaptEval(Part):
    """The labelled evaluation, read only for the final table, and the caps of every evaluation."""

    title: ClassVar[str] = "Final evaluation (labelled; read only for the final table)"

    eval_data: list[str] = setting(default_factory=list, role=INPUT, description="Labelled BEIR directories of the "
                                   "targets, opened only after every choice is made: the final table and Kendall's "
                                   "tau of the candidates' rankings.")
    eval_split: str = setting("test", description="Qrels split of --eval-data.")
    eval_max_queries: int | None = setting(None, ge=1, description="Cap on labelled queries per dataset (a seeded "
                                                                   "sample, the same for every training seed).")
    eval_max_docs: int | None = setting(None, ge=1, description="Cap on the corpus of every evaluation, synthetic and "
                                                                "labelled (judged documents kept).")
    query_instructions: dict[str, str] = setting(default_factory=dict, description="Query instruction per dataset "
                                                 "name, used by every evaluation (see docs/llm.md).")


class AdaptIndex(Part):
    """The index of the target corpora the run ends with, built by the adapted model through ``drmix index``'s
    backends (:mod:`drmix.retrieval.backends`)."""

    title: ClassVar[str] = "Index of the adapted model (drmix search)"

    index: bool = setting(True, description="End with every target corpus indexed by the adapted model "
                                            "(output_dir/index/<corpus>, or a Milvus collection per corpus), "
                                            "searchable with drmix search --index; --no-index skips it.")
    index_backend: str = setting(DEFAULT_BACKEND, description="Index backend, as drmix index --backend: memory (a "
                                 "folder loaded into RAM, exact search), faiss-disk (on-disk IVF lists) or milvus "
                                 "(a collection per corpus at --index-uri).")
    index_uri: str | None = setting(None, description="milvus: the Milvus Lite file (PATH.db, created when missing) "
                                                      "or server (http://HOST:19530) holding one collection per "
                                                      "corpus, as drmix index --uri.")

    @field_validator("index_backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        from drmix.retrieval.backends import backend

        try:
            return backend(v).name
        except ConfigError as e:
            raise ValueError(f"{e.message} ({e.fix})") from None

    @model_validator(mode="after")
    def _target(self) -> "AdaptIndex":
        from drmix.retrieval.backends import check_target

        if self.index:
            try:
                check_target(self.index_backend, uri=self.index_uri, uri_flag="--index-uri",
                             backend_flag="--index-backend")
            except ConfigError as e:
                raise ValueError(f"{e.message} ({e.fix})") from None
        return self


def index_fields() -> list[str]:
    """Fields (flat names) the index stage depends on besides the adapted model: the corpora and the backend."""
    return ["corpus", "index_backend", "index_uri"]


class AdaptStages(Part):
    """The candidate mixtures and the overrides of the stages that are not fine-tunings."""

    title: ClassVar[str] = "Candidates (chosen on the synthetic dev)"

    candidates: list[str] = setting(
        default_factory=lambda: ["uniform", "uniform+synthetic", "size+synthetic", "tdro:reweight+synthetic",
                                 "infdds+synthetic"],
        description="Mixtures fine-tuned from the COCO model, one chosen on the synthetic dev: uniform | size | "
                    "temperature | tdro:TRANSFER | infdds | audit (the weights drmix mixture audit recommends, "
                    "measured on the synthetic dev), each with an optional +synthetic (the synthetic train "
                    "collections join --data); uniform is always one.")
    coco: dict[str, Any] = setting(default_factory=dict, description="Overrides of COCO fields (max_steps, batch_size, "
                                   "learning_rate, span_max_length, max_documents, ...).")
    stage1: dict[str, Any] = setting(default_factory=dict, description="Overrides of training fields for tDRO's "
                                     "stage 1 (e.g. max_steps).")
    audit: dict[str, Any] = setting(default_factory=dict, description="Options of the audit candidate's mixture "
                                    "audit, fields of drmix mixture audit's Audit part (default budget_steps=100, "
                                    "seeds=1, signals=infdds,gradalign, dev_max_docs=--select-max-docs; the presets "
                                    "set budget_steps 20 / 100 / 150).")
    select_max_docs: int | None = setting(
        SELECT_MAX_DOCS, ge=1, description="Documents per corpus the candidates are compared on (the synthetic dev): "
                                           "the dev queries' source passages plus a seeded sample of the rest "
                                           "(none = the whole corpus; --eval-max-docs, when smaller, wins). The "
                                           "final evaluation is not capped by it.")

    @field_validator("candidates")
    @classmethod
    def _candidates(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one candidate (uniform is always one)")
        return [parse_candidate(s).label for s in v]


class AdaptLabels(Part):
    """A few labelled queries of the targets, when the user has them: the choice among the candidates is made on
    them instead of, or beside, the synthetic dev (never read by training or by the final evaluation)."""

    title: ClassVar[str] = "A few labels (the choice only)"

    dev_labels: list[str] = setting(default_factory=list, role=INPUT, description="Labelled dev queries of the "
                                    "targets (say 20-50 a corpus), one per --corpus: a folder with queries.jsonl and "
                                    "qrels/<--dev-labels-split>.tsv (its corpus, if any, is not read: the doc ids "
                                    "are the --corpus ones), or a qrels .tsv with queries.jsonl in its folder or the "
                                    "one above; matched to --corpus by folder name, else in --corpus order.")
    dev_labels_split: str = setting("dev", description="Qrels split of a --dev-labels folder (qrels/<split>.tsv).")
    select_on: Literal["synthetic", "labels", "both"] | None = setting(
        None, description="What the candidate is chosen on: synthetic (the synthetic dev), labels (--dev-labels) or "
                          "both (the mean of the two nDCG@10 averages); default labels with --dev-labels, else "
                          "synthetic.")

    @model_validator(mode="after")
    def _labels_given(self) -> "AdaptLabels":
        if self.select_on in ("labels", "both") and not self.dev_labels:
            raise ValueError(f"select_on {self.select_on!r} needs labelled dev queries: pass --dev-labels (or "
                             "--select-on synthetic)")
        return self

    @property
    def choice(self) -> str:
        """What the choice is made on, the default resolved."""
        return self.select_on or ("labels" if self.dev_labels else "synthetic")


#: the training fields drmix adapt does not carry: why, and what to do instead
ADAPT_LEFT_OUT: dict[str, tuple[str, str]] = {
    **RECIPE_LEFT_OUT,
    **dict.fromkeys(("mixture", "mixture_temperature", "weights_file", "transfer", "strategy"), (
        "every fine-tuning's mixture is one of --candidates, chosen on the synthetic dev", "list the mixtures to "
        "compare with --candidates (e.g. --candidates uniform --candidates tdro:reweight).")),
    "reference_model": ("tDRO's stage 1 measures against the uniform fine-tuning of the COCO model the recipe "
                        "trains", "drop it."),
    **dict.fromkeys(("dev", "dev_split"), ("the candidates are chosen, and Inf-DDS rewarded, on the synthetic dev "
                                           "built from --corpus (or on --dev-labels)",
                                           "drop it; labelled dev queries of the targets go to --dev-labels.")),
    **dict.fromkeys(("eval_every", "evaluator"), ("no fine-tuning evaluates while it trains (--eval-data is read "
                                                  "only for the final table)", "drop it.")),
    **dict.fromkeys(("idro", "strategy_options"), ("no candidate trains with a strategy that reads it (tDRO's "
                                                   "options are --dro, Inf-DDS's --influence)", "drop it.")),
}


class AdaptConfig(TrainingParts):
    """``drmix adapt``: the training parts (shared by every fine-tuning and, through ``coco``, the COCO stage),
    the target corpora, the synthetic set, the candidates and the labelled final evaluation. Every stage's config
    is composed from these parts (:func:`plan_adapt`); the training fields it leaves out are refused when given
    (``left_out``), the strategies' options and the ``coco`` / ``stage1`` overrides are checked by their typed
    models when the config is made (``audit`` by the audit's own part)."""

    command: ClassVar[str] = "drmix adapt"
    narrows: ClassVar[type[Config] | None] = TrainConfig
    left_out: ClassVar[dict[str, tuple[str, str]]] = ADAPT_LEFT_OUT

    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: AdaptEval = Field(default_factory=AdaptEval)
    run: AdaptRun = Field(default_factory=AdaptRun)  # type: ignore[valid-type]
    target: AdaptTarget = Field(default_factory=AdaptTarget)
    synthetic: SyntheticOptions = Field(default_factory=SyntheticOptions)
    stages: AdaptStages = Field(default_factory=AdaptStages)
    labels: AdaptLabels = Field(default_factory=AdaptLabels)
    dro: dict[str, Any] = setting(default_factory=dict, aliases=("tdro",),
                                  description="Options of tDRO's stage 1 (see docs/mixture.md).")
    influence: dict[str, Any] = setting(default_factory=dict, aliases=("infdds",),
                                        description="Options of the Inf-DDS candidate (see docs/influence.md).")
    search: AdaptIndex = Field(default_factory=AdaptIndex)

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        """The preset's values for every field it names that is not given (grouped or flat)."""
        if not isinstance(data, Mapping):
            return data
        nested = cls.nest(data)
        target = nested.get("target")
        preset = target.get("preset") if isinstance(target, Mapping) else getattr(target, "preset", None)
        if preset not in PRESETS:
            return nested
        fields = cls.flat_fields()
        for flat, value in PRESETS[preset].items():
            f = fields[flat]
            if f.group is None:
                nested.setdefault(flat, copy.deepcopy(value))
                continue
            part = nested.setdefault(f.group, {})
            if isinstance(part, Part):
                part = nested[f.group] = part.model_dump(exclude_unset=True)
            part.setdefault(f.name, copy.deepcopy(value))
        return nested

    @model_validator(mode="after")
    def _typed(self) -> "AdaptConfig":
        from drmix.pretrain.runner import CocoConfig
        from drmix.recipes.options import check_options, check_override

        check_options(self)
        check_override(lambda: CocoConfig.model_validate(self.stages.coco), "--coco", CocoConfig)
        check_override(lambda: TrainConfig.model_validate(self.stages.stage1), "--stage1", TrainConfig)
        check_audit_options(self.stages.audit)
        return self


def check_audit_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """``--audit KEY=VALUE`` checked by the audit's own part (:class:`~drmix.recipes.audit.AuditOptions`): a key
    that is not one of its fields, or a bad value, is a :class:`ConfigError` naming it."""
    from drmix.config import format_validation
    from drmix.recipes.audit import AuditConfig, AuditOptions

    fix = "write --audit KEY=VALUE with a field of the Audit part of `drmix mixture audit --help` (e.g. budget_steps)."
    unknown = sorted(set(values) - set(AuditOptions.model_fields))
    if unknown:
        raise ConfigError(f"invalid --audit override {unknown[0]}: not an option of the audit (use "
                          f"{', '.join(AuditOptions.model_fields)}).", fix=fix)
    try:
        return AuditOptions.model_validate(dict(values)).model_dump()
    except ValidationError as e:
        raise ConfigError(f"invalid --audit override {format_validation(e, AuditConfig)}.", fix=fix) from None


def synthetic_fields() -> list[str]:
    """Fields (flat names) the synthetic set depends on: the corpora, every synthetic setting but the operational
    ones, and the seed."""
    fields = AdaptConfig.flat_fields()
    return ["corpus"] + [k for k, f in fields.items() if f.group == "synthetic" and f.role != OPERATIONAL] + ["seed"]


def select_max_docs(config: AdaptConfig) -> int | None:
    """The corpus cap of the selection on the synthetic dev: ``--select-max-docs``, or ``--eval-max-docs`` when
    that is smaller (it caps every evaluation)."""
    caps = [c for c in (config.stages.select_max_docs, config.eval.eval_max_docs) if c is not None]
    return min(caps) if caps else None
