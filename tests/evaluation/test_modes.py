"""drmix eval's four modes (drmix.evaluation.modes): which one a request asks for, what each refuses in one line,
and what each reads (the output may not overlap it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from drmix.errors import ConfigError
from drmix.evaluation.modes import EvalRequest

D = Path("data/scifact")


@pytest.mark.parametrize("request_, mode", [
    (EvalRequest(data=[D]), "model"),
    (EvalRequest(data=[D], runs=[Path("r.trec")]), "runs"),
    (EvalRequest(data=[D], index="runs/idx"), "index"),
    (EvalRequest(mteb=["SciFact"]), "mteb"),
])
def test_the_mode_asked_for(request_, mode):
    assert request_.mode == mode


@pytest.mark.parametrize("request_, message", [
    (EvalRequest(data=[D], runs=[Path("r")], mteb=["SciFact"]), "--run and --mteb cannot be combined"),
    (EvalRequest(data=[D], runs=[Path("r")], index="i"), "--run and --index cannot be combined"),
    (EvalRequest(data=[D], index="i", dims="64", max_docs=5), "--dims, --max-docs cannot be used with --index"),
    (EvalRequest(data=[D, D], index="i"), "--index is scored against one dataset; 2 --data given"),
    (EvalRequest(data=[D], mteb=["SciFact"]), "--data and --mteb cannot be combined"),
    (EvalRequest(mteb=["SciFact"], k=10, precision="fp16"), "--k, --precision cannot be used with --mteb"),
    (EvalRequest(data=[D], runs=[Path("r")], model="m", torch_dtype="bf16"),
     "--model, --torch-dtype cannot be used with --run: a run file is scored as it is"),
    (EvalRequest(), "no dataset given"),
])
def test_what_a_mode_cannot_honour_is_one_line(request_, message):
    with pytest.raises(ConfigError, match=message) as e:
        request_.mode
    assert e.value.fix


def test_inputs_and_instructions(tmp_path):
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text("scifact: 'from the file'\nnfcorpus: 'other'\n")
    assert EvalRequest(data=[D], runs=[Path("r")]).inputs() == [D, Path("r")]
    assert EvalRequest(data=[D], index=str(tmp_path / "idx")).inputs() == [D, tmp_path / "idx"]
    assert EvalRequest(data=[D], index="http://milvus:19530#c").inputs() == [D, None]   # not on this machine
    request = EvalRequest(data=[D], prompts=prompts)
    assert request.instructions(["scifact"]) == {"scifact": "from the file", "nfcorpus": "other"}
    request.query_instruction = "given"
    assert request.instructions(["scifact"]) == {"scifact": "given", "nfcorpus": "other"}
