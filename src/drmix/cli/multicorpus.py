"""CLI commands ``drmix multicorpus build`` and ``drmix multicorpus sweep``.

``build`` turns entity-matching tables (Magellan layout) into the multi-corpus layout
(:mod:`drmix.data.entity_matching`); ``sweep`` evaluates allocation policies on such a layout, or on any
set of BEIR directories sharing query ids, and writes the Table 3-shaped results
(:mod:`drmix.evaluation.multi`). Multi-corpus *search* is ``drmix search --corpus NAME=DIR ...``
(:func:`drmix.retrieval.multi.multi_search`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from drmix.cli.areas import CommandArea, register_area
from drmix.errors import ConfigError
from drmix.retrieval.multi.registry import default_policy_specs

multicorpus_app = typer.Typer(
    name="multicorpus",
    help="Multi-corpus retrieval: build benchmarks from entity-matching tables and sweep allocation policies.",
    no_args_is_help=True,
)


def _console():
    from drmix.cli import make_console

    return make_console()


def _index_help(where: str) -> str:
    return (f"NAME=LOCATION: search corpus NAME through this built index instead of encoding it: {where}. Its "
            "queries and qrels still come from the corpus's BEIR directory. Repeatable.")


def _csv_list(value: Optional[str]) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


@multicorpus_app.command("build")
def build_command(
    source: Path = typer.Argument(..., help="Directory with tableA.csv, tableB.csv and train/valid/test.csv "
                                            "(ltable_id, rtable_id, label)."),
    output: Path = typer.Argument(..., help="Output directory (replaced atomically): one BEIR directory per "
                                            "side, train/<side>.jsonl, manifest.json. A non-empty folder that is "
                                            "not such a benchmark is refused."),
    names: Optional[str] = typer.Option(None, "--names", help="Names of side A and B, comma-separated (default: "
                                                              "from SOURCE's name, walmart-amazon -> walmart,amazon)."),
    query_field: str = typer.Option("title", "--query-field", help="Column whose value is the query text."),
    passage_fields: Optional[str] = typer.Option(None, "--passage-fields", help="Comma-separated columns serialised "
                                                 "into each passage (default: every column except id and the "
                                                 "query field)."),
    include_query_field: bool = typer.Option(False, "--include-query-field", help="Also put the query field in "
                                             "the default passage: an identity task (each query appears verbatim "
                                             "in its own passage), for sanity checks only."),
    seed: int = typer.Option(42, "--seed", help="Seed of the dev/test split and of distractor subsampling."),
    max_unmatched: Optional[int] = typer.Option(None, "--max-unmatched", min=0, help="Keep at most this many "
                                                "unmatched records per side (seeded sample; default all)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty OUTPUT folder that is not a "
                                                             "benchmark built by this command (its contents are deleted)."),
) -> None:
    """Convert entity-matching tables into a multi-corpus retrieval benchmark."""
    from drmix.data.entity_matching import EntityMatchingConfig, build_entity_matching
    from drmix.outputs import check_output_dir

    check_output_dir(output, "multicorpus", overwrite=overwrite, inputs=[source])

    side_names = _csv_list(names)
    if side_names is not None and len(side_names) != 2:
        raise ConfigError(f"--names needs two names, got {names!r}.", fix="write --names walmart,amazon.")
    cfg = EntityMatchingConfig(names=tuple(side_names) if side_names else None, query_field=query_field,
                               passage_fields=_csv_list(passage_fields),
                               include_query_field=include_query_field, seed=seed, max_unmatched=max_unmatched)
    s = build_entity_matching(source, output, cfg)
    a, b = s.names
    _console().print(f"built {output}: corpora {a} ({s.corpus_sizes[a]}) and {b} ({s.corpus_sizes[b]}); "
                     f"queries dev {s.queries['dev']}, test {s.queries['test']}; training pairs "
                     f"{a} {s.train_sizes[a]}, {b} {s.train_sizes[b]}", highlight=False)


def _corpus_dirs(layout: Optional[Path], corpus: Optional[list[str]]) -> dict[str, Path]:
    from drmix.data.entity_matching import read_manifest
    from drmix.retrieval.multi import parse_corpus_args

    if (layout is None) == (not corpus):
        raise ConfigError("give either a benchmark directory or --corpus NAME=DIR options.",
                          fix="e.g. drmix multicorpus sweep data/wa --model runs/wa-walmart --known walmart.")
    if layout is not None:
        return read_manifest(layout)["corpus_dirs"]
    return parse_corpus_args(corpus or [])


@multicorpus_app.command("sweep")
def sweep_command(
    layout: Optional[Path] = typer.Argument(None, help="Benchmark directory written by drmix multicorpus build "
                                                       "(or use --corpus)."),
    corpus: Optional[list[str]] = typer.Option(None, "--corpus", help="NAME=DIR: a BEIR directory or saved index "
                                               "per corpus, repeatable; the BEIR directories share query ids."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="SentenceTransformer folder, drmix run "
                                                                   "directory or hub id; default all-MiniLM-L6-v2."),
    known: Optional[list[str]] = typer.Option(None, "--known", help="The corpus the model was trained on (the "
                                              "'first' corpus of fixed/confidence); repeat to tabulate several. "
                                              "Default: the first corpus."),
    policy: Optional[list[str]] = typer.Option(None, "--policy", "-p", help="Allocation policy, repeatable; ranges "
                                               "like fixed:0.0..1.0 expand, fixed:simplex[/step] gives every "
                                               "split over all corpora (default: "
                                               + ", ".join(default_policy_specs()) + ")."),
    k: int = typer.Option(10, "--k", "-k", min=1, help="Retrieval budget of the table."),
    ks: str = typer.Option("1,2,5,10,20,50,100", "--ks", help="Budgets for the recall-vs-k plot, comma-separated."),
    split: str = typer.Option("test", "--split", help="qrels split evaluated."),
    tune_split: Optional[str] = typer.Option("dev", "--tune-split", help="Split on which fixed fractions, "
                                             "confidence thresholds and the label-free variant are chosen "
                                             "(adds '(dev-tuned)'/'(dev-chosen)' rows; calibrated is fitted on "
                                             "its queries' scores); must differ from --split; 'none' to skip."),
    depth: int = typer.Option(100, "--depth", min=1, help="Candidates fetched per corpus (and the confidence "
                                                          "policy's softmax window upper bound)."),
    mode: str = typer.Option("any", "--credit", help="Per-corpus credit: any (a corpus counts once any of its "
                                                     "relevant passages is retrieved) or fraction; the oracle "
                                                     "optimises the same credit."),
    output: Path = typer.Option(Path("multicorpus-sweep"), "--output", "-o", help="Directory for table.md, "
                                                                                   "results.json and plots."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the table.md, results.json and plots of an "
                                                             "earlier sweep in --output."),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Texts per encoding batch."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show encoding progress bars."),
    index: Optional[list[str]] = typer.Option(None, "--index", help=_index_help("an index of any backend")),
) -> None:
    """Evaluate allocation policies (Recall@k with per-corpus credit, MRR) and write Table 3."""
    from drmix.evaluation.multi import (
        format_table,
        load_multi_qrels,
        sweep_policies,
        write_sweep,
    )
    from drmix.model.encoder import load_encoder
    from drmix.retrieval.multi import MultiCorpusRetriever, expand_policy_specs, parse_policy

    if mode not in ("any", "fraction"):
        raise ConfigError(f"--credit must be any or fraction, got {mode!r}.", fix="pass --credit any.")
    try:
        budgets = sorted({int(x) for x in ks.split(",") if x.strip()} | {k})
    except ValueError:
        raise ConfigError(f"--ks {ks!r} is not a list of integers.", fix="write --ks 1,5,10,50.") from None
    dirs = _corpus_dirs(layout, corpus)
    from drmix.outputs import claim_output

    claim_output(output, "sweep", overwrite=overwrite, inputs=[layout, *dirs.values()])
    specs = expand_policy_specs(policy or default_policy_specs(), n_corpora=len(dirs))
    for s in specs:  # fail on a bad spec before encoding anything
        parse_policy(s)
    tune = None if tune_split in (None, "", "none") else tune_split
    if tune == split:
        raise ConfigError(f"--tune-split {tune} is the evaluated --split: fractions, thresholds and the label-free "
                          "variant would be chosen on the labels being reported.",
                          fix="evaluate on test and tune on dev (the default), or pass --tune-split none.")
    split_q, split_qrels = {}, {}
    for sp in [split] + ([tune] if tune and tune != split else []):
        split_q[sp], split_qrels[sp] = load_multi_qrels(dirs, sp)
    encoder = load_encoder(model)
    searched = _indexed(dirs, index)
    retriever = MultiCorpusRetriever.from_dirs(encoder, searched, depth=depth, batch_size=batch_size,
                                               show_progress=progress)
    all_q = {q: t for qs in split_q.values() for q, t in qs.items()}
    cset = retriever.candidates(all_q, k=max(budgets), show_progress=progress)
    results = []
    for name in known or [next(iter(dirs))]:
        ordered = cset.reorder(name)
        res = sweep_policies(ordered.subset(split_q[split]), split_qrels[split], specs, k,
                             setting=f"{name} known", ks=budgets, mode=mode,
                             cset_dev=ordered.subset(split_q[tune]) if tune else None,
                             qrels_dev=split_qrels[tune] if tune else None)
        results.append(res)
    paths = write_sweep(results, output)
    typer.echo(format_table(results))
    _console().print(f"wrote {', '.join(str(p) for p in paths.values())}", highlight=False)


def _indexed(dirs: dict, index: Optional[list[str]]) -> dict:
    """The corpora as searched: each ``--index NAME=LOCATION`` replaces corpus NAME's folder by that index."""
    from drmix.retrieval.multi import parse_corpus_args

    if not index:
        return dirs
    over = parse_corpus_args(index)
    unknown = [n for n in over if n not in dirs]
    if unknown:
        raise ConfigError(f"--index names corpus {unknown[0]!r}, which is not among {', '.join(dirs)}.",
                          fix="write --index NAME=LOCATION with the NAME of a corpus of the sweep.")
    return {n: over.get(n, d) for n, d in dirs.items()}


def register(app: typer.Typer) -> None:
    """Add the ``multicorpus`` command group (``build``, ``sweep``) to the main app; ``sweep --index`` names the
    locations of the registered index backends."""
    import inspect

    from drmix.cli.backend_flags import location_help

    where = location_help().removeprefix("An index: ").rstrip(".")
    inspect.signature(sweep_command).parameters["index"].default.help = _index_help(where)
    app.add_typer(multicorpus_app, name="multicorpus")


register_area(CommandArea("multicorpus", register))
