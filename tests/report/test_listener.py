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
