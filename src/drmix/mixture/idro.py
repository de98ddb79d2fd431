"""iDRO: implicit distributionally robust optimisation over k-means query clusters (``--strategy idro``).

Specification: COCO-DR ("COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and
Distributionally Robust Learning", Yu et al., EMNLP 2022, arXiv:2210.15212), Sec. 4.2, Eqs. 5-12 and Appendix E,
implemented as the authors' code does it (github.com/OpenMatch/COCO-DR, ``ANCE/model/dro_loss.py``,
``iDROLoss.forward``; clustering in ``ANCE/drivers/run_ann_data_gen.py``, ``generate_new_ann``):

1. **clusters**: the training queries are embedded with the *current* model and clustered by k-means
   (``K = 50``; faiss, L2, 5 restarts of 500 iterations as the authors' ``faiss.Kmeans(dim, K, nredo=5,
   niter=500)``); the clusters are recomputed every ``refresh_every`` steps (the authors: whenever ANCE
   refreshes its negatives). A batch's queries go to the nearest centroid (a no-grad forward of the
   queries in eval mode). ``kmeans: spherical`` clusters by cosine instead.
2. **per-cluster losses** ``l_i``: the mean per-example loss of cluster ``i`` in the (global) batch.
3. **per-cluster gradients** ``g_i = grad l_i`` on the parameters of the **last 3 transformer layers**
   only, L2-normalised, so ``g_i . g_j`` is a cosine (``g_i = 0`` for a cluster absent from the batch).
   Under GradCache (``--grad-cache-chunk``) the loss sees detached embeddings; ``g_i`` is then computed from
   the cluster's representation gradients ``dl_i/dr``, back-propagated through each chunk's re-forward
   (``dl_i/dtheta = sum_c (dr_c/dtheta)^T dl_i/dr_c``), the same vector as without GradCache.
4. **weight update** (``rule: authors``, default): ``r_ij = cos(g_i, g_j) * (l_i l_j)^beta`` (beta = 0.25,
   Eq. 12), ``e_i = rho * (1/K) sum_j r_ij`` over **all K** clusters (absent ones contribute 0; rho = 0.05
   plays ``1/tau`` of Eq. 11), ``e_i = 0`` for absent clusters, ``e <- e - max(e)``;
   ``h <- h^0.1 * exp(e) * [i present]``, normalised to sum 1, then floored at 0.01 -- so a cluster absent
   from the batch drops to the floor. The weights start at 1 (``h = ones(K)``).
   ``rule: present`` is drmix's earlier rule, kept as an option: the mean over the clusters present only
   (an exponent ``K/|P|`` times larger), absent clusters keep ``h^0.1`` (exponent 0), weights start at ``1/K``.
5. **loss**: ``sum_i h_i l_i`` with the weights ``h`` of the *previous* step (the update of step 4 is
   used from the next batch on).

Where the code (followed) and the paper differ:

* Eq. 11 multiplies by the previous weights ``w^(t-1)`` (a KL proximal step); the code raises them to the
  power 0.1 (``power``), which lets the weights forget old batches quickly.
* Eq. 5 weights the loss by ``alpha_i w_i`` with ``alpha_i ∝ l_i^beta``; the code puts ``(l_i l_j)^beta``
  only inside ``r_ij`` and back-propagates ``sum_i h_i l_i``.
* Eq. 11 sums ``r_ij`` over ``j``; the code averages over the K clusters (a constant factor that rescales
  ``rho``) and subtracts the maximum exponent for numerical safety (no effect after normalising).
* The floor (0.01) is applied after normalising and the weights are not renormalised afterwards (as in
  the code), so they may sum to more than 1.

Under DDP (``scope: rank``, the default, as the authors' ``iDROLoss`` runs under DDP): each process counts its
own slice of the batch, takes its own cluster losses ``l_i`` and keeps its own weights ``h``; only the
per-cluster gradients are summed over the processes (``dist.all_reduce(all_grads)``) before they are normalised,
so every process sees the same cosines but a cluster absent from *its* slice drops to the floor there. Each
process back-propagates ``sum_i h_i l_i`` of its slice and DDP averages the gradients. ``scope: global`` (an
option, drmix's earlier rule) all-reduces the per-cluster loss sums and counts as well, so every process makes
the same update from the global batch and back-propagates ``world * sum_i h_i (local sum_i / global n_i)``,
which DDP's averaging turns into the gradient of ``sum_i h_i l_i`` over the global batch. On one process the
two are the same.

The base loss and its geometry are the training run's: the authors fine-tune ANCE, whose loss is a 2-way softmax
over the positive and one ANN negative on raw [CLS] dot products; drmix applies iDRO to whatever per-example
loss the run trains with (InfoNCE with the configured negatives, in-batch by default, on the model's own pooling
-- mean pooling for the default MiniLM -- and cosine / ``temperature``). ``--pooling cls --no-normalize
--temperature 1 --no-in-batch-negatives --num-negatives 1`` comes closest to ANCE's setting.
Sampling over collections stays as configured (uniform): iDRO acts on the loss only. With gradient
accumulation the weights are updated once per micro-batch (as the authors' loss is called per forward).
If the per-cluster gradients reach none of the last layers' parameters (no gradient signal), training stops
with a :class:`~drmix.errors.ConfigError` rather than keep the weights silently uniform.
The weights, centroids and cluster sizes are part of the checkpoint, so a resumed run continues exactly.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from drmix.data.batch import Batch
from drmix.device import broadcast
from drmix.errors import ConfigError
from drmix.mixture.base import StepContext, Strategy
from drmix.mixture.registry import StrategySpec, register_strategy
from drmix.papers import COCO

log = logging.getLogger(__name__)


class IDROConfig(BaseModel):
    """Options of ``--strategy idro`` (``--idro KEY=VALUE``); defaults are the authors'."""

    model_config = ConfigDict(extra="forbid")

    clusters: int = Field(50, ge=1, description="K of k-means over the training queries.")
    refresh_every: int = Field(1000, ge=0, description="Recompute the clusters every N steps (0 = only at start).")
    layers: int = Field(3, ge=1, description="Per-cluster gradients on the last N transformer layers.")
    beta: float = Field(0.25, ge=0, description="Loss exponent in r_ij = cos(g_i, g_j) (l_i l_j)^beta.")
    rho: float = Field(0.05, gt=0, description="Step size: exponent = rho * mean_j r_ij.")
    power: float = Field(0.1, ge=0, description="Previous weights enter as h^power (authors: 0.1).")
    floor: float = Field(0.01, ge=0, lt=1, description="Minimum cluster weight after normalising.")
    rule: Literal["authors", "present"] = Field(
        "authors", description="authors: mean of r_ij over all K, absent clusters to the floor, weights start at 1; "
                               "present: mean over the clusters present, absent ones keep h^power, start at 1/K.")
    scope: Literal["rank", "global"] = Field(
        "rank", description="Under several processes: rank = each process keeps its own counts, cluster losses and "
                            "weights from its own slice of the batch, only the per-cluster gradients are summed "
                            "(the authors' iDROLoss under DDP); global = counts, losses and gradients all-reduced, "
                            "one set of weights for the global batch.")
    kmeans: Literal["l2", "spherical"] = Field("l2", description="k-means metric (authors: L2).")
    kmeans_iterations: int = Field(500, ge=1, description="k-means iterations per restart (authors: 500).")
    kmeans_restarts: int = Field(5, ge=1, description="k-means restarts, the best kept (authors: faiss nredo=5).")
    max_queries: int | None = Field(None, ge=1, description="Cluster a seeded sample of at most this many queries.")
    encode_batch_size: int = Field(128, ge=1, description="Batch size when embedding queries for k-means.")


# ------------------------------------------------------------------------------------------- the update rule

def idro_update(h: np.ndarray, losses: np.ndarray, present: np.ndarray, cos: np.ndarray, *, beta: float = 0.25,
                rho: float = 0.05, power: float = 0.1, floor: float = 0.01,
                rule: str = "authors") -> tuple[np.ndarray, np.ndarray]:
    """One iDRO weight update (module docstring, step 4); returns ``(new_h, exponent)``.

    ``losses`` [K] per-cluster mean losses (ignored where not ``present``), ``cos`` [K, K] cosines of the
    per-cluster gradients (only entries between present clusters are read; absent clusters have ``g = 0``).
    """
    h = np.asarray(h, dtype=np.float64)
    present = np.asarray(present, dtype=bool)
    K = len(h)
    idx = np.flatnonzero(present)
    lp = np.zeros(K)
    lp[idx] = np.maximum(np.asarray(losses, dtype=np.float64)[idx], 0.0) ** beta
    c = np.zeros((K, K))
    c[np.ix_(idx, idx)] = np.asarray(cos, dtype=np.float64)[np.ix_(idx, idx)]
    r = c * np.outer(lp, lp)
    expo = np.zeros(K)
    if rule == "authors":
        expo = rho * r.mean(axis=0) * present
        expo = expo - expo.max()
        new = np.power(h, power) * np.exp(expo) * present
    else:
        if len(idx):
            expo[idx] = rho * r[np.ix_(idx, idx)].mean(axis=1)
        expo = expo - expo.max()
        new = np.power(h, power) * np.exp(expo)
    new = new / new.sum()
    return np.maximum(new, floor), expo


def last_layer_parameters(model: torch.nn.Module, n: int) -> list[torch.nn.Parameter]:
    """Trainable parameters of the last ``n`` blocks of the model's longest transformer layer list."""
    best = None
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and name.split(".")[-1] in ("layer", "layers", "h", "block", "blocks"):
            if best is None or len(mod) > len(best):
                best = mod
    if best is None or len(best) == 0:
        raise ConfigError("iDRO cannot find the transformer layers of the model.",
                          fix="use a BERT-like or decoder model (an encoder.layer / layers module list).")
    params = [p for blk in list(best)[-n:] for p in blk.parameters() if p.requires_grad]
    if not params:
        raise ConfigError("the last transformer layers have no trainable parameters.", fix="unfreeze them.")
    return params


def kmeans(x: np.ndarray, k: int, *, iterations: int = 500, restarts: int = 5, spherical: bool = False,
           seed: int = 0) -> np.ndarray:
    """k-means centroids ``[k, d]`` (faiss; L2 with ``restarts`` restarts as the authors, or spherical)."""
    import faiss

    x = np.ascontiguousarray(x, dtype=np.float32)
    if k > len(x):
        raise ConfigError(f"iDRO needs at least K={k} training queries to cluster, got {len(x)}.",
                          fix=f"use --idro clusters=N with N <= {len(x)}, or more training data.")
    km = faiss.Kmeans(x.shape[1], k, niter=iterations, nredo=restarts, seed=int(seed) % (2**31),
                      spherical=spherical, verbose=False, min_points_per_centroid=1,
                      max_points_per_centroid=max(256, math.ceil(len(x) / k)))
    km.train(x)
    return np.asarray(km.centroids, dtype=np.float32)


# ------------------------------------------------------------------------------------------------ strategy

class IDROStrategy(Strategy):
    """Reweights the loss over k-means query clusters by gradient similarity (see the module docstring)."""

    name = "idro"

    def __init__(self, config: IDROConfig | None = None, *, seed: int = 0) -> None:
        self.config = config or IDROConfig()
        self.seed = seed
        K = self.config.clusters
        self.h = np.ones(K) if self.config.rule == "authors" else np.full(K, 1.0 / K)
        self.centroids: np.ndarray | None = None
        self.cluster_sizes = np.zeros(K, dtype=np.int64)
        self.refreshes = 0
        self.last: dict[str, Any] = {}

    @property
    def weight_names(self) -> list[str]:
        return [f"cluster{i}" for i in range(self.config.clusters)]

    # -- clusters --------------------------------------------------------------------------------------
    def _embed(self, ctx: StepContext, texts: list[str]) -> np.ndarray:
        if ctx.encode_queries is None:
            raise ConfigError("iDRO needs a trainer that can embed queries (StepContext.encode_queries).",
                              fix="use drmix.api.train.")
        return ctx.encode_queries(texts, batch_size=self.config.encode_batch_size)

    def refresh(self, ctx: StepContext) -> None:
        """Re-cluster the training queries with the current model (rank 0 computes, every rank receives)."""
        if ctx.training_queries is None:
            raise ConfigError("iDRO needs the training queries (StepContext.training_queries).",
                              fix="use drmix.api.train.")
        queries = list(ctx.training_queries())
        K = self.config.clusters
        if K > len(queries):
            raise ConfigError(f"iDRO needs at least K={K} training queries, the collections hold {len(queries)}.",
                              fix=f"use --idro clusters=N with N <= {len(queries)}.")
        rng = np.random.default_rng([self.seed, self.refreshes, 4093])
        if self.config.max_queries and len(queries) > self.config.max_queries:
            pick = np.sort(rng.choice(len(queries), self.config.max_queries, replace=False))
            queries = [queries[i] for i in pick]
        emb = self._embed(ctx, queries)
        cent = kmeans(emb, K, iterations=self.config.kmeans_iterations, restarts=self.config.kmeans_restarts,
                      spherical=self.config.kmeans == "spherical", seed=self.seed + self.refreshes)
        if ctx.world_size > 1:
            cent = broadcast(torch.as_tensor(cent, device=ctx.device), src=0).cpu().numpy()
        self.centroids = cent
        self.cluster_sizes = np.bincount(self.assign(emb), minlength=K)
        self.refreshes += 1
        ctx.log({"step": ctx.step, "idro_refresh": self.refreshes, "queries": len(queries),
                 "cluster_sizes": self.cluster_sizes.tolist()})
        log.info("iDRO: %d clusters over %d queries (sizes %d..%d)", K, len(queries), self.cluster_sizes.min(),
                 self.cluster_sizes.max())

    def assign(self, emb: np.ndarray) -> np.ndarray:
        """Nearest centroid: L2 (the authors' ``IndexFlatL2`` search), or dot product for spherical k-means."""
        x = np.asarray(emb, np.float32)
        if self.config.kmeans == "spherical":
            return (x @ self.centroids.T).argmax(axis=1)
        d = (x * x).sum(1, keepdims=True) - 2 * x @ self.centroids.T + (self.centroids ** 2).sum(1)[None, :]
        return d.argmin(axis=1)

    # -- the loss -----------------------------------------------------------------------------------------
    def loss(self, losses: torch.Tensor, batch: Batch, ctx: StepContext) -> torch.Tensor:
        if self.centroids is None:
            self.refresh(ctx)
        K = self.config.clusters
        world = ctx.world_size
        per_rank = self.config.scope == "rank"
        ids = torch.as_tensor(self.assign(self._embed(ctx, batch.queries)), device=losses.device)
        local_sum = torch.zeros(K, device=losses.device, dtype=losses.dtype).index_add(0, ids, losses)
        local_counts = torch.bincount(ids, minlength=K).to(torch.float64)
        if per_rank:
            # the authors' iDROLoss under DDP: this process's counts and cluster losses, its own weights
            counts, sums = local_counts, local_sum.detach().to(torch.float64)
            anywhere = (ctx.all_reduce(local_counts.clone()) > 0).cpu().numpy()
        else:
            counts = ctx.all_reduce(local_counts.clone())
            sums = ctx.all_reduce(local_sum.detach().to(torch.float64))
            anywhere = (counts > 0).cpu().numpy()
        present = (counts > 0).cpu().numpy()
        cl_loss = (sums / counts.clamp(min=1)).cpu().numpy()
        denom = counts.clamp(min=1).to(losses.dtype)
        h_prev = torch.as_tensor(self.h, device=losses.device, dtype=losses.dtype)
        # global: world * sum_i h_i (local sum_i / global n_i), which DDP's averaging turns into the global loss;
        # rank: sum_i h_i (local mean_i), averaged over the processes by DDP as the authors' robust loss is
        loss = (h_prev * local_sum / denom).sum() * (1 if per_rank else world)

        # per-cluster gradients of the mean cluster loss on the last layers, all-reduced and normalised.
        # Every rank differentiates every globally present cluster (a zero sum where it is absent locally):
        # with cross-device negatives the backward of the all-gather is a collective all ranks must join.
        params = last_layer_parameters(ctx.model, self.config.layers)
        idx = np.flatnonzero(anywhere)
        objectives = [local_sum[k] / denom[k] for k in idx]
        cache = ctx.grad_cache
        if cache is not None:
            # GradCache: the loss sees detached embeddings; project each cluster's representation gradient
            # through the chunks' re-forward (GradCache.project) and update once those gradients are known
            embs = tuple(ctx.embeddings)
            vectors = []
            for obj in objectives:
                v = torch.autograd.grad(obj, embs, retain_graph=True, allow_unused=True)
                vectors.append(tuple(x if x is not None else torch.zeros_like(e) for x, e in zip(v, embs)))
            cache.project(vectors, params,
                          lambda flats, reached: self._update(flats, reached, idx, cl_loss, present, ctx))
        else:
            flats, reached = [], False
            for obj in objectives:
                g = torch.autograd.grad(obj, params, retain_graph=True, allow_unused=True)
                reached = reached or any(x is not None for x in g)
                flats.append(torch.cat([(x if x is not None else torch.zeros_like(p)).reshape(-1).float()
                                        for x, p in zip(g, params)]))
            self._update(flats, reached, idx, cl_loss, present, ctx)
        self.last = {"present": int(present.sum())}
        return loss

    def _update(self, flats: list[torch.Tensor], reached: bool, idx: np.ndarray, cl_loss: np.ndarray,
                present: np.ndarray, ctx: StepContext) -> None:
        """Step 4 of the module docstring from the per-cluster gradients ``flats`` (one per present cluster)."""
        if len(flats) and not reached:
            raise ConfigError("iDRO's per-cluster gradients reach none of the last "
                              f"{self.config.layers} transformer layers' parameters (no gradient signal): the "
                              "weights would stay uniform.",
                              fix="train those layers (with LoRA, target them), or use --strategy static.")
        K = self.config.clusters
        grads = []
        for flat in flats:
            flat = ctx.all_reduce(flat)
            grads.append(flat / flat.norm().clamp(min=1e-12))
        cos = np.zeros((K, K))
        if grads:
            G = torch.stack(grads)
            cos[np.ix_(idx, idx)] = (G @ G.T).double().cpu().numpy()
        self.last_cos = cos
        if np.isfinite(cl_loss[present]).all():
            self.h, _ = idro_update(self.h, cl_loss, present, cos, beta=self.config.beta, rho=self.config.rho,
                                    power=self.config.power, floor=self.config.floor, rule=self.config.rule)
        else:
            log.warning("iDRO: non-finite cluster losses at step %d; weights kept", ctx.step)

    def after_step(self, ctx: StepContext) -> None:
        every = self.config.refresh_every
        if every and ctx.step % every == 0:
            self.refresh(ctx)

    # -- outputs and state -------------------------------------------------------------------------------------
    def trajectory_record(self, step: int) -> dict | None:
        return {"weights": dict(zip(self.weight_names, self.h.tolist())), **self.last}

    def final_weights(self) -> dict:
        out = super().final_weights()
        out.update({"strategy": "idro", "cluster_weights": self.h.tolist(), "clusters": self.config.clusters,
                    "cluster_sizes": self.cluster_sizes.tolist(), "refreshes": self.refreshes,
                    "options": self.config.model_dump()})
        return out

    def state_dict(self) -> dict:
        return {"h": self.h.tolist(), "centroids": None if self.centroids is None else self.centroids.tolist(),
                "cluster_sizes": self.cluster_sizes.tolist(), "refreshes": self.refreshes, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        self.h = np.asarray(state["h"], dtype=np.float64)
        self.centroids = None if state["centroids"] is None else np.asarray(state["centroids"], dtype=np.float32)
        self.cluster_sizes = np.asarray(state["cluster_sizes"], dtype=np.int64)
        self.refreshes = int(state["refreshes"])


SPEC = register_strategy(StrategySpec(
    name="idro", build=lambda config, options, names, weights: IDROStrategy(options, seed=config.optim.seed), options=IDROConfig,
    options_field="idro", help="iDRO (COCO-DR): reweight the loss over k-means query clusters (options: --idro).",
    paper=COCO,
    card_text="iDRO reweights k-means query clusters inside each batch (the collection sampling stays fixed)",
    docs="docs/coco.md"))
