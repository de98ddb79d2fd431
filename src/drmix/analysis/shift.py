"""Distribution shift between source (training) and target data: lexical overlap, query types, alignment/uniformity.

Specification: COCO-DR ("COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with Contrastive and
Distributionally Robust Learning", Yu et al., EMNLP 2022, arXiv:2210.15212), Sec. 3.2 and Appendices C, D and H:

* **weighted Jaccard** (Eq. 13, after Thakur et al. / Ioffe): ``J(S, T) = sum_k min(S_k, T_k) / sum_k max(S_k, T_k)``
  over the unigrams ``k`` of both sides, ``S_k`` the *relative* frequency of word ``k`` (frequencies are
  normalised so a large corpus does not dominate). Computed corpus-corpus (documents) and query-query
  (query words); the paper's *query intent similarity* is the same formula over the query-type
  distributions (``query_types``).
* **query types** (Appendix C.1, after Ren et al. 2022): the first word decides -- what / when / who / how /
  where / why / which; yes-no for is, was, are, were, do, does, did, have, has, had, should, can, could, would,
  am; declarative for the rest. (The paper's list also has "small", apparently a typo; left out.)
* **alignment** ``E ||f(x) - f(x+)||^2`` over positive pairs and **uniformity**
  ``log E exp(-2 ||f(x) - f(y)||^2)`` over distinct pairs of documents (Eqs. 24-25, Wang & Isola), on
  L2-normalised embeddings as in the authors' code. Positive pairs are (query, relevant document) pairs of
  the qrels split (or a collection's query/positive pairs); uniformity uses a seeded sample of documents.

Words are lower-cased runs of letters and digits. Corpora are streamed, so a large corpus is counted
without loading it; ``max_docs`` caps the documents read (a seeded reservoir sample) when given.
"""
from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drmix.errors import DataError
from drmix.io.atomic import atomic_write_json, atomic_write_text
from drmix.io.read import iter_jsonl

log = logging.getLogger(__name__)

WH_TYPES = ("what", "when", "who", "how", "where", "why", "which")
YES_NO_WORDS = frozenset("is was are were do does did have has had should can could would am".split())
QUERY_TYPES = (*WH_TYPES, "yes-no", "declarative")
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def query_type(query: str) -> str:
    """One of :data:`QUERY_TYPES` by the query's first word."""
    w = words(query)
    first = w[0] if w else ""
    if first in WH_TYPES:
        return first
    if first in YES_NO_WORDS:
        return "yes-no"
    return "declarative"


def query_type_distribution(queries: Iterable[str]) -> dict[str, float]:
    counts = Counter(query_type(q) for q in queries)
    n = sum(counts.values())
    return {t: (counts[t] / n if n else 0.0) for t in QUERY_TYPES}


def unigram_distribution(texts: Iterable[str]) -> dict[str, float]:
    counts: Counter = Counter()
    for t in texts:
        counts.update(words(t))
    n = sum(counts.values())
    return {k: v / n for k, v in counts.items()} if n else {}


def weighted_jaccard(p: dict[str, float], q: dict[str, float]) -> float:
    """``sum min / sum max`` over the union of keys (0 when both are empty)."""
    keys = set(p) | set(q)
    num = sum(min(p.get(k, 0.0), q.get(k, 0.0)) for k in keys)
    den = sum(max(p.get(k, 0.0), q.get(k, 0.0)) for k in keys)
    return num / den if den > 0 else 0.0


def alignment(x: np.ndarray, y: np.ndarray) -> float:
    """``mean ||x_i - y_i||^2`` of paired (L2-normalised) embeddings."""
    return float(((np.asarray(x) - np.asarray(y)) ** 2).sum(axis=1).mean())


def uniformity(x: np.ndarray) -> float:
    """``log mean_{i<j} exp(-2 ||x_i - x_j||^2)`` of (L2-normalised) embeddings."""
    x = np.asarray(x, dtype=np.float64)
    sq = (x * x).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
    iu = np.triu_indices(len(x), k=1)
    v = -2 * d2[iu]
    m = v.max()
    return float(m + np.log(np.exp(v - m).mean()))


# ------------------------------------------------------------------------------------------------ datasets

@dataclass
class ShiftData:
    """Texts of one dataset: (sampled) documents, queries and positive pairs."""

    name: str
    path: str
    documents: list[str]
    queries: list[str]
    pairs: list[tuple[str, str]] = field(default_factory=list)
    n_documents: int = 0


def _reservoir(items: Iterable[str], k: int | None, rng: np.random.Generator) -> tuple[list[str], int]:
    if k is None:
        out = list(items)
        return out, len(out)
    out: list[str] = []
    n = 0
    for n, it in enumerate(items, start=1):
        if len(out) < k:
            out.append(it)
        else:
            j = int(rng.integers(n))
            if j < k:
                out[j] = it
    return out, n


def load_shift_data(path: str | Path, *, split: str = "test", max_docs: int | None = None,
                    max_queries: int | None = None, seed: int = 0) -> ShiftData:
    """A BEIR directory (corpus, queries, qrels of ``split`` if present) or a training collection JSONL."""
    p = Path(path)
    rng = np.random.default_rng(seed)
    if p.is_dir() and (p / "corpus.jsonl").exists():
        from drmix.data.beir import doc_text, read_queries, read_qrels

        def docs():
            for _, obj in iter_jsonl(p / "corpus.jsonl"):
                yield obj.get("_id"), doc_text({"title": obj.get("title") or "", "text": obj.get("text") or ""})

        corpus_all = {}
        sample, n = _reservoir((f"{i}\t{t}" for i, t in docs()), max_docs, rng)
        documents = [s.split("\t", 1)[1] for s in sample]
        queries = read_queries(p / "queries.jsonl") if (p / "queries.jsonl").exists() else {}
        qrels_path = p / "qrels" / f"{split}.tsv"
        pairs: list[tuple[str, str]] = []
        if qrels_path.exists():
            qrels = read_qrels(qrels_path)
            queries = {q: t for q, t in queries.items() if q in qrels}
            wanted = {d for rel in qrels.values() for d, s in rel.items() if s > 0}
            corpus_all = {i: t for i, t in docs() if i in wanted}
            pairs = [(queries[q], corpus_all[d]) for q, rel in qrels.items() if q in queries
                     for d, s in rel.items() if s > 0 and d in corpus_all]
        qs = list(queries.values())
        if max_queries is not None and len(qs) > max_queries:
            qs = [qs[i] for i in sorted(rng.choice(len(qs), max_queries, replace=False))]
        if n == 0:
            raise DataError("the corpus is empty.", path=p / "corpus.jsonl", fix="pass a non-empty BEIR corpus.")
        return ShiftData(p.name, str(p), documents, qs, pairs, n)
    if p.is_file():
        documents, queries, pairs = [], [], []
        for line, obj in iter_jsonl(p):
            q = obj.get("query")
            pos = obj.get("positive", obj.get("positives"))
            pos = pos[0] if isinstance(pos, list) and pos else pos
            if not isinstance(q, str) or not isinstance(pos, str):
                raise DataError("a collection line needs 'query' and 'positive' strings.", path=p, line=line,
                                fix="pass a BEIR directory or a training collection JSONL.")
            queries.append(q)
            documents.append(pos)
            pairs.append((q, pos))
        if not documents:
            raise DataError("the collection is empty.", path=p, fix="pass a non-empty file.")
        n = len(documents)
        if max_docs is not None and n > max_docs:
            keep = sorted(rng.choice(n, max_docs, replace=False))
            documents = [documents[i] for i in keep]
            queries = [queries[i] for i in keep]
            pairs = [pairs[i] for i in keep]
        name = p.stem
        return ShiftData(name, str(p), documents, queries, pairs, n)
    raise DataError("not a BEIR directory (with corpus.jsonl) or a collection JSONL file.", path=p,
                    fix="check the path.")


# ------------------------------------------------------------------------------------------------- report

@dataclass
class ShiftReport:
    names: list[str]
    roles: list[str]                       # source | target
    corpus_jaccard: list[list[float]]
    query_jaccard: list[list[float]]       # query words
    intent_jaccard: list[list[float]]      # query-type distributions (the paper's query similarity)
    query_types: dict[str, dict[str, float]]
    sizes: dict[str, dict[str, int]]
    alignment: dict[str, float] = field(default_factory=dict)
    uniformity: dict[str, float] = field(default_factory=dict)
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def to_markdown(self) -> str:
        from drmix.markdown import md_cell

        src = [i for i, r in enumerate(self.roles) if r == "source"]
        tgt = [i for i, r in enumerate(self.roles) if r == "target"]
        lines = ["| source | target | corpus Jaccard | query Jaccard | query-type Jaccard |", "|---|---|---|---|---|"]
        for s in src:
            for t in tgt:
                lines.append(f"| {md_cell(self.names[s])} | {md_cell(self.names[t])} | {self.corpus_jaccard[s][t]:.4f} | "
                             f"{self.query_jaccard[s][t]:.4f} | {self.intent_jaccard[s][t]:.4f} |")
        lines += ["", "| dataset | role | documents | queries | " + " | ".join(QUERY_TYPES)
                  + (" | alignment | uniformity |" if self.alignment else " |"),
                  "|---|---|---|---|" + "---|" * len(QUERY_TYPES) + ("---|---|" if self.alignment else "")]
        for i, n in enumerate(self.names):
            qt = " | ".join(f"{self.query_types[n][t]:.3f}" for t in QUERY_TYPES)
            au = (f" | {self.alignment.get(n, float('nan')):.4f} | {self.uniformity.get(n, float('nan')):.4f}"
                  if self.alignment else "")
            lines.append(f"| {md_cell(n)} | {self.roles[i]} | {self.sizes[n]['documents']} | {self.sizes[n]['queries']} | "
                         f"{qt}{au} |")
        if self.model:
            lines.append(f"\nalignment / uniformity of model: {md_cell(self.model)} (lower is better for both)")
        return "\n".join(lines) + "\n"


def _embed(model: Any, texts: list[str], batch_size: int = 64) -> np.ndarray:
    e = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True,
                     show_progress_bar=False)
    return np.asarray(e, dtype=np.float64)


def shift_report(sources: Sequence[str | Path], targets: Sequence[str | Path], *, model: Any = None,
                 split: str = "test", max_docs: int | None = None, max_queries: int | None = None,
                 max_pairs: int = 1000, max_uniformity_docs: int = 1000, seed: int = 0) -> ShiftReport:
    """Compare every source with every target (and each with each other, for the heat-map)."""
    if not sources or not targets:
        raise DataError("need at least one --source and one --target.", fix="pass both.")
    data = [load_shift_data(p, split=split, max_docs=max_docs, max_queries=max_queries, seed=seed)
            for p in (*sources, *targets)]
    names = [d.name for d in data]
    if len(set(names)) != len(names):
        names = [f"{d.name}#{i}" for i, d in enumerate(data)]
    roles = ["source"] * len(sources) + ["target"] * len(targets)
    uni = [unigram_distribution(d.documents) for d in data]
    qwords = [unigram_distribution(d.queries) for d in data]
    qtypes = [query_type_distribution(d.queries) for d in data]
    n = len(data)

    def matrix(dists):
        return [[weighted_jaccard(dists[i], dists[j]) for j in range(n)] for i in range(n)]

    report = ShiftReport(names, roles, matrix(uni), matrix(qwords), matrix(qtypes), dict(zip(names, qtypes)),
                         {nm: {"documents": d.n_documents, "queries": len(d.queries)} for nm, d in zip(names, data)})
    if model is not None:
        from drmix.model.encoder import load_encoder

        st = load_encoder(model) if isinstance(model, (str, Path)) else model
        report.model = str(model) if isinstance(model, (str, Path)) else type(model).__name__
        rng = np.random.default_rng([seed, 17])
        for nm, d in zip(names, data):
            pairs = d.pairs
            if len(pairs) > max_pairs:
                pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), max_pairs, replace=False))]
            if pairs:
                report.alignment[nm] = alignment(_embed(st, [a for a, _ in pairs]), _embed(st, [b for _, b in pairs]))
            docs = d.documents
            if len(docs) > max_uniformity_docs:
                docs = [docs[i] for i in sorted(rng.choice(len(docs), max_uniformity_docs, replace=False))]
            if len(docs) >= 2:
                report.uniformity[nm] = uniformity(_embed(st, docs))
    return report


def write_shift_report(report: ShiftReport, out_dir: str | Path) -> list[Path]:
    """``shift.md``, ``shift.json``, ``query_types.png`` and ``jaccard.png`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "shift.md", report.to_markdown())
    atomic_write_json(out / "shift.json", report.to_json())
    from drmix.report.plots import new_figure, save_figure

    fig, (ax,) = new_figure(max(8.0, 1.2 * len(QUERY_TYPES)), 4.0)
    width = 0.8 / len(report.names)
    xs = np.arange(len(QUERY_TYPES))
    for i, nm in enumerate(report.names):
        ax.bar(xs + i * width, [report.query_types[nm][t] for t in QUERY_TYPES], width, label=nm)
    ax.set_xticks(xs + 0.4 - width / 2, QUERY_TYPES)
    ax.set_ylabel("share of queries")
    ax.set_title("query types")
    ax.legend(fontsize="small")
    save_figure(fig, out / "query_types.png")
    n = len(report.names)
    fig, axes = new_figure(5.0 * 2 + 1, 0.5 * n + 3, ncols=2)
    for ax, (title, m) in zip(axes, (("corpus weighted Jaccard", report.corpus_jaccard),
                                     ("query weighted Jaccard", report.query_jaccard))):
        im = ax.imshow(np.asarray(m), vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(n), report.names, rotation=45, ha="right")
        ax.set_yticks(range(n), report.names)
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{m[i][j]:.2f}", ha="center", va="center", fontsize="small",
                        color="white" if m[i][j] < 0.6 else "black")
        ax.set_title(title)
    fig.colorbar(im, ax=list(axes), shrink=0.8)
    save_figure(fig, out / "jaccard.png")
    return [out / "shift.md", out / "shift.json", out / "query_types.png", out / "jaccard.png"]


def load_report(path: str | Path) -> ShiftReport:
    return ShiftReport(**json.loads(Path(path).read_text(encoding="utf-8")))
