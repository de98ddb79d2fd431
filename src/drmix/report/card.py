"""Model cards: a README.md for every model folder drmix writes, in the sentence-transformers layout.

sentence-transformers writes a card only from its own trainer; a model drmix trains would otherwise keep
the base model's README byte for byte (``SentenceTransformer.save`` reuses the loaded card when its
trainer did not run), which misdescribes the fine-tune. :func:`write_model_card` fills a
:class:`~sentence_transformers.SentenceTransformerModelCardData` (base model, training collections with
their sizes, loss, hyperparameters, evaluation results, citations, tags) and renders it with
sentence-transformers' own template through ``huggingface_hub.ModelCard``; YAML front matter
(``base_model``, ``tags``, ``datasets``, ``metrics``, ``model-index``) comes from that machinery.

Written by hand, because the template has no place for them: the mixture section (final weight per
collection and how it was learned), the drmix command that reproduces the model (with the resolved
configuration) and drmix's papers, inserted as Markdown before the hyperparameters section.

What the card claims is what happened: the usage snippet loads the folder the model was written to (or the Hub
repository it is pushed to, ``--push-to-hub`` / ``drmix push``), never a placeholder; ``datasets:`` lists only
collections read from the Hub (local collections are listed in the body by name); the ``mixture:`` tag says what
the weights were (``static-<scheme>``, ``learned-<strategy>``, ``transferred``); the evaluation table holds the
run's evaluations (the periodic one, and ``RUN/eval/eval.json`` once ``drmix eval`` wrote it: :func:`refresh_card`).
"""
from __future__ import annotations

import json
import logging
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drmix.io.atomic import atomic_write_text
from drmix.model.paths import DEFAULT_HUB_ID, is_default_model
from drmix.papers import PAPERS, Paper
from drmix.markdown import md_cell, md_code, md_entities, md_fence

log = logging.getLogger(__name__)

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

MIXTURE_TEXT = {"uniform": "uniform over collections", "size": "proportional to collection size",
                "temperature": "proportional to |D|^(1/tau)", "file": "read from a weights file"}

#: configuration fields that say where things are, not how the model was trained

@dataclass
class CollectionInfo:
    """One training collection as the card shows it."""

    name: str
    size: int | None = None
    weight: float | None = None
    source: str | None = None   # where it was read from: a local path, or a Hub dataset id (``owner/name[:split]``)

    @property
    def hub_id(self) -> str | None:
        """The Hub dataset id it was read from, or None for a local collection."""
        return hub_dataset_id(self.source)


def hub_dataset_id(source: str | None) -> str | None:
    """``owner/name`` when ``source`` (a collection's source label) names a Hub dataset, else None."""
    if not source:
        return None
    head = str(source).split(":")[0]
    try:
        if Path(head).expanduser().exists():
            return None
    except OSError:
        return None
    from drmix.data.formats.sources import looks_like_hub_id

    return head if looks_like_hub_id(head) else None


@dataclass
class CardInfo:
    """What a card says about a model beyond what the model folder itself holds."""

    base_model: str | None = None
    kind: str = "fine-tuned"  # fine-tuned | pretrained (COCO) | pruned | LoRA-merged
    summary: str | None = None
    collections: list[CollectionInfo] = field(default_factory=list)
    weights_how: str | None = None
    loss: str | None = None
    loss_config: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] | None = None           # flat: field -> value
    defaults: dict[str, Any] | None = None
    roles: dict[str, str] | None = None            # field -> role (hyperparameter | input | operational)
    config_file: dict[str, Any] | None = None      # the config as config.yaml holds it (grouped)
    command: str | None = None
    eval_results: dict[str, dict[str, float]] = field(default_factory=dict)
    eval_split: str | None = None
    papers: list[Paper | str] = field(default_factory=list)  # a Paper, or a key of drmix.papers.PAPERS
    tags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model_id: str | None = None  # the Hub repository the card is pushed to (its usage snippet loads it)
    model_path: str | None = None  # the folder the model is written to (the snippet loads it when no model_id)
    loss_tag: str | None = None    # the ``loss:`` tag (InfoNCE, MarginMSE, ...)
    made_from: dict[str, dict[str, Any]] = field(default_factory=dict)  # "field path" -> content fingerprint

    def to_json(self) -> dict[str, Any]:
        """JSON of the card's facts (papers by key where they have one), for :func:`refresh_card`."""
        import dataclasses

        out = dataclasses.asdict(self)
        out["papers"] = [p if isinstance(p, str) else (p.key if PAPERS.get(p.key) == p else dataclasses.asdict(p))
                         for p in self.papers]
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "CardInfo":
        import dataclasses

        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in obj.items() if k in known}
        values["collections"] = [CollectionInfo(**c) for c in values.get("collections", [])]
        values["papers"] = [PAPERS.get(p, p) if isinstance(p, str) else Paper(**p) for p in values.get("papers", [])]
        return cls(**values)


def current_command() -> str | None:
    """The ``drmix ...`` command line of this process, or None when drmix runs from Python."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is None:
        return None
    if argv0.name == "drmix" or (argv0.name == "__main__.py" and argv0.parent.name in ("drmix", "cli")):
        return shlex.join(["drmix", *sys.argv[1:]])
    return None


def hub_id_of(base_model: str | None) -> str | None:
    """The Hub id of a base model given as a hub id, the bundled default, or None for other local folders."""
    if is_default_model(base_model):
        return DEFAULT_HUB_ID
    if Path(base_model).expanduser().exists():
        return None
    return base_model if HUB_ID.match(base_model) else None


def mixture_tag(cfg: Mapping[str, Any]) -> str:
    """The card's ``mixture:`` tag from a flat config: what the weights were.

    ``mixture:static-<scheme>`` (fixed before training: uniform, size, temperature, file),
    ``mixture:learned-<strategy>`` (a strategy moved them while training: tdro, groupdro, infdds, ...),
    ``mixture:transferred`` (weights learned by an earlier run, given as a weights file: ``--transfer``, or
    ``--mixture file`` with a weights.json a strategy wrote)."""
    strategy = str(cfg.get("strategy") or "static").lower()
    if strategy != "static":
        return f"mixture:learned-{strategy}"
    if cfg.get("transfer") or (cfg.get("mixture") == "file" and _learned_file(cfg.get("weights_file"))):
        return "mixture:transferred"
    return f"mixture:static-{cfg.get('mixture') or 'uniform'}"


def _strategy_field(path: str | None) -> Any:
    """The ``strategy`` of a ``weights.json``, or None (no path, unreadable, no such field): the card only describes
    the file, so an unreadable one is not an error here (training reads it with
    :func:`drmix.mixture.transfer.read_weights_file`)."""
    if not path:
        return None
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj.get("strategy") if isinstance(obj, dict) else None


def _learned_file(path: str | None) -> bool:
    """Whether ``path`` is a weights.json a strategy wrote (its ``strategy`` is not ``static``)."""
    return _strategy_field(path) not in (None, "static")


def info_from_train_config(config: Any, *, names: Sequence[str], sizes: Sequence[int],
                           weights: Mapping[str, Any] | None = None, command: str | None = None,
                           eval_results: Mapping[str, Mapping[str, float]] | None = None,
                           eval_split: str | None = None, sources: Sequence[str | None] | None = None) -> CardInfo:
    """A :class:`CardInfo` for a model trained by :class:`~drmix.train.trainer.Trainer` with ``config``.

    ``weights`` is what the strategy wrote to ``weights.json`` (``collections`` + ``weights`` lists);
    ``sources`` the collections' sources (paths or Hub ids), in the order of ``names``.
    """
    cfg = config.flat()
    defaults = type(config)().flat() if _constructible(type(config)) else None
    final = _weights_by_name(weights, names)
    strategy = cfg.get("strategy", "static")
    spec = _strategy_spec(strategy)
    how = (spec.card_text if spec is not None else "") or f"learned by the {strategy} strategy"
    if strategy == "static":
        how = f"fixed before training: {MIXTURE_TEXT.get(cfg.get('mixture'), cfg.get('mixture'))}"
        source = _learned_source(cfg.get("weights_file"))
        if source:
            how = f"transferred ({cfg.get('transfer') or 'as sampling weights'}) from weights {source}"
    papers: list[Paper] = []
    for paper in (spec.paper if spec is not None else None, _weights_file_paper(cfg.get("weights_file")),
                  PAPERS["lora"] if cfg.get("lora_r") else None,
                  PAPERS["matryoshka"] if cfg.get("matryoshka_dims") else None,
                  PAPERS["gradcache"] if cfg.get("grad_cache_chunk") else None):
        if paper is not None and paper not in papers:
            papers.append(paper)
    loss_config = {"temperature": cfg.get("temperature"), "in_batch_negatives": cfg.get("in_batch_negatives"),
                   "cross_device_negatives": cfg.get("cross_device_negatives"),
                   "hard_negatives_per_query": cfg.get("num_negatives")}
    if cfg.get("matryoshka_dims"):
        loss_config["matryoshka_dims"] = cfg["matryoshka_dims"]
    tags = ["drmix", "dense-retrieval", mixture_tag(cfg)]
    if cfg.get("lora_r"):
        tags.append("lora")
    sources = list(sources) if sources is not None else [None] * len(names)
    push = cfg.get("push_to_hub")
    return CardInfo(
        base_model=cfg.get("model"), kind="LoRA-merged" if cfg.get("lora_r") else "fine-tuned",
        model_id=push or None, model_path=str(Path(cfg["output_dir"]) / "model") if cfg.get("output_dir") else None,
        collections=[CollectionInfo(n, s, final.get(n), src) for n, s, src in zip(names, sizes, sources)],
        weights_how=how,
        loss="InfoNCE (contrastive, in-batch and hard negatives)", loss_config=loss_config, config=cfg,
        defaults=defaults, roles=type(config).roles(), config_file=config.model_dump(mode="json"), command=command if command is not None else current_command(),
        eval_results={k: dict(v) for k, v in (eval_results or {}).items()}, eval_split=eval_split,
        papers=papers, tags=tags, made_from=made_from(config))


def made_from(config: Any) -> dict[str, dict[str, Any]]:
    """``{"field path": fingerprint}`` of every file and folder the configuration's input fields name (the
    training collections, the starting model, a weights file, a reference model, dev sets): what the model was
    made from, by content (:func:`drmix.provenance.fingerprint`; hashes remembered, so nothing is read twice)."""
    from drmix.provenance import fingerprint

    roles = type(config).roles()
    out: dict[str, dict[str, Any]] = {}

    def strings(v: Any):
        if isinstance(v, str):
            yield v
        elif isinstance(v, Mapping):
            for x in v.values():
                yield from strings(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                yield from strings(x)

    for key, value in config.flat().items():
        if roles.get(key) != "input":
            continue
        for path in dict.fromkeys(strings(value)):
            fp = fingerprint(path) if path and Path(path).exists() else None
            if fp is not None:
                out[f"{key} {path}"] = {"field": key, "path": path, **fp}
    return out


def _constructible(cls: type) -> bool:
    try:
        cls()
        return True
    except Exception:  # noqa: BLE001 - a config with required fields has no defaults to compare with
        return False


def _weights_by_name(weights: Mapping[str, Any] | None, names: Sequence[str]) -> dict[str, float]:
    if not weights:
        return {}
    w = weights.get("final") if isinstance(weights.get("final"), dict) else weights.get("weights")
    if isinstance(w, dict):
        return {str(k): float(v) for k, v in w.items() if v is not None}
    cols = weights.get("collections") or list(names)
    if isinstance(w, list) and len(w) == len(cols):
        return {str(n): float(v) for n, v in zip(cols, w) if v is not None}
    return {}


def _learned_by(path: str | None) -> str | None:
    """The strategy a ``weights.json`` names (``"strategy"``), or None (see :func:`_strategy_field`)."""
    strategy = _strategy_field(path)
    return str(strategy) if strategy else None


def _learned_source(path: str | None) -> str | None:
    if not path:
        return None
    strategy = _learned_by(path)
    return f"learned by {md_cell(strategy)} ({md_code(path)})" if strategy else md_code(path)


def _strategy_spec(name: Any) -> Any:
    """The registered spec of strategy ``name``, or None (a strategy no longer registered)."""
    from drmix.mixture.registry import STRATEGIES

    return STRATEGIES.all().get(str(name).lower())


def _weights_file_paper(path: str | None) -> Paper | None:
    strategy = _learned_by(path)
    spec = _strategy_spec(strategy) if strategy else None
    return spec.paper if spec is not None else None


class _ReportedEvaluation:
    """Stands in for a sentence-transformers evaluator so its card machinery formats drmix's results
    (``name``, ``description``, ``primary_metric`` and ``get_config_dict`` are all it reads)."""

    description = "Information Retrieval"

    def __init__(self, dataset: str, split: str | None, primary: str | None) -> None:
        self.name = dataset
        self.split = split
        self.primary_metric = primary

    def get_config_dict(self) -> dict[str, Any]:
        return {"split": self.split} if self.split else {}


# the card prints "Evaluated with <code>module.name</code>": name the command that produced the numbers
_ReportedEvaluation.__module__ = "drmix"
_ReportedEvaluation.__name__ = _ReportedEvaluation.__qualname__ = "eval"


def _fmt_weight(w: float | None) -> str:
    return "" if w is None else f"{w:.4f}"


def drmix_sections(info: CardInfo) -> str:
    """The Markdown the sentence-transformers template cannot express (mixture, loss, command, papers)."""
    out: list[str] = []
    if info.summary or info.notes:
        out += ["### About this model", ""]
        if info.summary:
            out += [md_cell(info.summary), ""]
        out += [f"- {md_cell(n)}" for n in info.notes] + ([""] if info.notes else [])
    if info.collections:
        out += ["### Training Mixture", ""]
        if info.weights_how:  # drmix's sentence; a weights file's path in it is a code span already
            out += [f"Mixture weights: {info.weights_how}.", ""]
        total = sum(c.size or 0 for c in info.collections)
        out += ["| collection | examples | share of data | final weight |", "|---|---:|---:|---:|"]
        for c in info.collections:
            share = f"{c.size / total:.4f}" if c.size and total else ""
            out.append(f"| {md_cell(c.name)} | {'' if c.size is None else f'{c.size:,}'} | {share} | {_fmt_weight(c.weight)} |")
        out.append("")
    if info.loss:
        out += ["### Loss", "", f"{info.loss}" + (" with these parameters:" if info.loss_config else "."), ""]
        if info.loss_config:
            out += [md_fence(json.dumps(info.loss_config, indent=4), "json"), ""]
    if info.made_from:
        from drmix.provenance import short

        out += ["### Made from", "", "The inputs by content, so a file changed at the same path is told apart:", "",
                "| input | path | content |", "|---|---|---|"]
        for fp in info.made_from.values():
            out.append(f"| {md_cell(fp.get('field', ''))} | {md_cell(fp.get('path', ''))} | {md_cell(short(fp))} |")
        out.append("")
    if info.command or info.config:
        out += ["### Reproduce", ""]
        if info.command:
            out += ["This model was produced by:", "", md_fence(info.command, "bash"), ""]
        if info.config:
            out += ["<details><summary>Resolved configuration (config.yaml)</summary>", "",
                    md_fence(_yaml(info.config_file or info.config).rstrip(), "yaml"), "", "</details>", ""]
    return "\n".join(out)


def _yaml(obj: Any) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True)


def _hyperparameters(info: CardInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    if not info.config:
        return {}, {}
    roles = info.roles or {}   # the config's field roles (drmix.config.parts): inputs and bookkeeping are not shown
    allp = {k: v for k, v in info.config.items() if roles.get(k, "hyperparameter") == "hyperparameter"}
    nondefault = {k: v for k, v in allp.items() if info.defaults is not None and info.defaults.get(k) != v}
    return allp, nondefault


def card_data(model: Any, info: CardInfo, *, body: bool = False) -> Any:
    """A filled :class:`SentenceTransformerModelCardData` (registered with ``model``).

    ``body``: the names (collections, evaluation datasets, a local base model's folder) are written with
    :func:`~drmix.markdown.md_entities`, for the template's body, which puts them in prose, headings,
    tables and raw HTML; the front matter is rendered from the plain data (:func:`render_model_card`)."""
    from sentence_transformers import SentenceTransformerModelCardData

    name = md_entities if body else str
    datasets = [{"name": name(c.name), "size": c.size, "columns": ["query", "positive", "negative"],
                 "loss": {"fullname": "drmix.model.losses.contrastive_losses"},
                 **({"id": c.hub_id} if c.hub_id else {})}
                for c in info.collections]
    data = SentenceTransformerModelCardData(local_files_only=True, train_datasets=datasets,
                                            generate_widget_examples=False, task_name="retrieval")
    data.register_model(model)
    if info.model_id:
        data.set_model_id(info.model_id)
    elif info.model_path:  # the usage snippet loads the folder the model was written to
        data._snippet_default_model_id = info.model_path
    hub = hub_id_of(info.base_model)
    data.base_model = hub
    if hub is None and info.base_model:
        data.model_name = f"SentenceTransformer {info.kind} from {name(Path(info.base_model).name)} with drmix"
    elif hub:
        data.model_name = f"SentenceTransformer {info.kind} from {hub} with drmix"
    # only ids the Hub knows: a local collection's name would be read as a (wrong) dataset id
    data.datasets = list(dict.fromkeys(c.hub_id for c in info.collections if c.hub_id))
    loss_tag = info.loss_tag or ("InfoNCE" if info.loss else None)
    data.add_tags(["generated_from_drmix", *info.tags, f"loss:{loss_tag}" if loss_tag else "drmix"])
    allp, nondefault = _hyperparameters(info)
    data.all_hyperparameters = allp
    data.non_default_hyperparameters = nondefault
    data.eval_results_dict = {
        _ReportedEvaluation(name(dataset), name(info.eval_split) if info.eval_split else None,
                            "ndcg@10" if "ndcg@10" in metrics else None):
            {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        for dataset, metrics in info.eval_results.items()}
    citations = {"Sentence Transformers": _ST_CITATION}
    for paper in info.papers:
        paper = paper if isinstance(paper, Paper) else PAPERS[paper]
        citations[paper.citation_name] = paper.bibtex
    data.citations = citations
    return data


_ST_CITATION = """@inproceedings{reimers-2019-sentence-bert,
    title = "Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks",
    author = "Reimers, Nils and Gurevych, Iryna",
    booktitle = "Proceedings of the 2019 Conference on Empirical Methods in Natural Language Processing",
    month = "11",
    year = "2019",
    publisher = "Association for Computational Linguistics",
    url = "https://arxiv.org/abs/1908.10084",
}"""


def _insert(card: str, section: str) -> str:
    """``section`` inserted before the first known heading of the template's later sections."""
    if not section:
        return card
    for anchor in ("\n### Training Hyperparameters", "\n### Framework Versions", "\n## Citation"):
        i = card.find(anchor)
        if i >= 0:
            return card[:i] + "\n" + section.rstrip() + "\n" + card[i:]
    return card.rstrip() + "\n\n" + section


HUB_COMMENT = "# Download from the 🤗 Hub"
LOCAL_COMMENT = "# Load the model folder drmix wrote"
_SNIPPET = re.compile(r'(?P<comment># [^\n]*\n)?(?P<call>model = SentenceTransformer\(")(?P<id>[^"]*)("\))')


def point_usage_at(card: str, model_id: str, *, hub: bool = True) -> str:
    """``card`` with its usage snippet loading ``model_id`` (a Hub repository, or a local folder with
    ``hub=False``), whatever it loaded before (a folder path, or sentence-transformers' placeholder)."""
    comment = HUB_COMMENT if hub else LOCAL_COMMENT

    def repl(m: re.Match) -> str:
        head = f"{comment}\n" if m.group("comment") else ""
        return f'{head}{m.group("call")}{model_id}")'

    return _SNIPPET.sub(repl, card)


def render_model_card(model: Any, info: CardInfo) -> str:
    """The card's text: sentence-transformers' template, filled from ``info``, plus drmix's sections."""
    from huggingface_hub import ModelCard

    previous = getattr(model, "model_card_data", None)
    try:
        front = card_data(model, info).to_yaml()  # the plain names: the Hub reads them as data
        data = card_data(model, info, body=True)
        model.model_card_data = data
        card = ModelCard.from_template(card_data=data, template_path=str(data.template_path), hf_emoji="🤗").content
    finally:
        if previous is not None:
            model.model_card_data = previous
    card = _with_front_matter(card, front)
    if not info.model_id and info.model_path:
        card = point_usage_at(card, info.model_path, hub=False)
    return _insert(card, drmix_sections(info))


def _with_front_matter(card: str, front: str) -> str:
    """``card`` with its YAML front matter replaced by ``front``."""
    if not card.startswith("---\n"):
        return card
    end = card.find("\n---\n", 4)
    return card if end < 0 else "---\n" + front.strip("\n") + card[end:]


def write_model_card(model: Any, model_dir: str | Path, info: CardInfo) -> Path:
    """Write ``model_dir/README.md`` (atomically) describing ``model`` as ``info`` says; returns its path."""
    path = Path(model_dir) / "README.md"
    atomic_write_text(path, render_model_card(model, info))
    return path



#: the facts of a run's card, kept beside the run so that :func:`refresh_card` can re-render it
CARD_FACTS = "card.json"


def eval_results_from(run_dir: str | Path) -> tuple[dict[str, dict[str, float]], str | None]:
    """``({dataset: {metric: value}}, split)`` of the evaluations ``drmix eval`` wrote into a run
    (``RUN/eval/eval.json``, or any ``RUN/eval*/eval.json``), later files winning per dataset. A sampled
    evaluation's dataset is named with its sample (``scifact (sample: 100 of 300 queries, ...)``), in the card's
    tables and its ``model-index`` alike: it is not the full dataset's task."""
    from drmix.evaluation.evaluate import sample_label

    out: dict[str, dict[str, float]] = {}
    split = None
    for path in sorted(Path(run_dir).glob("eval*/eval.json")):
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        results = obj.get("results") if isinstance(obj, dict) else None
        if not isinstance(results, dict):
            continue
        split = obj.get("split") or split
        info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
        for dataset, metrics in results.items():
            if isinstance(metrics, dict):
                out[sample_label(str(dataset), info.get(dataset))] = {k: float(v) for k, v in metrics.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out, split


def refresh_card(run_dir: str | Path, *, model: Any = None) -> Path | None:
    """Re-render ``RUN/model/README.md`` from the run's card facts (``card.json``) with the evaluations found in
    the run since training (:func:`eval_results_from`); None when the run has no card facts or no model."""
    run_dir = Path(run_dir)
    facts, model_dir = run_dir / CARD_FACTS, run_dir / "model"
    if not facts.is_file() or not (model_dir / "modules.json").is_file():
        return None
    try:
        info = CardInfo.from_json(json.loads(facts.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as e:
        log.warning("cannot read %s (%s); the model card is left as it is", facts, e)
        return None
    results, split = eval_results_from(run_dir)
    if not results:
        return None
    info.eval_results = {**info.eval_results, **results}
    info.eval_split = split or info.eval_split
    if model is None:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    return write_model_card(model, model_dir, info)
