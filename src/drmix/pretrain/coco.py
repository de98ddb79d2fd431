"""COCO: continuous contrastive pretraining on target corpora (two spans of one document are positives).

Specification: COCO-DR ("COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and
Distributionally Robust Learning", Yu et al., EMNLP 2022, arXiv:2210.15212), Sec. 4.1,
Eq. 4, as the authors' code does it (github.com/OpenMatch/COCO-DR, ``COCO/``).

Spans (what the authors' preprocessing does; the paper only says "two disjoint sequences"):

1. every document (``title`` + ``text``) is split into sentences (:func:`drmix.data.sentences.split_sentences`,
   newlines read as spaces; ``pysbd``, rule-based, ships its rules and runs offline; nltk's punkt downloads data
   at run time);
2. sentences are packed greedily into chunks of at most ``max_tokens`` (30) tokens of the model's
   tokenizer (:func:`pack_chunks`): before each sentence a new chunk is started with probability
   ``new_chunk_probability`` (0.1), or when the sentence would overflow the chunk; a sentence longer than
   ``max_tokens`` is a chunk of its own (cropped to the span max length when encoded);
3. documents with fewer than 2 chunks are dropped (:class:`SpanStats` counts them; a corpus where every
   document is dropped is a :class:`~drmix.errors.DataError`);
4. each time a document is drawn, two *distinct* chunks (not necessarily adjacent) are drawn from it with a
   seeded generator (:class:`SpanBuilder`) -- a new pair every epoch.

Chunking is seeded per document (``(seed, corpus, row)``) so it is identical however it is parallelised.
Documents stream from the JSONL file into an Arrow table on disk (``datasets``, memory-mapped): a corpus of
10M documents never holds 10M rows in RAM; only the sampler's per-epoch permutation (8 bytes a document)
lives in memory.

Loss (:func:`coco_losses`, as in the authors' code): the ``2B`` spans of the *global* batch form one
softmax each: span ``s_{i,1}`` scores every other span of the batch, its own score masked out, and its
partner ``s_{i,2}`` is the target (and vice versa). The per-example loss is the mean of the two spans'
cross-entropies, so the batch mean equals the mean over all ``2B`` spans. Eq. 4 of the paper writes one
denominator summing over both spans of the pair; the code (followed here) uses a softmax per span.

Departures, and why:

* Chunking follows ``COCO/helper/create_train_co_short.py`` (``encode_one``; tested side by side), except that
  sentences are split by ``pysbd`` instead of nltk's punkt (which downloads data at run time), and the
  authors' extra drop of a document whose *first* chunk has at most 2 tokens is not applied (such documents
  are kept when they have 2 chunks).
* Eq. 4 scores with a raw inner product (temperature 1) of unnormalised [CLS] vectors; drmix models
  usually L2-normalise, so scores are cosines divided by ``temperature`` (default 0.05, as in
  fine-tuning); with a non-normalising model set ``temperature: 1`` for the paper's form.
* The authors add Condenser's masked-LM terms. A SentenceTransformer backbone without an LM head
  (e.g. MiniLM) trains the contrastive part only; drmix does not add an MLM head.
* Batch size matters: the authors call a batch of ~2,048 spans pairs critical (8 GPUs x 200). On one GPU use
  gradient caching (the GradCache wrapper of the training loop) -- :func:`coco_losses` is a function of the
  embeddings only, so it can be wrapped.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from drmix.data.batch import Batch
from drmix.data.sentences import split_sentences
from drmix.errors import ConfigError, DataError
from drmix.io.atomic import atomic_write_json
from drmix.io.read import iter_jsonl

log = logging.getLogger(__name__)

def pack_chunks(lengths: Sequence[int], *, max_tokens: int = 30, new_chunk_probability: float = 0.1,
                rng: np.random.Generator | None = None) -> list[list[int]]:
    """Group consecutive sentences (given their token counts) into chunks; returns sentence indices per chunk.

    Before every sentence one uniform number ``u`` is drawn (so the draws do not depend on the lengths); the
    sentence starts a new chunk when the current chunk is not empty and ``u < new_chunk_probability`` or the
    sentence would take it past ``max_tokens``. A sentence longer than ``max_tokens`` is a chunk of its own.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    chunks: list[list[int]] = []
    cur: list[int] = []
    cur_len = 0
    for i, n in enumerate(lengths):
        u = float(rng.random())
        if n > max_tokens:
            if cur:
                chunks.append(cur)
            chunks.append([i])
            cur, cur_len = [], 0
            continue
        if cur and (u < new_chunk_probability or cur_len + n > max_tokens):
            chunks.append(cur)
            cur, cur_len = [], 0
        cur.append(i)
        cur_len += n
    if cur:
        chunks.append(cur)
    return chunks


def chunk_text(text: str, count_tokens: Callable[[list[str]], list[int]], *, max_tokens: int = 30,
               new_chunk_probability: float = 0.1, rng: np.random.Generator | None = None) -> list[str]:
    """Chunks of ``text`` as strings (sentences of a chunk joined by one space)."""
    sents = split_sentences(text, newlines="space")
    if not sents:
        return []
    groups = pack_chunks(count_tokens(sents), max_tokens=max_tokens, new_chunk_probability=new_chunk_probability,
                         rng=rng)
    return [" ".join(sents[i] for i in g) for g in groups]


def token_counter(tokenizer: Any) -> Callable[[list[str]], list[int]]:
    """``count(texts) -> [tokens per text]`` with a Hugging Face tokenizer (no special tokens)."""
    def count(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    return count


def coco_losses(a: torch.Tensor, b: torch.Tensor, *, temperature: float = 0.05, gather: bool = False) -> torch.Tensor:
    """Per-pair COCO loss of spans ``a[i]``/``b[i]`` (``[B, d]`` each); returns ``[B]``.

    Every span scores all ``2N`` spans of the (global, with ``gather``) batch, its own score masked;
    the target is its partner. The loss of pair ``i`` is the mean of its two spans' cross-entropies.
    """
    from drmix.device import dist_info
    from drmix.model.losses import gather_with_grad

    B = a.size(0)
    world, rank = dist_info()
    use_gather = gather and world > 1
    A = gather_with_grad(a) if use_gather else a
    Bm = gather_with_grad(b) if use_gather else b
    N = A.size(0)
    offset = rank * B if use_gather else 0
    cols = torch.cat([A, Bm], dim=0)                                   # [2N, d]
    rows = torch.cat([a, b], dim=0)                                    # [2B, d] (local)
    own = torch.cat([torch.arange(B), torch.arange(B) + N]).to(a.device) + offset
    partner = torch.cat([torch.arange(B) + N, torch.arange(B)]).to(a.device) + offset
    scores = (rows @ cols.T) / temperature
    scores = scores.masked_fill(F.one_hot(own, 2 * N).bool(), float("-inf"))
    per_span = F.cross_entropy(scores, partner, reduction="none")
    return 0.5 * (per_span[:B] + per_span[B:])


# ------------------------------------------------------------------------------------------------ corpora

@dataclass
class SpanStats:
    """What chunking did to one corpus."""

    name: str
    path: str
    documents: int          # documents read
    kept: int               # documents with >= 2 chunks (trainable)
    dropped_short: int      # documents with exactly 1 chunk
    dropped_empty: int      # documents with no text
    chunks: int             # chunks in kept documents

    def describe(self) -> str:
        return (f"{self.name}: {self.documents} documents, {self.kept} kept ({self.chunks} chunks), "
                f"{self.dropped_short} dropped with fewer than 2 chunks, {self.dropped_empty} empty")


def corpus_file(path: str | Path) -> Path:
    """The JSONL file of a corpus argument: a BEIR directory (``corpus.jsonl``) or a JSONL file."""
    p = Path(path)
    if p.is_dir():
        f = p / "corpus.jsonl"
        if not f.exists():
            raise DataError("directory has no corpus.jsonl.", path=p,
                            fix="pass a BEIR directory or a JSONL file with a 'text' field per line.")
        return f
    if not p.exists():
        raise DataError("corpus not found.", path=p, fix="check the path.")
    return p


def corpus_name(path: str | Path) -> str:
    p = Path(path)
    return p.name if p.is_dir() else (p.parent.name if p.stem == "corpus" else p.stem)


def check_corpus_names(paths: Sequence[str | Path]) -> list[str]:
    """The corpora's names (:func:`corpus_name`); no corpus, or two with the same name, is a ``ConfigError``."""
    if not paths:
        raise ConfigError("no target corpus given.", fix="pass --corpus DIR_OR_JSONL (repeatable).")
    names = [corpus_name(p) for p in paths]
    if len(set(names)) != len(names):
        raise ConfigError(f"two target corpora have the same name ({', '.join(names)}).",
                          fix="put each corpus in a folder of its own name.")
    return names


def _doc_texts(path: str) -> Iterator[dict[str, str]]:
    for line, obj in iter_jsonl(path):
        text = obj.get("text", obj.get("contents"))
        if text is None:
            raise DataError("record has no 'text' field.", path=path, line=line,
                            fix="write {\"text\": ...} (and optionally \"title\") per line.")
        title = obj.get("title") or ""
        if not isinstance(text, str) or not isinstance(title, str):
            raise DataError("'text' and 'title' must be strings.", path=path, line=line, fix="write strings.")
        yield {"text": (title.strip() + " " + text.strip()).strip() if title.strip() else text.strip()}


def _spans_key(path: Path, **settings: Any) -> str:
    """The key of a corpus's cached spans: its content and the settings. Path, size and modification time are
    not enough (``cp -p``, ``rsync -t`` and ``tar x`` give a changed corpus the old ones, as
    :mod:`drmix.data.collections` says); the content digest is taken once per file version
    (:func:`drmix.fingerprint.file_digest`)."""
    from drmix.fingerprint import config_digest, file_digest

    return config_digest({"content": file_digest(path), **settings})[:16]


def build_spans(path: str | Path, cache_dir: str | Path, tokenizer: Any, *, corpus_index: int = 0, seed: int = 0,
                max_tokens: int = 30, new_chunk_probability: float = 0.1, max_documents: int | None = None,
                num_proc: int | None = None, name: str | None = None) -> tuple[Any, SpanStats]:
    """Chunk one corpus into an on-disk Arrow dataset with a ``chunks`` column (documents with >= 2 chunks).

    Cached in ``cache_dir`` under a key of the file's content and the settings. ``max_documents`` keeps a
    seeded random sample of that many documents (before chunking).
    """
    from filelock import FileLock

    f = corpus_file(path)
    name = name or corpus_name(path)
    fp = _spans_key(f, seed=seed, corpus=corpus_index, max_tokens=max_tokens, p=new_chunk_probability,
                      max_documents=max_documents, tok=getattr(tokenizer, "name_or_path", ""))
    root = Path(cache_dir) / f"{name}-{fp}"
    root.parent.mkdir(parents=True, exist_ok=True)
    # Processes of one distributed run build the same spans at once: the first builds, the others wait and read
    # (without the lock they race on the datasets cache's dataset_info.json and the saved folder).
    with FileLock(str(root) + ".lock"):
        return _build_spans_locked(f, root, tokenizer, name=name, seed=seed, corpus_index=corpus_index,
                                   max_tokens=max_tokens, new_chunk_probability=new_chunk_probability,
                                   max_documents=max_documents, num_proc=num_proc, cache_dir=Path(cache_dir))


def _build_spans_locked(f: Path, root: Path, tokenizer: Any, *, name: str, seed: int, corpus_index: int,
                        max_tokens: int, new_chunk_probability: float, max_documents: int | None,
                        num_proc: int | None, cache_dir: Path):
    import datasets

    stats_path = root / "stats.json"
    if stats_path.exists():
        stats = SpanStats(**json.loads(stats_path.read_text(encoding="utf-8")))
        return datasets.load_from_disk(str(root / "spans")), stats
    from drmix.io.read import iter_lines

    if next(iter_lines(f), None) is None:
        raise DataError("the corpus is empty.", path=f, fix="pass a corpus with at least one document.")
    tmp_cache = Path(cache_dir) / ".arrow-cache"
    try:
        raw = datasets.Dataset.from_generator(_doc_texts, gen_kwargs={"path": str(f)}, cache_dir=str(tmp_cache),
                                              features=datasets.Features({"text": datasets.Value("string")}))
    except Exception as e:  # datasets wraps the generator's errors: surface the DataError naming file and line
        from drmix.data.collections import _unwrap

        inner = _unwrap(e)
        if inner is not None:
            raise inner from None
        raise
    if len(raw) == 0:
        raise DataError("the corpus is empty.", path=f, fix="pass a corpus with at least one document.")
    if max_documents is not None and len(raw) > max_documents:
        keep = np.sort(np.random.default_rng([seed, corpus_index, 2]).choice(len(raw), max_documents, replace=False))
        raw = raw.select(keep)
    count = token_counter(tokenizer)

    def chunk_batch(batch: dict[str, list], idx: list[int]) -> dict[str, list]:
        out = []
        for text, i in zip(batch["text"], idx):
            out.append(chunk_text(text, count, max_tokens=max_tokens, new_chunk_probability=new_chunk_probability,
                                  rng=np.random.default_rng([seed, corpus_index, int(i)])))
        return {"chunks": out, "n_chunks": [len(c) for c in out]}

    chunked = raw.map(chunk_batch, batched=True, batch_size=256, with_indices=True, remove_columns=["text"],
                      num_proc=num_proc, desc=f"chunking {name}")
    n = np.asarray(chunked.with_format("numpy")["n_chunks"])
    stats = SpanStats(name=name, path=str(f), documents=len(raw), kept=int((n >= 2).sum()),
                      dropped_short=int((n == 1).sum()), dropped_empty=int((n == 0).sum()),
                      chunks=int(n[n >= 2].sum()))
    if stats.kept == 0:
        raise DataError(f"no document of the corpus splits into 2 or more chunks of <= {max_tokens} tokens "
                        f"({stats.documents} documents: {stats.dropped_short} with one chunk, "
                        f"{stats.dropped_empty} empty).", path=f,
                        fix="COCO needs documents of several sentences; pass a corpus of longer documents.")
    kept = chunked.select(np.flatnonzero(n >= 2)).flatten_indices().remove_columns("n_chunks")
    root.mkdir(parents=True, exist_ok=True)
    kept.save_to_disk(str(root / "spans"))
    atomic_write_json(stats_path, asdict(stats))
    import shutil

    shutil.rmtree(tmp_cache, ignore_errors=True)
    return datasets.load_from_disk(str(root / "spans")), stats


class SpanBuilder:
    """The trainer's batch builder for COCO: each drawn document gives two distinct chunks (seeded).

    ``query`` is the first span and ``positive`` the second; there are no hard negatives, duplicate keys, teacher
    scores or row keys (a :class:`~drmix.data.sampling.RowBuilder`).
    """

    keys = False
    scores = False
    row_keys = None

    def __init__(self, collections: list, *, seed: int = 0) -> None:
        self.collections = collections
        self.rng = np.random.default_rng([seed, 611953])

    def build(self, pairs: list[tuple[int, int]]) -> Batch:
        by_coll: dict[int, list[int]] = {}
        for c, r in pairs:
            by_coll.setdefault(c, []).append(r)
        fetched: dict[tuple[int, int], list[str]] = {}
        for c, rows in by_coll.items():
            uniq = sorted(set(rows))
            chunks = self.collections[c].dataset[uniq]["chunks"]
            fetched.update({(c, r): ch for r, ch in zip(uniq, chunks)})
        first, second = [], []
        for c, r in pairs:
            ch = fetched[(c, r)]
            i, j = draw_pair(len(ch), self.rng)
            first.append(ch[i])
            second.append(ch[j])
        return Batch(first, second, [[] for _ in pairs], np.array([c for c, _ in pairs], dtype=np.int64))

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


def draw_pair(n: int, rng: np.random.Generator) -> tuple[int, int]:
    """Two distinct indices in ``[0, n)`` (n >= 2), uniformly over ordered pairs."""
    i, j = rng.choice(n, size=2, replace=False)
    return int(i), int(j)
