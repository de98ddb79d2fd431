"""drmix compare: deltas, intervals and paired tests against hand-computed values."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from drmix.cli import app, main
from drmix.errors import DataError
from drmix.evaluation.compare import Scored, compare, load_scored, paired_test


def _pq(values: dict[str, float]) -> dict:
    return {q: {"ndcg@10": v} for q, v in values.items()}


def test_compare_average_weights_each_dataset_once():
    base = Scored("uniform", {"a": _pq({"1": 0.5, "2": 0.5}), "b": _pq({"x": 0.2, "y": 0.4, "z": 0.6, "w": 0.8})})
    model = Scored("tdro", {"a": _pq({"1": 0.7, "2": 0.5}), "b": _pq({"x": 0.2, "y": 0.4, "z": 0.6, "w": 0.4})})
    comp = compare([base, model], metric="ndcg@10", permutations=1000)
    rows = {d.dataset: d for d in comp.rows["tdro"]}
    # a: diffs [0.2, 0] -> +0.1; b: [0, 0, 0, -0.4] -> -0.1; average of datasets: 0.0 (not the query mean -1/30)
    assert rows["a"].delta == pytest.approx(0.1)
    assert rows["b"].delta == pytest.approx(-0.1)
    assert rows["average"].delta == pytest.approx(0.0, abs=1e-12)
    assert rows["average"].queries == 6
    # a: exact randomisation over 2 queries: |(+-0.2 +- 0)/2| >= 0.1 always -> p = 1
    assert rows["a"].fisher_p == pytest.approx(1.0)
    assert rows["average"].baseline == pytest.approx((0.5 + 0.5) / 2)


def test_compare_errors_name_the_fix(tmp_path):
    a = Scored("u", {"a": _pq({"1": 0.5})})
    b = Scored("v", {"c": _pq({"1": 0.5})})
    with pytest.raises(DataError, match="share no dataset"):
        compare([a, b])
    with pytest.raises(DataError, match="not among"):
        compare([a, Scored("w", {"a": _pq({"1": 0.1})})], baseline="zzz")
    old = tmp_path / "eval.json"
    old.write_text(json.dumps({"model": "m", "results": {"a": {"ndcg@10": 0.1}}}))
    with pytest.raises(DataError, match="per-query"):
        load_scored(old)


def _write_eval(path, model, per_query):
    path.mkdir(parents=True)
    (path / "eval.json").write_text(json.dumps({"model": model, "split": "test", "per_query": per_query}))


def test_cli_compare_writes_markdown_and_json(tmp_path, capsys):
    _write_eval(tmp_path / "u", "uniform", {"d": _pq({"1": 0.0, "2": 0.5, "3": 0.5, "4": 0.5})})
    _write_eval(tmp_path / "t", "tdro", {"d": _pq({"1": 1.0, "2": 0.7, "3": 0.8, "4": 0.9})})
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "u"), str(tmp_path / "t" / "eval.json"),
                                 "--output", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    row = out["models"]["tdro"][0]
    # diffs [1.0, 0.2, 0.3, 0.4]: mean 0.475; exact randomisation: only the all-plus / all-minus
    # patterns reach |sum| >= 1.9 -> 2/16.
    assert row["delta"] == pytest.approx(0.475)
    assert row["fisher_p"] == pytest.approx(2 / 16)
    assert out["baseline"] == "uniform"
    assert "| tdro | d | 4 |" in (tmp_path / "cmp" / "compare.md").read_text()
    with pytest.raises(SystemExit) as e:
        main(["compare", str(tmp_path / "u"), str(tmp_path / "missing")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no such evaluation" in err and "Traceback" not in err


# ------------------------------------------------------------------------------ rows, tables and errors by hand
# a: diffs [0.25, 0]; b: diffs [0, 0, 0, -0.5] (dyadic values: every mean and weight below is exact)
BASE = Scored("uniform", {"a": _pq({"1": 0.5, "2": 0.5}), "b": _pq({"x": 0.25, "y": 0.5, "z": 0.75, "w": 0.75})})
MODEL = Scored("tdro", {"a": _pq({"1": 0.75, "2": 0.5}), "b": _pq({"x": 0.25, "y": 0.5, "z": 0.75, "w": 0.25})})
T975 = {1: 12.706204736174698, 3: 3.182446305284263, 5: 2.570581835636314}   # Student t quantiles


def test_rows_intervals_and_tests_against_hand_values():
    import math

    comp = compare([BASE, MODEL])
    a, b, avg = comp.rows["tdro"]
    # a: mean 0.125, sd 0.25/sqrt(2), se 0.125, t = 1 with 1 df: p = 1 - 2 atan(1) / pi = 0.5
    assert (a.dataset, a.baseline, a.value, a.delta, a.queries) == ("a", 0.5, 0.625, 0.125, 2)
    assert a.t_p == pytest.approx(0.5) and (a.low, a.high) == pytest.approx((0.125 - T975[1] * 0.125,
                                                                            0.125 + T975[1] * 0.125))
    # b: mean -0.125, sd 0.25, se 0.125, t = -1 with 3 df: p = 2 (1 - F(1)), F(1) = 1/2 + (sqrt3/4 + pi/6) / pi
    p3 = 2 * (1 - (0.5 + (math.sqrt(3) / 4 + math.pi / 6) / math.pi))
    assert (b.baseline, b.value, b.delta, b.queries) == (0.5625, 0.4375, -0.125, 4)
    assert b.t_p == pytest.approx(p3) and (b.low, b.high) == pytest.approx((-0.125 - T975[3] * 0.125,
                                                                           -0.125 + T975[3] * 0.125))
    # b's randomisation: only the -0.5 moves the sum, |sum| is 0.125 in all 16 patterns: p = 1
    assert b.fisher_p == 1.0
    # average: weights 1/(2*2) and 1/(2*4): weighted diffs [1/16, 0, 0, 0, 0, -1/16], delta 0; the t-test on
    # N w d = [3/8, 0, 0, 0, 0, -3/8]: mean 0 (p = 1), sd sqrt(2 (3/8)^2 / 5), 5 df
    half = T975[5] * math.sqrt(2 * 0.375 ** 2 / 5) / math.sqrt(6)
    assert (avg.dataset, avg.baseline, avg.value, avg.delta) == ("average", 0.53125, 0.53125, 0.0)
    assert avg.t_p == pytest.approx(1.0) and (avg.low, avg.high) == pytest.approx((-half, half))
    assert (avg.queries, avg.baseline_queries, avg.model_queries, avg.dropped, avg.fisher_p) == (6, 6, 6, 0, 1.0)
    assert comp.average("tdro") is avg and comp.metric == "ndcg@10" and comp.alpha == 0.05
    single = compare([Scored("u", {"a": BASE.per_query["a"]}), Scored("m", {"a": MODEL.per_query["a"]})])
    assert [d.dataset for d in single.rows["m"]] == ["a"] and single.average("m").dataset == "a"


def test_markdown_and_json_of_a_comparison():
    comp = compare([BASE, MODEL])
    assert comp.to_markdown() == (
        "ndcg@10, delta vs `uniform` with 95% interval; p: paired t-test / Fisher randomisation over queries; "
        "* = both p < 0.05.\n\n"
        "| model | dataset | queries | baseline | model | delta | 95% interval | p (t) | p (rand.) |\n"
        "|---|---|---:|---:|---:|---:|---|---:|---:|\n"
        "| tdro | a | 2 | 0.5000 | 0.6250 | +0.1250 | [-1.4633, +1.7133] | 0.5000 | 1.0000 |\n"
        "| tdro | b | 4 | 0.5625 | 0.4375 | -0.1250 | [-0.5228, +0.2728] | 0.3910 | 1.0000 |\n"
        "| tdro | average | 6 | 0.5312 | 0.5312 | +0.0000 | [-0.2489, +0.2489] | 1.0000 | 1.0000 |\n")
    j = comp.to_json()
    assert (j["metric"], j["baseline"], j["alpha"]) == ("ndcg@10", "uniform", 0.05)
    assert [r["dataset"] for r in j["models"]["tdro"]] == ["a", "b", "average"]
    assert j["models"]["tdro"][1]["delta"] == -0.125


def test_markdown_marks_significance_formats_p_and_shows_counts_when_a_query_was_dropped():
    from drmix.evaluation.compare import Comparison, Delta

    rows = [Delta("d", 0.5, 0.6, 0.1, 0.05, 0.15, 1e-4, 3.2e-5, 10),          # both p < 0.05: starred
            Delta("e", 0.5, 0.6, 0.1, 0.05, 0.15, 0.01, 0.05, 10),            # randomisation p not below alpha
            Delta("f", 0.5, 0.6, 0.1, 0.05, 0.15, float("nan"), 0.99994, 1)]  # no t-test: empty cell
    md = Comparison("ndcg@10", "u", {"m": rows}).to_markdown().splitlines()
    assert md[4] == "| m | d | 10 | 0.5000 | 0.6000 | +0.1000* | [+0.0500, +0.1500] | 0.0001 | 3.2e-05 |"
    assert md[5] == "| m | e | 10 | 0.5000 | 0.6000 | +0.1000 | [+0.0500, +0.1500] | 0.0100 | 0.0500 |"
    assert md[6] == "| m | f | 1 | 0.5000 | 0.6000 | +0.1000 | [+0.0500, +0.1500] |  | 0.9999 |"
    assert Comparison("x", "u", {"m": [Delta("d", 0, 0, 0, 0, 0, 9.9e-5, 0.5, 2)]}).to_markdown().splitlines()[4] \
        .endswith("| 9.9e-05 | 0.5000 |")
    dropped = Comparison("ndcg@10", "u", {"m": [Delta("d", 0.5, 0.6, 0.1, 0.05, 0.15, 0.5, 0.5, 3, 4, 3, 1)]})
    assert dropped.dropped == 1
    assert dropped.to_markdown() == (
        "ndcg@10, delta vs `u` with 95% interval; p: paired t-test / Fisher randomisation over queries; * = both "
        "p < 0.05. The evaluations cover different queries (--intersect): only the shared ones are compared, 1 "
        "dropped; each row counts the queries compared, evaluated for the baseline, for the model, and dropped.\n\n"
        "| model | dataset | queries | baseline q. | model q. | dropped | baseline | model | delta | 95% interval "
        "| p (t) | p (rand.) |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n"
        "| m | d | 3 | 4 | 3 | 1 | 0.5000 | 0.6000 | +0.1000 | [+0.0500, +0.1500] | 0.5000 | 0.5000 |\n")


def test_significance_needs_both_p_values_strictly_below_alpha():
    from drmix.evaluation.compare import Comparison, Delta

    comp = Comparison("ndcg@10", "u", alpha=0.05)
    row = lambda t, f: Delta("d", 0, 0, 0, 0, 0, t, f, 5)  # noqa: E731
    assert comp.significant(row(0.049, 0.049))
    assert not comp.significant(row(0.01, 0.2)) and not comp.significant(row(0.2, 0.01))
    assert not comp.significant(row(0.05, 0.01)) and not comp.significant(row(0.01, 0.05))


def test_defaults_are_ten_thousand_seeded_sign_patterns():
    """15 queries (32,768 sign patterns): the randomisation test samples 10,000 of them with seed 0."""
    from drmix.evaluation.significance import randomization_test

    base = {str(i): 0.5 for i in range(15)}
    model = {str(i): 0.5 + (0.125 if i % 3 else -0.0625) for i in range(15)}
    comp = compare([Scored("u", {"d": _pq(base)}), Scored("m", {"d": _pq(model)})])
    d = [model[q] - base[q] for q in sorted(base)]
    assert comp.rows["m"][0].fisher_p == randomization_test(d, permutations=10000, seed=0)
    assert comp.rows["m"][0].fisher_p != randomization_test(d, permutations=10000, seed=1)
    two = compare([Scored("u", {"d": _pq(base), "e": _pq(base)}), Scored("m", {"d": _pq(model), "e": _pq(model)})])
    w = [1 / 30] * 30
    assert two.average("m").fisher_p == randomization_test(d + d, w, permutations=10000, seed=0)
    assert two.average("m").fisher_p != randomization_test(d + d, w, permutations=10000, seed=1)


def test_baseline_and_metric_errors_name_the_choices_and_the_fix():
    u, v = Scored("u", {"a": _pq({"1": 0.5})}), Scored("v", {"a": _pq({"1": 0.6})})
    with pytest.raises(DataError) as e:
        compare([u, v], baseline=2)
    assert (e.value.message, e.value.fix) == ("baseline index 2 is out of range (0..1).",
                                              "pass --baseline with a valid index or label.")
    with pytest.raises(DataError) as e:
        compare([u, v], baseline="w")
    assert (e.value.message, e.value.fix) == ("baseline 'w' is not among the models (u, v).",
                                              "pass --baseline with one of those labels or an index.")
    assert compare([u, v], baseline="v").baseline == "v" and set(compare([u, v], baseline=1).rows) == {"u"}
    with pytest.raises(DataError) as e:
        compare([u, Scored("w", {"b": _pq({"1": 0.6})})])
    assert (e.value.message, e.value.fix) == ("'w' and 'u' share no dataset.",
                                              "compare evaluations of the same datasets.")
    with pytest.raises(DataError) as e:
        compare([u, v], metric="recall@100")
    assert (e.value.message, e.value.fix) == ("metric 'recall@100' was not evaluated for 'a'.",
                                              "pass --metric with one of ndcg@10.")


def test_query_set_errors_name_both_models_and_the_counts():
    from drmix.evaluation.compare import query_sets

    with pytest.raises(DataError) as e:
        query_sets({"1": {}}, {"2": {}}, "d", ("A", "B"))
    assert (e.value.message, e.value.fix) == ("no query of 'd' was scored for both models (A: 1, B: 1).",
                                              "compare evaluations of the same dataset and split.")
    with pytest.raises(DataError) as e:       # without intersect (the default) different sets are refused
        query_sets({"1": {}, "2": {}, "3": {}}, {"1": {}, "4": {}}, "d", ("A", "B"))
    assert e.value.message == ("'B' and 'A' were evaluated on different queries of 'd': 2 and 3 queries, 1 shared, "
                               "3 evaluated for only one (2 only for A, 1 only for B).")
    assert e.value.fix == ("evaluate both on the same queries (same split and --max-queries), or pass --intersect to "
                           "compare the 1 shared queries (the table then shows the counts).")
    assert query_sets({"1": {}, "2": {}}, {"2": {}, "3": {}}, "d", intersect=True) == ["2"]


def test_intersect_logs_what_it_dropped(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="drmix.evaluation.compare"):
        compare([Scored("A", {"d": _pq({"1": 0.5, "2": 0.5, "3": 0.5})}), Scored("B", {"d": _pq({"1": 0.5})})],
                intersect=True)
    assert caplog.messages == ["B vs A on d: 1 of 3 queries compared, 2 evaluated for only one dropped (--intersect)"]


def test_load_scored_reads_every_kind_of_evaluation_folder(tmp_path):
    per_query = {"d": _pq({"1": 0.5})}
    # a drmix eval output folder (label: the model it names) and its eval.json (an explicit label wins)
    _write_eval(tmp_path / "ev", "my-model", per_query)
    [s] = load_scored(tmp_path / "ev")
    assert (s.label, s.per_query, s.source) == ("my-model", per_query, str(tmp_path / "ev" / "eval.json"))
    assert load_scored(tmp_path / "ev" / "eval.json", label="mine")[0].label == "mine"
    (tmp_path / "nameless").mkdir()
    (tmp_path / "nameless" / "eval.json").write_text(json.dumps({"per_query": per_query}))
    assert load_scored(tmp_path / "nameless")[0].label == "nameless"              # no model named: the folder
    # a pipeline stage folder: its eval-<split>.json, labelled by the folder
    stage = tmp_path / "root" / "stage2-top"
    (stage / "model").mkdir(parents=True)
    (stage / "eval-test.json").write_text(json.dumps({"model": str(stage / "model"), "per_query": per_query}))
    [s] = load_scored(stage)
    assert (s.label, s.source) == ("stage2-top", str(stage / "eval-test.json"))
    # a pipeline root: every model of summary.json with an evaluation, by the summary's labels
    other = tmp_path / "root" / "stage0"
    (other / "model").mkdir(parents=True)
    (tmp_path / "root" / "summary.json").write_text(json.dumps(
        {"models": {"uniform": str(other / "model"), "top:0.7": str(stage / "model")}}))
    assert [s.label for s in load_scored(tmp_path / "root")] == ["top:0.7"]      # uniform has no evaluation
    (other / "eval-test.json").write_text(json.dumps({"per_query": per_query}))
    assert [s.label for s in load_scored(tmp_path / "root")] == ["uniform", "top:0.7"]


def test_load_scored_errors_name_the_path_and_the_fix(tmp_path):
    with pytest.raises(DataError) as e:
        load_scored(tmp_path / "missing")
    assert (e.value.message, e.value.path) == ("no such evaluation or run.", str(tmp_path / "missing"))
    assert e.value.fix == "pass an eval.json, a `drmix eval --output` folder or a `drmix pipeline` output folder."
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError) as e:
        load_scored(tmp_path / "empty")
    assert (e.value.message, e.value.path, e.value.fix) == (
        "the folder holds no eval.json, eval-<split>.json or summary.json.", str(tmp_path / "empty"),
        "run `drmix eval --output DIR` first and pass DIR.")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError) as e:
        load_scored(bad)
    assert e.value.message.startswith("cannot read the evaluation (") and e.value.path == str(bad)
    assert e.value.fix == "pass a JSON file written by `drmix eval` or `drmix pipeline`."
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"model": "m", "results": {}}))
    with pytest.raises(DataError) as e:
        load_scored(old)
    assert (e.value.message, e.value.path, e.value.fix) == (
        "this evaluation has no per-query scores.", str(old),
        "re-run `drmix eval` (it now writes them) and compare the new eval.json.")


def test_compare_passes_alpha_permutations_and_seed_to_every_row():
    """Datasets of 15 and 14 queries (sampled sign patterns): every row's randomisation p is the sign-flip test
    with the permutations and seed asked for; the average row's weights 1 / (D n_d) differ between datasets."""
    from drmix.evaluation.significance import randomization_test

    base15, base14 = {str(i): 0.5 for i in range(15)}, {f"e{i}": 0.5 for i in range(14)}
    up = lambda b: {q: 0.5 + (0.0625 if i % 2 else -0.0625) + (0.03125 if i % 4 == 1 else 0)  # noqa: E731
                    for i, q in enumerate(b)}
    m15, m14 = up(base15), {q: v + (0.5 if q == "e0" else 0.0) for q, v in up(base14).items()}
    comp = compare([Scored("u", {"d": _pq(base15), "e": _pq(base14)}), Scored("m", {"d": _pq(m15), "e": _pq(m14)})],
                   permutations=5000, seed=3, alpha=0.01)
    assert comp.alpha == 0.01
    d15 = [m15[q] - 0.5 for q in sorted(base15)]            # the queries compared, in id order
    d14 = [m14[q] - 0.5 for q in sorted(base14)]
    assert comp.rows["m"][0].fisher_p == randomization_test(d15, permutations=5000, seed=3)
    assert comp.rows["m"][1].fisher_p == randomization_test(d14, permutations=5000, seed=3)
    w = [1 / 30] * 15 + [1 / 28] * 14
    assert comp.average("m").fisher_p == randomization_test(d15 + d14, w, permutations=5000, seed=3)
    assert comp.average("m").fisher_p != randomization_test(d15 + d14, permutations=5000, seed=3)


def test_errors_name_the_dataset_and_every_metric_evaluated(tmp_path):
    with pytest.raises(DataError, match="different queries of 'scifact'"):
        compare([Scored("A", {"scifact": _pq({"1": 0.5, "2": 0.5})}), Scored("B", {"scifact": _pq({"1": 0.5})})])
    two = {"1": {"ndcg@10": 0.5, "mrr@10": 0.5}}
    with pytest.raises(DataError) as e:
        compare([Scored("u", {"a": two}), Scored("v", {"a": two})], metric="recall@100")
    assert e.value.fix == "pass --metric with one of ndcg@10, mrr@10."


def test_a_summary_without_models_falls_back_to_the_folders_evaluation(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"table": "..."}))
    (tmp_path / "eval.json").write_text(json.dumps({"model": "m", "per_query": {"d": _pq({"1": 0.5})}}))
    [s] = load_scored(tmp_path)
    assert (s.label, s.source) == ("m", str(tmp_path / "eval.json"))
    stage = tmp_path / "stage" / "model"
    stage.mkdir(parents=True)
    (stage.parent / "eval-test.json").write_text(json.dumps({"per_query": {"d": _pq({"1": 0.5})}}))
    (tmp_path / "summary.json").write_text(json.dumps({"models": {"uniform": str(stage)}}))
    [s] = load_scored(tmp_path)
    assert (s.label, s.source) == ("uniform", str(stage.parent / "eval-test.json"))


def test_paired_test_pools_the_queries_both_scored_over_datasets():
    a = {"x": {"q1": 0.0, "q2": 0.5}, "y": {"q1": 0.5, "q2": 0.1}}
    b = {"x": {"q1": 0.5, "q2": 0.5}, "y": {"q1": 0.75}}          # y/q2 not scored by b: left out
    t = paired_test(a, b)
    # differences 0.5, 0, 0.25: mean 0.25, sd 0.25, t = sqrt(3); two-sided p with 2 df = 1 - t / sqrt(t^2 + 2)
    assert t["n"] == 3 and t["mean"] == pytest.approx(0.25)
    assert t["p"] == pytest.approx(1 - 3 ** 0.5 / 5 ** 0.5, abs=1e-9)
    half = 4.302652729911275 * 0.25 / 3 ** 0.5                    # t_{0.975, 2} sd / sqrt(n)
    assert (t["low"], t["high"]) == pytest.approx((0.25 - half, 0.25 + half))


def test_datasets_without_per_query_scores_are_left_out_or_refused_with_the_reason(caplog):
    import logging

    why = "STS task: MTEB gives no per-query scores"
    base = Scored("u", {"a": _pq({"1": 0.5, "2": 0.25})}, unpaired={"sts": why})
    model = Scored("m", {"a": _pq({"1": 0.75, "2": 0.25})}, unpaired={"sts": why})
    with caplog.at_level(logging.WARNING, logger="drmix.evaluation.compare"):
        comp = compare([base, model])
    assert [d.dataset for d in comp.rows["m"]] == ["a"]
    assert caplog.messages == [f"m vs u: sts is left out of the comparison: no per-query scores ({why})"]
    only = compare([Scored("u", {"a": _pq({"1": 0.5})}), Scored("m", {"a": _pq({"1": 0.5})}, unpaired={"x": why})])
    assert [d.dataset for d in only.rows["m"]] == ["a"]            # a dataset only one side has is not mentioned
    with pytest.raises(DataError) as e:
        compare([Scored("u", {}, unpaired={"sts": why}), Scored("m", {}, unpaired={"sts": why})])
    assert e.value.message == f"'m' and 'u' share no dataset with per-query scores: sts: {why}."
    assert e.value.fix.startswith("the paired tests need per-query scores: compare MTEB retrieval tasks")


def test_mteb_evaluations_without_per_query_scores_are_refused_with_the_reason(tmp_path):
    ev = tmp_path / "ev"
    ev.mkdir()
    (ev / "eval.json").write_text(json.dumps({"model": "m", "results": {}, "per_query": {},
                                              "info": {"STS12": {"per_query": "not a retrieval task"}}}))
    with pytest.raises(DataError) as e:
        load_scored(ev)
    assert e.value.message == ("this MTEB evaluation has no per-query scores, so no paired test can be run: "
                               "STS12: not a retrieval task.") and e.value.path == str(ev / "eval.json")
    (ev / "eval.json").write_text(json.dumps({"model": "m", "per_query": {"d": _pq({"1": 0.5})},
                                              "info": {"STS12": {"per_query": "not a retrieval task"},
                                                       "d": {"per_query": "kept"}}}))
    assert load_scored(ev)[0].unpaired == {"STS12": "not a retrieval task"}
    own = tmp_path / "mteb-results" / "model" / "rev"
    own.mkdir(parents=True)
    result = own / "NFCorpus.json"
    result.write_text(json.dumps({"task_name": "NFCorpus", "scores": {}, "mteb_version": "2.0"}))
    for path in (result, tmp_path / "mteb-results"):
        with pytest.raises(DataError) as e:
            load_scored(path)
        assert e.value.message.startswith("this is one of MTEB's own result files") and e.value.path == str(result)
        assert e.value.fix.startswith("evaluate with `drmix eval --mteb TASK --output DIR`")
