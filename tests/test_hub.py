"""drmix push: one commit through huggingface_hub's HfApi, against a loopback stand-in of the Hub API."""
import pytest
import yaml

from drmix.errors import ConfigError
from drmix.hub import HubError, push_to_hub
from loopback_hub import LoopbackHub


@pytest.fixture
def online(monkeypatch):
    """The test session runs offline (conftest); the loopback Hub is on 127.0.0.1."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub():
    h = LoopbackHub(require_token="hf_test")
    yield h
    h.close()


def make_run(tmp_path, tiny_model_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_model_path, run / "model")
    (run / "model" / "README.md").write_text("---\ntags:\n- drmix\n---\n\n# card\n\nSentenceTransformer("
                                             "\"sentence_transformers_model_id\")\n")
    (run / "config.yaml").write_text("max_steps: 3\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5, "lr": 1e-05}\n')
    (run / "checkpoints" / "step-1").mkdir(parents=True)
    (run / "checkpoints" / "step-1" / "optimizer.pt").write_bytes(b"x")
    return run


def _snapshot(root):
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_push_uploads_model_card_report_and_records(tmp_path, tiny_model_path, online, hub):
    run = make_run(tmp_path, tiny_model_path)
    before = _snapshot(tmp_path)
    result = push_to_hub(run, "me/tiny-retriever", token="hf_test", endpoint=hub.url)
    files = hub.repos["me/tiny-retriever"]
    assert hub.created[0]["name"] == "tiny-retriever" and result.commit == "abc123"
    assert {"modules.json", "model.safetensors", "config.json", "README.md", "report.html",
            "drmix/config.yaml", "drmix/metrics.jsonl"} <= set(files)
    assert not any(f.startswith("checkpoints") for f in files)
    assert files["model.safetensors"] == (run / "model" / "model.safetensors").read_bytes()
    card = files["README.md"].decode()
    assert 'SentenceTransformer("me/tiny-retriever")' in card  # the usage snippet loads the pushed repo
    assert yaml.safe_load(card.split("---")[1]) == {"tags": ["drmix"]}
    # the report is rendered for the upload only: push writes nothing local (docs/outputs.md)
    assert b"<!DOCTYPE html>" in files["report.html"] and _snapshot(tmp_path) == before
    assert set(hub.tokens) == {"Bearer hf_test"}


def test_wrong_token_is_one_clear_error(tmp_path, tiny_model_path, online, hub):
    run = make_run(tmp_path, tiny_model_path)
    with pytest.raises(HubError, match="HTTP 401") as e:
        push_to_hub(run, "me/x", token="wrong", endpoint=hub.url)
    assert "HF_TOKEN" in e.value.fix and hub.repos == {}


def test_unreachable_hub_and_offline_mode(tmp_path, tiny_model_path, online, monkeypatch):
    run = make_run(tmp_path, tiny_model_path)
    dead = LoopbackHub()
    url = dead.url
    dead.close()
    with pytest.raises(HubError, match="cannot reach the Hugging Face Hub"):
        push_to_hub(run, "me/x", token="t", endpoint=url)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    before = _snapshot(tmp_path)
    with pytest.raises(HubError, match="HF_HUB_OFFLINE"):
        push_to_hub(run, "me/x", token="t", endpoint=url)
    assert _snapshot(tmp_path) == before  # refused before anything was written (no report.html)


def test_bad_inputs(tmp_path):
    with pytest.raises(ConfigError, match="repository id"):
        push_to_hub(tmp_path, "no-slash")
    with pytest.raises(ConfigError, match="holds no model"):
        push_to_hub(tmp_path, "me/x")


def test_a_run_whose_root_points_into_model_is_pushed_from_model(tmp_path):
    from drmix.hub import model_folder_of

    run_dir = tmp_path / "run"
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "modules.json").write_text("[]")
    (run_dir / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "model", "type": "x"}]')
    assert model_folder_of(run_dir) == ((run_dir / "model").resolve(), run_dir)
    assert model_folder_of(run_dir / "model") == (run_dir / "model", None)
