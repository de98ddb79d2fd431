"""The DRAMA recipe on a target corpus
(DRAMA ("DRAMA: Diverse Augmentation from Large Language Models to Smaller Dense Retrievers", Ma et al.,
ACL 2025, arXiv:2502.18460), Sec. 3 and Fig. 1): augment -> train a
small student -> evaluate student vs teacher vs the untuned student, one table.

1. **augment** each target corpus (no labels needed): cropped-sentence queries mined by the teacher (ranks
   1-10 positives, 30-50 hard negatives); with an LLM configured (``generate: true``) also LLM-generated
   queries for ``generate_max_docs`` documents (a seeded sample across the corpus), mined the same way, and (``rerank: true``) the LLM's listwise
   rerank of their top-20 (top-1 positive, ranks 10-20 negatives). Files: ``augment/<corpus>-<kind>.jsonl``;
   LLM calls are cached in ``augment/llm-cache.jsonl``.
2. **student**: ``model`` (any SentenceTransformer), or, with ``prune_from`` set, a backbone pruned from a
   decoder LM by :mod:`drmix.model.prune` (``student-init/``), which is also the untuned student.
3. **train** the student on every augmented collection plus any ``data`` collections (labelled general-domain
   data, the paper's D_sft) (``train/``; all training fields apply, e.g. ``matryoshka_dims``,
   ``num_negatives`` -- the paper uses 7).
4. **evaluate** teacher, untuned student and trained student on ``test_data`` (BEIR directories), every metric
   at full size and at each of ``dims``; ``summary.md`` / ``summary.json`` hold the table.

Finished steps are skipped on a rerun (files present, training finished), so an interrupted run resumes.
Departures: the paper's teacher is an 8B LLM retriever and its LLM a 70B instruct model; here they are
whatever the user configures (the defaults, all-MiniLM-L6-v2 and SmolLM2-135M-Instruct, run on a laptop).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from drmix.config import PipelineBaseConfig, TrainConfig, load_config
from drmix.errors import ConfigError
from drmix.io import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)


class DramaConfig(PipelineBaseConfig):
    """``drmix pipeline drama`` options: the training fields (the student's) plus the recipe's own."""

    output_dir: str = Field("runs/drama", description="Root directory of the recipe's files.")
    corpus: list[str] = Field(default_factory=list, description="Target corpora to augment: BEIR directories or "
                                                                "corpus .jsonl files (labels are not read).")
    teacher: str | None = Field(None, description="Teacher retriever that mines positives and negatives "
                                                  "(default: bundled all-MiniLM-L6-v2).")
    prune_from: str | None = Field(None, description="Build the student by pruning this causal LM (folder, hub id, "
                                                     ".gguf, or 'smollm2' for the packaged one) instead of --model.")
    prune_layers: str | None = Field(None, description="Layers the pruned student keeps (0-based, e.g. 0,10,20,29).")
    prune_keep_layers: int | None = Field(6, ge=1, description="Or: how many layers to keep, first and last "
                                                               "included, the rest evenly spaced.")
    prune_mlp_keep: int | None = Field(None, ge=1, description="Narrow the pruned MLPs to this many channels.")
    max_docs: int | None = Field(None, ge=1, description="Documents sampled per corpus for augmentation (seeded).")
    min_words: int = Field(4, ge=1, description="Shortest sentence kept as a cropped query, in words.")
    max_per_doc: int | None = Field(2, ge=1, description="Cropped queries per document at most (seeded sample).")
    max_queries: int | None = Field(None, ge=1, description="Cropped queries per corpus at most (seeded sample).")
    positive_ranks: str = Field("1:10", description="Teacher ranks that become positives (1-based, inclusive).")
    negative_ranks: str = Field("30:50", description="Teacher ranks that become hard negatives.")
    generate: bool = Field(False, description="Also generate queries with the LLM (see llm).")
    generate_max_docs: int = Field(100, ge=1, description="Documents per corpus given to the LLM.")
    rerank: bool = Field(False, description="Also rerank the generated queries' top-20 with the LLM.")
    llm: dict[str, Any] = Field(default_factory=dict, description="LLM backend options (backend, model, base_url, "
                                                                  "timeout, ...; see docs/drama.md).")
    dims: list[int] = Field(default_factory=list, description="Also evaluate at these truncated sizes.")
    # DRAMA's student (Sec. 3.2, Table 4): a pruned decoder, bidirectional, mean pooling, every weight trained
    pooling: Literal["lasttoken", "mean", "cls"] | None = Field("mean", description="Pooling of the student (DRAMA: mean).")
    bidirectional: bool = Field(True, description="Bidirectional attention in a decoder student (DRAMA: on; encoders are bidirectional anyway).")
    lora_r: int | None = Field(0, ge=0, description="LoRA rank of the student (DRAMA trains every weight: 0).")

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


def _corpus_of(path: str) -> tuple[str, dict[str, dict[str, str]]]:
    from drmix.data.beir import read_corpus

    p = Path(path).expanduser()
    f = p / "corpus.jsonl" if p.is_dir() else p
    return (p.name if p.is_dir() else p.stem), read_corpus(f)


def _sample(ids: list[str], n: int | None, seed: int) -> list[str]:
    import numpy as np

    if n is None or len(ids) <= n:
        return ids
    keep = np.sort(np.random.default_rng(seed).choice(len(ids), size=n, replace=False))
    return [ids[i] for i in keep]


def generation_ids(ids: list[str], n: int, seed: int) -> list[str]:
    """The documents given to the LLM: a seeded sample of ``n`` spread over all of ``ids`` (not its head).

    ``ids`` is already a sorted sample of the corpus, so its first ``n`` would be the documents with the
    smallest ids; a second seeded draw (its own stream) spreads the generated queries over the corpus.
    """
    return _sample(ids, n, seed + 7907)


def augment_corpus(name: str, corpus: dict[str, dict[str, str]], teacher: Any, cfg: DramaConfig, out: Path,
                   backend: Any = None) -> dict[str, Any]:
    """Write this corpus's augmented collections into ``out``; returns the files and counts."""
    from drmix.augment.crop import crop_queries
    from drmix.augment.examples import mine_examples, rerank_examples, write_collection
    from drmix.augment.generate import GenerationStats, document_texts, generate_queries
    from drmix.augment.rerank import RerankStats
    from drmix.data.beir import doc_text
    from drmix.llm.runstats import failure_line, llm_stats

    texts = {d: doc_text(doc) for d, doc in corpus.items()}
    ids = _sample(list(corpus), cfg.max_docs, cfg.seed)
    info: dict[str, Any] = {"documents": len(ids)}
    crop_file = out / f"{name}-crop.jsonl"
    if not crop_file.exists():
        queries = crop_queries({d: corpus[d] for d in ids}, min_words=cfg.min_words, max_per_doc=cfg.max_per_doc,
                               seed=cfg.seed)
        queries = [queries[i] for i in map(int, _sample([str(i) for i in range(len(queries))], cfg.max_queries,
                                                         cfg.seed))]
        rows = [{"query": q.query, "augment": "crop", "source_doc": q.doc_id, "sentence": q.sentence} for q in queries]
        mined, counts = mine_examples(rows, texts, teacher, positives=cfg.positive_ranks,
                                      negatives=cfg.negative_ranks, teacher_name=cfg.teacher or "default")
        write_collection(crop_file, mined)
        info["crop"] = dict(counts)
    info["files"] = [str(crop_file)]
    if cfg.generate:
        gen_file = out / f"{name}-generate.jsonl"
        gen_ids = generation_ids(ids, cfg.generate_max_docs, cfg.seed)
        if not gen_file.exists():
            stats = GenerationStats()
            with llm_stats(out / f"{name}-generate.stats.json", stats) as stats_path:  # on every exit path
                rows, _ = generate_queries(document_texts(corpus, gen_ids), backend, stats=stats)
            info["generate"] = stats.as_dict()
            rows = [{"query": r["query"], "augment": "generate", "source_doc": r["doc_id"], "llm": backend.describe()}
                    for r in rows]
            mined, counts = mine_examples(rows, texts, teacher, positives=cfg.positive_ranks,
                                          negatives=cfg.negative_ranks, teacher_name=cfg.teacher or "default")
            write_collection(gen_file, mined, why=failure_line(stats, stats_path) + f"; outcomes "
                             f"{dict(stats.outcomes)}, mining {dict(counts)}. Check the endpoint or llm.timeout")
            if cfg.rerank:
                rstats = RerankStats()
                with llm_stats(out / f"{name}-rerank.stats.json", rstats):
                    rr, _ = rerank_examples(mined, texts, backend, stats=rstats)
                info["rerank"] = rstats.as_dict()
                write_collection(out / f"{name}-rerank.jsonl", rr, why=failure_line(rstats, out / f"{name}-rerank"
                                 f".stats.json") + f"; outcomes {dict(rstats.outcomes)}")
        info["files"].append(str(gen_file))
        if cfg.rerank and (out / f"{name}-rerank.jsonl").exists():
            info["files"].append(str(out / f"{name}-rerank.jsonl"))
    return info


def _student_init(cfg: DramaConfig, root: Path) -> str:
    if cfg.prune_from is None:
        return cfg.model or "default"
    from drmix.model.prune import prune_to_sentence_transformer

    out = root / "student-init"
    if not (out / "modules.json").exists():
        src = None if cfg.prune_from.lower() in ("smollm2", "default") else cfg.prune_from
        prune_to_sentence_transformer(src, out, layers=cfg.prune_layers,
                                      keep_layers=None if cfg.prune_layers else cfg.prune_keep_layers,
                                      mlp_keep=cfg.prune_mlp_keep, max_seq_length=cfg.doc_max_length)
    return str(out)


def evaluate_labelled(models: dict[str, str], cfg: DramaConfig, root: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{label: {dataset: {metric: value}}}``, cached per label in ``eval/<label>.json``."""
    from drmix.data.beir import load_beir
    from drmix.evaluation.evaluate import dataset_names, evaluate_dataset, subsample
    from drmix.model.encoder import load_encoder

    key = {"data": [str(Path(d).resolve()) for d in cfg.test_data], "split": cfg.test_split,
           "max_queries": cfg.test_max_queries, "max_docs": cfg.test_max_docs, "dims": cfg.dims, "seed": cfg.seed,
           "max_length": cfg.doc_max_length}
    data = None
    results: dict[str, dict[str, dict[str, float]]] = {}
    for label, path in models.items():
        cache = root / "eval" / f"{label}.json"
        if cache.exists():
            cached = json.loads(cache.read_text(encoding="utf-8"))
            if cached.get("key") == {**key, "model": path}:
                results[label] = cached["results"]
                continue
        if data is None:
            data = {n: subsample(load_beir(d, cfg.test_split), max_queries=cfg.test_max_queries,
                                 max_docs=cfg.test_max_docs, seed=cfg.seed)
                    for n, d in zip(dataset_names(cfg.test_data), cfg.test_data)}
        model = load_encoder(None if path == "default" else path)
        results[label] = {n: evaluate_dataset(model, ds, dims=tuple(cfg.dims), max_length=cfg.doc_max_length,
                                              query_instructions=cfg.query_instructions)
                          for n, ds in data.items()}
        atomic_write_json(cache, {"key": {**key, "model": path}, "results": results[label]})
    return results


def summary_table(results: dict[str, dict[str, dict[str, float]]], metrics: list[str]) -> str:
    """Markdown: one row per (dataset, metric), one column per model, the student's share of the teacher."""
    labels = list(results)
    datasets = list(dict.fromkeys(d for r in results.values() for d in r))
    lines = ["| dataset | metric | " + " | ".join(labels) + " | student / teacher |",
             "|---|---|" + "---:|" * (len(labels) + 1)]
    for d in datasets:
        for m in metrics:
            vals = [results[lb].get(d, {}).get(m) for lb in labels]
            if all(v is None for v in vals):
                continue
            t, s = results.get("teacher", {}).get(d, {}).get(m), results.get("student", {}).get(d, {}).get(m)
            share = f"{s / t:.1%}" if t and s is not None else ""
            lines.append(f"| {d} | {m} | " + " | ".join("" if v is None else f"{v:.4f}" for v in vals)
                         + f" | {share} |")
    return "\n".join(lines) + "\n"


def run_drama_pipeline(cfg: DramaConfig) -> dict[str, Any]:
    """Run the recipe (see the module docstring); returns the summary dictionary."""
    from drmix.model.backbone import BackboneOptions
    from drmix.model.encoder import load_encoder
    from drmix.train.trainer import train

    if not cfg.corpus:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR (a BEIR directory or corpus.jsonl).")
    root = Path(cfg.output_dir)
    aug = root / "augment"
    aug.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / "drama.yaml", cfg.dump_yaml())
    teacher = load_encoder(cfg.teacher, model_kwargs=BackboneOptions.from_config(cfg).model_kwargs())
    backend = None
    if cfg.generate or cfg.rerank:
        from drmix.llm.factory import LLMConfig, build_backend

        backend = build_backend(LLMConfig.model_validate(cfg.llm), cache_path=aug / "llm-cache.jsonl")
    augment: dict[str, Any] = {}
    files: list[str] = []
    for path in cfg.corpus:
        name, corpus = _corpus_of(path)
        augment[name] = augment_corpus(name, corpus, teacher, cfg, aug, backend)
        files += augment[name]["files"]
    del teacher
    student0 = _student_init(cfg, root)
    train_dir = root / "train"
    if not (train_dir / "model" / "modules.json").exists():
        tcfg = TrainConfig.model_validate({**cfg.model_dump(include=set(TrainConfig.model_fields)),
                                           "model": student0, "data": files + list(cfg.data),
                                           "output_dir": str(train_dir),
                                           "resume": True})
        train(tcfg)
    models = {"teacher": cfg.teacher or "default", "untuned": student0, "student": str(train_dir / "model")}
    summary: dict[str, Any] = {"augment": augment, "models": models}
    if cfg.test_data:
        from drmix.evaluation.matryoshka import dim_suffix

        results = evaluate_labelled(models, cfg, root)
        metrics = ["ndcg@10"] + [dim_suffix("ndcg@10", d) for d in cfg.dims] + ["recall@100"]
        summary["results"] = results
        summary["table"] = summary_table(results, metrics)
        atomic_write_text(root / "summary.md", "# DRAMA recipe\n\n" + summary["table"])
    atomic_write_json(root / "summary.json", summary)
    return summary


def load_drama_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> DramaConfig:
    return load_config(DramaConfig, path, overrides)
