"""``drmix augment`` end to end (crop -> mine -> generate -> rerank against a loopback endpoint), outputs that
``drmix train`` loads, ``drmix prune`` and one-line errors."""
from __future__ import annotations

import json

import pytest
from loopback_llm import LoopbackServer

from cli_helpers import run
from drmix.data.beir import write_beir
from drmix.data.collections import load_collection_spec

TOPICS = ["cats", "dogs", "ships", "trains", "rivers", "mountains"]
CORPUS = {f"d{i}": {"title": "", "text": f"This note is about {t} and nothing else. Many people like {t} a lot. "
                                         f"Fig. 3."} for i, t in enumerate(TOPICS)}


@pytest.fixture()
def corpus(tmp_path):
    return write_beir(tmp_path / "toy", CORPUS, {"q0": "cats"}, {"test": {"q0": {"d0": 1}}})


def _reply(body, n):
    system = body["messages"][0]["content"]
    if "search agent" in system:
        passage = body["messages"][-1]["content"]
        topic = next(t for t in TOPICS if t in passage)
        text = f"Task: learn about {topic}\nQuery: facts about {topic}\nLanguage: English"
    else:
        text = "[2] > [2] > [9] > [1]"   # a duplicate and an invalid id, the rest missing
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def test_augment_chain_writes_loadable_collections(corpus, tmp_path, tiny_model_path, capsys):
    crop = tmp_path / "crop.jsonl"
    code, _, err = run(["augment", "crop", "--corpus", str(corpus), "--output", str(crop)], capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in crop.read_text().splitlines()]
    assert len(lines) == 12 and lines[0]["augment"] == "crop" and lines[0]["source_doc"] == "d0"
    assert lines[0]["positive"] == CORPUS["d0"]["text"]

    mined = tmp_path / "mined.jsonl"
    code, _, err = run(["augment", "mine", "--queries", str(crop), "--corpus", str(corpus), "--output", str(mined),
                        "--teacher", tiny_model_path, "--positives", "1:2", "--negatives", "4:6"], capsys)
    assert code == 0, err
    first = json.loads(mined.read_text().splitlines()[0])
    assert len(first["positives"]) == 2 and len(first["negatives"]) == 3 and first["augment"] == "crop+mine"
    assert json.loads((tmp_path / "mined.jsonl.stats.json").read_text())["kept"] == 12

    server = LoopbackServer(_reply)
    try:
        gen = tmp_path / "gen.jsonl"
        llm = ["--backend", "openai", "--base-url", server.url, "--llm-model", "served", "--max-retries", "0"]
        code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(gen), *llm], capsys)
        assert code == 0, err
        rows = [json.loads(x) for x in gen.read_text().splitlines()]
        assert [r["query"] for r in rows] == [f"facts about {t}" for t in TOPICS]
        assert rows[0]["llm"]["model"] == "served" and rows[0]["positive"] == CORPUS["d0"]["text"]
        calls = len(server.bodies)
        code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(gen), *llm], capsys)
        assert code == 2 and "--overwrite" in err                  # an existing output needs --overwrite
        code, _, _ = run(["augment", "generate", "--corpus", str(corpus), "--output", str(gen), "--overwrite", *llm],
                         capsys)
        assert code == 0 and len(server.bodies) == calls          # the rerun is served from the cache

        gmined = tmp_path / "gen-mined.jsonl"
        run(["augment", "mine", "--queries", str(gen), "--corpus", str(corpus), "--output", str(gmined),
             "--teacher", tiny_model_path, "--negatives", "2:6"], capsys)
        rr = tmp_path / "rerank.jsonl"
        code, _, err = run(["augment", "rerank", "--input", str(gmined), "--corpus", str(corpus), "--output",
                            str(rr), "--k", "5", "--negatives", "4:5", *llm], capsys)
        assert code == 0, err
        line = json.loads(rr.read_text().splitlines()[0])
        cands = [c[0] for c in line["teacher"]["candidates"][:5]]
        assert line["llm_rerank"]["order"] == [cands[1], cands[0], cands[2], cands[3], cands[4]]
        assert line["llm_rerank"]["repairs"] == {"invalid": 1, "duplicates": 1, "missing": 3}
        stats = json.loads((tmp_path / "rerank.jsonl.stats.json").read_text())
        assert stats["repaired_share"] == 1.0 and stats["kept"] == 6
    finally:
        server.close()
    for f in (crop, mined, gen, gmined, rr):           # what drmix train --data reads
        (col,) = load_collection_spec(str(f))
        assert len(col) > 0 and col.dataset[0]["positives"]


def test_errors_are_one_line(corpus, tmp_path, capsys):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    code, _, err = run(["augment", "generate", "--corpus", str(corpus), "--output", str(tmp_path / "g.jsonl"),
                        "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--llm-model", "m",
                        "--max-retries", "0"], capsys)
    assert code == 2 and "unreachable" in err and "Traceback" not in err
    empty = write_beir(tmp_path / "empty", {"a": {"title": "", "text": "Fig. 2."}}, {"q": "x"}, {"test": {"q": {"a": 1}}})
    code, _, err = run(["augment", "crop", "--corpus", str(empty), "--output", str(tmp_path / "c.jsonl")], capsys)
    assert code == 2 and "no sentence" in err
    code, _, err = run(["prune", "--model", str(tmp_path / "nope.gguf"), "--output", str(tmp_path / "p")], capsys)
    assert code == 2 and "not found" in err
