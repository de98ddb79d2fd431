"""Configs made of parts (drmix.config.parts): flat names, the two YAML layouts, composition, roles."""
import logging

import pytest
import yaml

from drmix.config import (HYPERPARAMETER, INPUT, OPERATIONAL, RecipeConfig, TrainConfig, load_config)
from drmix.errors import ConfigError


def test_every_field_has_one_flat_name_and_the_old_flat_names_all_remain():
    flat = TrainConfig.flat_fields()
    # the 68 fields of drmix 0.1's flat TrainConfig, each still a flag / keyword under its old name
    old = ("model data output_dir max_steps batch_size gradient_accumulation_steps learning_rate weight_decay "
           "warmup_ratio scheduler max_grad_norm temperature num_negatives in_batch_negatives cross_device_negatives "
           "query_max_length doc_max_length batching mixture mixture_temperature weights_file transfer strategy "
           "reference_model dev dev_split eval_data query_instructions eval_every eval_split eval_max_queries seed "
           "save_every keep_checkpoints log_every resume resume_with_changes max_nonfinite_steps show_progress "
           "mixed_precision grad_cache_chunk lora_r lora_alpha lora_dropout lora_targets input_prefetch input_workers "
           "pretokenize tokenize_num_proc matryoshka_dims pooling append_eos normalize bidirectional torch_dtype "
           "attn_implementation gradient_checkpointing compile compile_backend trust_remote_code device "
           "max_collection_size report_to push_to_hub strategy_options idro").split()
    assert len(old) == 66 and set(old) <= set(flat)
    assert {"dro", "influence"} <= set(flat) and flat["dro"].aliases == ("tdro",)
    assert flat["influence"].aliases == ("infdds",)
    # + the data layout fields, false negatives masked, the no-duplicates sampler, the loss and its teacher temperature,
    # sentence-transformers evaluators
    assert {"format", "columns", "mask_duplicates", "batch_sampler", "loss", "teacher_temperature",
            "evaluator"} <= set(flat)
    # + the names other trainers' users look for: epochs, warm-up steps, prompts, resume point, checkpoint naming
    assert len(flat) == 82 and {"epochs", "warmup_steps", "query_prompt", "document_prompt", "resume_from",
                                "save_final_checkpoint", "checkpoint_naming"} <= set(flat)
    assert (flat["model"].group, flat["model"].name) == ("model", "name_or_path")
    assert (flat["data"].group, flat["data"].name) == ("data", "collections")
    assert (flat["mixture"].group, flat["mixture"].name) == ("mixture", "scheme")
    assert (flat["learning_rate"].group, flat["batch_size"].group) == ("optim", "contrastive")


def test_flat_keywords_grouped_values_and_both_give_the_same_config():
    flat = TrainConfig(model="m", data=["a.jsonl"], mixture="size", learning_rate=1e-4, batch_size=8,
                       output_dir="runs/x", tdro={"lr": 0.1})
    grouped = TrainConfig(model={"name_or_path": "m"}, data={"collections": ["a.jsonl"]}, mixture={"scheme": "size"},
                          optim={"learning_rate": 1e-4}, contrastive={"batch_size": 8}, run={"output_dir": "runs/x"},
                          dro={"lr": 0.1})
    assert flat == grouped
    assert flat.optim.learning_rate == 1e-4 and flat.contrastive.batch_size == 8 and flat.dro == {"lr": 0.1}
    assert flat.optim.max_steps == 1000                        # untouched fields keep their defaults
    # a single collection spec given flat is the `data` field, not the part
    one = TrainConfig(data={"path": "a.jsonl", "name": "a"})
    assert one.data.collections[0].name == "a"


def test_flat_view_round_trips_through_both_layouts():
    cfg = TrainConfig(max_steps=7, eval_every=3, strategy="groupdro", dro={"lr": 0.5})
    flat = cfg.flat()
    assert flat["max_steps"] == 7 and flat["eval_every"] == 3 and flat["strategy"] == "groupdro"
    assert TrainConfig.flatten(cfg.model_dump(mode="json")) == flat
    old_layout = {"max_steps": 7, "eval_every": 3, "strategy": "groupdro", "tdro": {"lr": 0.5}}
    assert {k: TrainConfig.flatten(old_layout)[k] for k in old_layout if k != "tdro"} == \
        {k: flat[k] for k in old_layout if k != "tdro"}
    assert TrainConfig.flatten(old_layout)["dro"] == {"lr": 0.5}


def test_replace_and_from_parts_compose_without_exclude_lists():
    pipe = RecipeConfig(batch_size=4, learning_rate=3e-4, test_data=["t"], output_dir="root")
    stage = TrainConfig.from_parts(pipe, output_dir="root/stage", max_steps=2)
    assert isinstance(stage, TrainConfig) and not hasattr(stage, "test")
    assert (stage.contrastive.batch_size, stage.optim.learning_rate, stage.optim.max_steps) == (4, 3e-4, 2)
    assert stage.run.output_dir == "root/stage" and pipe.run.output_dir == "root"   # the source is untouched
    again = stage.replace(max_steps=5, model="x")
    assert (again.optim.max_steps, again.model.name_or_path, stage.optim.max_steps) == (5, "x", 2)
    with pytest.raises(Exception):
        stage.replace(batch_size=0)                              # validated like any config


def test_roles_classify_fields_for_resume_and_card():
    roles = TrainConfig.roles()
    assert roles["learning_rate"] == roles["seed"] == roles["temperature"] == HYPERPARAMETER
    assert roles["data"] == roles["model"] == roles["reference_model"] == roles["weights_file"] == INPUT
    for name in ("output_dir", "save_every", "log_every", "eval_data", "eval_every", "device", "report_to",
                 "input_workers", "compile", "resume"):
        assert roles[name] == OPERATIONAL, name


def test_a_flat_yaml_file_loads_with_one_warning_naming_the_fields(tmp_path, caplog):
    f = tmp_path / "old.yaml"
    f.write_text("batch_size: 16\nlearning_rate: 0.001\ntdro: {lr: 0.2}\noptim: {max_steps: 9}\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_config(TrainConfig, f, {"max_steps": 11})
    assert (cfg.contrastive.batch_size, cfg.optim.learning_rate, cfg.dro, cfg.optim.max_steps) == \
        (16, 0.001, {"lr": 0.2}, 11)                            # flags win over the file
    warned = [r for r in caplog.records if "flat layout" in r.getMessage()]
    assert len(warned) == 1 and "batch_size" in warned[0].getMessage() and "tdro" in warned[0].getMessage()
    g = tmp_path / "new.yaml"
    g.write_text(cfg.dump_yaml())
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert load_config(TrainConfig, g) == cfg               # what a run writes reads back, silently
    assert not [r for r in caplog.records if "flat layout" in r.getMessage()]
    assert set(yaml.safe_load(g.read_text())) == set(TrainConfig.model_fields)


def test_errors_name_the_flat_field_and_the_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("optim: {learning_rate: -1}\n")
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, f)
    assert "learning_rate:" in e.value.message and "optim" not in e.value.message and str(e.value.path) == str(f)
    f.write_text("optim: {learning_rat: 1}\n")
    with pytest.raises(ConfigError, match="learning_rat"):
        load_config(TrainConfig, f)
    f.write_text("bogus_field: 1\n")
    with pytest.raises(ConfigError, match="bogus_field"):
        load_config(TrainConfig, f)


def test_a_part_variant_changes_defaults_and_keeps_bounds_roles_and_validators():
    from typing import Literal

    from drmix.config import MixtureConfig, OptimConfig, PipelineRun

    Run = PipelineRun.variant("Run", output_dir=("runs/x", "Root."))
    assert (Run().output_dir, Run.model_fields["output_dir"].description) == ("runs/x", "Root.")
    assert role_of_field(Run, "output_dir") == OPERATIONAL and Run().overwrite is False
    assert Run(report_to="tensorboard,none").report_to == ["tensorboard"]    # the base's validator is kept
    with pytest.raises(ValueError, match="unknown tracker"):
        Run(report_to="nope")
    Optim = OptimConfig.variant("Optim", learning_rate=(1e-4, "Peak."))
    assert Optim().learning_rate == 1e-4 and OptimConfig().learning_rate == 2e-5     # the base is untouched
    with pytest.raises(ValueError):
        Optim(learning_rate=0)                                                       # gt=0 is kept
    Mix = MixtureConfig.variant("Mix", strategy=("static", "Two.", Literal["static", "idro"]))
    assert Mix(strategy="idro").strategy == "idro" and Mix().weights_file is None
    with pytest.raises(ValueError):
        Mix(strategy="tdro")                                                         # the narrower type
    assert Optim.__module__ == __name__                                              # named where it is made


def role_of_field(part, name):
    from drmix.config import role_of

    return role_of(part.model_fields[name])


def test_a_part_without_fields_keeps_the_others_with_their_bounds_roles_and_validators():
    from drmix.config import ContrastiveConfig, RunConfig

    C = ContrastiveConfig.without("C", "batching")
    assert list(C.model_fields) == [n for n in ContrastiveConfig.model_fields if n != "batching"]   # in order
    assert (C.title, C.__doc__, C.__module__) == (ContrastiveConfig.title, ContrastiveConfig.__doc__, __name__)
    with pytest.raises(ValueError, match="batching"):
        C(batching="mixed")                                                   # gone: an unknown field
    with pytest.raises(ValueError):
        C(batch_size=0)                                                       # ge=1 kept
    assert C(loss="Cached-MNRL").grad_cache_chunk == 32                       # a field and a model validator kept
    with pytest.raises(ValueError, match="dimensions must be positive"):
        C(matryoshka_dims=[0])
    assert C.model_fields["batch_size"].json_schema_extra == ContrastiveConfig.model_fields["batch_size"].json_schema_extra
    assert "batching" in ContrastiveConfig.model_fields                       # the base is untouched
    R = RunConfig.without("R", "report_to")                                   # its only field's validator goes
    assert "_trackers" not in R.__pydantic_decorators__.field_validators
    assert R(resume="runs/x/checkpoints/step-2").resume_from == "runs/x/checkpoints/step-2"   # a model validator stays
    assert C.variant("V", temperature=(0.1, "T.")).model_fields["temperature"].default == 0.1  # and it is a part
    with pytest.raises(TypeError, match="no field 'bogus'"):
        ContrastiveConfig.without("X", "bogus")
