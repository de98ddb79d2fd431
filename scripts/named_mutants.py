"""The authors' settings, each departure written as a mutant: does a test fail when drmix leaves the setting?

    python scripts/named_mutants.py [--only NAME ...] [--list]

mutmut (``scripts/mutation.sh mixture``) makes its mutants by small syntactic edits; the departures below are the
ones that matter for reproducing the papers -- a whole rule or default swapped for the one drmix ran earlier, or
for the obvious reading of the paper where the authors' code does otherwise. Each is written here by hand as one
text replacement in one file. The script copies the checkout's tracked files to a temporary folder, applies one
mutant at a time, runs the tests that should catch it (``pytest -x``, the slow trainer runs left out as in
``scripts/mutation.sh``) and prints a Markdown table: the mutant, the edit, and the first test that failed
(``survived`` if none did). Nothing in the checkout is written. docs/testing.md prints its table.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str            # the departure, in words
    path: str            # file, relative to the checkout
    old: str             # exact text, found once
    new: str
    tests: tuple[str, ...]


DRO = ("tests/mixture/test_dro.py", "tests/mixture/test_dro_authors.py", "tests/mixture/test_dro_cases.py")
IDRO = ("tests/mixture/test_idro.py",)
INFLUENCE = ("tests/mixture/test_influence.py", "tests/mixture/test_influence_authors.py")
STAGE1 = ("tests/recipes/test_optimize.py", "tests/recipes/test_tdro.py")

MUTANTS = (
    Mutant("tdro-absent-keep", "tDRO: an absent collection keeps its weight, the others renormalised among "
           "themselves (the authors: gradient 0, softmax over all)", "src/drmix/mixture/dro.py",
           '("previous" if m == "difference" else "renormalise")', '("previous" if m == "difference" else "keep")',
           DRO),
    Mutant("doremi-absent-renormalise", "DoReMi: an absent domain's score is 0 instead of its previous one "
           "(perdomain_scores)", "src/drmix/mixture/dro.py",
           '("previous" if m == "difference" else "renormalise")',
           '("renormalise" if m == "difference" else "renormalise")', DRO),
    Mutant("doremi-mean-without-initial", "DoReMi: the average weights leave out the initial weights "
           "(avg_domain_weights counts them)", "src/drmix/mixture/dro.py",
           'else m == "difference"),', "else False),", DRO),
    Mutant("groupdro-loss-renormalised", "GroupDRO: the loss renormalised over the groups present (the authors: "
           "group_loss @ adv_probs, absent groups 0)", "src/drmix/mixture/dro.py",
           '("groups" if strategy == "groupdro" else "examples")',
           '("examples" if strategy == "groupdro" else "examples")', DRO),
    Mutant("tdro-stage1-one-negative", "tDRO stage 1 with one hard negative (the authors: train_n_passages 8)",
           "src/drmix/recipes/optimize.py", "STAGE1_NEGATIVES = 7", "STAGE1_NEGATIVES = 1", STAGE1),
    Mutant("tdro-stage1-temperature", "tDRO stage 1 at the fine-tuning temperature 0.05 (the authors: 0.002)",
           "src/drmix/recipes/optimize.py", "STAGE1_TEMPERATURE = 0.002", "STAGE1_TEMPERATURE = 0.05", STAGE1),
    Mutant("tdro-stage1-in-batch", "tDRO stage 1 with in-batch negatives (the authors: dro_only_hn)",
           "src/drmix/recipes/optimize.py", '"in_batch_negatives": False,', '"in_batch_negatives": True,', STAGE1),
    Mutant("idro-updated-weights-in-loss", "iDRO: the loss weighted by the just-updated cluster weights (the "
           "authors: the previous ones)", "src/drmix/mixture/idro.py",
           "            self._update(flats, reached, idx, cl_loss, present, ctx)\n",
           "            self._update(flats, reached, idx, cl_loss, present, ctx)\n"
           "            loss = (torch.as_tensor(self.h, device=losses.device, dtype=losses.dtype) * local_sum"
           " / denom).sum() * (1 if per_rank else world)\n", IDRO),
    Mutant("idro-unnormalised-gradients", "iDRO: cosines of unnormalised per-cluster gradients (the authors "
           "normalise each)", "src/drmix/mixture/idro.py",
           "grads.append(flat / flat.norm().clamp(min=1e-12))", "grads.append(flat)", IDRO),
    Mutant("idro-global-scope", "iDRO under several processes: one global set of counts and weights (the "
           "authors: per rank)", "src/drmix/mixture/idro.py",
           'scope: Literal["rank", "global"] = Field(\n        "rank",',
           'scope: Literal["rank", "global"] = Field(\n        "global",', IDRO),
    Mutant("coco-loss-no-temperature", "COCO: span scores not divided by the temperature",
           "src/drmix/pretrain/coco.py", "scores = (rows @ cols.T) / temperature", "scores = (rows @ cols.T)",
           ("tests/pretrain/test_coco.py",)),
    Mutant("coco-loss-own-span-kept", "COCO: a span's score with itself left among the candidates",
           "src/drmix/pretrain/coco.py",
           'scores = scores.masked_fill(F.one_hot(own, 2 * N).bool(), float("-inf"))', "scores = scores",
           ("tests/pretrain/test_coco.py",)),
    Mutant("infdds-reinforce-without-p", "Inf-DDS: REINFORCE without the P(i) factor of section 3.3",
           "src/drmix/mixture/influence/scorer.py",
           "(p_full[idx].detach() * rewards.to(psi.dtype) * log_p_cond)",
           "(rewards.to(psi.dtype) * log_p_cond)", INFLUENCE),
    Mutant("infdds-reptile-parameter-units", "Inf-DDS: Reptile's delta in parameter units (a step ~1e-5 of a "
           "training step)", "src/drmix/mixture/influence/config.py",
           'reptile_units: Literal["gradient", "parameters"] = Field(\n        "gradient",',
           'reptile_units: Literal["gradient", "parameters"] = Field(\n        "parameters",', INFLUENCE),
    Mutant("multidds-per-dev-reward", "MultiDDS: the reward averaged over per-dev cosines (the authors: one cosine "
           "against the summed dev gradient)", "src/drmix/mixture/influence/config.py",
           'gradcos: Literal["authors", "per_dev"] = Field(\n        "authors",',
           'gradcos: Literal["authors", "per_dev"] = Field(\n        "per_dev",', INFLUENCE),
    Mutant("multidds-actor-with-p", "MultiDDS: the actor's gradient with REINFORCE's P(i) factor",
           "src/drmix/mixture/influence/scorer.py",
           "objective = (torch.log_softmax(psi[idx], dim=0) * rewards.to(psi.dtype)).sum()",
           "objective = (torch.softmax(psi, dim=0)[idx].detach() * torch.log_softmax(psi[idx], dim=0)"
           " * rewards.to(psi.dtype)).sum()", INFLUENCE),
    Mutant("drama-no-llm-steps", "DRAMA: generation and reranking off when an LLM is given (cropped sentences "
           "only)", "src/drmix/recipes/drama.py", "object.__setattr__(self, step, bool(self.llm))",
           "object.__setattr__(self, step, False)", ("tests/recipes/test_drama.py",)),
    Mutant("drama-one-negative", "DRAMA: one hard negative (the paper: 7)", "src/drmix/recipes/drama.py",
           "num_negatives=(7,", "num_negatives=(1,", ("tests/recipes/test_drama.py",)),
    # what a user configured, silently not done
    Mutant("checkpoint-one-extra-kept", "Checkpoints: one more kept than keep_checkpoints",
           "src/drmix/train/checkpoint.py", "for old in done[:-keep]:", "for old in done[:-keep - 1]:",
           ("tests/train/test_checkpoint.py",)),
    Mutant("eval-key-without-max-length", "Evaluation cache: max_length left out of the key (a cache made at "
           "another length reused)", "src/drmix/evaluation/suite.py",
           '"seed": seed, "max_length": max_length, ', '"seed": seed, ', ("tests/evaluation/test_suite.py",)),
    Mutant("infonce-fixed-temperature", "InfoNCE: the configured temperature ignored, always 0.05",
           "src/drmix/train/objective.py", "return cls(temperature=c.temperature,", "return cls(temperature=0.05,",
           ("tests/train/test_objective.py",)),
)

# the trainer runs and spawned processes scripts/mutation.sh leaves out (30-60 s each)
DESELECT = (
    "tests/mixture/test_influence.py::test_trainer_run_writes_trajectory_and_resumes_exactly",
    "tests/mixture/test_influence.py::test_policy_moves_towards_dev_like_collection",
    "tests/mixture/test_idro.py::test_idro_run_refreshes_clusters_writes_weights_and_resumes",
    "tests/mixture/test_idro.py::test_grad_cache_gives_the_per_cluster_gradients_of_the_uncached_batch",
    "tests/mixture/test_idro.py::test_idro_rejects_more_clusters_than_queries",
    "tests/mixture/test_dro.py::test_ddp_ranks_make_the_global_update",
)


def copy_checkout(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.split(b"\0")
    for f in files:
        if not f:
            continue
        src = ROOT / os.fsdecode(f)
        if src.is_file():
            (dest / os.fsdecode(f)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(f))


def first_failure(output: str) -> str | None:
    m = re.search(r"^FAILED (\S+)", output, re.M) or re.search(r"^ERROR (\S+)", output, re.M)
    return m.group(1) if m else None


def run_one(mutant: Mutant, work: Path) -> str:
    target = work / mutant.path
    original = target.read_text(encoding="utf-8")
    if original.count(mutant.old) != 1:
        raise SystemExit(f"{mutant.name}: the text to replace occurs {original.count(mutant.old)} times in "
                         f"{mutant.path} (expected once): update scripts/named_mutants.py")
    target.write_text(original.replace(mutant.old, mutant.new), encoding="utf-8")
    try:
        env = dict(os.environ, PYTHONPATH=str(work / "src"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false", COLUMNS="200")
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", "-m", "not slow",
               *mutant.tests, *(a for d in DESELECT for a in ("--deselect", d))]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode == 0:
            return "**survived**"
        if proc.returncode != 1:
            return f"error (pytest exit {proc.returncode})"
        failed = first_failure(proc.stdout)
        return f"killed: `{failed}`" if failed else "killed"
    finally:
        target.write_text(original, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=None, help="names of the mutants to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if args.only is None or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.what}")
        return 0
    with tempfile.TemporaryDirectory(prefix="drmix-named-mutants-") as tmp:
        work = Path(tmp)
        copy_checkout(work)
        rows = []
        for m in chosen:
            result = run_one(m, work)
            print(f"{m.name}: {result}", file=sys.stderr, flush=True)
            rows.append(f"| `{m.name}` | {m.what} | `{m.path.removeprefix('src/')}` | {result} |")
    print("| mutant | the departure | file | first test that fails |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    return 0 if all("survived" not in r and "error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
