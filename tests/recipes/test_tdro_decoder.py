"""`pipeline tdro` on a decoder backbone: proxy, reference and final models are last-token retrievers as the
tDRO paper trains them (temperature 0.002, LoRA r 8 / alpha 32 / dropout 0.1, query instructions)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from test_tdro import write_beir, write_collections
from tiny_decoder import build_tiny_decoder

from drmix.config import TrainConfig
from drmix.recipes.tdro import PipelineConfig, run_tdro_pipeline


def test_tdro_pipeline_with_a_decoder_backbone(tmp_path):
    from sentence_transformers import SentenceTransformer

    lm = build_tiny_decoder(tmp_path / "lm", arch="llama")
    beir = write_beir(tmp_path)
    cfg = PipelineConfig(
        model=str(lm), data=[str(write_collections(tmp_path))], output_dir=str(tmp_path / "run"), max_steps=2,
        batch_size=6, learning_rate=1e-3, warmup_ratio=0.0, query_max_length=32, doc_max_length=32, log_every=1,
        save_every=100, show_progress=False, seed=3, test_data=[str(beir)], stage1={"max_steps": 2},
        transfers=["top:0.7"], device="cpu", temperature=0.002,
        query_instructions={beir.name: "Find the sentence about"})
    result = run_tdro_pipeline(cfg)
    root = Path(cfg.run.output_dir)
    stage1 = TrainConfig.flatten(yaml.safe_load((root / "stage1-tdro" / "config.yaml").read_text()))
    assert stage1["temperature"] == 0.002 and stage1["reference_model"].endswith("stage0-reference/model")
    for label, model_dir in result.models.items():
        adapter = json.loads((Path(model_dir).parent / "adapter" / "adapter_config.json").read_text())
        assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (8, 32, 0.1), label
        model = SentenceTransformer(str(model_dir), device="cpu")
        assert model[1].pooling_mode == "lasttoken" and model.similarity_fn_name == "cosine"
        ids = model.tokenizer("the cat")["input_ids"]
        assert ids[-1] == model.tokenizer.eos_token_id and ids.count(ids[-1]) == 1
        assert model.prompts[beir.name] == "Find the sentence about "
    assert set(result.results) == set(result.models)
