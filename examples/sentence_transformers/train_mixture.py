"""A plain SentenceTransformerTrainer script with drmix's dataset mixtures (docs/integrations.md).

Each --data NAME=DIR is a BEIR directory; its training split (qrels/train.tsv) becomes one dataset of the
DatasetDict, as (anchor, positive) pairs. The batches' datasets are drawn by drmix's weights, and with
--dro the weights are learned online by GroupDRO or DoReMi from the per-dataset losses.

    python examples/sentence_transformers/train_mixture.py --output-dir runs/st-groupdro \\
        --data scifact=../shared/data/scifact --data nfcorpus=../shared/data/nfcorpus --dro groupdro
    python examples/sentence_transformers/train_mixture.py --output-dir runs/st-transfer \\
        --data scifact=../shared/data/scifact --data nfcorpus=../shared/data/nfcorpus \\
        --weights-file runs/st-groupdro/weights.json --transfer top:0.5

Defaults (the bundled all-MiniLM-L6-v2, 20 steps of 8 pairs, 64 tokens, 200 pairs per dataset): about 110
CPU-seconds (measured: docs/integrations.md), a minute on two idle cores.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from datasets import Dataset, DatasetDict
from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from sentence_transformers.base.sampler import BatchSamplers
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

from drmix.data.beir import doc_text, load_beir
from drmix.integrations.sentence_transformers import MixtureDRO, mixture
from drmix.model.encoder import load_encoder


def beir_pairs(root: str, split: str, max_rows: int) -> Dataset:
    """(anchor, positive) rows: each judged query with its first relevant document."""
    data = load_beir(root, split)
    rows = {"anchor": [], "positive": []}
    for qid, docs in data.qrels.items():
        relevant = [d for d, score in docs.items() if score > 0 and d in data.corpus]
        if relevant and len(rows["anchor"]) < max_rows:
            rows["anchor"].append(data.queries[qid])
            rows["positive"].append(doc_text(data.corpus[relevant[0]]))
    return Dataset.from_dict(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", action="append", required=True, help="NAME=BEIR_DIR (repeat)")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--model", default=None, help="model folder or hub id (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument("--split", default="train")
    p.add_argument("--max-rows", type=int, default=200, help="pairs per dataset")
    p.add_argument("--mixture", default="uniform", choices=["uniform", "size", "temperature"])
    p.add_argument("--weights-file", default=None, help="a drmix weights.json (or {name: weight})")
    p.add_argument("--transfer", default=None, help="top:0.7, reweight or loss (with --weights-file)")
    p.add_argument("--dro", default=None, choices=["groupdro", "doremi"], help="learn the weights online")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=64)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    train = DatasetDict({name: beir_pairs(path, args.split, args.max_rows)
                         for name, path in (d.split("=", 1) for d in args.data)})
    model = load_encoder(args.model, max_seq_length=args.max_length)
    loss = MultipleNegativesRankingLoss(model)
    callbacks = []
    if args.dro:
        reference = None
        if args.dro == "doremi":  # DoReMi's reference: here the starting model, frozen
            reference = MultipleNegativesRankingLoss(load_encoder(args.model, max_seq_length=args.max_length))
        dro = MixtureDRO(train, args.dro, reference=reference, options={"lr": 0.05} if args.dro == "groupdro" else {})
        sampler, loss, callbacks = dro.batch_sampler(), dro.wrap_loss(loss), [dro]
    else:
        mix = mixture(train, args.mixture, weights_file=args.weights_file, transfer=args.transfer)
        print("mixture:", dict(zip(mix.names, mix.sampling.round(3).tolist())))
        sampler, loss = mix.batch_sampler(), mix.wrap_loss(loss)

    training_args = SentenceTransformerTrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=2e-5, warmup_steps=2, batch_sampler=BatchSamplers.NO_DUPLICATES,
        multi_dataset_batch_sampler=sampler, save_strategy="no", logging_steps=5, report_to="none",
        use_cpu=True, seed=0)
    trainer = SentenceTransformerTrainer(model=model, args=training_args, train_dataset=train, loss=loss,
                                         callbacks=callbacks)
    trainer.train()
    model.save(str(Path(args.output_dir) / "model"))
    if args.dro:
        print("learned weights:", {n: round(w, 3) for n, w in callbacks[0].weights.items()},
              "->", Path(args.output_dir) / "weights.json")


if __name__ == "__main__":
    main()
