"""A config written with another library's field names is answered with drmix's names."""
import pytest

from drmix.config import TrainConfig, load_config
from drmix.config.names import FOREIGN, explain_unknown
from drmix.errors import ConfigError


def test_every_named_field_exists():
    fields = TrainConfig.flat_fields()
    assert {field for field, _ in FOREIGN.values()} <= set(fields)


@pytest.mark.parametrize("key, says", [
    ("model_name_or_path", "drmix calls it model (--model)"),
    ("num_train_epochs", "drmix calls it epochs (--epochs)"),
    ("per_device_train_batch_size", "batch_size (--batch-size): the global batch"),
    ("train_group_size", "num_negatives (--num-negatives): train_group_size - 1"),
    ("bf16", "mixed_precision: bf16"),
    ("deepspeed", "--deepspeed ds.json"),
    ("learnin_rate", "did you mean learning_rate"),
    ("zzz", "see `drmix train --help`"),
])
def test_explain_unknown(key, says):
    assert says in explain_unknown(key, TrainConfig.flat_fields())


def test_an_hf_style_yaml_names_drmix_fields(tmp_path):
    cfg = tmp_path / "hf.yaml"
    cfg.write_text("model_name_or_path: BAAI/bge-small-en-v1.5\nper_device_train_batch_size: 16\n"
                   "num_train_epochs: 1\ntrain_data: data/train.jsonl\n")
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, cfg)
    msg = e.value.message
    for key, field in (("model_name_or_path", "model"), ("per_device_train_batch_size", "batch_size"),
                       ("num_train_epochs", "epochs"), ("train_data", "data")):
        assert f"{key}: not a drmix field; drmix calls it {field} " in msg
    assert "Extra inputs are not permitted" not in msg


def test_a_misspelt_field_inside_a_group_is_named_too():
    with pytest.raises(ConfigError, match=r"optim\.warmup_step: not a drmix field; did you mean warmup_steps"):
        load_config(TrainConfig, None, {"optim": {"warmup_step": 3}})

