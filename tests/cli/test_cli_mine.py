"""``drmix mine``: one command, two modes (negatives for labelled collections, DRAMA's teacher mining); the
earlier spelling ``drmix augment mine`` writes the same file as ``--mode teacher``."""
from __future__ import annotations

import json

import pytest

from cli_helpers import run
from drmix.data.beir import write_beir

TOPICS = ["cats", "dogs", "ships", "trains", "rivers", "mountains"]
CORPUS = {f"d{i}": {"title": "", "text": f"This note is about {t} and nothing else. Many people like {t} a lot."}
          for i, t in enumerate(TOPICS)}


@pytest.fixture()
def queries(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"query": f"about {t}"}) + "\n" for t in TOPICS), encoding="utf-8")
    return path


def test_teacher_mode_is_the_earlier_augment_mine(tmp_path, queries, tiny_model_path, capsys):
    corpus = write_beir(tmp_path / "toy", CORPUS, {"q0": "cats"}, {"test": {"q0": {"d0": 1}}})
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    code, _, err = run(["mine", "--mode", "teacher", "--queries", str(queries), "--corpus", str(corpus), "-o", str(a),
                        "--model", tiny_model_path, "--positive-ranks", "1:2", "--ranks", "4:6"], capsys)
    assert code == 0, err
    code, _, err = run(["augment", "mine", "--queries", str(queries), "--corpus", str(corpus), "-o", str(b),
                        "--teacher", tiny_model_path, "--positives", "1:2", "--negatives", "4:6"], capsys)
    assert code == 0 and "drmix mine --mode teacher" in err          # the earlier spelling says what it is now
    assert a.read_bytes() == b.read_bytes() and len(a.read_text().splitlines()) == len(TOPICS)
    first = json.loads(a.read_text().splitlines()[0])
    assert len(first["positives"]) == 2 and len(first["negatives"]) == 3 and first["teacher"]["negative_ranks"] == "4:6"
    assert (tmp_path / "a.jsonl.stats.json").read_bytes() == (tmp_path / "b.jsonl.stats.json").read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["--mode", "teacher", "--data", "c.jsonl", "--queries", "q", "--corpus", "c"],
     "--mode teacher does not take --data"),
    (["--data", "c.jsonl", "--positive-ranks", "1:3", "--keep-candidates", "5"],
     "--mode negatives does not take --positive-ranks, --keep-candidates"),
    (["--mode", "teacher"], "--mode teacher needs --queries and --corpus"),
    ([], "--mode negatives needs --data"),
    (["--mode", "both", "--data", "c.jsonl"], "unknown --mode 'both'"),
])
def test_options_of_the_other_mode_and_missing_inputs_are_refused(tmp_path, capsys, argv, message):
    code, _, err = run(["mine", "-o", str(tmp_path / "out.jsonl"), *argv], capsys)
    assert code == 2 and message in err and not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("flag, shown", [([], True), (["--no-progress"], False)])
def test_both_modes_show_a_progress_bar_in_passages_unless_no_progress(tmp_path, queries, tiny_model_path, capsys,
                                                                      monkeypatch, flag, shown):
    import drmix.augment.mine as mine

    passes, embed = [], mine.embed
    monkeypatch.setattr(mine, "embed", lambda *a, **kw: passes.append(kw["show_progress"]) or embed(*a, **kw))
    corpus = write_beir(tmp_path / "toy", CORPUS, {"q0": "cats"}, {"test": {"q0": {"d0": 1}}})
    code, _, err = run(["mine", "--mode", "teacher", "--queries", str(queries), "--corpus", str(corpus), "-o",
                        str(tmp_path / "t.jsonl"), "--model", tiny_model_path, "--positive-ranks", "1:2", "--ranks",
                        "3:4", *flag], capsys)
    assert code == 0, err
    assert ("passage/s" in err) is shown                   # tqdm's rate in passages/s, with the time left
    labelled = tmp_path / "l.jsonl"
    labelled.write_text("".join(json.dumps({"query": f"about {t}", "positive": CORPUS[f"d{i}"]["text"]}) + "\n"
                                for i, t in enumerate(TOPICS)), encoding="utf-8")
    code, _, err = run(["mine", "--data", str(labelled), "-o", str(tmp_path / "n.jsonl"), "--model", tiny_model_path,
                        "--ranks", "1:3", *flag], capsys)
    assert code == 0, err
    assert passes == [shown, shown] and ("passage/s" in err) is shown
