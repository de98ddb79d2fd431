"""What a finished run leaves besides the model: its own card, report.html, tracker files, loadable checkpoints."""
from __future__ import annotations

import json

import pytest
import yaml
from huggingface_hub import ModelCard

from drmix.config import TrainConfig
from drmix.api import train
from drmix.train.trainer import Trainer
from train_helpers import make_collections


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"), n=24)


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    from drmix.data.beir import write_beir

    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    corpus = {f"d{i}": {"title": "", "text": f"{words[i]} {words[(i + 1) % 8]} {words[(i + 3) % 8]}"} for i in range(8)}
    queries = {f"q{i}": f"{words[i]} {words[(i + 1) % 8]}" for i in range(8)}
    return write_beir(tmp_path_factory.mktemp("beir") / "toy", corpus, queries,
                      {"dev": {f"q{i}": {f"d{i}": 1} for i in range(8)}})


def cfg(model, data, out, **kw):
    base = dict(model=model, data=[str(data)], output_dir=str(out), batch_size=4, learning_rate=1e-3,
                warmup_ratio=0.0, log_every=1, save_every=2, show_progress=False, device="cpu", seed=0, max_steps=4)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def run(tiny_model_path, data, beir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    result = train(cfg(tiny_model_path, data, out, mixture="size", eval_data=[str(beir)], eval_every=2,
                       keep_checkpoints=3, report_to=["tensorboard"]))
    return out, result


def test_the_model_card_is_the_runs_own(run, tiny_model_path):
    out, _ = run
    readme = out / "model" / "README.md"
    base = (tiny_model_path + "/README.md")
    assert readme.read_bytes() != open(base, "rb").read()  # not the base model's card byte for byte
    card = readme.read_text(encoding="utf-8")
    meta = ModelCard.load(readme).data.to_dict()
    assert "base_model" not in meta  # a local base model is named in the body, not as a Hub id
    # local collections are not Hub dataset ids: the front matter lists none, the body names them
    assert "datasets" not in meta and "generated_from_drmix" in meta["tags"]
    assert "greek" in card and "letters" in card
    last_eval = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"eval"' in x][-1]
    got = {m["type"]: m["value"] for m in meta["model-index"][0]["results"][0]["metrics"]}
    assert got["ndcg@10"] == pytest.approx(last_eval["eval"]["toy/ndcg@10"])
    assert "| greek | 24 | 0.5000 | 0.5000 |" in card  # size-proportional weights of two equal collections
    assert "fixed before training: proportional to collection size" in card
    assert f"SentenceTransformer fine-tuned from {tiny_model_path.rstrip('/').split('/')[-1]}" in card


def test_config_yaml_records_the_resolved_model(run, tiny_model_path, data, tmp_path):
    from drmix.model.encoder import default_model_path

    out, _ = run
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["name_or_path"] == tiny_model_path
    config = cfg(None, data, tmp_path / "default", max_steps=1)
    train(config)  # the bundled all-MiniLM-L6-v2
    assert yaml.safe_load((tmp_path / "default" / "config.yaml").read_text())["model"]["name_or_path"] == default_model_path()
    assert config.model.name_or_path is None  # the caller's config object is left as it was


def test_report_html_is_written(run):
    out, _ = run
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count("<svg") >= 3 and "Evaluation during training" in html and "model/README.md" in html


def test_per_collection_losses_are_the_batch_losses(run):
    out, _ = run
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert len(records) == 4
    for r in records:  # homogeneous batches: one collection per step, whose mean loss is the step's raw loss
        drawn = {k: v for k, v in r["collection_losses"].items() if v is not None}
        assert len(drawn) == 1 and list(drawn.values())[0] == pytest.approx(r["raw_loss"], rel=1e-5)
        assert r["collection_counts"][next(iter(drawn))] == 4


def test_tensorboard_holds_the_logged_scalars(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = run
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert [(e.step, pytest.approx(e.value, rel=1e-6)) for e in acc.Scalars("train/loss")] == \
        [(r["step"], r["loss"]) for r in records]
    assert [e.step for e in acc.Scalars("eval/toy/ndcg@10")] == [2, 4]
    tags = set(acc.Tags()["scalars"])
    assert {"train/lr", "train/samples_per_s", "loss/greek", "loss/letters"} <= tags


def test_checkpoints_load_as_models(run, beir, capsys):
    from sentence_transformers import SentenceTransformer

    from drmix.cli import main

    out, _ = run
    last = SentenceTransformer(str(out / "checkpoints" / "step-4"), device="cpu")
    final = SentenceTransformer(str(out / "model"), device="cpu")
    assert (last.encode(["alpha beta"]) == final.encode(["alpha beta"])).all()
    with pytest.raises(SystemExit) as e:
        main(["eval", "--model", str(out / "checkpoints" / "step-2"), "--data", str(beir), "--split", "dev"])
    assert e.value.code in (0, None), capsys.readouterr().err
    assert "ndcg@10" in capsys.readouterr().out


def test_resume_from_a_model_folder_checkpoint_is_exact(tiny_model_path, data, tmp_path):
    import torch

    full = Trainer(cfg(tiny_model_path, data, tmp_path / "full", max_steps=4))
    full.train()
    cut = tmp_path / "cut"

    class Killed(Exception):
        pass

    def kill_at_3(ctx):
        if ctx.step == 3:
            raise Killed

    with pytest.raises(Killed):  # killed after the step-2 checkpoint (a SentenceTransformer folder)
        train(cfg(tiny_model_path, data, cut, max_steps=4), callbacks=[kill_at_3])
    assert (cut / "checkpoints" / "step-2" / "modules.json").is_file()
    resumed = Trainer(cfg(tiny_model_path, data, cut, max_steps=4, resume=True))
    resumed.train()
    a = torch.cat([p.detach().flatten() for p in full.model.parameters()])
    b = torch.cat([p.detach().flatten() for p in resumed.model.parameters()])
    assert torch.equal(a, b)


def test_hf_callback_stops_training(tiny_model_path, data, tmp_path):
    from transformers import TrainerCallback

    class StopAt3(TrainerCallback):
        def __init__(self):
            self.logged = []

        def on_log(self, args, state, control, logs=None, **kw):
            self.logged.append(state.global_step)

        def on_step_end(self, args, state, control, **kw):
            control.should_training_stop = state.global_step >= 3
            return control

    cb = StopAt3()
    result = train(cfg(tiny_model_path, data, tmp_path / "r", max_steps=10), callbacks=[cb])
    assert result.steps == 3 and cb.logged == [1, 2, 3] and (result.model_dir / "modules.json").is_file()


def test_push_to_hub_offline_fails_before_training(tiny_model_path, data, tmp_path, capsys):
    from drmix.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--model", tiny_model_path, "--data", str(data), "--output-dir", str(tmp_path / "r"),
              "--max-steps", "1", "--push-to-hub", "me/model"])
    assert e.value.code == 2 and "HF_HUB_OFFLINE" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
