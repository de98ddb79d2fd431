"""The work of every stage of ``drmix adapt`` and its estimated time (``--estimate``; the progress lines are
:mod:`drmix.recipes.progress`)."""
from __future__ import annotations

from collections.abc import Mapping

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.recipes.adapt.config import AdaptConfig
from drmix.recipes.adapt.plan import AdaptPlan, _corpus_name, plan_adapt
from drmix.recipes.progress import ASSUMED_RATES, Progress, StageWork, estimate_rows

__all__ = ["ASSUMED_RATES", "Progress", "StageWork", "estimate_device", "estimate_table", "gpu_hours",
           "plan_work", "select_max_docs", "unsharded_passages"]


def select_max_docs(config: AdaptConfig) -> int | None:
    """The corpus cap of the selection on the synthetic dev: ``--select-max-docs``, or ``--eval-max-docs`` when
    that is smaller (it caps every evaluation)."""
    caps = [c for c in (config.stages.select_max_docs, config.eval.eval_max_docs) if c is not None]
    return min(caps) if caps else None


def _corpus_sizes(config: AdaptConfig) -> dict[str, int]:
    from drmix.pretrain.coco import corpus_file

    out = {}
    for p in config.target.corpus:
        with open(corpus_file(p), "rb") as f:
            out[_corpus_name(p)] = sum(1 for line in f if line.strip())
    return out


def _pseudo_queries(config: AdaptConfig, sizes: Mapping[str, int]) -> int:
    """The cropped pseudo-queries the synthetic set writes at most (``--max-per-doc`` of ``--max-docs`` a corpus)."""
    s = config.synthetic
    return sum(min(n, s.max_docs or n) * (s.max_per_doc or 3) for n in sizes.values())


def plan_work(config: AdaptConfig, plan: AdaptPlan | None = None,
              sizes: Mapping[str, int] | None = None) -> list[StageWork]:
    """The work of every stage, in the order they run (the estimate's input; hand-written, like
    benchmarks/_lease.py: no library estimates a training script's time). ``sizes``: documents per corpus, when
    already counted."""
    plan = plan or plan_adapt(config)
    sizes = sizes if sizes is not None else _corpus_sizes(config)
    s = config.synthetic
    n_corpus = sum(sizes.values())
    queries = _pseudo_queries(config, sizes)
    llm = len(sizes) * s.generate_max_docs if s.llm else 0
    cap = config.eval.eval_max_docs
    eval_docs = sum(min(n, cap or n) for n in sizes.values())
    select_docs = sum(min(n, select_max_docs(config) or n) for n in sizes.values())
    out = [StageWork("synthetic set", passages=n_corpus + queries + llm, llm_calls=llm),
           StageWork("COCO", examples=plan.coco.optim.max_steps * plan.coco.contrastive.batch_size)]

    def fine_tune(cfg: TrainConfig) -> float:
        return cfg.optim.max_steps * cfg.contrastive.batch_size * (1 + cfg.contrastive.num_negatives / 2)

    out.append(StageWork("uniform fine-tuning", examples=fine_tune(plan.baseline)))
    done_stage1: set[bool] = set()
    for label, (c, cfg) in plan.candidates.items():
        if c.scheme == "tdro" and c.synthetic not in done_stage1:
            s1 = plan.stage1[c.synthetic]
            # seven negatives per query and the reference's forward pass; missing negatives mined once
            out.append(StageWork(f"tDRO stage 1{' (+synthetic)' if c.synthetic else ''}",
                                 examples=s1.optim.max_steps * s1.contrastive.batch_size * 4.5,
                                 passages=2 * (config.data.max_collection_size or 2_000) * len(s1.data.collections)))
            done_stage1.add(c.synthetic)
        work = fine_tune(cfg)
        if c.scheme == "infdds":
            from drmix.mixture.influence.config import InfDDSConfig

            o = InfDDSConfig.model_validate(config.influence)
            updates = max(0, cfg.optim.max_steps - o.warmup_steps) // o.update_every
            k = o.subset_size or len(cfg.data.collections)
            bs = cfg.contrastive.batch_size
            work += updates * (k * o.lookahead_steps * (o.train_batch_size or bs)
                               + (k + 1) * len(plan.synthetic_dirs) * (o.dev_batch_size or bs) / 3)
        out.append(StageWork(f"candidate {label}", examples=work))
    n_models = len(plan.candidates) + 2
    if plan.labels:    # --dev-labels: the folders written (no model work), every candidate on the labelled dev
        out += [StageWork("labelled dev"), StageWork("selection on labelled dev", passages=len(plan.candidates) * sum(
            min(sizes.get(n, 0), select_max_docs(config) or sizes.get(n, 0)) for n in plan.labels))]
    out.append(StageWork("selection on synthetic dev", passages=len(plan.candidates) * select_docs))
    # the synthetic test: the report's four models (base, uniform fine-tuning, COCO -> uniform, adapted); the
    # labelled split: the base model, the baseline and every candidate (the report's others are cached among them)
    report = 4 + ("uniform+synthetic" in plan.candidates)   # scored too: the report's first sentence parts by it
    out.append(StageWork("final evaluation", passages=(report + n_models * bool(config.eval.eval_data)) * eval_docs))
    if config.search.index:   # every target corpus encoded once more, by the adapted model
        from drmix.recipes.adapt.index import INDEX_TITLE

        out.append(StageWork(INDEX_TITLE, passages=n_corpus))
    return out


def estimate_device(config: AdaptConfig) -> str:
    """The device the estimate is for: ``--device``, else cuda for ``--preset gpu`` or when a GPU is here."""
    if config.run.device:
        return "cuda" if str(config.run.device).startswith("cuda") else "cpu"
    if config.target.preset == "gpu":
        return "cuda"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def unsharded_passages(config: AdaptConfig, work: list[StageWork], sizes: Mapping[str, int]) -> dict[str, float]:
    """Passages of each stage's ``work`` that every rank of a torchrun launch encodes whole: the synthetic set's
    pseudo-queries and the queries of tDRO stage 1's mining (half its passages). The corpus passes are split over
    the ranks (:mod:`drmix.recipes.adapt.launch`), training is data-parallel."""
    out = {"synthetic set": float(_pseudo_queries(config, sizes))}
    out.update({w.name: w.passages / 2 for w in work if w.name.startswith("tDRO stage 1")})
    return out


def gpu_hours(work: list[StageWork], gpus: int, unsharded: Mapping[str, float] | None = None) -> tuple[float, float]:
    """(hours on one GPU, hours on ``gpus`` GPUs) of ``work`` at the assumed GPU rates. Over several GPUs (under
    ``torchrun --nproc-per-node N``) each stage is split evenly -- data-parallel training, the corpus passes in
    shards -- but for ``unsharded[stage]`` passages, which every GPU encodes whole (:func:`unsharded_passages`):
    a lower bound, since the gradient all-reduce, the gather of sharded embeddings and the exact search on one
    device are not counted."""
    rates = ASSUMED_RATES["cuda"]
    one = many = 0.0
    for w in work:
        whole = min(w.passages, (unsharded or {}).get(w.name, 0.0)) / rates[1]
        seconds = w.seconds(rates)
        one += seconds
        many += (seconds - whole) / gpus + whole
    return one / 3600, many / 3600


def estimate_table(config: AdaptConfig, gpus: int = 8) -> str:
    """Markdown: every stage's work and estimated minutes on the estimate's device, the total, and the hours of
    the whole run for this corpus on one GPU and on ``gpus`` (:func:`gpu_hours`)."""
    if gpus < 1:
        raise ConfigError(f"--estimate-gpus must be at least 1, got {gpus}.", fix="pass --estimate-gpus 8 (or 1).")
    sizes = _corpus_sizes(config)
    work = plan_work(config, sizes=sizes)
    device = estimate_device(config)
    lines = estimate_rows(work, device)
    one, many = gpu_hours(work, gpus, unsharded_passages(config, work, sizes))
    lines += ["", f"For {sum(sizes.values()):,} target passages: {one:,.2f} h on one GPU, at least {many:,.2f} h on "
                  f"{gpus} GPUs (at {ASSUMED_RATES['cuda'][0]:,.0f} examples/s and {ASSUMED_RATES['cuda'][1]:,.0f} "
                  f"passages/s a GPU; on {gpus} GPUs, under torchrun --nproc-per-node {gpus}, training is "
                  "data-parallel and the corpus passes are split over the GPUs, the pseudo-queries and mining "
                  "queries are encoded whole by each)."]
    llm = sum(w.llm_calls for w in work)
    if llm:
        lines += ["", f"Plus {llm:,} LLM calls (not estimated: their speed is the LLM's)."]
    return "\n".join(lines) + "\n"
