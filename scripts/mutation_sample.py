"""Sampled mutation testing (docs/testing.md, "Sampled mutants"): mutmut over files whose every mutant would take
hours on two cores -- a seeded random sample of each file's mutants, the score with its 95% interval.

    nice -n 15 .venv/bin/python scripts/mutation_sample.py                  # 25 mutants a file, seed 0
    .venv/bin/python scripts/mutation_sample.py --per-file 10 --seed 1      # another sample
    .venv/bin/python scripts/mutation_sample.py --retest                    # after adding tests: the survivors
    .venv/bin/python scripts/mutation_sample.py --table RESULTS.json        # the table of a finished run

Like scripts/mutation.sh it copies the checkout's tracked files into ``$MUTATION_WORK/sampled`` (default
/tmp/drmix-mutation/sampled) and writes there the ``setup.cfg`` that restricts mutmut to the files below and the
tests that mirror them; nothing in the checkout is written. mutmut generates every mutant of the files; the
script draws ``--per-file`` of each file's mutant names (sorted, ``random.Random(seed).sample``), runs ``mutmut
run`` on those names only (mutmut runs, for each, the selected tests that call the mutated function), writes the
statuses to ``results.json`` in that folder and prints one row a file: the mutants the file has, those sampled,
how each ended, the score (killed / tested: a run stopped early leaves some "not checked") and its 95% Wilson
interval (``scipy.stats.binomtest``). A mutant that timed out or found no test is not counted as killed.
``mutmut show NAME`` in that folder shows a mutant. ``--retest`` (the same folder, ``--per-file`` and ``--seed``)
copies the checkout again and tests only the sampled mutants the last run did not kill, with the tests as they
are now (mutmut keeps every other verdict); its statuses go to ``results-retest.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the files mutated and the tests that mirror them (the two-process DDP run, 30-110 s, is left out, as in
#: scripts/mutation.sh train)
FILES = {
    "src/drmix/train/trainer.py": ["tests/train/test_trainer.py",
                                   "--deselect", "tests/train/test_trainer.py::test_two_process_ddp_matches_one_process"],
    "src/drmix/train/checkpoint.py": ["tests/train/test_checkpoint.py"],
    "src/drmix/train/objective.py": ["tests/train/test_objective.py"],
    "src/drmix/evaluation/suite.py": ["tests/evaluation/test_suite.py"],
    "src/drmix/evaluation/evaluate.py": ["tests/evaluation/test_evaluate.py"],
}
#: as in scripts/mutation.sh: the text of log lines and error messages is not mutated
DO_NOT_MUTATE = [r"^\s*log\.(debug|info|warning|error|exception)\(", r"raise \w+Error\("]
STATUSES = ("killed", "survived", "timeout", "no tests", "not checked")


def _copy_checkout(work: Path) -> None:
    """The checkout's tracked (and untracked, not ignored) files as they are, into ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout
    keep = b"\0".join(f for f in files.split(b"\0") if f and not f.startswith(b"mutants/"))
    archive = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=ROOT, input=keep, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-xf", "-"], cwd=work, input=archive, check=True)


def _setup_cfg(files: dict[str, list[str]]) -> str:
    lines = ["[mutmut]", "source_paths = src", "only_mutate ="]
    lines += [f"    {f}" for f in files]
    lines += ["pytest_add_cli_args_test_selection ="]
    lines += [f"    {t}" for t in dict.fromkeys(t for ts in files.values() for t in ts)]
    lines += ["pytest_add_cli_args = -p no:cacheprovider", "do_not_mutate_patterns ="]
    lines += [f"    {p}" for p in DO_NOT_MUTATE]
    return "\n".join(lines) + "\n"


_GENERATE = """
from pathlib import Path
from os import makedirs
from mutmut.__main__ import create_mutants, store_lines_covered_by_tests
from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
makedirs(Path("mutants"), exist_ok=True)
copy_src_dir(); copy_also_copy_files(); setup_source_paths(); store_lines_covered_by_tests()
create_mutants(1)
"""


def _meta(work: Path, path: str) -> dict:
    return json.loads((work / "mutants" / (path + ".meta")).read_text(encoding="utf-8"))


def draw(names: list[str], k: int, seed: int) -> list[str]:
    """``k`` of ``names`` (all when there are fewer), the same for the same names and seed."""
    names = sorted(names)
    return sorted(random.Random(seed).sample(names, min(k, len(names))))


def status(code: int | None) -> str:
    """mutmut's exit code of a mutant's tests as one of :data:`STATUSES` (a test failure, pytest's internal error or
    a segfault is a kill; the CPU limit's signals, SIGKILL included, are a timeout)."""
    if code in (1, 3, -11):
        return "killed"
    if code == 0:
        return "survived"
    if code in (5, 33):
        return "no tests"
    if code in (24, -24, 36, 152, 255, -9):
        return "timeout"
    return "not checked"


def wilson(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def table(results: dict) -> str:
    """Markdown: one row a file and the total (see the module docstring)."""
    head = ("| file | mutants | sampled | killed | survived | timeout | no tests | not checked | score | "
            "95% interval (Wilson) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    rows, total = [head], {"mutants": 0, "sampled": 0, **{s: 0 for s in STATUSES}}
    for path, r in results["files"].items():
        counts = {s: sum(1 for v in r["sampled"].values() if v == s) for s in STATUSES}
        n = len(r["sampled"])
        total["mutants"] += r["mutants"]
        total["sampled"] += n
        for s in STATUSES:
            total[s] += counts[s]
        rows.append(_row(f"`{path.removeprefix('src/drmix/')}`", r["mutants"], n, counts))
    rows.append(_row("all (the samples pooled)", total["mutants"], total["sampled"], total))
    survivors = [name for r in results["files"].values() for name, s in r["sampled"].items() if s != "killed"]
    return "\n".join(rows) + f"\n\nseed {results['seed']}, {results['per_file']} a file; not killed: " + (
        ", ".join(f"`{n}`" for n in survivors) or "none") + "\n"


def _row(name: str, mutants: int, n: int, counts: dict) -> str:
    checked = n - counts["not checked"]          # a run stopped early: the score is of the mutants it tested
    low, high = wilson(counts["killed"], checked) if checked else (0.0, 1.0)
    score = 100 * counts["killed"] / checked if checked else 0.0
    return (f"| {name} | {mutants:,} | {n} | {counts['killed']} | {counts['survived']} | {counts['timeout']} | "
            f"{counts['no tests']} | {counts['not checked']} | {score:.0f}% | {100 * low:.0f}%-{100 * high:.0f}% |")


def run(work: Path, per_file: int, seed: int, max_children: int, files: dict[str, list[str]],
        retest: bool = False) -> dict:
    _copy_checkout(work)
    (work / "setup.cfg").write_text(_setup_cfg(files), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)            # mutmut puts mutants/src first; nothing else may shadow it
    subprocess.run([sys.executable, "-c", _GENERATE], cwd=work, env=env, check=True)
    sample = {path: draw(list(_meta(work, path)["exit_code_by_key"]), per_file, seed) for path in files}
    names = [n for ns in sample.values() for n in ns]
    if retest:                              # the verdicts of the last run, but for the mutants it did not kill
        before = {n: c for path in files for n, c in _meta(work, path)["exit_code_by_key"].items()}
        names = [n for n in names if status(before.get(n)) != "killed"]
    subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names], cwd=work,
                   env=env)
    results = {"seed": seed, "per_file": per_file, "files": {}}
    for path, drawn in sample.items():
        codes = _meta(work, path)["exit_code_by_key"]
        results["files"][path] = {"mutants": len(codes), "sampled": {n: status(codes.get(n)) for n in drawn}}
    (work / ("results-retest.json" if retest else "results.json")).write_text(json.dumps(results, indent=1),
                                                                            encoding="utf-8")
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-file", type=int, default=25, help="mutants drawn from each file (default 25)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    ap.add_argument("--max-children", type=int, default=1, help="mutants tested at once (default 1)")
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("MUTATION_WORK", "/tmp/drmix-mutation"))
                    / "sampled", help="the folder the checkout is copied to (default /tmp/drmix-mutation/sampled)")
    ap.add_argument("--retest", action="store_true", help="test again only the sampled mutants the last run in "
                    "--work did not kill (after tests were added for them)")
    ap.add_argument("--table", type=Path, help="print the table of this results.json instead of running")
    args = ap.parse_args()
    if args.table:
        results = json.loads(args.table.read_text(encoding="utf-8"))
    else:
        results = run(args.work, args.per_file, args.seed, args.max_children, FILES, retest=args.retest)
    print(table(results), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
