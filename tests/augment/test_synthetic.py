"""The synthetic train / dev / test set of a corpus: round-trip filter, splits by passage, BEIR folders."""
from __future__ import annotations

import json

import pytest

from drmix.augment.synthetic import (SyntheticQuery, build_corpus_synthetic, round_trip_keep, split_by_passage,
                                     write_corpus_synthetic)
from drmix.data.beir import load_beir
from drmix.errors import DataError

TOPICS = ["cats", "dogs", "ships", "trains", "rivers", "mountains", "music", "bread", "coffee", "gardens"]
CORPUS = {f"d{i}": {"title": "", "text": f"Everything here is about {t} today. Nobody else writes about {t} so much."}
          for i, t in enumerate(TOPICS)}


def test_round_trip_keeps_a_query_whose_source_is_in_the_top_k():
    qs = [SyntheticQuery("a", "x", "d1", "crop"), SyntheticQuery("b", "y", "d2", "crop"),
          SyntheticQuery("c", "z", "d3", "crop")]
    ranked = [["d1", "d9", "d8"], ["d9", "d8", "d2"], ["d9", "d8", "d7", "d3"]]
    assert round_trip_keep(qs, ranked, 1) == [True, False, False]
    assert round_trip_keep(qs, ranked, 3) == [True, True, False]
    assert round_trip_keep(qs, ranked, 4) == [True, True, True]
    with pytest.raises(ValueError):
        round_trip_keep(qs, ranked, 0)


def _queries(n_passages: int, per: int = 1) -> list[SyntheticQuery]:
    return [SyntheticQuery(f"q{p}-{j}", f"text {p} {j}", f"p{p}", "crop")
            for p in range(n_passages) for j in range(per)]


def test_splits_share_no_passage_and_keep_a_passages_queries_together():
    qs = _queries(40, per=2)
    s = split_by_passage(qs, dev_queries=6, test_queries=4, seed=3)
    src = {k: {q.source for q in v} for k, v in s.items()}
    assert not (src["train"] & src["dev"]) and not (src["train"] & src["test"]) and not (src["dev"] & src["test"])
    assert len(s["test"]) == 4 and len(s["dev"]) == 6 and len(s["train"]) == 80 - 10   # two queries a passage
    assert (len(src["test"]), len(src["dev"]), len(src["train"])) == (2, 3, 35)
    assert sorted(q.qid for v in s.values() for q in v) == sorted(q.qid for q in qs)   # every query once
    assert split_by_passage(qs, dev_queries=6, test_queries=4, seed=3) == s                # seeded
    assert split_by_passage(qs, dev_queries=6, test_queries=4, seed=4) != s


def test_few_passages_leave_half_of_them_to_train():
    # 8 passages: at most 8 // 4 = 2 each for test and dev, however many queries were asked for
    s = split_by_passage(_queries(8), dev_queries=100, test_queries=100, seed=0)
    assert (len(s["test"]), len(s["dev"]), len(s["train"])) == (2, 2, 4)
    s = split_by_passage(_queries(3), dev_queries=100, test_queries=100, seed=0)
    assert (len(s["test"]), len(s["dev"]), len(s["train"])) == (1, 1, 1)
    with pytest.raises(DataError, match="only 2 source passage"):
        split_by_passage(_queries(2), dev_queries=1, test_queries=1, seed=0)


def _rank_by_topic(miss: set[str]):
    """A filter model that ranks the passage sharing the query's topic first -- except for topics in ``miss``,
    whose passage it ranks fifth; the other passages follow in id order."""
    def rank(queries, ids, texts, top_n):
        out = []
        for q in queries:
            topic = next(t for t in TOPICS if t in q)
            src = f"d{TOPICS.index(topic)}"
            others = [d for d in ids if d != src]
            pos = 4 if topic in miss else 0
            out.append((others[:pos] + [src] + others[pos:])[:top_n])
        return out
    return rank


def test_build_counts_generated_filtered_kept_and_mines_negatives_outside_the_held_out_passages():
    made = build_corpus_synthetic("toy", CORPUS, _rank_by_topic({"ships", "music"}), max_docs=None, max_per_doc=2,
                                  filter_k=3, negative_ranks="2:6", dev_queries=2, test_queries=2, seed=1)
    # 10 documents x 2 sentences; the two sentences of "ships" and "music" miss the top 3
    assert made.stats["generated"] == {"crop": 20}
    assert made.stats["filtered"] == {"crop": 4} and made.stats["kept"] == {"crop": 16}
    assert made.stats["queries"] == {"train": 12, "dev": 2, "test": 2}
    assert made.stats["passages"] == {"train": 6, "dev": 1, "test": 1}
    kept_sources = {q.source for v in made.splits.values() for q in v}
    assert kept_sources.isdisjoint({"d2", "d6"})
    held = {q.source for s in ("dev", "test") for q in made.splits[s]}
    for q in made.splits["train"]:
        negs = made.negatives[q.qid]
        # ranks 2..6 of the ranking are the five passages after the source, minus held-out ones
        others = [d for d in CORPUS if d != q.source][:5]
        assert negs == [d for d in others if d not in held]
        assert q.source not in negs


def test_written_folders_are_beir_and_the_train_file_is_a_collection(tmp_path):
    made = build_corpus_synthetic("toy", CORPUS, _rank_by_topic(set()), max_docs=None, max_per_doc=1, filter_k=1,
                                  negative_ranks="2:3", dev_queries=2, test_queries=2, seed=0)
    write_corpus_synthetic(made, CORPUS, tmp_path / "toy", tmp_path / "train.jsonl")
    dev, test = load_beir(tmp_path / "toy", "dev"), load_beir(tmp_path / "toy", "test")
    assert len(dev.corpus) == len(CORPUS) and len(dev.queries) == 2 and len(test.queries) == 2
    for split, data in (("dev", dev), ("test", test)):
        for q in made.splits[split]:
            assert data.qrels[q.qid] == {q.source: 1} and data.queries[q.qid] == q.text
    rows = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    held = {q.source for s in ("dev", "test") for q in made.splits[s]}
    for row in rows:
        assert row["source_doc"] not in held and not held & set(row["negative_ids"])
        assert row["positive"] == CORPUS[row["source_doc"]]["text"]


def test_llm_queries_are_counted_apart_from_the_crops():
    from fake_llm import FakeBackend

    def answer(passage: str) -> str | None:
        topic = next(t for t in TOPICS if t in passage)
        return None if topic == "bread" else f"Task: find it\nQuery: who writes about {topic}\nLanguage: English"

    made = build_corpus_synthetic("toy", CORPUS, _rank_by_topic({"cats"}), max_docs=None, max_per_doc=1, filter_k=2,
                                  dev_queries=1, test_queries=1, seed=0, backend=FakeBackend(answer),
                                  generate_docs=4)
    gen = made.stats["generated"]
    assert gen["crop"] == 10 and gen["generate"] == 4 - ("d7" in _generated_ids(made))
    assert made.stats["llm"]["documents"] == 4
    kinds = {q.kind for v in made.splits.values() for q in v}
    assert kinds == {"crop", "generate"}


def _generated_ids(made) -> set[str]:
    from drmix.augment.generate import generation_ids

    return set(generation_ids(list(CORPUS), 4, 0))


def test_too_few_passages_name_fixes_that_are_options_of_drmix_adapt():
    """The split runs under ``drmix adapt``: every --flag its fix names is one of that command's options."""
    import re

    import typer

    from drmix.cli import app

    adapt = typer.main.get_command(app).commands["adapt"]
    options = {o for p in adapt.params for o in (*p.opts, *p.secondary_opts)}
    with pytest.raises(DataError) as e:
        split_by_passage(_queries(1), dev_queries=1, test_queries=1, seed=0)
    flags = set(re.findall(r"--[a-z][a-z-]*", e.value.fix))
    assert "--max-docs" in flags and flags <= options
