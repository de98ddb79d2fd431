"""Other libraries' names for drmix's config fields, so a config written for them is answered with drmix's names.

A YAML file copied from a transformers ``TrainingArguments`` / sentence-transformers / Tevatron / FlagEmbedding
script (``model_name_or_path``, ``per_device_train_batch_size``, ``num_train_epochs``, ``train_data``) is not
read silently under other meanings: each such key is refused with the drmix field (and flag) that means the same,
and how the value changes where the meaning differs (a per-device batch, a group size counting the positive).
Any other unknown key is answered with the closest drmix field names.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

#: foreign key -> (drmix flat name, what to write); the note says how the value changes, or is empty
FOREIGN: dict[str, tuple[str, str]] = {
    "model_name_or_path": ("model", ""),
    "model_name": ("model", ""),
    "train_data": ("data", "a list of collection paths"),
    "train_dir": ("data", "a list of collection paths"),
    "dataset_name": ("data", "a list of collection paths or Hub dataset ids"),
    "train_dataset": ("data", "a list of collection paths or Hub dataset ids"),
    "num_train_epochs": ("epochs", ""),
    "per_device_train_batch_size": ("batch_size", "the global batch: per-device size x processes (or the "
                                    "--per-device-batch-size flag)"),
    "train_batch_size": ("batch_size", "the global batch of all processes"),
    "train_group_size": ("num_negatives", "train_group_size - 1 (drmix counts the hard negatives only; or the "
                         "--train-group-size flag)"),
    "bf16": ("mixed_precision", "mixed_precision: bf16"),
    "fp16": ("mixed_precision", "mixed_precision: fp16"),
    "lr_scheduler_type": ("scheduler", "linear, cosine or constant"),
    "logging_steps": ("log_every", ""),
    "save_steps": ("save_every", ""),
    "save_total_limit": ("keep_checkpoints", ""),
    "eval_steps": ("eval_every", ""),
    "resume_from_checkpoint": ("resume_from", "a checkpoint folder"),
    "query_max_len": ("query_max_length", ""),
    "q_max_len": ("query_max_length", ""),
    "passage_max_len": ("doc_max_length", ""),
    "p_max_len": ("doc_max_length", ""),
    "max_seq_length": ("doc_max_length", "and query_max_length"),
    "query_prefix": ("query_prompt", ""),
    "passage_prefix": ("document_prompt", ""),
    "query_instruction_for_retrieval": ("query_prompt", ""),
    "passage_instruction_for_retrieval": ("document_prompt", ""),
    "negatives_cross_device": ("cross_device_negatives", ""),
    "use_inbatch_neg": ("in_batch_negatives", ""),
    "hub_model_id": ("push_to_hub", "the repository USER/NAME"),
    "learning_rate_scheduler": ("scheduler", ""),
}

#: foreign keys with no drmix field of their own, and where their setting lives
ELSEWHERE: dict[str, str] = {
    "deepspeed": "DeepSpeed is set up by accelerate: pass --deepspeed ds.json to drmix train, or run `accelerate "
                 "launch --config_file accelerate.yaml -m drmix.cli train ...` with deepspeed_config_file in it",
    "local_rank": "processes come from `accelerate launch` / torchrun; drop it",
    "do_train": "drmix train always trains; drop it",
    "overwrite_output_dir": "drmix never overwrites a run: choose another output_dir, or resume: true to continue it",
}


def explain_unknown(key: str, flat_names: Iterable[str], command: str = "drmix train") -> str:
    """What to write instead of the unknown config key ``key`` (a drmix field, with its flag, or the closest
    names); ``flat_names`` are the config's fields, listed by ``command --help``."""
    names = list(flat_names)
    if key in FOREIGN and FOREIGN[key][0] in names:
        field, note = FOREIGN[key]
        return (f"not a drmix field; drmix calls it {field} (--{field.replace('_', '-')})"
                + (f": {note}" if note else ""))
    if key in ELSEWHERE:
        return f"not a drmix field; {ELSEWHERE[key]}"
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    return ("not a drmix field" + (f"; did you mean {' or '.join(close)}" if close else
                                   f"; see `{command} --help` or docs/configuration.md for the fields"))
