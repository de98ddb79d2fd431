"""``pretrain_coco``: a run writes a SentenceTransformer folder and span counts; resume gives identical weights."""
from __future__ import annotations

import json

import pytest
import torch

from drmix.errors import ConfigError
from drmix.pretrain.runner import CocoConfig, pretrain_coco

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
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 4 and all(x > 0 for x in losses)


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
