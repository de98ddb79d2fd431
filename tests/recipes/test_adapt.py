"""``drmix adapt`` on tiny random models and tiny corpora: end to end, labels unread until the final table,
splits without a shared passage, resume after a kill in every stage, a changed setting refused or re-run."""
from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from drmix.data.beir import write_beir
from drmix.errors import ConfigError
from drmix.recipes import adapt as adapt_mod
from drmix.recipes.adapt import (AdaptConfig, Candidate, candidate_plan, kendall_tau, parse_candidate, plan_adapt,
                                 plan_work, run_adapt)

TOPICS = {
    "pets": ["cats", "dogs", "parrots", "hamsters", "rabbits", "ferrets", "goldfish", "turtles"],
    "travel": ["ships", "trains", "bicycles", "airports", "harbours", "tunnels", "bridges", "ferries"],
}
WORDS = {"animals": ["cat", "dog", "horse", "sheep", "goat", "mouse"],
         "food": ["bread", "rice", "apple", "cheese", "pasta", "soup"]}


def write_targets(root: Path) -> list[Path]:
    """Two labelled BEIR corpora: their corpus is the target, their queries and qrels the withheld labels."""
    out = []
    for name, topics in TOPICS.items():
        corpus = {f"{name}{i}": {"title": "", "text": f"This note is about {t} only. People who like {t} read it "
                                                      f"every morning. The {t} club meets each week."}
                  for i, t in enumerate(topics)}
        out.append(write_beir(root / name, corpus, {f"q{i}": t for i, t in enumerate(topics)},
                              {"test": {f"q{i}": {f"{name}{i}": 1} for i in range(len(topics))}}))
    return out


def write_collections(root: Path) -> Path:
    d = root / "train"
    d.mkdir()
    for name, words in WORDS.items():
        (d / f"{name}.jsonl").write_text("".join(
            json.dumps({"query": f"what about the {w}", "positive": f"the {w} is a {name} word",
                        "negatives": [f"the {words[(i + 1) % len(words)]} is not it"]}) + "\n"
            for i, w in enumerate(words)))
    return d


def make_config(tmp: Path, model: str, **over) -> AdaptConfig:
    targets = write_targets(tmp) if not (tmp / "pets").exists() else [tmp / n for n in TOPICS]
    data = write_collections(tmp) if not (tmp / "train").exists() else tmp / "train"
    values = dict(corpus=[str(t) for t in targets], data=[str(data)], eval_data=[str(t) for t in targets],
                  model=model, teacher=model, output_dir=str(tmp / "run"), max_steps=3, batch_size=4,
                  learning_rate=1e-3, warmup_ratio=0.0, query_max_length=16, doc_max_length=32, save_every=1,
                  log_every=1, show_progress=False, device="cpu", seed=3, filter_k=8, max_per_doc=2,
                  dev_queries=4, test_queries=2, negative_ranks="2:4",
                  candidates=["uniform", "size+synthetic", "tdro:reweight+synthetic", "infdds+synthetic"],
                  coco={"max_steps": 3, "batch_size": 4, "span_max_tokens": 8, "span_max_length": 16},
                  stage1={"max_steps": 3}, influence={"warmup_steps": 0, "update_every": 1})
    values.update(over)
    return AdaptConfig(**values)


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch):
    """report.html without its matplotlib figures: the recipe's pages are tested, not the plots (most of a tiny
    run's time)."""
    from drmix.report import html

    monkeypatch.setattr(html, "_line_figure", lambda *a, **kw: None)
    monkeypatch.setattr(html, "_weights_figure", lambda *a, **kw: None)


# ---------------------------------------------------------------------------------------------- labels unread
class LabelGuard:
    """An audit hook (sys.addaudithook: every open() of the process) that fails any opening of the withheld
    files -- the labelled directories' queries.jsonl and qrels -- while armed; the recipe's final evaluation
    disarms it. Hooks cannot be removed, so one guard serves the session and is pointed at new folders."""

    def __init__(self) -> None:
        self.forbidden: list[Path] = []
        self.armed = False
        self.opened_after: list[str] = []
        self.violations: list[str] = []
        sys.addaudithook(self)

    def __call__(self, event: str, args) -> None:
        if event != "open" or not self.forbidden or not args or not isinstance(args[0], (str, bytes, Path)):
            return
        path = str(args[0] if not isinstance(args[0], bytes) else args[0].decode(errors="replace"))
        for root in self.forbidden:
            if path.startswith(str(root)) and (path.endswith("queries.jsonl") or "/qrels" in path):
                if self.armed:
                    self.violations.append(path)
                    raise AssertionError(f"a labelled file was opened before the final evaluation: {path}")
                self.opened_after.append(path)


_GUARD: LabelGuard | None = None


@pytest.fixture()
def label_guard(monkeypatch):
    global _GUARD
    if _GUARD is None:
        _GUARD = LabelGuard()
    original = adapt_mod.final_labelled_evaluation

    def final(*a, **kw):
        _GUARD.armed = False
        return original(*a, **kw)

    monkeypatch.setattr(adapt_mod, "final_labelled_evaluation", final)
    _GUARD.final = final
    _GUARD.armed, _GUARD.opened_after = True, []
    yield _GUARD
    assert _GUARD.violations == []
    _GUARD.armed, _GUARD.forbidden = False, []


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_model_path):
    """One finished run (most tests read it)."""
    global _GUARD
    if _GUARD is None:
        _GUARD = LabelGuard()
    tmp = tmp_path_factory.mktemp("adapt")
    cfg = make_config(tmp, tiny_model_path)
    _GUARD.forbidden = [Path(d).resolve() for d in cfg.eval.eval_data] + [Path(d) for d in cfg.eval.eval_data]
    original = adapt_mod.final_labelled_evaluation

    def final(*a, **kw):
        _GUARD.armed = False
        return original(*a, **kw)

    adapt_mod.final_labelled_evaluation = final
    _GUARD.armed, _GUARD.opened_after = True, []
    lines: list[str] = []
    from drmix.report import html

    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(html, "_line_figure", lambda *a, **kw: None)
            m.setattr(html, "_weights_figure", lambda *a, **kw: None)
            result = run_adapt(cfg, progress=lines.append)
    finally:
        adapt_mod.final_labelled_evaluation = original
        _GUARD.armed = False
    opened = list(_GUARD.opened_after)
    assert _GUARD.violations == []
    _GUARD.forbidden = []
    return cfg, result, lines, opened


def test_labelled_files_are_opened_only_by_the_final_evaluation(finished):
    cfg, result, _, opened = finished
    # the guard was armed through every stage and the selection (an opening would have failed the run) and
    # saw the final evaluation open each labelled directory's queries and qrels
    for d in cfg.eval.eval_data:
        assert any(p.startswith(str(Path(d))) and "qrels" in p for p in opened), d
    assert result.labelled is not None


def test_end_to_end_report_model_and_card(finished):
    cfg, result, lines, _ = finished
    root = Path(cfg.run.output_dir)
    assert list(result.candidates) == ["uniform", "size+synthetic", "uniform+synthetic", "tdro:reweight+synthetic",
                                       "infdds+synthetic"]
    assert result.selected in result.candidates
    assert set(result.models) == {"base model", "uniform fine-tuning", "COCO → uniform",
                                  f"adapted ({result.selected})"}
    for suite in (result.synthetic_test, result.labelled):
        assert set(suite.results["uniform fine-tuning"]) == {"pets", "travel"}
    # every candidate scored on the synthetic dev; the chosen one is the best there (ties: the earlier)
    avg = {lb: sum(r["ndcg@10"] for r in by.values()) / 2 for lb, by in result.selection.items()}
    best = max(avg.values())
    assert result.selected == next(lb for lb in result.candidates if avg[lb] == best)
    summary = json.loads((root / "summary.json").read_text())
    assert summary["selected"] == result.selected and summary["kendall"]["candidates"] == 5
    assert set(summary["comparisons"]) == {"synthetic test: vs uniform fine-tuning",
                                           "synthetic test: adapted vs COCO → uniform",
                                           "test: vs uniform fine-tuning",
                                           "test: adapted vs COCO → uniform"}
    md = (root / "summary.md").read_text()
    assert "## Candidates: synthetic dev against labelled" in md and "Kendall's tau" in md
    assert "| synthetic-pets |" in md                      # the weights table names the synthetic collection
    # the adapted model: a loadable copy of the chosen candidate with the adaptation in its card
    card = (root / "model" / "README.md").read_text()
    assert "### Adapted with drmix adapt" in card and result.selected in card
    assert (root / "model" / "modules.json").is_file() and (root / "report.html").is_file()
    assert (root / "report.html").read_text().count("Kendall") >= 1
    # the run opens its report with one sentence on the labelled split, ends with an index per corpus named in
    # the card and the summary, and plots the candidates' synthetic dev against their labelled score
    assert summary["headline"].startswith(f"The adapted model ({result.selected}) ")
    assert "on the labelled test split of pets and travel;" in summary["headline"]
    assert summary["headline_from"]["on"] == "labelled" and md.startswith(f"# drmix adapt: pets, travel\n\n**")
    assert set(summary["index"]["corpora"]) == {"pets", "travel"} and summary["index"]["candidate"] == result.selected
    assert all(Path(e["location"], "meta.json").is_file() for e in summary["index"]["corpora"].values())
    assert "with the **memory** backend" in card and "## Index (drmix search)" in md
    assert summary["figures"][0]["file"] == "candidates.png" and (root / "candidates.png").is_file()
    assert "data:image/png;base64," in (root / "report.html").read_text()
    # one progress line per stage, with its estimate
    started = [x for x in lines if x.startswith("adapt [")]
    assert len(started) == len(plan_work(cfg)) and all("estimated" in x for x in started)


def test_the_synthetic_splits_share_no_passage(finished):
    cfg, result, _, _ = finished
    root = Path(cfg.run.output_dir) / "synthetic"
    stats = json.loads((root / "stats.json").read_text())["corpora"]
    for name in TOPICS:
        held = {}
        for split in ("dev", "test"):
            rows = [x.split("\t") for x in (root / name / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]]
            held[split] = {r[1] for r in rows}
        train = [json.loads(x) for x in (root / "train" / f"synthetic-{name}.jsonl").read_text().splitlines()]
        used = {r["source_doc"] for r in train} | {d for r in train for d in r["negative_ids"]}
        assert held["dev"] and held["test"] and train
        assert not held["dev"] & held["test"] and not used & (held["dev"] | held["test"])
        s = stats[name]
        assert s["generated"]["crop"] == 16 and sum(s["queries"].values()) == s["kept"]["crop"]


def test_no_stage_is_configured_with_the_labelled_directories(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path)
    plan = plan_adapt(cfg)
    labelled = {str(Path(d)) for d in cfg.eval.eval_data}
    configs = [plan.coco, plan.baseline, *(c for _, c in plan.candidates.values()), *plan.stage1.values()]
    for c in configs:
        flat = c.flat()
        assert flat["eval_data"] == [] and not labelled & set(map(str, flat.get("dev", []))), c.run.output_dir
    infdds = plan.candidates["infdds+synthetic"][1]
    assert infdds.mixture.dev == plan.synthetic_dirs and infdds.mixture.dev_split == "dev"
    tdro = plan.candidates["tdro:reweight+synthetic"][1]
    assert tdro.mixture.transfer == "reweight"
    assert tdro.mixture.weights_file.endswith("tdro-stage1-synthetic/weights.json")
    s1 = plan.stage1[True]
    assert s1.mixture.reference_model.endswith("coco-uniform-synthetic/model") and s1.optim.max_steps == 3
    assert plan.coco.coco.corpus == cfg.target.corpus and plan.coco.optim.max_steps == 3
    assert all(c.model.name_or_path.endswith("coco/model") for _, c in plan.candidates.values())
    assert plan.baseline.model.name_or_path == tiny_model_path
    assert plan.candidates["size+synthetic"][1].mixture.scheme == "size"
    assert plan.candidates["size+synthetic"][1].data.collections[-2:] == plan.train_files


# ---------------------------------------------------------------------------------------------- resume
def test_resume_after_a_kill_in_each_stage(tmp_path, tiny_model_path, monkeypatch, label_guard):
    """Killed in the synthetic set (nothing is left), then in every training stage at step 3 (its step-2
    checkpoint is kept) and in the final evaluation: each rerun resumes the killed stage from its checkpoint and
    reuses every finished one; the last one trains nothing."""
    from drmix import api
    from drmix.augment import synthetic as syn

    cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform", "tdro:reweight+synthetic",
                                                             "infdds+synthetic"])
    label_guard.forbidden = [Path(d) for d in cfg.eval.eval_data]
    root = Path(cfg.run.output_dir)
    original_train, original_write = api.train, syn.write_corpus_synthetic
    first_steps: dict[str, int] = {}

    def train_killed_in(folder: str | None):
        def train(config, **kw):
            out = Path(config.run.output_dir).name

            def watch(ctx):
                first_steps.setdefault(out, ctx.step)
                if out == folder and ctx.step == 3:
                    raise RuntimeError(f"killed in {folder}")
            return original_train(config, callbacks=[*kw.pop("callbacks", ()), watch], **kw)
        return train

    def killed_writer(made, corpus, beir_dir, train_file):
        if made.name == "travel":           # the first corpus is written already (inside the stage's temp folder)
            raise RuntimeError("killed in the synthetic set")
        return original_write(made, corpus, beir_dir, train_file)

    monkeypatch.setattr(syn, "write_corpus_synthetic", killed_writer)
    with pytest.raises(RuntimeError, match="killed in the synthetic set"):
        run_adapt(cfg)
    assert not (root / "synthetic").exists()            # all or nothing
    monkeypatch.setattr(syn, "write_corpus_synthetic", original_write)

    def final_killed(*a, **kw):
        raise RuntimeError("killed in the final evaluation")

    kills = ["coco", "base-uniform", "coco-uniform-synthetic", "tdro-stage1-synthetic", "coco-infdds-synthetic", None]
    previous, stamps = None, {}
    for folder in kills:
        monkeypatch.setattr(api, "train", train_killed_in(folder))
        if folder is None:
            monkeypatch.setattr(adapt_mod, "final_labelled_evaluation", final_killed)
        first_steps.clear()
        with pytest.raises(RuntimeError, match=f"killed in {folder or 'the final evaluation'}"):
            run_adapt(cfg)
        if previous is not None:
            assert first_steps[previous] == 3, previous          # resumed from its step-2 checkpoint
        if folder is not None:
            assert first_steps[folder] == 1 and (root / folder / "checkpoints").is_dir(), folder
            assert not (root / folder / "model").exists()
        for done, mtime in stamps.items():                      # finished stages are reused, not trained again
            assert (root / done / "model" / "modules.json").stat().st_mtime == mtime, done
        stamps = {p.parent.parent.name: p.stat().st_mtime for p in root.glob("*/model/modules.json")}
        previous = folder
    assert (root / "synthetic" / "stats.json").is_file() and (root / "coco-uniform" / "select-dev.json").is_file()
    monkeypatch.setattr(api, "train", train_killed_in(None))
    monkeypatch.setattr(adapt_mod, "final_labelled_evaluation", label_guard.final)
    first_steps.clear()
    result = run_adapt(cfg)
    assert first_steps == {} and (root / "summary.md").is_file() and result.labelled is not None
    assert set(stamps) == {"coco", "base-uniform", "coco-uniform", "coco-uniform-synthetic", "tdro-stage1-synthetic",
                           "coco-tdro-reweight-synthetic", "coco-infdds-synthetic"}


def test_a_changed_setting_is_refused_or_reruns_the_stages_built_on_it(finished, caplog):
    from drmix.train.resume_check import ResumeMismatchError

    cfg, result, _, _ = finished
    root = Path(cfg.run.output_dir)
    recorded = (root / "adapt.yaml").read_bytes()
    before = {p.parent.parent.name: p.stat().st_mtime for p in root.glob("*/model/modules.json")}
    changed = cfg.replace(filter_k=7)
    with pytest.raises(ResumeMismatchError, match="synthetic: filter_k 8 -> 7"):
        run_adapt(changed)
    assert (root / "adapt.yaml").read_bytes() == recorded
    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        run_adapt(changed.replace(resume_with_changes=True))
    after = {p.parent.parent.name: p.stat().st_mtime for p in root.glob("*/model/modules.json")}
    # COCO, the baseline and COCO -> uniform read nothing synthetic: reused; the rest is built on synthetic/
    for kept in ("coco", "base-uniform", "coco-uniform"):
        assert after[kept] == before[kept], kept
    for redone in ("coco-uniform-synthetic", "coco-size-synthetic", "tdro-stage1-synthetic",
                   "coco-tdro-reweight-synthetic", "coco-infdds-synthetic"):
        assert after[redone] != before[redone], redone
    assert "candidate infdds+synthetic: re-run with the changed settings (it is built on synthetic)" in caplog.text
    assert json.loads((root / "synthetic" / "stats.json").read_text())["corpora"]["pets"]["filter_k"] == 7


# ---------------------------------------------------------------------------------------------- small parts
def test_candidates_parse_label_and_order():
    assert parse_candidate(" TDRO:Top:0.7+synthetic ") == Candidate("tdro", "top:0.7", True)
    assert parse_candidate("tdro:top:0.7+synthetic").folder == "coco-tdro-top-0.7-synthetic"
    assert parse_candidate("infdds").label == "infdds"
    plan = candidate_plan(["size", "tdro:reweight+synthetic", "infdds+synthetic", "size"])
    assert [c.label for c in plan] == ["uniform", "size", "uniform+synthetic", "tdro:reweight+synthetic",
                                       "infdds+synthetic"]
    for bad, message in (("tdro", "unknown candidate"), ("tdro:sideways", "unknown tDRO transfer"),
                         ("tdro:top:1.5", "fraction"), ("random+synthetic", "unknown candidate")):
        with pytest.raises((ValueError, ConfigError), match=message):
            parse_candidate(bad)
    with pytest.raises(ConfigError, match="candidates: unknown candidate 'bogus'"):
        from drmix.config import load_config

        load_config(AdaptConfig, None, {"candidates": ["bogus"]})


def test_a_preset_fills_only_what_is_not_given():
    cfg = AdaptConfig(preset="medium", max_steps=7, coco={"max_steps": 5})
    assert cfg.optim.max_steps == 7 and cfg.stages.coco == {"max_steps": 5}          # given: kept
    assert cfg.contrastive.batch_size == 32 and cfg.data.doc_max_length == 24       # the preset's
    assert cfg.stages.candidates[-1] == "infdds+synthetic" and cfg.influence == {"subset_size": 4}
    grouped = AdaptConfig.model_validate({"target": {"preset": "cpu"}, "optim": {"max_steps": 9}})
    assert grouped.optim.max_steps == 9 and grouped.contrastive.batch_size == 16
    assert AdaptConfig().optim.max_steps == 1000                                     # no preset: the defaults
    assert grouped.replace(seed=4).contrastive.batch_size == 16


def test_kendall_tau_by_hand():
    # one discordant pair (b, c) of six: (5 - 1) / 6
    k = kendall_tau({"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 0.1, "b": 0.3, "c": 0.2, "d": 0.4})
    assert k["tau"] == pytest.approx(4 / 6) and k["candidates"] == 4
    assert kendall_tau({"a": 1, "b": 2}, {"a": 2, "b": 1})["tau"] == pytest.approx(-1.0)


def test_work_plan_counts_by_hand(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path, num_negatives=2, eval_max_docs=5)
    work = {w.name: w for w in plan_work(cfg)}
    assert work["COCO"].examples == 3 * 4
    assert work["uniform fine-tuning"].examples == 3 * 4 * 2              # one query, a positive, 2 negatives / 2
    assert work["tDRO stage 1 (+synthetic)"].examples == 3 * 4 * 4.5
    # 16 documents (+ at most 2 sentences each); 5 candidates on 2 dev sets of 5 documents
    assert work["synthetic set"].passages == 16 + 32
    assert work["selection on synthetic dev"].passages == 5 * 10
    assert list(work)[:3] == ["synthetic set", "COCO", "uniform fine-tuning"]


def test_candidates_are_compared_on_the_capped_sub_corpus_and_the_final_evaluation_on_the_whole(finished):
    cfg, result, _, _ = finished
    for label, model in result.candidates.items():
        key = json.loads((Path(model).parent / "select-dev.json").read_text())["key"]
        assert key["max_docs"] == 100_000 and key["split"] == "dev", label      # --select-max-docs' default
    key = json.loads((Path(result.candidates["uniform"]).parent / "synthetic-test.json").read_text())["key"]
    assert key["max_docs"] is None                                                 # the whole corpus


def test_selection_cap_estimate_and_gpu_hours_by_hand(tmp_path, tiny_model_path):
    from drmix.recipes.adapt import StageWork, estimate_table, gpu_hours, select_max_docs

    cfg = make_config(tmp_path, tiny_model_path, select_max_docs=3)
    assert select_max_docs(cfg) == 3
    assert select_max_docs(cfg.replace(eval_max_docs=2)) == 2                      # the smaller cap wins
    assert select_max_docs(cfg.replace(select_max_docs=None)) is None
    assert select_max_docs(cfg.replace(select_max_docs=None, eval_max_docs=7)) == 7
    work = {w.name: w for w in plan_work(cfg)}
    # 5 candidates on 2 corpora of 8 documents, 3 of each; the final evaluation: 4 report models and
    # uniform+synthetic on the synthetic test and, with --eval-data, the base model, the baseline and 5 candidates
    # on the labelled split; the index: the 16 documents once
    assert work["selection on synthetic dev"].passages == 5 * 2 * 3
    assert work["final evaluation"].passages == (5 + 7) * 16
    assert work["index of the adapted model"].passages == 16 and list(work)[-1] == "index of the adapted model"
    no_labels = {w.name: w for w in plan_work(cfg.replace(eval_data=[]))}
    assert no_labels["final evaluation"].passages == 5 * 16
    assert "index of the adapted model" not in {w.name for w in plan_work(cfg.replace(index=False))}
    assert {w.name: w for w in plan_work(cfg.replace(candidates=["size"]))}["final evaluation"].passages == (4 + 4) * 16
    # 3.6M examples at 1,000/s and 36M passages at 10,000/s: two hours on one GPU, a quarter hour on eight
    assert gpu_hours([StageWork("a", examples=3_600_000), StageWork("b", passages=36_000_000)], 8) == (2.0, 0.25)
    # 7.2M of b's passages encoded whole by every GPU (its queries): 0.2 h of them, 0.8 h split over eight
    assert gpu_hours([StageWork("a", examples=3_600_000), StageWork("b", passages=36_000_000, unsharded=7_200_000)],
                     8) == pytest.approx((2.0, 0.125 + 0.2 + 0.1))
    # the synthetic set's 2 corpora x 8 documents x 2 pseudo-queries; tDRO stage 1 mines its queries whole
    stage1 = "tDRO stage 1 (+synthetic)"
    assert work["synthetic set"].unsharded == 32 and work[stage1].unsharded == work[stage1].passages / 2
    assert {w.name for w in work.values() if w.unsharded} == {"synthetic set", stage1}
    from drmix.recipes.throughput import Rate, Rates

    measured = Rates("cpu", Rate(0.1, True, "two steps"), {"model": Rate(0.5, True, "two batches"),
                                                           "teacher": Rate(0.2, False, "not loaded")})
    rows = estimate_table(cfg, gpus=4, rates=measured)
    assert "- training: 0.1 examples/s (measured: two steps)" in rows
    assert "- encoding by the teacher: 0.2 passages/s (assumed: not loaded)" in rows
    # COCO's 12 examples at 0.1/s: 2 min; the synthetic set's 48 passages at the teacher's 0.2/s: 4 min; the
    # selection's 30 and the final evaluation's 192 at the model's 0.5/s: 1 min and 6.4 min
    for row in ("| COCO | 12 | 0 | 2.0 |", "| synthetic set | 0 | 48 | 4.0 |",
                "| selection on synthetic dev | 0 | 30 | 1.0 |", "| final evaluation | 0 | 192 | 6.4 |"):
        assert row in rows, row
    text = " ".join(rows.split())
    assert "For 16 target passages:" in text and "on 4 GPUs" in text and "passages/s a GPU, assumed" in text
    assert "under torchrun --nproc-per-node 4, training is data-parallel" in text
    with pytest.raises(ConfigError, match="--estimate-gpus"):
        estimate_table(cfg, gpus=0, rates=measured)


def test_the_estimate_measures_the_run_with_its_own_model_lengths_and_passages(tmp_path, tiny_model_path,
                                                                               monkeypatch):
    from drmix.recipes import throughput
    from drmix.recipes.adapt.estimate import machine_rates

    cfg = make_config(tmp_path, tiny_model_path, num_negatives=1)
    asked = {}
    monkeypatch.setattr(throughput, "measure", lambda device, **kw: asked.update(device=device, **kw) or "rates")
    assert machine_rates(cfg, {"pets": str(tmp_path / "pets")}, passages=3) == "rates"
    texts = asked.pop("texts")
    assert asked == {"device": "cpu", "model": tiny_model_path, "batch_size": 4, "query_max_length": 16,
                     "doc_max_length": 32, "num_negatives": 1, "encoders": {"teacher": (tiny_model_path, None)}}
    assert len(texts) == 3 and texts[0].startswith("This note is about cats only.")   # the corpus's own passages


def test_bad_inputs_fail_before_any_stage(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path)
    for change, message in (({"corpus": []}, "no target corpus"), ({"data": []}, "no training collections"),
                            ({"eval_split": "dev"}, "no qrels/dev.tsv"),
                            ({"eval_data": [str(tmp_path / "nope")]}, "BEIR directory not found"),
                            ({"corpus": [str(tmp_path / "pets"), str(tmp_path / "pets")]}, "same name"),
                            ({"influence": {"update_evry": 3}}, "update_evry")):
        with pytest.raises(ConfigError, match=message):
            run_adapt(cfg.replace(**change))
        assert not (tmp_path / "run").exists()


def test_the_teachers_corpus_embeddings_are_cached_and_rank_as_mine_ranked(tmp_path, tiny_model_path, monkeypatch):
    """The teacher's corpus embeddings come from the one content-keyed embedding cache: the corpus is encoded
    once across the teacher's uses, not at all on a rerun (a fresh load), and an edited passage alone."""
    from drmix.augment.mine import mine_ranked
    from drmix.model.encoder import load_encoder
    from drmix.retrieval import encode

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DRMIX_EMBEDDING_CACHE", raising=False)
    teacher = load_encoder(tiny_model_path)
    docs = [f"a note about {t}" for ts in TOPICS.values() for t in ts]
    ids = [f"d{i}" for i in range(len(docs))]
    queries = ["cats and dogs", "trains", "harbour ferries"]
    encoded: list[int] = []
    original = encode._encode_here

    def counting(model, texts, **kw):  # what reaches the model
        encoded.append(len(texts))
        return original(model, texts, **kw)

    monkeypatch.setattr(encode, "_encode_here", counting)
    first = adapt_mod.teacher_ranker(teacher, tiny_model_path)(queries, ids, docs, 5)
    assert encoded == [len(docs), 3]                   # the corpus, then the queries
    again = adapt_mod.teacher_ranker(teacher, tiny_model_path)(queries, ids, docs, 5)
    assert encoded[2:] == [3]                          # another use of the teacher: the queries only
    rerun = adapt_mod.teacher_ranker(load_encoder(tiny_model_path), tiny_model_path)(queries, ids, docs, 5)
    assert encoded[3:] == [3]                          # a rerun (the teacher loaded again): the queries only
    assert first == again == rerun == [[d for d, _ in r] for r in mine_ranked(queries, ids, docs, teacher, top_n=5)]
    edited, before = [*docs[:-1], "a note about ferries and more"], len(encoded)
    adapt_mod.teacher_ranker(teacher, tiny_model_path)(queries, ids, edited, 5)
    assert encoded[before:] == [1, 3]                  # the edited passage alone
    assert not (tmp_path / "cache" / "embeddings").exists()  # no second cache beside drmix.retrieval.embedding_cache


def test_a_model_folder_the_recipe_did_not_write_is_refused(tmp_path, tiny_model_path):
    cfg = make_config(tmp_path, tiny_model_path)
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "adapt.yaml").write_text(cfg.dump_yaml())     # an earlier run's folder, and a user's model/
    (tmp_path / "run" / "model" / "mine.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not the adapted model"):
        run_adapt(cfg)
    assert not (tmp_path / "run" / "synthetic").exists()
    assert (tmp_path / "run" / "model" / "mine.txt").read_text() == "mine"


def test_a_second_run_into_an_output_directory_another_run_holds_is_refused(tmp_path, tiny_model_path):
    """One run at a time into an --output-dir (under torchrun rank 0 holds it): a live process's lock refuses the
    run before any stage, and the other run's lock and files are left as they are."""
    import os
    import socket

    from drmix.lock import LOCK_NAME, RunLockedError

    cfg = make_config(tmp_path, tiny_model_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(RunLockedError, match="another run is writing"):
        run_adapt(cfg)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [LOCK_NAME]
    (tmp_path / "run" / LOCK_NAME).unlink()     # the other run ended: this one takes the lock, then the claim
    (tmp_path / "run" / "notes.txt").write_text("mine")   # refuses a user's folder as before, lock released
    with pytest.raises(ConfigError, match="holds files drmix did not write"):
        run_adapt(cfg)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


def test_an_llm_endpoint_writes_queries_that_are_counted_apart_and_cached(tmp_path, tiny_model_path):
    from loopback_llm import LoopbackServer, chat

    topics = [t for ts in TOPICS.values() for t in ts]

    def reply(body, n):
        passage = body["messages"][-1]["content"]
        topic = next(t for t in topics if t in passage)
        return 200, chat(f"Task: find the club\nQuery: when does the {topic} club meet\nLanguage: English")

    server = LoopbackServer(reply)
    try:
        cfg = make_config(tmp_path, tiny_model_path, candidates=["uniform"], llm=server.url, llm_model="served",
                          llm_options={"max_retries": 0}, generate_max_docs=3, eval_data=[])
        result = run_adapt(cfg)
        calls = len(server.bodies)
    finally:
        server.close()
    assert calls == 6 and all(b["model"] == "served" for b in server.bodies)     # 3 documents of each corpus
    for name in TOPICS:
        s = result.synthetic[name]
        assert s["generated"] == {"crop": 16, "generate": 3} and s["llm"]["kept"] == 3
        assert sum(s["kept"].values()) == sum(s["queries"].values())
    assert (Path(cfg.run.output_dir) / "llm-cache.jsonl").is_file() and result.labelled is None
    assert "LLM-generated queries by" in (Path(cfg.run.output_dir) / "summary.md").read_text()


def test_the_selection_keeps_the_best_and_gives_ties_to_the_earlier_candidate():
    from drmix.recipes.adapt import select_candidate

    assert select_candidate({"uniform": 0.30, "size": 0.35, "infdds": 0.32}) == "size"
    assert select_candidate({"uniform": 0.30, "size": 0.30, "infdds": 0.30}) == "uniform"
    assert select_candidate({"uniform": 0.30, "size": 0.30 + 1e-13, "infdds": 0.31}) == "infdds"
