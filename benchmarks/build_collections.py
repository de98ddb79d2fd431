"""Build the training collections of the mixture benchmark from the public data in ../shared/data.

One JSONL collection per source (``{"query", "positive", "negatives"}``), several domains and sizes:

| collection | source | query -> positive | hard negative |
|---|---|---|---|
| scifact | BEIR SciFact train qrels | claim -> abstract | TF-IDF-closest non-relevant abstract |
| nfcorpus | BEIR NFCorpus train qrels | question -> relevant doc (one of up to 3) | TF-IDF-closest non-relevant doc |
| altlex | AltLex English/Simple Wikipedia | English sentence -> Simple English version | TF-IDF-closest other Simple sentence |
| msrp | MSRP train + val, label 1 | sentence -> paraphrase | TF-IDF-closest other sentence |
| sick | SICK train + trial, relatedness >= 4 | sentence A -> sentence B | TF-IDF-closest other sentence |
| xquad | XQuAD English | question -> its paragraph | TF-IDF-closest other paragraph |
| walmart_amazon | DeepMatcher Walmart-Amazon train, label 1 | Walmart record -> matching Amazon record | a labelled non-match of the same record, else TF-IDF |
| amazon_google | DeepMatcher Amazon-Google train, label 1 | Amazon record -> matching Google record | as above |
| docs_<family> | ``drmix.data.builders.localdocs.build_localdocs`` | docstring pairs of installed packages | lexical + random (its own) |

Each collection is capped at ``--max-per-collection`` examples (seeded sample). Documents are cut to
``--max-words`` words (training truncates to the token limit anyway). Only test-free splits are used: the
BEIR test qrels evaluate the leave-one-out models.

    python benchmarks/build_collections.py --out /tmp/drmix-bench/collections
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import random
import sys
from pathlib import Path

import numpy as np

from _common import DEFAULT_DATA  # noqa: E402  (and the offline environment)

log = logging.getLogger("build_collections")


def cut(text: str, max_words: int) -> str:
    words = text.split()
    return " ".join(words[:max_words])


def mine_negatives(queries: list[str], pool: list[str], exclude: list[set[int]], *, seed: int = 0) -> list[int]:
    """Index into ``pool`` of the TF-IDF-closest document to each query that is not excluded (-1 if none)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(sublinear_tf=True, stop_words="english", min_df=1)
    pm = vec.fit_transform(pool)
    qm = vec.transform(queries)
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, len(queries), 256):
        sims = (qm[start:start + 256] @ pm.T).toarray()
        for row, i in zip(sims, range(start, start + len(sims))):
            row[list(exclude[i])] = -1.0
            best = int(row.argmax())
            if row[best] <= 0:       # nothing shares a term: a random other document
                choices = [j for j in rng.choice(len(pool), size=min(8, len(pool)), replace=False)
                           if j not in exclude[i]]
                best = int(choices[0]) if choices else -1
            out.append(best)
    return out


def pairs_collection(pairs: list[tuple[str, str]], *, max_words: int, seed: int) -> list[dict]:
    """Symmetric sentence pairs: negatives mined among all second sentences."""
    pool = [b for _, b in pairs]
    neg = mine_negatives([a for a, _ in pairs], pool, [{i} for i in range(len(pairs))], seed=seed)
    rows = []
    for (a, b), j in zip(pairs, neg):
        if j < 0 or pool[j] == b:
            continue
        rows.append({"query": cut(a, max_words), "positive": cut(b, max_words), "negatives": [cut(pool[j], max_words)]})
    return rows


def beir_collection(root: Path, *, max_words: int, seed: int, max_positives: int = 3) -> list[dict]:
    from drmix.data.beir import doc_text, load_beir

    data = load_beir(root, "train")
    ids = list(data.corpus)
    pos_of = {d: i for i, d in enumerate(ids)}
    texts = [cut(doc_text(data.corpus[d]), max_words) for d in ids]
    qids = [q for q in data.qrels if any(s > 0 for s in data.qrels[q].values())]
    exclude = [{pos_of[d] for d in data.qrels[q] if d in pos_of} for q in qids]
    neg = mine_negatives([data.queries[q] for q in qids], texts, exclude, seed=seed)
    rows = []
    for q, j in zip(qids, neg):
        positives = [texts[pos_of[d]] for d, s in sorted(data.qrels[q].items()) if s > 0 and d in pos_of]
        rows.append({"query": data.queries[q], "positive": positives[:max_positives],
                     "negatives": [texts[j]] if j >= 0 else []})
    return rows


def altlex(data: Path, *, max_words: int, seed: int, limit: int) -> list[dict]:
    with gzip.open(data / "altlex" / "pairs_english_simple.jsonl.gz", "rt", encoding="utf-8") as f:
        pairs = [tuple(json.loads(line)) for line in f if line.strip()]
    pairs = [(a.replace("\\/", "/"), b.replace("\\/", "/")) for a, b in pairs if a != b]
    random.Random(seed).shuffle(pairs)
    return pairs_collection(pairs[: limit], max_words=max_words, seed=seed)


def msrp(data: Path, *, max_words: int, seed: int) -> list[dict]:
    pairs = []
    for name in ("msr-para-train.tsv", "msr-para-val.tsv"):
        with open(data / "msrp" / name, encoding="utf-8-sig") as f:
            for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if len(row) == 5 and row[0] == "1":
                    pairs.append((row[3], row[4]))
    return pairs_collection(pairs, max_words=max_words, seed=seed)


def sick(data: Path, *, max_words: int, seed: int) -> list[dict]:
    pairs = []
    for name in ("SICK_train.txt", "SICK_trial.txt"):
        with open(data / "sick" / name, encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                if float(row["relatedness_score"]) >= 4.0 and row["sentence_A"] != row["sentence_B"]:
                    pairs.append((row["sentence_A"], row["sentence_B"]))
    return pairs_collection(pairs, max_words=max_words, seed=seed)


def xquad(data: Path, *, max_words: int, seed: int) -> list[dict]:
    doc = json.loads((data / "xquad" / "xquad.en.json").read_text(encoding="utf-8"))
    paragraphs, questions = [], []
    for article in doc["data"]:
        for p in article["paragraphs"]:
            paragraphs.append(cut(p["context"], max_words))
            questions += [(qa["question"], len(paragraphs) - 1) for qa in p["qas"]]
    neg = mine_negatives([q for q, _ in questions], paragraphs, [{i} for _, i in questions], seed=seed)
    return [{"query": q, "positive": paragraphs[i], "negatives": [paragraphs[j]]} for (q, i), j in zip(questions, neg)]


def _records(path: Path) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {r["id"]: " ".join(f"{k}: {v}" for k, v in r.items() if k != "id" and v) for r in rows}


def entity_matching(root: Path, *, seed: int) -> list[dict]:
    left, right = _records(root / "tableA.csv"), _records(root / "tableB.csv")
    with open(root / "train.csv", encoding="utf-8") as f:
        labelled = list(csv.DictReader(f))
    non_matches: dict[str, list[str]] = {}
    for r in labelled:
        if r["label"] == "0":
            non_matches.setdefault(r["ltable_id"], []).append(r["rtable_id"])
    pos = [(r["ltable_id"], r["rtable_id"]) for r in labelled if r["label"] == "1"]
    right_ids = list(right)
    right_index = {rid: i for i, rid in enumerate(right_ids)}
    mined = mine_negatives([left[a] for a, _ in pos], [right[r] for r in right_ids],
                           [{right_index[b]} for _, b in pos], seed=seed)
    rows = []
    for (a, b), j in zip(pos, mined):
        neg = [right[n] for n in non_matches.get(a, []) if n != b][:1] or [right[right_ids[j]]]
        rows.append({"query": left[a], "positive": right[b], "negatives": neg})
    return rows


def cap(rows: list[dict], limit: int, seed: int) -> list[dict]:
    if len(rows) <= limit:
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
    return [rows[i] for i in keep]


#: what the files of ``build_all`` are made with, besides the data (``out/build.json`` records it)
BUILD_VERSION = 1


def read_build_record(out: Path) -> dict:
    """``out/build.json``: the settings the collections were built with and each file's content digest."""
    try:
        raw = json.loads((out / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _still_built(path: Path, record: dict, key: dict) -> bool:
    """Whether ``path`` is the file built earlier with ``key`` (same settings, content unchanged since)."""
    from drmix.provenance import file_fingerprint

    digest = (record.get("files") or {}).get(path.stem)
    return record.get("key") == key and path.is_file() and digest == file_fingerprint(path)["digest"]


def build_all(data: Path, out: Path, *, seed: int = 0, max_per_collection: int = 1500, max_words: int = 120,
              localdocs: bool = True) -> dict[str, int]:
    """Write ``out/<name>.jsonl`` for every collection; returns ``{name: examples}``.

    A file is kept when ``out/build.json`` records it built with the same seed, cap and word limit and its
    content is unchanged since; otherwise (other settings, an edited file, a folder from before the record) it
    is built again and replaced atomically."""
    from drmix.io.atomic import atomic_write_json, write_jsonl_atomic
    from drmix.provenance import file_fingerprint

    out.mkdir(parents=True, exist_ok=True)
    key = {"seed": seed, "max_per_collection": max_per_collection, "max_words": max_words, "version": BUILD_VERSION}
    record = read_build_record(out)
    files: dict[str, str] = {}
    builders = {
        "scifact": lambda: beir_collection(data / "scifact", max_words=max_words, seed=seed),
        "nfcorpus": lambda: beir_collection(data / "nfcorpus", max_words=max_words, seed=seed),
        "altlex": lambda: altlex(data, max_words=max_words, seed=seed, limit=2 * max_per_collection),
        "msrp": lambda: msrp(data, max_words=max_words, seed=seed),
        "sick": lambda: sick(data, max_words=max_words, seed=seed),
        "xquad": lambda: xquad(data, max_words=max_words, seed=seed),
        "walmart_amazon": lambda: entity_matching(data / "walmart-amazon", seed=seed),
        "amazon_google": lambda: entity_matching(data / "amazon-google", seed=seed),
    }
    sizes = {}
    for name, build in builders.items():
        path = out / f"{name}.jsonl"
        if not _still_built(path, record, key):
            if path.exists():
                log.info("%s: built with other settings or changed since; built again", name)
            rows = cap(build(), max_per_collection, seed)
            write_jsonl_atomic(path, rows)
            log.info("%s: %d examples", name, len(rows))
        files[name] = file_fingerprint(path)["digest"]
        sizes[name] = sum(1 for _ in open(path, encoding="utf-8"))
    if localdocs:
        docs = _localdocs(out, seed=seed, max_per_collection=max_per_collection,
                          rebuild=not all(_still_built(p, record, key) for p in out.glob("docs_*.jsonl")))
        sizes.update(docs)
        files.update({name: file_fingerprint(out / f"{name}.jsonl")["digest"] for name in docs})
    atomic_write_json(out / "build.json", {"key": key, "files": files})
    return sizes


def _localdocs(out: Path, *, seed: int, max_per_collection: int, rebuild: bool = False) -> dict[str, int]:
    sizes = {}
    existing = sorted(out.glob("docs_*.jsonl"))
    if rebuild:
        for path in existing:
            path.unlink()
        existing = []
    if not existing:
        try:
            from drmix.data.builders.localdocs import build_localdocs
        except ImportError:
            log.warning("drmix.data.builders.localdocs is not available: documentation collections skipped")
            return {}
        built = build_localdocs(out.parent / "localdocs", seed=seed, max_pairs_per_collection=max_per_collection)
        for fam, path in built.train_files.items():
            target = out / f"docs_{fam}.jsonl"
            target.write_text(Path(path).read_text(encoding="utf-8"), encoding="utf-8")
        existing = sorted(out.glob("docs_*.jsonl"))
    for path in existing:
        sizes[path.stem] = sum(1 for _ in open(path, encoding="utf-8"))
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data directory (read-only)")
    ap.add_argument("--out", type=Path, required=True, help="output directory for the JSONL collections")
    ap.add_argument("--seed", type=int, default=0, help="seed of every sample")
    ap.add_argument("--max-per-collection", type=int, default=1500, help="cap on examples per collection")
    ap.add_argument("--max-words", type=int, default=120, help="documents are cut to this many words")
    ap.add_argument("--no-localdocs", action="store_true", help="skip the documentation collections")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sizes = build_all(args.data.resolve(), args.out, seed=args.seed, max_per_collection=args.max_per_collection,
                      max_words=args.max_words, localdocs=not args.no_localdocs)
    for name, n in sizes.items():
        print(f"{name:20s} {n:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
