"""The work of each kind of stage of ``drmix adapt`` and the estimate of the whole run (``--estimate``; the
progress lines are :mod:`drmix.recipes.progress`).

Each function gives one stage's work (:class:`~drmix.recipes.progress.StageWork`: training examples, passages
encoded, LLM calls, and the passages every rank of a torchrun launch encodes whole); the stage declares it in
:func:`drmix.recipes.adapt.stages.adapt_stages`. Hand-written, like benchmarks/_lease.py: no library estimates
a training script's time.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.recipes.adapt.config import AdaptConfig, select_max_docs
from drmix.recipes.progress import StageWork, estimate_rows, training_work
from drmix.recipes.throughput import MODEL, Rates, assumed

#: the encoder of the synthetic set's passes and of tDRO stage 1's mining: the teacher, at its own length
TEACHER = "teacher"

__all__ = ["TEACHER", "candidate_work", "coco_work", "estimate_device", "estimate_text", "final_work", "gpu_hours",
           "index_work", "labelled_selection_work", "machine_rates", "pseudo_queries", "selection_work",
           "stage1_work", "synthetic_work", "training_work"]   # training_work: a fine-tuning's (drmix.recipes.progress)


def pseudo_queries(config: AdaptConfig, sizes: Mapping[str, int]) -> int:
    """The cropped pseudo-queries the synthetic set writes at most (``--max-per-doc`` of ``--max-docs`` a corpus)."""
    s = config.synthetic
    return sum(min(n, s.max_docs or n) * (s.max_per_doc or 3) for n in sizes.values())


def synthetic_work(name: str, config: AdaptConfig, sizes: Mapping[str, int]) -> StageWork:
    """The teacher encodes every corpus and the pseudo-queries (each rank of a launch encodes the queries whole);
    with ``--llm`` one call a sampled document."""
    llm = len(sizes) * config.synthetic.generate_max_docs if config.synthetic.llm else 0
    queries = pseudo_queries(config, sizes)
    return StageWork(name, passages=sum(sizes.values()) + queries + llm, llm_calls=llm, unsharded=queries,
                     encoder=TEACHER)


def coco_work(name: str, coco: Any) -> StageWork:
    """COCO: a span pair counts as one example."""
    return StageWork(name, examples=coco.optim.max_steps * coco.contrastive.batch_size)


def stage1_work(name: str, config: AdaptConfig, stage1: TrainConfig) -> StageWork:
    """tDRO stage 1: seven negatives per query and the reference's forward pass; missing negatives mined once
    (every rank of a launch encodes the mining queries, half the passages, whole)."""
    passages = 2 * (config.data.max_collection_size or 2_000) * len(stage1.data.collections)
    return StageWork(name, examples=stage1.optim.max_steps * stage1.contrastive.batch_size * 4.5, passages=passages,
                     unsharded=passages / 2, encoder=TEACHER)


def candidate_work(name: str, config: AdaptConfig, scheme: str, cfg: TrainConfig, dev_sets: int) -> StageWork:
    """A candidate's fine-tuning; Inf-DDS adds its look-ahead steps and the scoring of ``dev_sets`` dev sets."""
    work = training_work(name, cfg).examples
    if scheme == "infdds":
        from drmix.mixture.influence.config import InfDDSConfig

        o = InfDDSConfig.model_validate(config.influence)
        updates = max(0, cfg.optim.max_steps - o.warmup_steps) // o.update_every
        k = o.subset_size or len(cfg.data.collections)
        bs = cfg.contrastive.batch_size
        work += updates * (k * o.lookahead_steps * (o.train_batch_size or bs)
                           + (k + 1) * dev_sets * (o.dev_batch_size or bs) / 3)
    return StageWork(name, examples=work)


def _capped(sizes: Mapping[str, int], cap: int | None, names: Any = None) -> int:
    return sum(min(n, cap or n) for name, n in sizes.items() if names is None or name in names)


def labelled_selection_work(name: str, config: AdaptConfig, sizes: Mapping[str, int], candidates: int,
                            labelled: Any) -> StageWork:
    """Every candidate on the labelled dev of the ``labelled`` corpora (the selection's sub-corpus)."""
    return StageWork(name, passages=candidates * _capped(sizes, select_max_docs(config), labelled))


def selection_work(name: str, config: AdaptConfig, sizes: Mapping[str, int], candidates: int) -> StageWork:
    """Every candidate on the synthetic dev's sub-corpus of each corpus."""
    return StageWork(name, passages=candidates * _capped(sizes, select_max_docs(config)))


def final_work(name: str, config: AdaptConfig, sizes: Mapping[str, int], candidates: int, parted: bool) -> StageWork:
    """The synthetic test: the report's four models (base, uniform fine-tuning, COCO -> uniform, adapted) and
    the candidate that parts the gain (``parted``); the labelled split: the base model, the baseline and every
    candidate (the report's others are cached among them)."""
    report = 4 + parted
    return StageWork(name, passages=(report + (candidates + 2) * bool(config.eval.eval_data))
                     * _capped(sizes, config.eval.eval_max_docs))


def index_work(name: str, sizes: Mapping[str, int]) -> StageWork:
    """Every target corpus encoded once more, by the adapted model."""
    return StageWork(name, passages=sum(sizes.values()))


def estimate_device(config: AdaptConfig) -> str:
    """The device the estimate is for: ``--device``, else cuda for ``--preset gpu`` or when a GPU is here."""
    if config.run.device:
        return "cuda" if str(config.run.device).startswith("cuda") else "cpu"
    if config.target.preset == "gpu":
        return "cuda"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def machine_rates(config: AdaptConfig, corpora: Mapping[str, str], passages: int = 64) -> Rates:
    """The rates of this run on this machine (:func:`drmix.recipes.throughput.measure`: seconds): its model's
    training steps at its batch, lengths and negatives, its model's encoding at ``--doc-max-length`` and the
    teacher's at the teacher's own length (the synthetic set's and tDRO's mining passes), on the first
    ``passages`` passages of its first corpus; assumed, saying why, for a device that is not here."""
    from itertools import islice

    from drmix.data.beir import doc_text
    from drmix.data.corpus import corpus_file
    from drmix.io.read import iter_jsonl
    from drmix.recipes.throughput import measure

    first = corpus_file(next(iter(corpora.values())))
    texts = [doc_text(obj) for _, obj in islice(iter_jsonl(first), passages)]
    return measure(estimate_device(config), model=config.model.name_or_path, texts=texts,
                   batch_size=config.contrastive.batch_size, query_max_length=config.data.query_max_length,
                   doc_max_length=config.data.doc_max_length, num_negatives=config.contrastive.num_negatives,
                   encoders={TEACHER: (config.synthetic.teacher, None)})


def gpu_hours(work: list[StageWork], gpus: int, rates: Rates | None = None) -> tuple[float, float]:
    """(hours on one GPU, hours on ``gpus`` GPUs) of ``work`` at GPU ``rates`` (default: assumed). Over several
    GPUs (under ``torchrun --nproc-per-node N``) each stage is split evenly -- data-parallel training, the corpus
    passes in shards -- but for each stage's ``unsharded`` passages, which every GPU encodes whole: a lower bound,
    since the gradient all-reduce, the gather of sharded embeddings and the exact search on one device are not
    counted."""
    rates = rates or assumed("cuda")
    one = many = 0.0
    for w in work:
        whole = min(w.passages, w.unsharded) / rates.encoding(w.encoder).per_s
        seconds = rates.seconds(w)
        one += seconds
        many += (seconds - whole) / gpus + whole
    return one / 3600, many / 3600


def check_gpus(gpus: int) -> None:
    if gpus < 1:
        raise ConfigError(f"--estimate-gpus must be at least 1, got {gpus}.", fix="pass --estimate-gpus 8 (or 1).")


def estimate_text(config: AdaptConfig, work: list[StageWork], passages: int, rates: Rates, gpus: int = 8) -> str:
    """Markdown: every stage's work and estimated minutes at ``rates`` (each said measured or assumed), the total,
    and the hours of the whole run for ``passages`` target passages on one GPU and on ``gpus``
    (:func:`gpu_hours`: at ``rates`` when they were measured on a GPU here, else at the assumed GPU rates)."""
    check_gpus(gpus)
    lines = estimate_rows(work, rates)
    gpu = rates if rates.device == "cuda" else assumed("cuda")
    one, many = gpu_hours(work, gpus, gpu)
    model = gpu.encoding(MODEL)
    lines += ["", f"For {passages:,} target passages: {one:,.2f} h on one GPU, at least {many:,.2f} h on "
                  f"{gpus} GPUs (at {gpu.examples.per_s:,.0f} examples/s and {model.per_s:,.0f} passages/s a GPU, "
                  f"{'measured here' if gpu.measured else 'assumed'}; on {gpus} GPUs, under torchrun "
                  f"--nproc-per-node {gpus}, training is data-parallel and the corpus passes are split over the "
                  "GPUs, the pseudo-queries and mining queries are encoded whole by each)."]
    llm = sum(w.llm_calls for w in work)
    if llm:
        lines += ["", f"Plus {llm:,} LLM calls (not estimated: their speed is the LLM's)."]
    return "\n".join(lines) + "\n"
