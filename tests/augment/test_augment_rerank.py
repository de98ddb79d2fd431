"""The listwise ranking parser on valid, partial, duplicated and garbage outputs; the rerank prompt."""
from __future__ import annotations

from fake_llm import FakeBackend

from drmix.augment.rerank import RerankTemplate, parse_ranking, rerank_candidates


def test_valid_permutation():
    r = parse_ranking("[3] > [1] > [4] > [2]", 4)
    assert r.order == [2, 0, 3, 1]
    assert (r.valid, r.invalid, r.duplicates, r.missing, r.complete) == (4, 0, 0, 0, True)


def test_partial_output_appends_missing_in_teacher_order():
    r = parse_ranking("[4] > [2]", 5)
    assert r.order == [3, 1, 0, 2, 4]
    assert (r.valid, r.missing, r.complete) == (2, 3, False)


def test_duplicates_and_invalid_ids_are_dropped_and_counted():
    r = parse_ranking("[2] > [9] > [2] > [0] > [1] > [2]", 3)
    assert r.order == [1, 0, 2]
    assert (r.valid, r.invalid, r.duplicates, r.missing) == (2, 2, 2, 1)


def test_bare_numbers_when_there_are_no_brackets():
    assert parse_ranking("2 > 3 > 1", 3).order == [1, 2, 0]


def test_garbage_has_no_judgement():
    r = parse_ranking("I think the passages are all relevant.", 3)
    assert not r.parsed and r.order == [0, 1, 2] and r.missing == 3


def test_prompt_numbers_passages_cuts_them_and_repeats_the_query_after():
    msgs = RerankTemplate.load().messages("what is atp", ["one two three four", "five six"], max_words=2)
    user = msgs[-1]["content"]
    assert "[1] one two\n[2] five six" in user
    assert user.index("[2] five six") < user.index("what is atp")
    assert "[2] > [1]" in user  # the answer format is shown


def test_rerank_counts_outcomes_and_repairs():
    replies = iter(["[2] > [1] > [3]", "[3] > [3]", "no idea", None])
    rankings, stats = rerank_candidates([("q", ["a", "b", "c"])] * 4, FakeBackend(lambda m: next(replies)))
    assert [r.order if r else None for r in rankings] == [[1, 0, 2], [2, 0, 1], None, None]
    assert dict(stats.outcomes) == {"complete": 1, "repaired": 1, "unparsed": 1, "llm_error": 1}
    assert dict(stats.repairs) == {"invalid": 0, "duplicates": 1, "missing": 2}
    assert stats.as_dict()["repaired_share"] == 0.25
