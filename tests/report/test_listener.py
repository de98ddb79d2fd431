"""The run report listener's card: a periodic evaluation on a sample of each dev set is named as one."""
import json
from types import SimpleNamespace

import pytest
from huggingface_hub import ModelCard

from drmix.config import TrainConfig
from drmix.report.listener import RunReport
from drmix.train.objective import InfoNCE


@pytest.mark.parametrize("cap, name", [(50, "scifact (sample: at most 50 queries)"), (None, "scifact")])
def test_periodic_sample_is_named_in_model_index(tiny_model_path, tmp_path, cap, name):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.save(str(tmp_path / "model"))
    cfg = TrainConfig(data=["a.jsonl"], output_dir=str(tmp_path), eval_data=["scifact"], eval_max_queries=cap)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 5, "eval": {"scifact/ndcg@10": 0.5,
                                                                             "avg/ndcg@10": 0.5}}) + "\n")
    trainer = SimpleNamespace(config=cfg, out=tmp_path, names=["a"], sizes=[3], collections=[],
                              objective=InfoNCE(temperature=0.05, num_negatives=0))
    path = RunReport.write_card(trainer, model, None)
    results = ModelCard.load(path).data.to_dict()["model-index"][0]["results"]
    assert [r["dataset"]["name"] for r in results] == [name]


def test_a_run_made_from_objects_is_described_by_them(tiny_model_path, tmp_path):
    """drmix.train(config, model=, train_dataset=, loss=MultipleNegativesRankingLoss(model),
    evaluator=InformationRetrievalEvaluator(...)) with a trained query prompt: the card and config.yaml say what
    ran -- the loss object and its parameters, not infonce and its temperature; the dataset's columns; the evaluator
    that made the scores; the data given; encode_query in the usage snippet."""
    import yaml
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    import drmix

    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    rows = {"anchor": [f"{w} query" for w in words], "positive": [f"{w} document" for w in words],
            "negative": [f"{words[(i + 1) % 8]} other" for i in range(8)]}
    evaluator = InformationRetrievalEvaluator({f"q{i}": f"{w} query" for i, w in enumerate(words)},
                                              {f"d{i}": f"{w} document" for i, w in enumerate(words)},
                                              {f"q{i}": {f"d{i}"} for i in range(8)}, name="toy-dev")
    model = SentenceTransformer(tiny_model_path, device="cpu")
    cfg = TrainConfig(output_dir=str(tmp_path / "run"), max_steps=1, batch_size=4, show_progress=False,
                      device="cpu", query_prompt="query: ")
    result = drmix.train(cfg, model=model, train_dataset=Dataset.from_dict(rows),
                         loss=MultipleNegativesRankingLoss(model), evaluator=evaluator)
    card = (result.model_dir / "README.md").read_text(encoding="utf-8")
    text = " ".join(card.split())
    # the dataset section: the columns the rows hold and the loss that ran
    assert "* Columns: anchor, positive, and negative" in text
    assert "* Loss: [<code>MultipleNegativesRankingLoss</code>]" in text and "contrastive_losses" not in text
    # the evaluation: sentence-transformers' evaluator made the scores, not drmix eval
    assert "* Evaluated with [<code>InformationRetrievalEvaluator</code>]" in text and "drmix.eval" not in text
    # the hyperparameters and the embedded configuration: the objects in place of the fields they replaced
    hyper = card.split("### Training Hyperparameters")[1].split("### Framework Versions")[0]
    assert "- `loss`: MultipleNegativesRankingLoss (a sentence-transformers loss object)" in hyper
    assert "`temperature`" not in hyper and "infonce" not in hyper
    embedded = yaml.safe_load(card.split("```yaml\n")[1].split("```")[0])
    assert embedded["contrastive"]["loss"] == "MultipleNegativesRankingLoss (a sentence-transformers loss object)"
    assert "temperature" not in embedded["contrastive"]
    assert embedded["eval"]["evaluator"] == ["InformationRetrievalEvaluator toy-dev (an evaluator object)"]
    assert embedded["data"]["collections"] == [
        "train (train_dataset['train']): 8 rows, columns anchor, positive, negative"]
    assert "`loss`: MultipleNegativesRankingLoss (a sentence-transformers loss object)" in card
    # the usage snippet applies the trained query prompt
    assert "model.encode_query(queries)" in card and "model.encode_document(documents)" in card
    # config.yaml says the same in its header, and still loads as the configuration it was
    saved = (result.output_dir / "config.yaml").read_text(encoding="utf-8")
    assert saved.startswith("# trained from Python objects given to drmix.train")
    assert "#   loss: MultipleNegativesRankingLoss (a sentence-transformers loss object)" in saved
    assert TrainConfig.model_validate(yaml.safe_load(saved)).contrastive.loss == "infonce"
