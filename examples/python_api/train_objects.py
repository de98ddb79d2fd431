"""drmix.train with the objects a SentenceTransformerTrainer script already has (docs/integrations.md): a loaded
SentenceTransformer, a DatasetDict of (anchor, positive) pairs, a sentence-transformers loss and an
InformationRetrievalEvaluator -- and drmix's mixture, checkpoints, metrics.jsonl, model card and report.

Each --data NAME=DIR is a BEIR directory: its training split becomes one dataset of the DatasetDict, and --eval
DIR's test split the evaluator's corpus, queries and judgements.

    python examples/python_api/train_objects.py --output-dir runs/api \\
        --data scifact=../shared/data/scifact --data nfcorpus=../shared/data/nfcorpus \\
        --eval ../shared/data/scifact --max-docs 2000
"""
from __future__ import annotations

import argparse
import logging

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

import drmix
from drmix.data.beir import doc_text, load_beir


def beir_pairs(root: str, split: str, max_rows: int) -> Dataset:
    """(anchor, positive) rows: each judged query with its first relevant document."""
    data = load_beir(root, split)
    rows: dict[str, list[str]] = {"anchor": [], "positive": []}
    for qid, docs in data.qrels.items():
        relevant = [d for d, score in docs.items() if score > 0 and d in data.corpus]
        if relevant and len(rows["anchor"]) < max_rows:
            rows["anchor"].append(data.queries[qid])
            rows["positive"].append(doc_text(data.corpus[relevant[0]]))
    return Dataset.from_dict(rows)


def beir_evaluator(root: str, split: str, max_docs: int) -> InformationRetrievalEvaluator:
    """sentence-transformers' evaluator over a BEIR directory (its judged documents, then others up to max_docs)."""
    data = load_beir(root, split)
    judged = {d for docs in data.qrels.values() for d in docs if d in data.corpus}
    keep = list(judged) + [d for d in data.corpus if d not in judged][:max(0, max_docs - len(judged))]
    return InformationRetrievalEvaluator(
        queries=dict(data.queries), corpus={d: doc_text(data.corpus[d]) for d in keep},
        relevant_docs={q: {d for d, s in docs.items() if s > 0} for q, docs in data.qrels.items()},
        name=data.root.name, show_progress_bar=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", action="append", required=True, help="NAME=BEIR_DIR (repeat)")
    p.add_argument("--eval", default=None, help="a BEIR directory evaluated during training")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--model", default=None, help="model folder or hub id (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--max-rows", type=int, default=200, help="pairs per dataset")
    p.add_argument("--max-docs", type=int, default=2000, help="evaluation corpus cap")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    from drmix.model.encoder import resolve_model_path

    model = SentenceTransformer(resolve_model_path(args.model), device="cpu")
    train = DatasetDict({name: beir_pairs(root, "train", args.max_rows)
                         for name, root in (d.split("=", 1) for d in args.data)})
    evaluator = beir_evaluator(args.eval, "test", args.max_docs) if args.eval else None
    config = drmix.TrainConfig(output_dir=args.output_dir, max_steps=args.steps, batch_size=args.batch_size,
                               mixture="temperature", eval_every=args.steps, device="cpu", query_max_length=64,
                               doc_max_length=64)
    result = drmix.train(config, model=model, train_dataset=train, loss=MultipleNegativesRankingLoss(model),
                         evaluator=evaluator)
    print(f"trained {result.steps} steps: {result.model_dir}")


if __name__ == "__main__":
    main()
