"""COCO: chunking by hand, the drop rule with counts, the seeded pair draw, the loss by hand, exact resume."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from drmix.errors import DataError
from drmix.pretrain.coco import SpanBuilder, build_spans, chunk_text, coco_losses, draw_pair, pack_chunks


class FixedRng:
    """Stands in for a numpy Generator: returns the given uniforms in order."""

    def __init__(self, values):
        self.values = list(values)

    def random(self):
        return self.values.pop(0)


def test_greedy_packing_by_hand():
    # lengths 10, 15, 10, 40, 5, 5 with max 30 and no random breaks:
    # [10+15=25] (+10 overflows) [10] [40 alone, too long] [5+5]
    assert pack_chunks([10, 15, 10, 40, 5, 5], max_tokens=30, new_chunk_probability=0.0) == [[0, 1], [2], [3], [4, 5]]


def test_random_new_chunk_before_a_sentence():
    # one uniform per sentence; 0.05 < 0.1 before sentence 2 forces a break although 3+3 fits
    rng = FixedRng([0.5, 0.9, 0.05, 0.7])
    assert pack_chunks([3, 3, 3, 3], max_tokens=30, new_chunk_probability=0.1, rng=rng) == [[0, 1], [2, 3]]
    # the first sentence never breaks (nothing to close)
    assert pack_chunks([3, 3], max_tokens=30, new_chunk_probability=0.1, rng=FixedRng([0.0, 0.5])) == [[0, 1]]


def test_chunk_text_uses_sentences_and_token_counts():
    text = "The cat sat. The dog ran away\nquickly. Birds fly."   # a wrapped line stays one sentence
    words = lambda xs: [len(x.split()) for x in xs]  # noqa: E731 - token count = words
    assert chunk_text(text, words, max_tokens=8, new_chunk_probability=0.0) == [
        "The cat sat. The dog ran away quickly.", "Birds fly."]  # 3 + 5 = 8 fits, +2 overflows
    assert chunk_text(text, words, max_tokens=4, new_chunk_probability=0.0) == [
        "The cat sat.", "The dog ran away quickly.", "Birds fly."]
    assert chunk_text("   ", words) == []


def test_pair_draw_is_distinct_and_seeded():
    a = [draw_pair(3, np.random.default_rng(5)) for _ in range(1)]
    b = [draw_pair(3, np.random.default_rng(5)) for _ in range(1)]
    assert a == b
    rng = np.random.default_rng(0)
    pairs = [draw_pair(3, rng) for _ in range(300)]
    assert all(i != j for i, j in pairs)
    assert {(i, j) for i, j in pairs} == {(i, j) for i in range(3) for j in range(3) if i != j}  # not only adjacent


def test_loss_by_hand_on_two_pairs():
    # spans a0=(1,0), a1=(0,1), b0=(1,0), b1=(0,1); temperature 1
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # row a0 scores [a0 masked, a1=0, b0=1, b1=0] -> -log(e / (e + 1 + 1)); the same for every span
    expected = -math.log(math.e / (math.e + 2))
    out = coco_losses(a, b, temperature=1.0)
    assert torch.allclose(out, torch.tensor([expected, expected]), atol=1e-6)


def test_loss_by_hand_on_three_pairs_with_temperature():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    b = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    t = 0.5
    e = lambda s: math.exp(s / t)  # noqa: E731
    # a0=(1,0): others a1=0, a2=1, b0=0 (target), b1=0, b2=1
    la0 = -math.log(e(0) / (e(0) + e(1) + e(0) + e(0) + e(1)))
    # b0=(0,1): others a0=0 (target), a1=1, a2=0, b1=1, b2=0
    lb0 = -math.log(e(0) / (e(0) + e(1) + e(0) + e(1) + e(0)))
    # a2=(1,0): a0=1, a1=0, b0=0, b1=0, b2=1 (target)
    la2 = -math.log(e(1) / (e(1) + e(0) + e(0) + e(0) + e(1)))
    # b2=(1,0): a0=1, a1=0, a2=1 (target), b0=0, b1=0
    lb2 = -math.log(e(1) / (e(1) + e(0) + e(1) + e(0) + e(0)))
    out = coco_losses(a, b, temperature=t)
    assert out[0].item() == pytest.approx((la0 + lb0) / 2, abs=1e-5)
    assert out[2].item() == pytest.approx((la2 + lb2) / 2, abs=1e-5)


def _corpus(path, docs):
    path.write_text("".join(json.dumps({"_id": str(i), "title": "", "text": t}) + "\n" for i, t in enumerate(docs)))
    return path


LONG = ("Alpha beta gamma delta epsilon zeta eta theta. Iota kappa lambda mu nu xi omicron pi. "
        "Rho sigma tau upsilon phi chi psi omega. One two three four five six seven eight.")


def test_short_documents_are_dropped_and_counted(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    f = _corpus(tmp_path / "c.jsonl", [LONG, "Just one sentence.", LONG + " " + LONG, ""])
    ds, stats = build_spans(f, tmp_path / "cache", tok, max_tokens=12, new_chunk_probability=0.0, name="c")
    assert (stats.documents, stats.kept, stats.dropped_short, stats.dropped_empty) == (4, 2, 1, 1)
    assert [len(c) for c in ds["chunks"]] == [4, 8]          # each sentence is 9-12 tokens: one a chunk
    assert stats.chunks == 12
    builder = SpanBuilder([type("C", (), {"dataset": ds})()], seed=3)
    b1 = builder.build([(0, 0), (0, 1), (0, 0)])
    assert all(q != p for q, p in zip(b1.queries, b1.positives))
    again = SpanBuilder([type("C", (), {"dataset": ds})()], seed=3).build([(0, 0), (0, 1), (0, 0)])
    assert (b1.queries, b1.positives) == (again.queries, again.positives)


def test_corpus_without_two_chunk_documents_is_an_error(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    f = _corpus(tmp_path / "short.jsonl", ["One sentence.", "Another one."])
    with pytest.raises(DataError, match="2 short documents|2 documents: 2 with one chunk"):
        build_spans(f, tmp_path / "cache", tok)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        build_spans(empty, tmp_path / "cache", tok)


# ---------------------------------------------------------------- transcriptions of the authors' code
# github.com/OpenMatch/COCO-DR, COCO/helper/create_train_co_short.py (encode_one) and COCO/modeling.py
# (CoCondenserForPretraining.compute_contrastive_loss), written out plainly.

def _authors_encode_one(lengths, uniforms, maxlen=30):
    """encode_one's packing loop on token counts; ``uniforms[i]`` is random.random() at sentence i (the
    authors draw it only when the length test is False -- the same coupling, since ``or`` short-circuits)."""
    spans, span = [], []
    for i, n in enumerate(lengths):
        if n > 0:
            if n + len(span) > maxlen or uniforms[i] <= 0.1:
                if len(span) > 0:
                    spans.append(span)
                span = []
            span.extend([i] * n)
    if len(span) > 0:
        spans.append(span)
    return [sorted(set(s)) for s in spans]


def test_chunking_matches_the_authors_create_train_co_short():
    rng = np.random.default_rng(11)
    for _ in range(300):
        lengths = [int(x) for x in rng.integers(1, 45, size=int(rng.integers(1, 12)))]
        uniforms = [float(u) for u in rng.random(len(lengths))]
        ours = pack_chunks(lengths, max_tokens=30, new_chunk_probability=0.1, rng=FixedRng(uniforms))
        assert ours == _authors_encode_one(lengths, uniforms)


def _authors_contrastive_loss(co_cls_hiddens, world_size=1):
    """compute_contrastive_loss: spans interleaved (pair i at rows 2i, 2i+1), target the other of the pair."""
    n = co_cls_hiddens.size(0)
    target = torch.arange(n).view(-1, 2).flip([1]).flatten()
    sim = co_cls_hiddens @ co_cls_hiddens.T
    sim.fill_diagonal_(float("-inf"))
    return torch.nn.functional.cross_entropy(sim, target, reduction="none") * world_size


def test_loss_matches_the_authors_compute_contrastive_loss():
    gen = torch.Generator().manual_seed(5)
    for B in (2, 3, 8):
        a, b = torch.randn(B, 6, generator=gen), torch.randn(B, 6, generator=gen)
        theirs = _authors_contrastive_loss(torch.stack([a, b], dim=1).reshape(2 * B, 6))   # [a0, b0, a1, b1, ...]
        ours = coco_losses(a, b, temperature=1.0)                                        # raw inner product
        assert torch.allclose(ours, 0.5 * (theirs[0::2] + theirs[1::2]), atol=1e-5)
        assert ours.mean().item() == pytest.approx(theirs.mean().item(), abs=1e-5)       # the loss they optimise


def test_loss_at_drmixs_defaults_is_the_authors_on_cosines_over_the_temperature():
    """drmix's default COCO geometry (normalised embeddings, temperature 0.05 -- CocoConfig's default) is the
    authors' compute_contrastive_loss on the normalised spans with every score divided by 0.05."""
    from drmix.pretrain.runner import CocoConfig

    assert CocoConfig().contrastive.temperature == 0.05 and CocoConfig().model.normalize is True
    gen = torch.Generator().manual_seed(6)
    B = 5
    a = torch.nn.functional.normalize(torch.randn(B, 6, generator=gen, dtype=torch.float64), dim=-1)
    b = torch.nn.functional.normalize(torch.randn(B, 6, generator=gen, dtype=torch.float64), dim=-1)
    spans = torch.stack([a, b], dim=1).reshape(2 * B, 6)
    theirs = _authors_contrastive_loss(spans / math.sqrt(0.05))          # (x / sqrt(t)) . (y / sqrt(t)) = x.y / t
    ours = coco_losses(a, b)                                             # the default temperature
    assert torch.allclose(ours, 0.5 * (theirs[0::2] + theirs[1::2]), rtol=1e-10, atol=1e-12)
    from drmix.pretrain.objective import CocoObjective

    # the trainer's objective: queries = first spans, documents = second spans (+ unused), in float32 as trained
    objective = CocoObjective(temperature=0.05)
    got = objective.losses(a, torch.cat([b, a]), torch.zeros(B, 0, dtype=torch.bool), gather=False)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), ours, rtol=1e-5, atol=1e-6)


def test_spans_are_cached_sampled_and_the_builder_resumes(tmp_path, tiny_model_path):
    """build_spans reuses its cache (same file, same settings), keeps a seeded max_documents sample, writes
    title + text; SpanBuilder's state resumes the same pairs; SpanStats.describe names every count."""
    from transformers import AutoTokenizer

    from drmix.pretrain.coco import corpus_file, corpus_name, token_counter

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps({"title": f"Title {i}.", "text": LONG}) + "\n" for i in range(5)))
    ds, stats = build_spans(f, tmp_path / "cache", tok, max_tokens=12, new_chunk_probability=0.0, name="c",
                            max_documents=3, seed=1)
    assert (stats.documents, stats.kept, stats.name, stats.path) == (3, 3, "c", str(f))
    assert ds["chunks"][0][0].startswith("Title ")                       # the title leads the text
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    ds2, stats2 = build_spans(f, tmp_path / "cache", tok, max_tokens=12, new_chunk_probability=0.0, name="c",
                              max_documents=3, seed=1)
    assert stats2 == stats and ds2["chunks"] == ds["chunks"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == cached   # reused, nothing new built
    _, other = build_spans(f, tmp_path / "cache", tok, max_tokens=12, new_chunk_probability=0.0, name="c",
                           max_documents=4, seed=1)
    assert other.documents == 4                                          # another setting: another entry
    assert stats.describe() == ("c: 3 documents, 3 kept (%d chunks), 0 dropped with fewer than 2 chunks, 0 empty"
                                % stats.chunks)
    builder = SpanBuilder([type("C", (), {"dataset": ds})()], seed=7)
    builder.build([(0, 0), (0, 2)])
    state = builder.state_dict()
    first = builder.build([(0, 1), (0, 2), (0, 1)])
    resumed = SpanBuilder([type("C", (), {"dataset": ds})()], seed=0)
    resumed.load_state_dict(state)
    again = resumed.build([(0, 1), (0, 2), (0, 1)])
    assert (first.queries, first.positives) == (again.queries, again.positives)
    assert first.negatives == [[], [], []] and first.collection_ids.tolist() == [0, 0, 0]
    assert token_counter(tok)(["a b c", ""]) == [len(tok("a b c", add_special_tokens=False)["input_ids"]), 0]
    # corpus arguments: a BEIR folder (its corpus.jsonl) or a file; names from the folder or the file
    beir = tmp_path / "scifact"
    beir.mkdir()
    with pytest.raises(DataError, match="no corpus.jsonl"):
        corpus_file(beir)
    (beir / "corpus.jsonl").write_text(f.read_text())
    assert corpus_file(beir) == beir / "corpus.jsonl" and corpus_name(beir) == "scifact"
    assert corpus_name(beir / "corpus.jsonl") == "scifact" and corpus_name(f) == "c"
    with pytest.raises(DataError, match="not found"):
        corpus_file(tmp_path / "missing.jsonl")


def test_a_corpus_rewritten_keeping_size_inode_and_mtime_is_chunked_again(tmp_path, tiny_model_path, monkeypatch):
    """The span cache is keyed by the corpus's content: a corpus replaced by rsync -t or cp -p (its size, inode and
    modification time the old ones) is not served the old spans."""
    from stat_helpers import rewrite_keeping_stat
    from transformers import AutoTokenizer

    from drmix import fingerprint

    monkeypatch.setenv("DRMIX_CACHE", str(tmp_path / "drmix-cache"))
    monkeypatch.setattr(fingerprint, "_MEMO", {})
    monkeypatch.setattr(fingerprint, "SETTLE_NS", 0)
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps({"title": f"Old {i}.", "text": LONG}) + "\n" for i in range(3)))
    ds, _ = build_spans(f, tmp_path / "cache", tok, max_tokens=12, new_chunk_probability=0.0, name="c")
    assert {c[0].split(".")[0] for c in ds["chunks"]} == {"Old 0", "Old 1", "Old 2"}
    rewrite_keeping_stat(f, f.read_bytes().replace(b"Old", b"New"))
    ds, _ = build_spans(f, tmp_path / "cache", tok, max_tokens=12, new_chunk_probability=0.0, name="c")
    assert {c[0].split(".")[0] for c in ds["chunks"]} == {"New 0", "New 1", "New 2"}
    assert len([p for p in (tmp_path / "cache").iterdir() if p.is_dir() and p.name.startswith("c-")]) == 2


def test_corpus_records_need_string_text(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    for i, (bad, match) in enumerate(((({"title": "x"}), "no 'text' field"), ({"text": 3}, "must be strings"),
                                      ({"text": "a", "title": 5}, "must be strings"))):
        f = tmp_path / f"bad{i}.jsonl"
        f.write_text(json.dumps({"text": LONG}) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataError, match=match) as e:
            build_spans(f, tmp_path / f"cache{i}", tok)
        assert e.value.line == 2
    ok = tmp_path / "contents.jsonl"                                     # "contents" is read as the text
    ok.write_text(json.dumps({"contents": LONG + " " + LONG}) + "\n")
    _, stats = build_spans(ok, tmp_path / "cache-ok", tok, max_tokens=12, new_chunk_probability=0.0)
    assert stats.kept == 1


def test_loss_gathers_the_other_process_spans(monkeypatch):
    """gather=True on process 1 of 2: every local span scores both processes' spans, its partner at the global
    index; the losses equal the rows of process 1 in the whole batch."""
    import torch.distributed.nn.functional as dist_fn

    import drmix.device as device

    gen = torch.Generator().manual_seed(8)
    a0, b0, a1, b1 = (torch.randn(2, 4, generator=gen) for _ in range(4))
    whole = coco_losses(torch.cat([a0, a1]), torch.cat([b0, b1]), temperature=0.5)
    others = {id(a1): a0, id(b1): b0}
    monkeypatch.setattr(dist_fn, "all_gather", lambda t: [others[id(t)], t] if id(t) in others else [t, t])
    monkeypatch.setattr(device, "dist_info", lambda: (2, 1))
    import drmix.model.losses as losses_mod

    monkeypatch.setattr(losses_mod, "dist_info", lambda: (2, 1))
    ours = coco_losses(a1, b1, temperature=0.5, gather=True)
    assert torch.allclose(ours, whole[2:], atol=1e-6)
    assert not torch.allclose(coco_losses(a1, b1, temperature=0.5, gather=False), whole[2:], atol=1e-3)


# ---------------------------------------------------------------- defaults, seeding, the cache and its counts
class WordTokenizer:
    """A tokenizer of whitespace words (one token each), named like a Hugging Face tokenizer."""

    def __init__(self, name="words"):
        self.name_or_path = name

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [t.split() for t in texts]}


def _words(xs):
    return [len(x.split()) for x in xs]


def _sentence(n, tag="w"):
    return " ".join(f"{tag}{k}" for k in range(n)) + "."


def test_packing_defaults_are_30_tokens_and_a_tenth():
    # 30 tokens fill a chunk, 31 overflow it; a uniform of 0.099 starts a new chunk, 0.5 does not
    assert pack_chunks([29, 1], rng=FixedRng([0.5, 0.5])) == [[0, 1]]
    assert pack_chunks([30, 1], rng=FixedRng([0.5, 0.5])) == [[0], [1]]
    assert pack_chunks([1, 1], rng=FixedRng([0.5, 0.099])) == [[0], [1]]
    # without a generator the packing is still reproducible
    assert pack_chunks([1] * 40, new_chunk_probability=0.5) == pack_chunks([1] * 40, new_chunk_probability=0.5)
    text = " ".join([_sentence(29), _sentence(1, "x"), _sentence(1, "y")])
    assert chunk_text(text, _words, rng=FixedRng([0.5, 0.5, 0.5])) == [_sentence(29) + " " + _sentence(1, "x"),
                                                                      _sentence(1, "y")]
    assert chunk_text(text, _words, rng=FixedRng([0.5, 0.099, 0.5])) == [_sentence(29), "x0. y0."]


def test_chunk_text_draws_from_the_given_generator_at_the_given_probability():
    text = "A b. C d. E f."
    # p = 0.5: only the uniform 0.3 before sentence 1 starts a chunk
    assert chunk_text(text, _words, new_chunk_probability=0.5, rng=FixedRng([0.9, 0.3, 0.9])) == ["A b.", "C d. E f."]


def _corpus_of(path, n_docs, sentences=12):
    rng = np.random.default_rng(21)
    docs = [" ".join(_sentence(int(rng.integers(2, 8)), f"d{d}s{s}w") for s in range(sentences)) for d in range(n_docs)]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    return path, docs


def test_chunks_are_seeded_by_seed_corpus_and_row(tmp_path):
    """Document i of corpus c is chunked with the generator seeded (seed, c, i) (module docstring), at the
    defaults (30 tokens, 0.1, seed 0, corpus 0) or the settings given; the name defaults to the file's."""
    f, docs = _corpus_of(tmp_path / "c.jsonl", 6)
    tok = WordTokenizer()
    for kw in ({}, dict(seed=3, corpus_index=2, max_tokens=12, new_chunk_probability=0.5)):
        ds, stats = build_spans(f, tmp_path / "cache", tok, **kw)
        seed, ci = kw.get("seed", 0), kw.get("corpus_index", 0)
        want = [chunk_text(t, _words, max_tokens=kw.get("max_tokens", 30),
                           new_chunk_probability=kw.get("new_chunk_probability", 0.1),
                           rng=np.random.default_rng([seed, ci, i])) for i, t in enumerate(docs)]
        assert ds["chunks"] == [w for w in want if len(w) >= 2]
        assert stats.name == "c" and stats.documents == 6


def test_counts_keep_documents_of_exactly_two_chunks(tmp_path):
    # one sentence of 5 words is a chunk (max 5, no random breaks): 2, 1, 0 (empty), 3, 1 chunks
    docs = [" ".join([_sentence(5)] * 2), _sentence(5), "", " ".join([_sentence(5)] * 3), _sentence(4)]
    f = tmp_path / "c.jsonl"
    f.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    ds, stats = build_spans(f, tmp_path / "cache", WordTokenizer(), max_tokens=5, new_chunk_probability=0.0)
    assert (stats.documents, stats.kept, stats.dropped_short, stats.dropped_empty, stats.chunks) == (5, 2, 2, 1, 5)
    assert [len(c) for c in ds["chunks"]] == [2, 3]
    assert ds.column_names == ["chunks"]                                 # the texts are not stored twice


def test_document_sample_is_distinct_and_reproducible(tmp_path):
    f, docs = _corpus_of(tmp_path / "c.jsonl", 10, sentences=8)
    picked = []
    for cache in ("a", "b"):
        ds, stats = build_spans(f, tmp_path / cache, WordTokenizer(), max_tokens=8, max_documents=8, seed=4)
        assert stats.documents == 8
        picked.append([c[0].split("s0w")[0] for c in ds["chunks"]])  # "dN": the document of each row
    assert picked[0] == picked[1] and len(set(picked[0])) == len(picked[0]) == stats.kept


def test_cache_key_covers_every_setting_the_file_and_the_tokenizer(tmp_path, monkeypatch):
    """A change of seed, corpus index, max tokens, probability, sample size or tokenizer builds a new entry;
    the same call reuses it; a file of the same name, size and time elsewhere is another corpus. Nothing is
    written outside the cache folder (its parents are made), and no temporary Arrow cache is left behind."""
    import os

    import datasets

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    (tmp_path / "one").mkdir()
    f, _ = _corpus_of(tmp_path / "one" / "c.jsonl", 3)
    cache = tmp_path / "nested" / "deeper" / "cache"
    base = dict(seed=0, corpus_index=0, max_tokens=30, new_chunk_probability=0.1, max_documents=None)

    def entries():
        return sorted(p.name for p in cache.iterdir() if p.is_dir())

    _, stats = build_spans(f, cache, WordTokenizer(), **base)
    assert len(entries()) == 1
    build_spans(f, cache, WordTokenizer(), **base)
    assert len(entries()) == 1
    changes = [dict(seed=1), dict(corpus_index=1), dict(max_tokens=20), dict(new_chunk_probability=0.5),
               dict(max_documents=2)]
    for i, change in enumerate(changes):
        build_spans(f, cache, WordTokenizer(), **{**base, **change})
        assert len(entries()) == i + 2, change
    build_spans(f, cache, WordTokenizer("other-words"), **base)
    assert len(entries()) == len(changes) + 2
    nameless = type("Nameless", (), {"__call__": WordTokenizer.__call__})()
    build_spans(f, cache, nameless, **base)                              # a tokenizer without a name works
    # the same name, size and modification time in another folder, different words
    (tmp_path / "two").mkdir()
    g = tmp_path / "two" / "c.jsonl"
    g.write_text(f.read_text().replace("w", "v"))
    st = f.stat()
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns))
    ds_g, stats_g = build_spans(g, cache, WordTokenizer(), **base)
    assert stats_g.path == str(g) and "v0" in ds_g["chunks"][0][0]
    assert stats.name == "c" and list(work.iterdir()) == []
    assert not (tmp_path / "hf-cache").exists() or not any((tmp_path / "hf-cache").rglob("*.arrow"))
    assert not (cache / ".arrow-cache").exists()


def test_an_interrupted_build_is_rebuilt(tmp_path):
    """A build killed after making its folder (no stats.json yet) is built again on the next call."""
    import shutil

    f, _ = _corpus_of(tmp_path / "c.jsonl", 3)
    ds, stats = build_spans(f, tmp_path / "cache", WordTokenizer())
    (root,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir() and not p.name.startswith(".")]
    (root / "stats.json").unlink()
    shutil.rmtree(root / "spans")
    ds2, stats2 = build_spans(f, tmp_path / "cache", WordTokenizer())
    assert stats2 == stats and ds2["chunks"] == ds["chunks"]


def test_the_title_leads_the_text_after_one_space(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"title": " My title. ", "text": " A b c. D e f. G h i. "}) + "\n")
    ds, _ = build_spans(f, tmp_path / "cache", WordTokenizer(), max_tokens=3, new_chunk_probability=0.0)
    assert ds["chunks"][0] == ["My title.", "A b c.", "D e f.", "G h i."]


def test_a_beir_folder_is_named_after_the_folder_whatever_its_dots(tmp_path):
    from drmix.pretrain.coco import corpus_name

    folder = tmp_path / "cqadupstack.android"
    folder.mkdir()
    assert corpus_name(folder) == "cqadupstack.android"
    assert corpus_name(tmp_path / "nq.v1.jsonl") == "nq.v1"


def test_each_drawn_pair_is_two_distinct_chunks_of_its_document():
    docs = [["a0", "a1"], ["b0", "b1", "b2"]]
    coll = type("C", (), {"dataset": {}})()
    coll.dataset = _Rows(docs)
    batch = SpanBuilder([coll], seed=2).build([(0, 1), (0, 0), (0, 1), (0, 1)])
    for (c, r), q, p in zip([(0, 1), (0, 0), (0, 1), (0, 1)], batch.queries, batch.positives):
        assert q in docs[r] and p in docs[r] and q != p


class _Rows:
    """``dataset[rows]["chunks"]`` as a datasets.Dataset answers it."""

    def __init__(self, docs):
        self.docs = docs

    def __getitem__(self, rows):
        return {"chunks": [self.docs[r] for r in rows]}


def test_coco_loss_defaults_to_the_local_batch_and_gathers_on_process_0(monkeypatch):
    """Without ``gather`` a process scores its own spans only; with it, process 0 of 2 gets the rows of process 0
    in the whole batch (its spans first among the gathered columns)."""
    import torch.distributed.nn.functional as dist_fn

    import drmix.device as device
    import drmix.model.losses as losses_mod

    gen = torch.Generator().manual_seed(12)
    a0, b0, a1, b1 = (0.2 * torch.randn(2, 4, generator=gen) for _ in range(4))
    whole = coco_losses(torch.cat([a0, a1]), torch.cat([b0, b1]), temperature=0.5)
    local = coco_losses(a0, b0, temperature=0.5)
    others = {id(a0): a1, id(b0): b1}
    monkeypatch.setattr(dist_fn, "all_gather", lambda t: [t, others[id(t)]])
    monkeypatch.setattr(device, "dist_info", lambda: (2, 0))
    monkeypatch.setattr(losses_mod, "dist_info", lambda: (2, 0))
    assert torch.equal(coco_losses(a0, b0, temperature=0.5), local)
    ours = coco_losses(a0, b0, temperature=0.5, gather=True)
    assert torch.allclose(ours, whole[:2], atol=1e-6) and not torch.allclose(ours, local, atol=1e-4)


def test_coco_loss_is_computed_on_the_spans_device():
    a, b = torch.randn(3, 4, device="meta"), torch.randn(3, 4, device="meta")   # meta stands in for a GPU
    assert coco_losses(a, b).device.type == "meta"


def test_target_corpora_need_distinct_names(tmp_path):
    """The corpora of one run are named by corpus_name; none, or two of one name, is a ConfigError."""
    from drmix.errors import ConfigError
    from drmix.pretrain.coco import check_corpus_names

    assert check_corpus_names([tmp_path / "scifact", tmp_path / "nq.jsonl"]) == ["scifact", "nq"]
    with pytest.raises(ConfigError, match="no target corpus"):
        check_corpus_names([])
    with pytest.raises(ConfigError, match="same name"):
        check_corpus_names([tmp_path / "a" / "scifact", tmp_path / "b" / "scifact" / "corpus.jsonl"])
