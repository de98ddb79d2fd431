"""An index backend is one module: a toy backend, installed as a package installs one (a distribution whose
``drmix.index_backends`` entry point names its module), is built and used by ``drmix index``, ``search``, ``eval
--index``, multi-corpus search and ``drmix adapt``'s index stage, its typed parameter a ``drmix index`` flag --
with nothing in drmix edited: everything it needs is in this file.

The toy keeps each collection in one ``.npz`` file at ``toy://FOLDER#NAME`` (a backend whose indexes live at a
URI, the kind that needs the most from drmix: ``--uri`` and ``--collection``, a location that is not a folder)
and searches it exactly with numpy.
"""
from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from drmix.data.beir import write_beir

TOY = textwrap.dedent('''
    """A toy index backend: exact numpy search over one .npz file per collection, at toy://FOLDER#NAME."""
    import json
    from pathlib import Path

    import numpy as np
    from pydantic import BaseModel, ConfigDict, Field

    from drmix.errors import ConfigError, IndexLoadError
    from drmix.retrieval.backends.base import (BackendSpec, ChunkChecker, Index, empty_hits, register_backend,
                                               split_location)


    class ToyParams(BaseModel):
        model_config = ConfigDict(extra="forbid")

        scale: float = Field(1.0, gt=0, description="scores are multiplied by this.",
                             json_schema_extra={"flag": "--toy-scale"})


    def _file(location):
        uri, name = split_location(location)
        return Path(uri[len("toy://"):]) / f"{name}.npz"


    class ToyIndex(Index):
        backend = "toy"

        def __init__(self, location, vectors, ids, metadata, texts):
            self.location, self.vectors, self.ids, self.metadata, self.texts = location, vectors, ids, metadata, texts

        @classmethod
        def claims(cls, location):
            return str(location).startswith("toy://")

        @classmethod
        def check_target(cls, target, meta, overwrite):
            if _file(target).exists() and not overwrite:
                raise ConfigError(f"toy collection {target} exists.", fix="pass --overwrite.")

        @classmethod
        def write(cls, target, chunks, meta, kind, params, overwrite=False, corpus=None):
            check, ids, parts = ChunkChecker(), [], []
            for chunk_ids, vectors in chunks:
                chunk_ids, vectors = check(chunk_ids, vectors)
                ids += chunk_ids
                parts.append(vectors)
            check.finish()
            texts = {d: dict(corpus[d]) for d in ids} if corpus is not None else {}
            full = {**meta, "kind": kind, "params": params.model_dump(), "dim": check.dim, "count": check.count,
                    "has_texts": corpus is not None}
            _file(target).parent.mkdir(parents=True, exist_ok=True)
            np.savez(_file(target), vectors=np.concatenate(parts), ids=np.array(ids), meta=json.dumps(full),
                     texts=json.dumps(texts))
            return target

        @classmethod
        def open(cls, location):
            if not _file(location).is_file():
                raise IndexLoadError("no toy collection here.", path=_file(location), fix="drmix index --backend toy.")
            z = np.load(_file(location))
            return cls(location, z["vectors"], [str(i) for i in z["ids"]], json.loads(str(z["meta"])),
                       json.loads(str(z["texts"])))

        def __len__(self):
            return len(self.ids)

        @property
        def dim(self):
            return int(self.vectors.shape[1])

        def search(self, queries, k):
            q = self.queries(queries)
            kk = min(int(k), len(self))
            if kk <= 0 or not len(q):
                return empty_hits(len(q), kk)
            s = (q @ self.vectors.T) * self.metadata["params"]["scale"]
            order = np.argsort(-s, axis=1, kind="stable")[:, :kk]
            return np.take_along_axis(s, order, 1).astype(np.float32), [[self.ids[j] for j in r] for r in order]

        def doc(self, doc_id):
            return self.texts.get(doc_id)

        def holds(self, doc_ids):
            return set(doc_ids) & set(self.ids)

        def sample_vectors(self, size, seed):
            rows = np.random.default_rng(seed).choice(len(self), size=min(size, len(self)), replace=False)
            return self.vectors[np.sort(rows)]


    register_backend(BackendSpec(
        name="toy", index=ToyIndex, kinds=("exact",), target="uri", params=ToyParams,
        location_help="a toy collection as toy://FOLDER#NAME", target_help="toy://FOLDER", example="toy://FOLDER",
        help="exact numpy search over one .npz file per collection (a test)."))
''')

CORPUS = {f"p{i}": {"title": w, "text": f"{w} and {v} {i}"} for i, (w, v) in enumerate(
    (a, b) for a in ("cat", "ship", "bread", "ocean") for b in ("yeast", "river", "engine"))}
QUERIES = {"q0": "about the cat", "q1": "about the ship", "q2": "about bread"}
QRELS = {"test": {"q0": {"p0": 1, "p1": 1}, "q1": {"p3": 1}, "q2": {"p6": 1, "p8": 1}}}


@pytest.fixture
def toy_installed(tmp_path, monkeypatch):
    """The toy backend installed as a distribution on sys.path; the registry reads entry points afresh."""
    from drmix.retrieval.backends import BACKENDS

    site = tmp_path / "site"
    dist = site / "drmix_toy-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: drmix-toy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[drmix.index_backends]\ntoy = drmix_toy_backend\n")
    (site / "drmix_toy_backend.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    BACKENDS.load()
    monkeypatch.setattr(BACKENDS, "_loaded", False)
    yield site
    BACKENDS.unregister("toy")
    sys.modules.pop("drmix_toy_backend", None)


def _ok(app, args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_a_backend_plugged_in_by_its_entry_point_is_used_everywhere(toy_installed, tmp_path, tiny_model_path,
                                                                    monkeypatch):
    from drmix.cli.retrieval import register
    from drmix.retrieval.backends import BACKENDS, backend_for, open_index

    app = typer.Typer()
    register(app)                                                      # the commands, as the main app makes them
    assert "toy" in BACKENDS and backend_for("toy://x#y").name == "toy"
    index_cmd = typer.main.get_command(app).commands["index"]
    options = {p.opts[0]: p for p in index_cmd.params}
    assert options["--toy-scale"].help == "toy: scores are multiplied by this.  [default: 1.0]"
    assert "toy: exact numpy search" in options["--backend"].help and "toy: exact (default)" in options["--kind"].help
    data = write_beir(tmp_path / "toy", CORPUS, QUERIES, QRELS)
    store = f"toy://{tmp_path / 'store'}"

    # drmix index: --uri and the collection named after the corpus folder, the typed flag reaching the backend
    out = _ok(app, ["index", "--corpus", str(data), "--backend", "toy", "--uri", store, "--toy-scale", "2",
                    "--kind", "exact", "--model", tiny_model_path]).output
    assert f"into {store}#toy" in " ".join(out.split())
    index = open_index(f"{store}#toy")
    assert len(index) == 12 and index.metadata["params"] == {"scale": 2.0} and index.metadata["count"] == 12
    assert index.metadata["fingerprint"] and index.metadata["corpus"] == str((data / "corpus.jsonl").resolve())
    result = CliRunner().invoke(app, ["index", "--corpus", str(data), "--backend", "toy", "--uri", store,
                                      "--model", tiny_model_path])
    assert "toy collection" in str(result.exception) and "exists" in str(result.exception)  # its own refusal

    # drmix search: the model the index records, the texts it stores, its scores
    hits = json.loads(_ok(app, ["search", "--index", f"{store}#toy", "-q", "about the cat", "-k", "3",
                                "--json"]).stdout)["hits"]
    assert len(hits) == 3 and all(h["text"] == f"{CORPUS[h['doc_id']]['title']} {CORPUS[h['doc_id']]['text']}"
                                  for h in hits)
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.encode import encode_texts, model_normalizes

    model = load_encoder(tiny_model_path)
    q = encode_texts(model, ["about the cat"], normalize=model_normalizes(model))
    d = encode_texts(model, [f"{CORPUS[h['doc_id']]['title']} {CORPUS[h['doc_id']]['text']}" for h in hits],
                     normalize=model_normalizes(model))
    assert [h["score"] for h in hits] == pytest.approx((2 * d @ q[0]).tolist(), abs=1e-5)

    # drmix eval --index: the same metrics as an exact evaluation of the model (an exact search, scores x 2)
    _ok(app, ["eval", "--index", f"{store}#toy", "--data", str(data), "--output", str(tmp_path / "e1")])
    _ok(app, ["eval", "--model", tiny_model_path, "--data", str(data), "--output", str(tmp_path / "e2")])
    via, exact = (json.loads((tmp_path / e / "eval.json").read_text()) for e in ("e1", "e2"))
    assert via["results"]["toy"] == pytest.approx(exact["results"]["toy"], abs=1e-6)
    assert via["info"]["toy"]["backend"] == "toy" and via["info"]["toy"]["judged_not_indexed"] == 0

    # multi-corpus search: the toy collection beside a BEIR directory encoded on the fly
    rows = [json.loads(line) for line in _ok(app, ["search", "--corpus", f"a={store}#toy", "--corpus",
                                                   f"b={data}", "-q", "about the ocean", "-k", "4", "--json",
                                                   "--model", tiny_model_path]).stdout.splitlines()]
    assert {h["corpus"] for h in rows[0]["hits"]} == {"a", "b"} and len(rows[0]["hits"]) == 4

    # drmix adapt's index stage: one toy collection per target corpus at --index-uri
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "recipes"))
    from test_adapt import make_config

    from drmix.recipes.adapt import plan_adapt
    from drmix.recipes.adapt.index import build_indexes

    cfg = make_config(tmp_path / "adapt", tiny_model_path, candidates=["uniform"], index_backend="toy",
                      index_uri=f"toy://{tmp_path / 'adapted'}")
    record = build_indexes(cfg, plan_adapt(cfg), "uniform", Path(tiny_model_path))
    assert record["backend"] == "toy" and record["kind"] == "exact"
    assert record["corpora"]["pets"]["location"] == f"toy://{tmp_path / 'adapted'}#pets"
    assert len(open_index(record["corpora"]["pets"]["location"])) == 8
    again = build_indexes(cfg, plan_adapt(cfg), "uniform", Path(tiny_model_path))
    assert again["corpora"]["pets"]["built"] is False                   # kept: read by the toy's own read_meta


def test_the_registry_refuses_a_backend_without_kinds():
    from drmix.retrieval.backends.base import BackendSpec, Index, register_backend

    with pytest.raises(ValueError, match="declares no index kind"):
        register_backend(BackendSpec(name="kindless", help="", index=Index, kinds=()))
    from drmix.retrieval.backends import BACKENDS

    assert "kindless" not in BACKENDS
