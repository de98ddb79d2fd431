"""The index stage of ``drmix adapt``: every target corpus indexed by the adapted model through ``drmix index``'s
backends (:func:`drmix.retrieval.backends.index_documents`), so the run ends with something ``drmix search``
answers.

``output_dir/index/<corpus>/`` is one index per corpus (a backend that writes a folder: memory, faiss-disk), or
``--index-uri`` holds one collection per corpus (a backend that writes to a URI: milvus; ``index/`` then holds the
record only). ``index/index.json`` records where each
index is, the backend and kind, the model (``output_dir/model``, the adapted model's copy; its weights'
fingerprint) and each corpus's content fingerprint; ``index/index.yaml`` the settings it was made with (the
stage's record, :class:`drmix.recipes.stages.Stage`). An index already built in this folder by the same model
from the same corpus is kept when the stage resumes.
"""
from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path
from typing import Any

import yaml

from drmix.errors import ConfigError, DiskFullError
from drmix.recipes.adapt.config import AdaptConfig, index_fields
from drmix.recipes.adapt.plan import AdaptPlan

log = logging.getLogger(__name__)

INDEX_DIR = "index"
#: the stage's name in the progress lines and the estimate
INDEX_TITLE = "index of the adapted model"
RECORD = "index.json"
SETTINGS = "index.yaml"


def index_settings(config: AdaptConfig) -> dict[str, Any]:
    """The settings the stage is made with (a projection of the recipe's config, :func:`index_fields`)."""
    values = config.flat()
    return {k: values[k] for k in index_fields()}


def index_location(config: AdaptConfig, plan: AdaptPlan, corpus: str) -> str:
    """Where ``corpus``'s index goes: ``output_dir/index/<corpus>``, or ``URI#<collection>`` for a backend that
    writes collections at a URI (``--index-uri``)."""
    from drmix.retrieval.backends import backend, collection_name

    s = config.search
    if backend(s.index_backend).target == "uri":
        return f"{s.index_uri}#{collection_name(corpus)}"
    return str(plan.root / INDEX_DIR / corpus)


def read_index_record(root: Path) -> dict[str, Any] | None:
    """``index/index.json`` of a run (None when the index stage has not finished)."""
    try:
        data = json.loads((Path(root) / INDEX_DIR / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def index_finished(root: Path, selected: str | None) -> bool:
    """The stage is finished when its record names the candidate selected now (another selection, after a
    changed candidate or selection setting, re-indexes)."""
    record = read_index_record(root)
    return record is not None and (selected is None or record.get("candidate") == selected)


def _meta(location: str, backend_name: str) -> dict[str, Any] | None:
    """What the index at ``location`` records (read by its backend without loading the vectors where it can), or
    None when there is none."""
    from drmix.errors import DrmixError
    from drmix.retrieval.backends import backend

    try:
        meta = backend(backend_name).read_meta(location)
    except (DrmixError, OSError, ValueError, KeyError):
        return None
    return meta if isinstance(meta, dict) else None


def _kept(location: str, backend_name: str, fingerprint: str, corpus_fp: dict[str, Any]) -> bool:
    """An index at ``location`` built by the model of ``fingerprint`` from the corpus of ``corpus_fp``."""
    meta = _meta(location, backend_name) or {}
    return bool(fingerprint) and meta.get("fingerprint") == fingerprint and meta.get("corpus_fingerprint") == corpus_fp


def build_indexes(config: AdaptConfig, plan: AdaptPlan, selected: str, model_dir: Path) -> dict[str, Any]:
    """Index every target corpus with the selected candidate's model (``model_dir``; the index names its copy
    ``output_dir/model``), then write ``index/index.json``; returns that record."""
    from drmix.data.beir import read_corpus
    from drmix.io.atomic import atomic_write_json, atomic_write_text
    from drmix.model.encoder import load_encoder
    from drmix.pretrain.coco import corpus_file
    from drmix.provenance import corpus_fingerprint
    from drmix.retrieval.backends import (backend, check_index_room, index_documents, model_fingerprint,
                                          resolve_kind)

    s = config.search
    spec = backend(s.index_backend)
    kind = resolve_kind(spec, None)
    folder = plan.root / INDEX_DIR
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / SETTINGS, yaml.safe_dump(index_settings(config), sort_keys=False))
    encoder = load_encoder(str(model_dir), device=config.run.device)
    fingerprint = model_fingerprint(encoder)
    adapted = str((plan.root / "model").resolve())
    corpora: dict[str, Any] = {}
    for name, path in plan.corpora.items():
        file = corpus_file(path)
        fp = corpus_fingerprint(path)
        location = index_location(config, plan, name)
        if _kept(location, spec.name, fingerprint, fp):
            log.info("index of %s: kept (built earlier by the same model from the same corpus) at %s", name, location)
            docs, count = None, (_meta(location, spec.name) or {}).get("count")
        else:
            docs = read_corpus(file)
            meta: dict[str, Any] = {"model": adapted, "corpus": str(Path(file).resolve()), "corpus_fingerprint": fp,
                                    "candidate": selected, "adapt_output_dir": str(plan.root.resolve())}
            # a collection this run wrote earlier is replaced; any other is refused (spec.check)
            ours = spec.target == "uri" and _ours(location, spec.name, plan.root)
            try:
                spec.check(location, meta, ours)
            except ConfigError as e:     # a collection this run did not write
                raise ConfigError(f"index of {name}: {e.message}", path=e.path,
                                  fix="drop that collection, pass another --index-uri, or --no-index.") from None
            room = Path(location) if spec.target != "uri" else spec.index.local_path(location)
            if room is not None:  # a folder of this run, a Milvus Lite folder: refused before encoding if it cannot fit
                try:
                    check_index_room(room, docs, encoder, store_texts=True)
                except DiskFullError as e:
                    raise DiskFullError(f"index of {name}: {e.message}", path=e.path,
                                        fix="free space on that filesystem, choose another --output-dir, or pass "
                                            "--no-index (the adapted model is kept).") from None
            location = index_documents(spec, location, encoder, docs, meta, kind=kind, params={}, overwrite=ours,
                                       max_length=config.data.doc_max_length)
            count = len(docs)
            log.info("index of %s: %d documents (%s %s) at %s", name, count, spec.name, kind, location)
        corpora[name] = {"location": location, "corpus": str(Path(file).resolve()), "corpus_fingerprint": fp,
                         "documents": count, "built": docs is not None}
    record = {"backend": spec.name, "kind": kind, "model": adapted, "candidate": selected,
              "model_fingerprint": fingerprint, "corpora": corpora}
    atomic_write_json(folder / RECORD, record)
    return record


def _ours(location: str, backend_name: str, root: Path) -> bool:
    """Whether the index at ``location`` was written by the adapt run in ``root``."""
    return (_meta(location, backend_name) or {}).get("adapt_output_dir") == str(root.resolve())


def first_query(root: Path, corpus: str) -> str | None:
    """The first synthetic test query of ``corpus`` (a query the corpus answers), for the printed example."""
    from drmix.data.beir import read_queries

    try:
        queries = read_queries(Path(root) / "synthetic" / corpus / "queries.jsonl")
    except Exception:  # noqa: BLE001 - the example falls back to a placeholder
        return None
    return next(iter(queries.values()), None)


def search_command(record: dict[str, Any], root: Path) -> str | None:
    """``drmix search --index LOCATION --query "..."`` for the first corpus of the record, shell-quoted."""
    corpora = record.get("corpora") or {}
    if not corpora:
        return None
    name, entry = next(iter(corpora.items()))
    query = first_query(root, name) or "your question"
    return f"drmix search --index {shlex.quote(str(entry['location']))} --query {shlex.quote(query)}"


def index_lines(record: dict[str, Any] | None) -> list[str]:
    """Markdown lines of the report and the model card: how the index was made and where it is."""
    if not record:
        return []
    from drmix.markdown import md_cell, md_code
    from drmix.provenance import short

    lines = [f"Indexed by the adapted model ({md_code(record['model'])}, weights fingerprint "
             f"{md_code(record.get('model_fingerprint', ''))}) with the **{md_cell(record['backend'])}** backend "
             f"({md_cell(record['kind'])}), as `drmix index` builds it:", ""]
    for name, e in (record.get("corpora") or {}).items():
        lines.append(f"- {md_cell(name)}: {md_code(e['location'])} (corpus {short(e.get('corpus_fingerprint'))})")
    return lines + [""]
