"""drmix.model.saving: an encoder saved as a SentenceTransformer folder, atomically, with a hook inside."""
from __future__ import annotations

import pytest
from tiny_llama import build_tiny_llama

from drmix.model.prune import prune_decoder
from drmix.model.saving import save_sentence_transformer


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = build_tiny_llama(tmp_path_factory.mktemp("llama") / "lm", layers=2)
    lm = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    return prune_decoder(lm, [0, 1]), AutoTokenizer.from_pretrained(str(path))


def test_the_hook_writes_into_the_folder_before_it_is_moved_in(pruned, tmp_path):
    from sentence_transformers import SentenceTransformer

    seen = []

    def finish(model, folder):
        seen.append(folder)
        assert not (tmp_path / "st").exists()          # the output appears only when complete
        (folder / "NOTE.md").write_text("hello", encoding="utf-8")

    out = save_sentence_transformer(*pruned, tmp_path / "st", max_seq_length=16, query_prompt="Q: ", finish=finish)
    assert out == tmp_path / "st" and seen and seen[0] != out
    assert (out / "NOTE.md").read_text(encoding="utf-8") == "hello" and not (out / "_hf").exists()
    model = SentenceTransformer(str(out), device="cpu")
    assert model.prompts == {"query": "Q: ", "document": ""} and model.max_seq_length == 16


def test_a_failing_hook_leaves_no_folder(pruned, tmp_path):
    def finish(model, folder):
        raise RuntimeError("card failed")

    with pytest.raises(RuntimeError, match="card failed"):
        save_sentence_transformer(*pruned, tmp_path / "st", finish=finish)
    assert not (tmp_path / "st").exists()
