"""``pretrain_coco``: a run writes a SentenceTransformer folder and span counts; resume gives identical weights."""
from __future__ import annotations

import json

import pytest
import torch

from drmix.errors import ConfigError
from drmix.pretrain.runner import CocoConfig, pretrain_coco
from drmix.train.resume_check import ResumeMismatchError

TEXT = ("Sentence number {i} talks about topic {j} at length. It continues with more words on {j}. "
        "A third sentence mentions item {i} again. Finally the document ends here for {j}.")


@pytest.fixture()
def corpus(tmp_path):
    d = tmp_path / "target"
    d.mkdir()
    rows = [{"_id": str(i), "title": f"Doc {i}", "text": TEXT.format(i=i, j=i % 3)} for i in range(12)]
    rows.append({"_id": "short", "title": "", "text": "Too short."})
    (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def cfg(model, corpus, out, **kw):
    base = dict(model=model, corpus=[str(corpus)], output_dir=str(out), max_steps=4, batch_size=4, save_every=2,
                span_max_tokens=12, show_progress=False, log_every=1, warmup_ratio=0.0, seed=7)
    base.update(kw)
    return CocoConfig(**base)


def params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_coco_run_writes_model_and_counts(tiny_model_path, corpus, tmp_path):
    res = pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "run"))
    assert (res.model_dir / "modules.json").exists()
    stats = json.loads((tmp_path / "run" / "spans.json").read_text())
    assert stats[0]["documents"] == 13 and stats[0]["kept"] == 12 and stats[0]["dropped_short"] == 1
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
              if '"loss"' in line]
    assert len(losses) == 4 and all(x > 0 for x in losses)
    card = (res.model_dir / "README.md").read_text(encoding="utf-8")  # the COCO model's own card
    assert "COCO-pretrained" in card and "two spans of one document" in card and "eprint = {2210.15212}" in card


def test_coco_resume_gives_identical_weights(tiny_model_path, corpus, tmp_path):
    from sentence_transformers import SentenceTransformer

    full = pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "full"))

    class Killed(Exception):
        pass

    def kill_at_3(ctx):
        if ctx.step == 3:
            raise Killed

    with pytest.raises(Killed):
        pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "cut"), callbacks=[kill_at_3])
    with pytest.raises(ConfigError, match="already holds a run"):
        pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "cut"))
    # a resume with another COCO setting (one the trainer's own check does not see) is refused before
    # coco.yaml, the record of the earlier settings, is touched
    recorded = (tmp_path / "cut" / "coco.yaml").read_bytes()
    with pytest.raises(ResumeMismatchError, match="span_max_tokens 12 -> 20"):
        pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "cut", resume=True, span_max_tokens=20))
    assert (tmp_path / "cut" / "coco.yaml").read_bytes() == recorded
    resumed = pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "cut", resume=True))
    assert resumed.steps == 4
    a = SentenceTransformer(str(full.model_dir), device="cpu")
    b = SentenceTransformer(str(resumed.model_dir), device="cpu")
    assert torch.equal(params(a), params(b))


def test_no_corpus_is_an_error(tiny_model_path, tmp_path):
    with pytest.raises(ConfigError, match="no target corpus"):
        pretrain_coco(CocoConfig(model=tiny_model_path, output_dir=str(tmp_path / "x")))


def test_coco_with_grad_cache_matches_the_full_batch(tiny_model_path, corpus, tmp_path):
    """GradCache (--grad-cache-chunk) wraps the COCO loss like InfoNCE: same weights as the uncached batch."""
    from sentence_transformers import SentenceTransformer

    plain = pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "plain", max_steps=2, save_every=2))
    cached = pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "cached", max_steps=2, save_every=2,
                               grad_cache_chunk=1))
    a = params(SentenceTransformer(str(plain.model_dir), device="cpu"))
    b = params(SentenceTransformer(str(cached.model_dir), device="cpu"))
    base = params(SentenceTransformer(tiny_model_path, device="cpu"))
    assert not torch.equal(a, base)                   # the run trained
    assert torch.allclose(a, b, atol=1e-5, rtol=0)    # and chunking changed nothing


def _two_corpora(tmp_path, sizes=(20, 4)):
    dirs = []
    for name, n in zip(("big", "small"), sizes):
        d = tmp_path / name
        d.mkdir()
        rows = [{"_id": f"{name}{i}", "title": "", "text": TEXT.format(i=f"{name}{i}", j=i % 3)} for i in range(n)]
        (d / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        dirs.append(str(d))
    return dirs


def test_pooled_batches_mix_corpora_and_see_each_document_once_per_epoch(tiny_model_path, tmp_path, monkeypatch):
    """The authors' rule (COCO/run_coco_pre_training.py: one dataset of all target corpora, random batches):
    one epoch of 24 documents is 6 batches of 4 holding every document exactly once, corpora mixed."""
    from drmix.pretrain import coco

    built = []
    real = coco.SpanBuilder.build

    def spy(self, pairs):
        built.append(list(pairs))
        return real(self, pairs)

    monkeypatch.setattr(coco.SpanBuilder, "build", spy)
    corpora = _two_corpora(tmp_path)
    pretrain_coco(CocoConfig(model=tiny_model_path, corpus=corpora, output_dir=str(tmp_path / "run"), max_steps=6,
                             batch_size=4, save_every=100, span_max_tokens=12, show_progress=False, seed=3))
    epoch = built[:6]
    assert all(c == 0 for b in epoch for c, _ in b)                    # one pooled dataset
    assert sorted(r for b in epoch for _, r in b) == list(range(24))   # every document once
    small = [sum(r >= 20 for _, r in b) for b in epoch]                 # rows 20..23: the small corpus
    assert sum(small) == 4 and max(small) < 4                          # its documents are spread over batches


def test_per_corpus_mixture_is_kept_as_an_option(tiny_model_path, tmp_path, monkeypatch):
    """``mixture: uniform`` with homogeneous batching: every batch from one corpus (drmix's earlier rule)."""
    from drmix.pretrain import coco

    built = []
    real = coco.SpanBuilder.build
    monkeypatch.setattr(coco.SpanBuilder, "build", lambda self, pairs: (built.append(list(pairs)), real(self, pairs))[1])
    pretrain_coco(CocoConfig(model=tiny_model_path, corpus=_two_corpora(tmp_path), output_dir=str(tmp_path / "run"),
                             max_steps=4, batch_size=4, save_every=100, span_max_tokens=12, show_progress=False,
                             mixture="uniform"))
    assert all(len({c for c, _ in b}) == 1 for b in built[:4])


@pytest.mark.parametrize("dropout", [False, True])
def test_backbone_runs_in_eval_mode_unless_dropout_is_asked(tiny_model_path, corpus, tmp_path, monkeypatch, dropout):
    """COCO/modeling.py, CoCondenserForPretraining.forward calls ``self.lm.eval()``: no dropout by default."""
    import drmix.model.backbone as backbone

    seen = []
    real = backbone.load_sentence_transformer

    def load(*a, **k):
        m = real(*a, **k)
        drops = [mod for mod in m.modules() if isinstance(mod, torch.nn.Dropout)]
        assert drops
        for mod in drops:
            mod.register_forward_pre_hook(lambda mod, inp: seen.append(mod.training))
        return m

    monkeypatch.setattr(backbone, "load_sentence_transformer", load)
    pretrain_coco(cfg(tiny_model_path, corpus, tmp_path / "run", max_steps=2, dropout=dropout))
    assert seen and set(seen) == {dropout}
