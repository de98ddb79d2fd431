"""``drmix adapt --dev-labels``: the choice made on a few labelled dev queries, both choices reported, an overlap
with the --eval-data split refused, a changed labels file named by the stage check, bad labels refused by file
and line."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from drmix.data.beir import write_beir
from drmix.errors import ConfigError, DataError
from drmix.recipes.adapt import AdaptConfig, AdaptResult, plan_adapt, plan_work, run_adapt, select_candidate
from drmix.recipes.adapt.labels import LabelledSelection, choice_scores, match_sources
from drmix.recipes.adapt.report import _dev_labels_md
from drmix.recipes.adapt.selection import choice_comparison

TOPICS = {"pets": ["cats", "dogs", "parrots", "hamsters", "rabbits", "ferrets"],
          "travel": ["ships", "trains", "bicycles", "airports", "harbours", "tunnels"]}


def write_targets(root: Path) -> list[Path]:
    """Two BEIR corpora with a test split (q0..q2) and, apart, labelled dev queries (d3..d5) named as the
    corpora: ``labels/<name>/`` holds queries.jsonl and qrels/dev.tsv only."""
    out = []
    for name, topics in TOPICS.items():
        corpus = {f"{name}{i}": {"title": "", "text": f"This note is about {t} only. People who like {t} read it "
                                                      f"every morning. The {t} club meets each week."}
                  for i, t in enumerate(topics)}
        out.append(write_beir(root / name, corpus, {f"q{i}": topics[i] for i in range(3)},
                              {"test": {f"q{i}": {f"{name}{i}": 1} for i in range(3)}}))
        lab = root / "labels" / name
        (lab / "qrels").mkdir(parents=True)
        (lab / "queries.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"about {topics[i]}"}) + "\n"
                                                   for i in range(3, 6)))
        (lab / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
            f"d{i}\t{name}{i}\t1\n" for i in range(3, 6)))
    return out


def make_config(tmp: Path, model: str, **over) -> AdaptConfig:
    targets = write_targets(tmp) if not (tmp / "pets").exists() else [tmp / n for n in TOPICS]
    train = tmp / "train.jsonl"
    train.write_text("".join(json.dumps({"query": f"what about the {w}", "positive": f"the {w} is a word"}) + "\n"
                             for w in ("cat", "dog", "horse", "sheep", "goat", "mouse")))
    values = dict(corpus=[str(t) for t in targets], data=[str(train)], eval_data=[str(t) for t in targets],
                  dev_labels=[str(tmp / "labels" / n) for n in TOPICS], model=model, teacher=model,
                  output_dir=str(tmp / "run"), max_steps=2, batch_size=4, learning_rate=1e-3, warmup_ratio=0.0,
                  query_max_length=16, doc_max_length=32, save_every=1, log_every=1, show_progress=False,
                  device="cpu", seed=3, filter_k=6, max_per_doc=2, dev_queries=2, test_queries=2,
                  negative_ranks="2:4", candidates=["uniform", "size"],
                  coco={"max_steps": 2, "batch_size": 4, "span_max_tokens": 8, "span_max_length": 16})
    values.update(over)
    return AdaptConfig(**values)


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch):
    from drmix.report import html

    monkeypatch.setattr(html, "_line_figure", lambda *a, **kw: None)
    monkeypatch.setattr(html, "_weights_figure", lambda *a, **kw: None)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model_path):
    from drmix.report import html

    tmp = tmp_path_factory.mktemp("adapt-labels")
    cfg = make_config(tmp, tiny_model_path)
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(html, "_line_figure", lambda *a, **kw: None)
        m.setattr(html, "_weights_figure", lambda *a, **kw: None)
        result = run_adapt(cfg, progress=lines.append)
    # one progress line per stage, with its estimate: the labelled dev and its selection are two of them
    started = [x for x in lines if x.startswith("adapt [")]
    assert len(started) == len(plan_work(cfg))
    assert any("labelled dev: 6 labelled queries of pets, travel" in x for x in started)   # files only: no time
    assert any("selection on labelled dev: 2 candidates on 6 labelled queries -- estimated" in x for x in started)
    return cfg, result


# ---------------------------------------------------------------------------------------------- the choice
def test_the_choice_by_hand():
    syn = {"uniform": 0.50, "size": 0.60, "temperature": 0.40}
    lab = {"uniform": 0.70, "size": 0.40, "temperature": 0.80}
    assert select_candidate(choice_scores(syn, lab, "synthetic")) == "size"
    assert select_candidate(choice_scores(syn, lab, "labels")) == "temperature"
    # both: the mean of the two averages, 0.60 / 0.50 / 0.60 -> the tie goes to the earlier candidate
    assert choice_scores(syn, lab, "both") == pytest.approx({"uniform": 0.60, "size": 0.50, "temperature": 0.60})
    assert select_candidate(choice_scores(syn, lab, "both")) == "uniform"
    assert choice_scores(syn, None, "labels") == syn


def test_the_labelled_choice_and_both_choices_are_reported(finished):
    cfg, result = finished
    root = Path(cfg.run.output_dir)
    lab = result.dev_labels
    assert result.select_on == "labels" and lab.queries == {"pets": 3, "travel": 3}
    # every candidate scored on the labelled dev (its two corpora averaged); the choice is its best, ties earlier
    avg = {c: sum(v["ndcg@10"] for v in lab.results[c].values()) / 2 for c in result.candidates}
    assert lab.average == pytest.approx(avg)
    assert result.selected == lab.selected == next(c for c in result.candidates if avg[c] == max(avg.values()))
    syn = {c: sum(v["ndcg@10"] for v in result.selection[c].values()) / 2 for c in result.candidates}
    assert result.synthetic_choice == next(c for c in result.candidates if syn[c] == max(syn.values()))
    summary = json.loads((root / "summary.json").read_text())
    d = summary["dev_labels"]
    assert d["select_on"] == "labels" and d["queries"] == {"pets": 3, "travel": 3}
    assert d["choices"] == {"synthetic dev": result.synthetic_choice, "labelled dev": lab.selected,
                            "adapted": result.selected}
    test_avg = {c: sum(v["ndcg@10"] for v in summary["labelled"][c].values()) / 2 for c in result.candidates}
    assert d["choices_test_average"]["labelled dev"] == pytest.approx(test_avg[lab.selected])
    assert d["choices_test_average"]["synthetic dev"] == pytest.approx(test_avg[result.synthetic_choice])
    assert d["labelled_dev_average"] == pytest.approx(avg)
    md = (root / "summary.md").read_text()
    assert "## The two choices: synthetic dev and labelled dev (nDCG@10)" in md
    assert f"| labelled dev | {lab.selected} | {test_avg[lab.selected]:.4f} |" in md
    assert f"| synthetic dev | {result.synthetic_choice} | {test_avg[result.synthetic_choice]:.4f} |" in md
    card = (root / "model" / "README.md").read_text()
    assert "chosen among uniform, size on the user's labelled dev queries (--dev-labels: pets 3, travel 3)" in card
    # the labelled dev is a BEIR folder of the target's corpus; the labelled files are only read
    made = root / "dev-labels" / "pets"
    assert (made / "corpus.jsonl").resolve() == (Path(cfg.target.corpus[0]) / "corpus.jsonl").resolve()
    assert (made / "qrels" / "dev.tsv").read_text().splitlines()[1:] == ["d3\tpets3\t1", "d4\tpets4\t1",
                                                                        "d5\tpets5\t1"]


def test_the_two_choices_paired_on_the_labelled_split_by_hand():
    from types import SimpleNamespace

    per_query = {"a": {"pets": {"q0": {"ndcg@10": 0.2}, "q1": {"ndcg@10": 0.4}}},
                 "b": {"pets": {"q0": {"ndcg@10": 0.5}, "q1": {"ndcg@10": 0.5}}}}
    result = AdaptResult(Path("."), "b", {}, {"a": Path("a"), "b": Path("b")}, synthetic_choice="a",
                         dev_labels=LabelledSelection({}, {"a": 0.1, "b": 0.2}, "b", {"pets": 2}),
                         labelled=SimpleNamespace(per_query=per_query))
    cfg = AdaptConfig()
    c = choice_comparison(result, cfg)
    assert c.baseline == "synthetic-dev choice (a)"
    row = c.rows["labelled-dev choice (b)"]
    assert [r.delta for r in row if r.dataset == "pets"] == [pytest.approx(0.2)]      # (0.3 + 0.1) / 2
    # the report: every candidate on both devs and on test, each dev's choice with its test score, the test
    result.choice_test = c
    result.labelled.results = {"a": {"pets": {"ndcg@10": 0.3}}, "b": {"pets": {"ndcg@10": 0.5}}}
    md = "\n".join(_dev_labels_md(cfg, result, {"a": 0.7, "b": 0.6}))
    assert "| a | 0.7000 | 0.1000 | 0.3000 |" in md and "| b | 0.6000 | 0.2000 | 0.5000 |" in md
    assert "| synthetic dev | a | 0.3000 |" in md and "| labelled dev | b | 0.5000 |" in md
    assert "| adapted model (--select-on synthetic) | b | 0.5000 |" in md
    # both rankings put b first: tau +1 over the two candidates
    assert "labelled test rankings of the 2 candidates: **+1.000** (p 1)." in md
    assert "### Paired test on the labelled test split: labelled-dev choice against synthetic-dev choice" in md
    assert "labelled-dev choice (b)" in md and "Both devs chose the same candidate." not in md
    result.synthetic_choice = "b"                                                     # the same candidate: no test
    assert choice_comparison(result, cfg) is None


# ---------------------------------------------------------------------------------------------- refused
def test_labelled_dev_queries_of_the_eval_split_are_refused(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path)
    (tmp_path / "labels" / "travel" / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ttravel1\t1\n")
    with open(tmp_path / "labels" / "travel" / "queries.jsonl", "a") as f:
        f.write(json.dumps({"_id": "q1", "text": "trains"}) + "\n")
    with pytest.raises(ConfigError) as e:
        plan_adapt(cfg)
    msg = str(e.value)
    assert str(tmp_path / "labels" / "travel" / "qrels" / "dev.tsv") in msg
    assert str(tmp_path / "travel" / "qrels" / "test.tsv") in msg and "'q1'" in msg and "--dev-labels-split" in msg


def test_the_test_set_as_labels_is_refused_whatever_the_folders_are_called(tmp_path, tiny_model_path):
    """The eval split's own qrels given as --dev-labels, the corpora copies under other folder names: the labelled
    queries are compared by content (text; id and judged document), not by the folders' names or paths."""
    import shutil

    cfg = make_config(tmp_path, tiny_model_path)
    copies = []
    for name in TOPICS:
        (tmp_path / "copies" / f"my-{name}").mkdir(parents=True)
        shutil.copy(tmp_path / name / "corpus.jsonl", tmp_path / "copies" / f"my-{name}" / "corpus.jsonl")
        copies.append(str(tmp_path / "copies" / f"my-{name}"))
    test_as_labels = cfg.replace(corpus=copies, dev_labels=[str(tmp_path / n) for n in TOPICS],
                                 dev_labels_split="test")
    with pytest.raises(ConfigError, match=r"share 3 of their 3 queries with the --eval-data test split") as e:
        plan_adapt(test_as_labels)
    assert str(tmp_path / "pets" / "qrels" / "test.tsv") in str(e.value)
    # the same queries under new ids (their texts), or the same ids judging the same documents (other texts)
    pets = tmp_path / "labels" / "pets"
    (pets / "queries.jsonl").write_text(json.dumps({"_id": "x1", "text": "  Dogs "}) + "\n"
                                        + json.dumps({"_id": "q2", "text": "about parrots"}) + "\n")
    for qrels, shared in (("x1\tpets1\t1\n", "'x1'"), ("q2\tpets2\t1\n", "'q2'")):
        (pets / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
        with pytest.raises(ConfigError, match=f"share 1 of their 1 queries .*e.g. {shared}"):
            plan_adapt(cfg)
    # an id the test split uses for another query (another text, another document) is not the test set
    (pets / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\tpets4\t1\n")
    assert plan_adapt(cfg).labels["pets"].qrels == {"q2": {"pets4": 1}}


def test_labels_without_a_positive_judgement_are_refused(tmp_path, tiny_model_path, caplog):
    cfg = make_config(tmp_path, tiny_model_path)
    qrels = tmp_path / "labels" / "pets" / "qrels" / "dev.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nd3\tpets3\t0\nd4\tpets4\t-1\nd5\tpets5\t-1\n")
    with pytest.raises(DataError, match="none of the 3 judged queries has a positive judgement") as e:
        plan_adapt(cfg)
    assert e.value.path == str(qrels)
    # some without one: counted and said, not refused
    qrels.write_text("query-id\tcorpus-id\tscore\nd3\tpets3\t0\nd4\tpets4\t1\nd5\tpets5\t2\n")
    with caplog.at_level(logging.WARNING, logger="drmix.recipes.adapt"):
        assert plan_adapt(cfg).labels["pets"].qrels["d4"] == {"pets4": 1}
    assert "1 of 3 queries have no positive judgement" in caplog.text


def test_a_changed_labels_file_is_named_by_the_stage_check(finished, tmp_path):
    from drmix.train.resume_check import ResumeMismatchError

    cfg, result = finished
    root = Path(cfg.run.output_dir)
    qrels = Path(cfg.labels.dev_labels[1]) / "qrels" / "dev.tsv"
    original = qrels.read_text()
    models = {p.parent.parent.name: p.stat().st_mtime for p in root.glob("*/model/modules.json")}
    try:
        qrels.write_text("\n".join(original.splitlines()[:-1]) + "\n")
        with pytest.raises(ResumeMismatchError, match=re.escape(f"dev labels: dev_labels {qrels}: rows 4 -> 3")):
            run_adapt(cfg)
        again = run_adapt(cfg.replace(resume_with_changes=True))      # the labelled dev made again, nothing trained
        assert again.dev_labels.queries == {"pets": 3, "travel": 2}
        assert json.loads((root / "dev-labels" / "labels.json").read_text())["corpora"]["travel"]["queries"] == 2
        assert {p.parent.parent.name: p.stat().st_mtime for p in root.glob("*/model/modules.json")
                if p.parent.parent.name != "model"} == {k: v for k, v in models.items() if k != "model"}
    finally:
        qrels.write_text(original)


def test_bad_labels_are_one_clear_error_naming_the_file_and_line(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path)
    pets = tmp_path / "labels" / "pets"
    qrels = pets / "qrels" / "dev.tsv"
    good = qrels.read_text()
    # no qrels of the split: the folder named, the splits it has offered
    with pytest.raises(DataError, match="no qrels/test.tsv") as e:
        plan_adapt(cfg.replace(dev_labels_split="test"))
    assert e.value.path == str(pets) and "--dev-labels-split dev" in e.value.fix
    # a judged query without a text: the qrels line
    qrels.write_text(good + "d9\tpets1\t1\n")
    with pytest.raises(DataError, match="query id 'd9' is not in") as e:
        plan_adapt(cfg)
    assert e.value.path == str(qrels) and e.value.line == 5
    # a document of another corpus (the labels of travel given for pets): the qrels line
    qrels.write_text(good.replace("d4\tpets4", "d4\ttravel4"))
    with pytest.raises(DataError, match="document id 'travel4' is not in the corpus of --corpus pets") as e:
        plan_adapt(cfg)
    assert e.value.path == str(qrels) and e.value.line == 3
    qrels.write_text(good)
    # one source for two corpora that is not named as either
    other = tmp_path / "mine"
    other.mkdir()
    with pytest.raises(ConfigError, match="1 --dev-labels for 2 --corpus") as e:
        plan_adapt(cfg.replace(dev_labels=[str(other)]))
    assert "same order" in e.value.fix
    # a labels choice without labels
    with pytest.raises(Exception, match="select_on 'labels' needs labelled dev queries"):
        AdaptConfig(select_on="labels")


def test_sources_match_by_name_else_in_corpus_order(tmp_path):
    corpora = {"pets": "/c/pets", "travel": "/c/travel"}
    (tmp_path / "travel" / "qrels").mkdir(parents=True)
    (tmp_path / "travel" / "qrels" / "dev.tsv").write_text("")
    (tmp_path / "x" / "qrels").mkdir(parents=True)
    (tmp_path / "x" / "qrels" / "dev.tsv").write_text("")
    # by name: a folder, a qrels file inside qrels/ of a folder named as the corpus (any order, any subset)
    assert match_sources([str(tmp_path / "travel" / "qrels" / "dev.tsv")], corpora) == {
        "travel": str(tmp_path / "travel" / "qrels" / "dev.tsv")}
    assert match_sources([str(tmp_path / "x"), str(tmp_path / "travel")], corpora) == {
        "pets": str(tmp_path / "x"), "travel": str(tmp_path / "travel")}
