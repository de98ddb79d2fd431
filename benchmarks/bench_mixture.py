"""Learned mixtures on real collections: uniform vs tDRO (top-70%, reweighting) vs DoReMi vs GroupDRO.

Question: do learned collection weights transfer into better zero-shot retrieval than uniform weights,
with less data (tDRO top-70%), and does raw-loss GroupDRO over-weight the highest-loss collection?

Setup (all-MiniLM-L6-v2, leave-one-out): the collections of ``build_collections.py`` (SciFact and NFCorpus
train qrels, AltLex, MSRP, SICK, XQuAD, Walmart-Amazon, Amazon-Google and the local-documentation
families); for target T in {scifact, nfcorpus} every collection except T trains, and nDCG@10 is measured
on T's BEIR test split. Per target, through :func:`drmix.pipeline.run_tdro_pipeline` (one root, one
stage-0 model shared by the strategies):

* stage 0 -- uniform, task-homogeneous fine-tuning: the uniform baseline and the frozen reference;
* stage 1 -- tdro (ratio), doremi (excess loss), groupdro (raw loss) on mixed equal-share batches with
  hard-negative-only InfoNCE;
* stage 2 -- tdro top:0.7 and tdro reweight; doremi reweight; groupdro reweight.

Then the cost of a stage-1 step (proxy + reference forward + weight update, mixed batch, hard negatives
only) relative to a plain fine-tuning step (same batch size and lengths), measured alternately in one
process on the same machine.

    nohup nice -n 10 python benchmarks/bench_mixture.py --work /tmp/drmix-bench > /tmp/bench_mixture.log 2>&1 &
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from build_collections import DEFAULT_DATA, build_all  # noqa: E402

log = logging.getLogger("bench_mixture")
TARGETS = ("scifact", "nfcorpus")
RUNS = [("tdro", ["top:0.7", "reweight"]), ("doremi", ["reweight"]), ("groupdro", ["reweight"])]
COLUMNS = [("uniform", "uniform", None), ("tDRO top-70%", "tdro", "top:0.7"), ("tDRO reweight", "tdro", "reweight"),
           ("DoReMi reweight", "doremi", "reweight"), ("GroupDRO reweight", "groupdro", "reweight")]


def pipeline_config(args, collections: Path, target: str, strategy: str, transfers: list[str]):
    from drmix.pipeline import PipelineConfig

    data = sorted(str(p) for p in collections.glob("*.jsonl") if p.stem != target)
    return PipelineConfig(
        model=None, data=data, output_dir=str(args.work / f"loo-{target}"), strategy=strategy, transfers=transfers,
        max_steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, warmup_ratio=0.1,
        query_max_length=args.query_len, doc_max_length=args.doc_len, num_negatives=1, seed=args.seed,
        log_every=5, save_every=1000, show_progress=False, device="cpu",
        stage1={"max_steps": args.stage1_steps, "batch_size": args.stage1_batch_size},
        test_data=[str(args.data / target)], test_split="test", test_max_queries=args.test_queries,
        test_max_docs=args.test_docs)


def run_target(args, collections: Path, target: str) -> dict:
    from drmix.pipeline import run_tdro_pipeline

    out = {"results": {}, "weights": {}, "kept": {}, "seconds": {}}
    for strategy, transfers in RUNS:
        t0 = time.perf_counter()
        res = run_tdro_pipeline(pipeline_config(args, collections, target, strategy, transfers))
        out["seconds"][strategy] = round(time.perf_counter() - t0, 1)
        for label, r in res.results.items():
            key = "uniform" if label == "uniform" else f"{strategy}:{label}"
            out["results"][key] = r[target]["ndcg@10"]
        learned = json.loads(res.weights_path.read_text())
        out["weights"][strategy] = dict(zip(learned["collections"], learned["weights"]))
        out["traj_last"] = out.get("traj_last", {})
        traj = [json.loads(x) for x in (res.weights_path.parent / "weights.jsonl").read_text().splitlines()]
        out["traj_last"][strategy] = {"proxy_loss": _mean_over(traj, "proxy_loss"),
                                      "reference_loss": _mean_over(traj, "reference_loss")}
        out["kept"][strategy] = learned.get("top", {}).get("70", [])
        log.info("%s / %s done in %.0f s: %s", target, strategy, out["seconds"][strategy], out["results"])
    return out


def _mean_over(traj: list[dict], key: str) -> dict[str, float | None]:
    names = list(traj[0][key])
    out = {}
    for n in names:
        vals = [r[key][n] for r in traj if r[key].get(n) is not None]
        out[n] = sum(vals) / len(vals) if vals else None
    return out


def stage1_cost(args, collections: Path, reference: Path, reps: int) -> dict:
    """Seconds per plain fine-tuning step and per stage-1 step, alternating, same machine and process."""
    import torch

    from drmix.config import TrainConfig
    from drmix.data.collections import load_collections
    from drmix.mixture.dro import build_dro_strategy
    from drmix.pipeline import fill_missing_negatives, stage1_config
    from drmix.train.trainer import Trainer

    data = sorted(str(p) for p in collections.glob("*.jsonl"))
    base = TrainConfig(model=None, data=data, batch_size=args.batch_size, query_max_length=args.query_len,
                       doc_max_length=args.doc_len, num_negatives=1, seed=args.seed, show_progress=False,
                       device="cpu", output_dir=str(args.work / "cost-plain"), learning_rate=args.lr)
    s1 = stage1_config(base, strategy="tdro", reference=str(reference), output_dir=args.work / "cost-stage1")
    cols = load_collections(data, seed=args.seed)
    plain = Trainer(base, collections=cols)
    proxy = Trainer(s1, strategy=build_dro_strategy("tdro"), collections=fill_missing_negatives(cols, 1))

    def step(tr: Trainer) -> float:
        t0 = time.perf_counter()
        batch = tr.builder.build(tr.sampler.next_indices(tr.strategy.sampling_weights()))
        q, d, mask = tr._batch_inputs(tr.model, batch, tr._num_negatives(batch))
        qe, de = tr.wrapped(q, d)
        losses = tr._losses_from_embeddings(qe, de, mask, gather=True)
        loss = tr.strategy.loss(losses, batch, tr.context())
        tr.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(tr.wrapped.parameters(), 1.0)
        tr.optimizer.step()
        tr.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    step(plain), step(proxy)                                    # warm-up
    times = {"plain": [], "stage1": []}
    for _ in range(reps):
        times["plain"].append(step(plain))
        times["stage1"].append(step(proxy))
    ratios = sorted(s / p for s, p in zip(times["stage1"], times["plain"]))
    return {"plain_s": times["plain"], "stage1_s": times["stage1"], "median_ratio": ratios[len(ratios) // 2],
            "ratio_of_sums": sum(times["stage1"]) / sum(times["plain"])}


def report(args, sizes: dict, per_target: dict, cost: dict | None) -> str:
    lines = ["| LOO target (nDCG@10) | " + " | ".join(c for c, _, _ in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    avgs = {c: [] for c, _, _ in COLUMNS}
    for target, out in per_target.items():
        base = out["results"]["uniform"]
        cells = []
        for col, strat, transfer in COLUMNS:
            v = out["results"].get("uniform" if transfer is None else f"{strat}:{transfer}")
            if v is None:
                cells.append("")
                continue
            avgs[col].append(v)
            cells.append(f"{v:.4f}" if transfer is None else f"{v:.4f} ({v - base:+.4f})")
        lines.append(f"| {target} | " + " | ".join(cells) + " |")
    if all(len(v) == len(per_target) for v in avgs.values()) and len(per_target) > 1:
        b = sum(avgs["uniform"]) / len(avgs["uniform"])
        lines.append("| average | " + " | ".join(
            f"{sum(v) / len(v):.4f}" + ("" if c == "uniform" else f" ({sum(v) / len(v) - b:+.4f})")
            for c, v in avgs.items()) + " |")
    lines += ["", "Learned weights (tDRO final / DoReMi mean over steps / GroupDRO final; "
                  "* = kept by tDRO top-70%):", ""]
    for target, out in per_target.items():
        names = list(out["weights"]["tdro"])
        lines += [f"LOO {target}:", "",
                  "| collection | examples | tDRO | DoReMi | GroupDRO | mean proxy loss | mean ref loss |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for n in sorted(names, key=lambda x: -out["weights"]["tdro"][x]):
            star = "*" if n in out["kept"]["tdro"] else ""
            pl = out["traj_last"]["groupdro"]["proxy_loss"].get(n)
            rl = out["traj_last"]["tdro"]["reference_loss"].get(n)
            lines.append(f"| {n}{star} | {sizes.get(n, '')} | {out['weights']['tdro'][n]:.4f} | "
                         f"{out['weights']['doremi'][n]:.4f} | {out['weights']['groupdro'][n]:.4f} | "
                         f"{pl if pl is None else round(pl, 3)} | {rl if rl is None else round(rl, 3)} |")
        kept = out["kept"]["tdro"]
        used = sum(sizes[n] for n in kept)
        total = sum(sizes[n] for n in names)
        lines += ["", f"tDRO top-70% keeps {len(kept)}/{len(names)} collections, {used}/{total} examples "
                      f"({used / total:.0%}).", ""]
    if cost:
        lines += [f"Stage-1 step cost: {cost['median_ratio']:.2f}x a plain fine-tuning step (median of "
                  f"{len(cost['plain_s'])} alternating pairs; ratio of sums {cost['ratio_of_sums']:.2f}x; "
                  f"plain step {sorted(cost['plain_s'])[len(cost['plain_s']) // 2]:.2f} s).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="uniform vs tDRO vs DoReMi vs GroupDRO, leave-one-out nDCG@10")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data directory (read-only)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/drmix-bench"), help="work directory (runs, collections)")
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), help="leave-one-out targets")
    ap.add_argument("--steps", type=int, default=10, help="stage 0 and stage 2 optimiser steps")
    ap.add_argument("--stage1-steps", type=int, default=8, help="stage 1 optimiser steps")
    ap.add_argument("--batch-size", type=int, default=8, help="batch size of stages 0 and 2")
    ap.add_argument("--stage1-batch-size", type=int, default=11,
                    help="stage-1 batch size (a multiple of the number of collections gives each an equal share)")
    ap.add_argument("--lr", type=float, default=5e-5, help="learning rate of every stage")
    ap.add_argument("--query-len", type=int, default=32, help="max query tokens")
    ap.add_argument("--doc-len", type=int, default=64, help="max document tokens")
    ap.add_argument("--test-queries", type=int, default=100, help="test queries per target (seeded subsample)")
    ap.add_argument("--test-docs", type=int, default=600, help="corpus cap per target (judged documents kept)")
    ap.add_argument("--cost-reps", type=int, default=3, help="alternating step pairs for the stage-1 cost")
    ap.add_argument("--max-per-collection", type=int, default=1500, help="cap on examples per collection")
    ap.add_argument("--seed", type=int, default=42, help="seed of every stage")
    ap.add_argument("--only-cost", action="store_true",
                    help="only measure the stage-1 step cost (needs the stage-0 model of the first target)")
    args = ap.parse_args(argv)
    args.data = args.data.resolve()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("datasets", "sentence_transformers", "transformers", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(2)
    collections = args.work / "collections"
    sizes = build_all(args.data, collections, seed=0, max_per_collection=args.max_per_collection)
    log.info("collections: %s", sizes)
    per_target = {}
    if args.only_cost:
        ref = args.work / f"loo-{args.targets[0]}" / "stage0-reference" / "model"
        cost = stage1_cost(args, collections, ref, args.cost_reps)
        (args.work / "cost.json").write_text(json.dumps(cost, indent=1))
        print(report(args, sizes, {}, cost))
        return 0
    for target in args.targets:
        per_target[target] = run_target(args, collections, target)
        (args.work / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                            "sizes": sizes, "per_target": per_target}, indent=1))
        print(report(args, sizes, per_target, None), flush=True)
    cost = None
    if args.cost_reps > 0:
        ref = args.work / f"loo-{args.targets[0]}" / "stage0-reference" / "model"
        cost = stage1_cost(args, collections, ref, args.cost_reps)
        log.info("stage-1 cost: %s", cost)
    text = report(args, sizes, per_target, cost)
    (args.work / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                        "sizes": sizes, "per_target": per_target, "cost": cost},
                                                       indent=1))
    (args.work / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
