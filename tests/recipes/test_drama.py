"""``drmix pipeline drama`` on a toy corpus: augment -> train -> one table of teacher, untuned and trained student."""
from __future__ import annotations

import json

import pytest

from drmix.data.beir import write_beir
from drmix.errors import ConfigError
from drmix.recipes.drama import DramaConfig, run_drama_pipeline, summary_table

TOPICS = ["cats", "dogs", "ships", "trains", "rivers", "mountains", "music", "bread"]
CORPUS = {f"d{i}": {"title": "", "text": f"This note is about {t} only. People who like {t} read it often."}
          for i, t in enumerate(TOPICS)}


def test_pipeline_end_to_end_and_resume(tmp_path, tiny_model_path, capsys):
    toy = write_beir(tmp_path / "toy", CORPUS, {f"q{i}": t for i, t in enumerate(TOPICS)},
                     {"test": {f"q{i}": {f"d{i}": 1} for i in range(8)}})
    cfg = DramaConfig(corpus=[str(toy)], teacher=tiny_model_path, model=tiny_model_path, test_data=[str(toy)],
                      dims=[8], output_dir=str(tmp_path / "run"), max_steps=2, batch_size=4, negative_ranks="3:5",
                      show_progress=False, device="cpu", save_every=100)
    summary = run_drama_pipeline(cfg)
    aug = json.loads((tmp_path / "run" / "augment" / "toy-crop.jsonl").read_text().splitlines()[0])
    assert aug["augment"] == "crop+mine" and len(aug["positives"]) == 8 and len(aug["negatives"]) == 3
    assert summary["augment"]["toy"]["crop"] == {"kept": 16}
    assert set(summary["results"]) == {"teacher", "untuned", "student"}
    assert set(summary["results"]["student"]["toy"]) >= {"ndcg@10", "ndcg@10@8d", "recall@100"}
    assert (tmp_path / "run" / "train" / "model" / "modules.json").exists()
    table = (tmp_path / "run" / "summary.md").read_text()
    assert "| toy | ndcg@10@8d |" in table
    # a rerun reuses every finished step
    again = run_drama_pipeline(cfg)
    assert again["results"] == summary["results"]


def test_a_rerun_with_a_changed_augmentation_setting_is_refused_or_redoes_it(tmp_path, tiny_model_path, caplog):
    import logging

    from drmix.train.resume_check import ResumeMismatchError

    toy = write_beir(tmp_path / "toy", CORPUS, {"q0": "cats"}, {"test": {"q0": {"d0": 1}}})
    cfg = DramaConfig(corpus=[str(toy)], teacher=tiny_model_path, model=tiny_model_path,
                      output_dir=str(tmp_path / "run"), max_steps=1, batch_size=4, negative_ranks="3:5",
                      show_progress=False, device="cpu", save_every=100, max_per_doc=2)
    run_drama_pipeline(cfg)
    crop = tmp_path / "run" / "augment" / "toy-crop.jsonl"
    assert len(crop.read_text().splitlines()) == 16
    recorded = (tmp_path / "run" / "drama.yaml").read_bytes()
    changed = cfg.replace(**{"max_per_doc": 1})
    with pytest.raises(ResumeMismatchError, match="augment: max_per_doc 2 -> 1"):
        run_drama_pipeline(changed)
    assert (tmp_path / "run" / "drama.yaml").read_bytes() == recorded
    with caplog.at_level(logging.WARNING, logger="drmix.recipes"):
        run_drama_pipeline(changed.replace(**{"resume_with_changes": True}))
    assert len(crop.read_text().splitlines()) == 8          # one cropped query per document now
    assert "student: re-run with the changed settings (it is built on augment)" in caplog.text
    # a test-set setting changes no step: reused as it is
    run_drama_pipeline(changed.replace(**{"test_max_queries": 3}))


def test_summary_table_share_of_teacher():
    res = {"teacher": {"a": {"ndcg@10": 0.5}}, "untuned": {"a": {"ndcg@10": 0.2}}, "student": {"a": {"ndcg@10": 0.45}}}
    assert summary_table(res, ["ndcg@10"]).splitlines()[2] == "| a | ndcg@10 | 0.5000 | 0.2000 | 0.4500 | 90.0% |"


def test_no_corpus_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no target corpus"):
        run_drama_pipeline(DramaConfig(output_dir=str(tmp_path / "x")))


def test_generation_samples_documents_across_the_corpus(tmp_path, monkeypatch):
    """The LLM sees a seeded sample spread over the corpus, not the first ``generate_max_docs`` ids."""
    import drmix.augment.examples as examples
    import drmix.augment.generate as generate
    from drmix.augment.generate import generation_ids
    from drmix.recipes.drama import augment_corpus

    ids = [f"d{i:04d}" for i in range(1000)]
    picked = generation_ids(ids, 100, seed=3)
    assert len(set(picked)) == 100 and set(picked) <= set(ids)
    positions = sorted(ids.index(d) for d in picked)
    assert positions[-1] > 500 and positions != list(range(100))      # not the head of the corpus
    assert generation_ids(ids, 100, seed=3) == picked and generation_ids(ids, 100, seed=4) != picked
    assert generation_ids(ids[:50], 100, seed=3) == ids[:50]            # fewer documents: all of them

    seen = {}

    def fake_generate(texts, backend, **kw):
        seen["ids"] = list(texts)
        return [], type("S", (), {"as_dict": lambda self: {}})()

    monkeypatch.setattr(generate, "generate_queries", fake_generate)
    monkeypatch.setattr(examples, "mine_examples", lambda rows, *a, **k: (rows, {}))
    monkeypatch.setattr(examples, "write_collection", lambda path, rows, **kw: None)
    corpus = {d: {"title": "", "text": "one two three four five six seven eight nine ten. " * 2} for d in ids}
    cfg = DramaConfig(corpus=["x"], generate=True, generate_max_docs=100, max_docs=None, seed=3,
                      output_dir=str(tmp_path))
    augment_corpus("toy", corpus, teacher=None, cfg=cfg, out=tmp_path, backend=None)
    assert seen["ids"] == picked


def test_defaults_are_the_papers_recipe():
    """DRAMA Sec. 3.1 and B: cropped queries ranks 1-10 positives / 30-50 negatives (k 50, m 10, n 20), reranked
    top-1 positive / ranks 10-20 negatives (k 20, n 10), seven hard negatives per query; generation and reranking
    on whenever an LLM is configured, off without one, and either can still be set."""
    from drmix.augment.rerank import RERANK_NEGATIVES
    from drmix.augment.steps import enabled_steps

    bare = DramaConfig(corpus=["x"])
    assert (bare.recipe.positive_ranks, bare.recipe.negative_ranks, bare.contrastive.num_negatives) == \
        ("1:10", "30:50", 7)
    assert (RERANK_NEGATIVES.start, RERANK_NEGATIVES.end) == (10, 20)
    assert (bare.recipe.generate, bare.recipe.rerank) == (False, False)
    assert [s.name for s in enabled_steps(bare.recipe)] == ["crop"]
    llm = DramaConfig(corpus=["x"], llm={"backend": "openai", "base_url": "http://h/v1", "model": "m"})
    assert (llm.recipe.generate, llm.recipe.rerank) == (True, True)
    assert [s.name for s in enabled_steps(llm.recipe)] == ["crop", "generate", "rerank"]
    assert DramaConfig(corpus=["x"], llm={"model": "m"}, rerank=False).recipe.rerank is False
    assert DramaConfig(corpus=["x"], generate=True).recipe.generate is True
