"""The trainer on a tiny random BERT: learning, outputs, exact resume, accumulation, homogeneous batches."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drmix.config import TrainConfig
from drmix.errors import ConfigError
from drmix.api import train
from drmix.train.trainer import Trainer

from train_helpers import WORDS, config, make_collections, params, read_metrics


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_collections(tmp_path_factory.mktemp("data"))


def test_loss_goes_down_and_outputs_are_written(tiny_model_path, data, tmp_path):
    out = tmp_path / "run"
    result = train(config(tiny_model_path, data, out, max_steps=40, scheduler="constant"))
    losses = [m["raw_loss"] for m in read_metrics(out)]
    assert len(losses) == 40
    assert sum(losses[-8:]) / 8 < 0.8 * sum(losses[:8]) / 8
    assert (result.model_dir / "modules.json").exists()  # a standard SentenceTransformer folder
    from sentence_transformers import SentenceTransformer

    assert SentenceTransformer(str(result.model_dir), device="cpu").encode(["alpha"]).shape == (1, 32)
    saved = TrainConfig.model_validate(__import__("yaml").safe_load((out / "config.yaml").read_text()))
    assert saved.optim.max_steps == 40 and saved.optim.scheduler == "constant"
    weights = json.loads((out / "weights.json").read_text())
    assert weights["collections"] == ["greek", "letters"] and weights["weights"] == [0.5, 0.5]


def test_homogeneous_batches_hold_one_collection(tiny_model_path, data, tmp_path):
    train(config(tiny_model_path, data, tmp_path / "r", max_steps=6, mixture="size"))
    for m in read_metrics(tmp_path / "r"):
        assert sorted(m["collection_counts"].values()) == [0, 8]


def test_resume_gives_identical_weights(tiny_model_path, data, tmp_path):
    full = Trainer(config(tiny_model_path, data, tmp_path / "full", max_steps=6, save_every=3))
    full.train()
    # what the resume check compares: the collections and their sizes (40 rows each)
    state = json.loads((tmp_path / "full" / "checkpoints" / "step-6" / "trainer_state.json").read_text())
    assert (state["step"], state["collections"], state["sizes"]) == (6, ["greek", "letters"], [40, 40])

    class Killed(Exception):
        pass

    def kill_at_4(ctx):
        if ctx.step == 4:
            raise Killed

    with pytest.raises(Killed):
        Trainer(config(tiny_model_path, data, tmp_path / "cut", max_steps=6, save_every=3), callbacks=[kill_at_4]).train()
    assert not (tmp_path / "cut" / "model").exists()
    with pytest.raises(ConfigError, match="already holds a run"):
        Trainer(config(tiny_model_path, data, tmp_path / "cut", max_steps=6, save_every=3)).train()
    resumed = Trainer(config(tiny_model_path, data, tmp_path / "cut", max_steps=6, save_every=3, resume=True))
    assert resumed.train().steps == 6
    assert torch.equal(params(full.model), params(resumed.model))
    # the log holds each step once: the killed step 4 was dropped and redone
    assert [m["step"] for m in read_metrics(tmp_path / "cut")] == [1, 2, 3, 4, 5, 6]
    assert [m["loss"] for m in read_metrics(tmp_path / "cut")] == [m["loss"] for m in read_metrics(tmp_path / "full")]


def test_gradient_accumulation_matches_the_big_batch_without_in_batch_negatives(tiny_model_path, data, tmp_path):
    # With hard-negative-only loss each example's loss is independent of its batch-mates, so two micro-batches
    # of 4 accumulate to exactly the gradient of one batch of 8 (in mixed mode both draw the same rows): the
    # optimiser sees the same gradient at each step, and after two steps the weights are the same. A loss divided
    # by any other factor than the accumulation steps changes the accumulated gradient by that factor.
    def run(out, **kw):
        trainer = Trainer(config(tiny_model_path, data, out, max_steps=2, in_batch_negatives=False, batching="mixed",
                                 **kw))
        weight = next(p for n, p in trainer.model.named_parameters() if p.ndim == 2 and "encoder" in n)
        grads = []      # the weight's .grad each time a backward has accumulated into it
        weight.register_post_accumulate_grad_hook(lambda p: grads.append(p.grad.detach().clone()))
        trainer.train()
        return trainer, grads

    a, grads_a = run(tmp_path / "a", batch_size=8)
    b, grads_b = run(tmp_path / "b", batch_size=4, gradient_accumulation_steps=2)
    ma, mb = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert ma[0]["collection_counts"] == mb[0]["collection_counts"] == {"greek": 4, "letters": 4}
    assert (len(grads_a), len(grads_b)) == (2, 4)                    # a backward per batch / per micro-batch
    for step in (0, 1):                                              # after the last micro-batch of each step
        assert torch.linalg.vector_norm(grads_a[step]) > 0
        torch.testing.assert_close(grads_b[2 * step + 1], grads_a[step], rtol=1e-4, atol=1e-8)
    torch.testing.assert_close(params(b.model), params(a.model), rtol=1e-4, atol=1e-6)
    assert [m["raw_loss"] for m in mb] == pytest.approx([m["raw_loss"] for m in ma], rel=1e-4)


def test_two_process_ddp_matches_one_process(tiny_model_path, data, tmp_path):
    """gloo DDP with cross-device negatives: same losses and same weights as one process on the global batch."""
    helper = Path(__file__).parent.parent / "helpers" / "ddp_train.py"
    data_file = str(data / "greek.jsonl")
    one = subprocess.run([sys.executable, str(helper), tiny_model_path, data_file, str(tmp_path / "one"), "2"],
                         capture_output=True, text=True)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          str(helper), tiny_model_path, data_file, str(tmp_path / "two"), "2"],
                         capture_output=True, text=True)
    assert two.returncode == 0, two.stderr[-2000:]
    r1 = json.loads((tmp_path / "one" / "result.json").read_text())
    r2 = json.loads((tmp_path / "two" / "result.json").read_text())
    assert (r1["world"], r2["world"]) == (1, 2)
    assert r2["losses"] == pytest.approx(r1["losses"], abs=1e-5)
    assert r2["param_head"] == pytest.approx(r1["param_head"], abs=1e-6)


def test_two_nodes_train_as_one_process_and_build_their_own_caches(tiny_model_path, data, tmp_path, capsys):
    """drmix train on two nodes of one process each (tests/nodes.py: each its own DRMIX_CACHE): an --output-dir each
    node has on its own disk is refused on both ranks before anything loads; into a folder both mount, the losses
    and weights of one process on the global batch, written by rank 0 alone, while each node tokenised the
    collection into its own cache."""
    from cli_helpers import run
    from nodes import by_rank, one_line, two_nodes
    from safetensors.torch import load_file

    base = ["train", "--data", str(data / "greek.jsonl"), "--model", tiny_model_path, "--max-steps", "2",
            "--batch-size", "8", "--learning-rate", "1e-3", "--warmup-ratio", "0", "--log-every", "1",
            "--save-every", "1000", "--no-show-progress", "--device", "cpu", "--num-negatives", "1", "--seed", "3"]
    code, _, err = run([*base, "--output-dir", str(tmp_path / "one")], capsys)
    assert code == 0, err
    nodes = two_nodes(tmp_path, [[*base, "--output-dir", "run"], [*base, "--output-dir", str(tmp_path / "two")]],
                      sort_chunk=None)
    assert [n.returncode for n in nodes] == [0, 0], nodes[0].stderr[-3000:] + nodes[1].stderr[-3000:]
    assert [n.codes()[0][1] for n in nodes] == ["2", "2"] and [n.codes()[1][1] for n in nodes] == ["0", "0"]
    first = by_rank(nodes)[0]
    assert (f"{first.root / 'run'}: the output directory is not one folder on every node: rank 1 (node 1) does not "
            "see the marker rank 0 (node 0) wrote there") in one_line(first.stderr)
    assert "Fix: put --output-dir on a filesystem every node mounts at the same path" in one_line(first.stderr)
    assert not any((n.root / "run" / "config.yaml").exists() for n in nodes)
    # global rank 0 alone prints the outcome (and would push with --push-to-hub)
    assert "trained 2 steps" in by_rank(nodes)[0].stdout and "trained" not in by_rank(nodes)[1].stdout
    one, two = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert [m["loss"] for m in two] == pytest.approx([m["loss"] for m in one], abs=1e-5) and len(one) == 2
    a, b = (load_file(str(tmp_path / r / "model" / "model.safetensors")) for r in ("one", "two"))
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=2e-5, rtol=1e-4)  # summed in another order
    # rank 0 wrote the run; each node tokenised the collection into its own DRMIX_CACHE (the same key)
    keys = [sorted(p.name for p in (n.cache / "tokenized").iterdir() if not p.name.startswith(".")) for n in nodes]
    assert keys[0] == keys[1] and len(keys[0]) == 1
    assert not any((n.root / "two").exists() for n in nodes)


def test_periodic_evaluation_on_dev_sets(tiny_model_path, data, tmp_path):
    from drmix.data.beir import write_beir

    corpus = {f"d{i}": {"title": "", "text": f"{WORDS[i]} {WORDS[i + 1]}"} for i in range(6)}
    queries = {f"q{i}": WORDS[i] for i in range(3)}
    qrels = {"dev": {f"q{i}": {f"d{i}": 1} for i in range(3)}}
    dev = write_beir(tmp_path / "devset", corpus, queries, qrels)
    train(config(tiny_model_path, data, tmp_path / "r", max_steps=4, eval_data=[str(dev)], eval_every=2))
    evals = [json.loads(line) for line in open(tmp_path / "r" / "metrics.jsonl") if '"eval"' in line]
    assert [e["step"] for e in evals] == [2, 4]
    for e in evals:
        assert 0.0 <= e["eval"]["devset/ndcg@10"] <= 1.0
        assert e["eval"]["avg/ndcg@10"] == e["eval"]["devset/ndcg@10"]  # one dev set: the average is itself


def test_reference_reuses_the_step_inputs_and_matches_fresh_tokenisation(tiny_model_path, data, tmp_path,
                                                                          monkeypatch):
    """tDRO's reference scores the batch being trained on the step's own tensors (no second tokenisation),
    with the losses fresh tokenisation gives."""
    trainer = Trainer(config(tiny_model_path, data, tmp_path / "run", max_steps=2, strategy="tdro",
                             reference_model=tiny_model_path, batching="mixed"))
    calls = []
    real = trainer.encoder.device_inputs
    monkeypatch.setattr(trainer.encoder, "device_inputs", lambda model, *a: calls.append(model) or real(model, *a))
    trainer.train()
    reference = trainer.reference
    assert reference.shares_inputs is True
    from drmix.retrieval.encode import embedding_dim

    assert embedding_dim(reference.model) == 32                        # the configured tiny model, not the default
    assert all(m is not reference.model for m in calls)  # the reference never tokenised on its own
    batch = reference.live[0]
    reused = trainer.reference_losses(batch)
    reference.live = None
    fresh = trainer.reference_losses(batch)
    assert calls and calls[-1] is reference.model      # this one did tokenise
    torch.testing.assert_close(reused, fresh, rtol=0, atol=1e-6)


@pytest.mark.parametrize("strategy", ["tdro", "doremi", "groupdro"])
def test_dro_under_homogeneous_batching_is_refused_before_training(tiny_model_path, data, tmp_path, strategy):
    """One collection per batch: the DRO weights could never move -- refused with the fix, nothing written."""
    ref = None if strategy == "groupdro" else tiny_model_path
    with pytest.raises(ConfigError, match="batching mixed") as err:
        Trainer(config(tiny_model_path, data, tmp_path / "run", max_steps=2, strategy=strategy,
                       reference_model=ref, batching="homogeneous"))
    assert "could never move" in str(err.value)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_query_and_document_prompts_are_trained_with_and_saved(tiny_model_path, data, tmp_path):
    import json as _json

    out = tmp_path / "run"
    trainer = Trainer(config(tiny_model_path, data, out, max_steps=1, query_prompt="query: ",
                             document_prompt="passage: "))
    assert (trainer.encoder.q_prompt, trainer.encoder.d_prompt) == ("query: ", "passage: ")
    trainer.train()
    saved = _json.loads((out / "model" / "config_sentence_transformers.json").read_text())
    assert saved["prompts"]["query"] == "query: " and saved["prompts"]["document"] == "passage: "
    # the run root reads the same prompts (SentenceTransformer(RUN))
    assert _json.loads((out / "config_sentence_transformers.json").read_text())["prompts"] == saved["prompts"]


def test_a_collections_document_prompt_is_trained_with_and_recorded_in_config_yaml(tiny_model_path, data, tmp_path):
    import yaml

    out = tmp_path / "run"
    specs = [{"path": str(data / "greek.jsonl"), "document_prompt": "passage: "}, str(data / "letters.jsonl")]
    trainer = Trainer(config(tiny_model_path, data, out, max_steps=2, batching="mixed").replace(data=specs))
    greek, letters = trainer.collections
    assert (greek.document_prompt, letters.document_prompt) == ("passage: ", None)
    batch = trainer.builder.build([(0, 0), (1, 0)])       # from the stored ids (pre-tokenised by default)
    first = greek.dataset[0]["positives"][0]
    assert list(batch.positives) == ["passage: " + first, letters.dataset[0]["positives"][0]]
    ids = trainer.model.tokenizer("passage: " + first)["input_ids"]
    assert batch.tokens.positives[0].tolist() == ids
    trainer.train()
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["data"]["collections"][0]["document_prompt"] == "passage: "


def test_records_are_written_every_log_every_steps_and_at_the_last_with_the_scheduled_lr(tiny_model_path, data,
                                                                                           tmp_path):
    # linear decay without warm-up: the lr of step s (1-based) is 1e-3 * (3 - (s - 1)) / 3
    train(config(tiny_model_path, data, tmp_path / "r", max_steps=3, log_every=2, scheduler="linear"))
    records = read_metrics(tmp_path / "r")
    assert [m["step"] for m in records] == [2, 3]
    assert [m["lr"] for m in records] == pytest.approx([2e-3 / 3, 1e-3 / 3])


def test_a_sharded_run_saves_the_model_rebuilt_from_the_gathered_weights(monkeypatch):
    """Under FSDP/ZeRO the main process rebuilds the model it saves from the configured backbone and the gathered
    full state dict (what no CPU test can shard: the collaborators are stand-ins)."""
    from types import SimpleNamespace

    import drmix.train.trainer as tr

    built = []
    monkeypatch.setattr(tr, "full_state_dict", lambda accelerator, wrapped: {"w": 1})
    monkeypatch.setattr(tr, "load_retriever", lambda name, opts, **kw: built.append(name) or "backbone")
    monkeypatch.setattr(tr, "rebuild_with_state", lambda build, state: (build(), state))
    me = SimpleNamespace(sharding="fsdp", accelerator=None, wrapped=None, is_main=True, lora_r=0,
                         config=TrainConfig(model="my/backbone"))
    assert Trainer._model_for_saving(me) == ("backbone", {"w": 1}) and built == ["my/backbone"]
    assert Trainer._model_for_saving(SimpleNamespace(**{**vars(me), "is_main": False})) is None
