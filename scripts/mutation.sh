#!/usr/bin/env bash
# Mutation testing of one package with mutmut 3 (docs/testing.md): which changes to the code do its tests catch?
#
#   scripts/mutation.sh PACKAGE [MAX_CHILDREN]      PACKAGE: evaluation | outputs | train | mixture
#
# mutmut reads one configuration per project (pyproject.toml [tool.mutmut] or setup.cfg [mutmut]); to restrict a
# run to one package and the tests that cover it, this script copies the tracked files of the checkout into
# $MUTATION_WORK/PACKAGE (default /tmp/drmix-mutation/PACKAGE), writes the package's setup.cfg there, runs
# `mutmut run` and prints `mutmut results` and the score (killed / all mutants). Nothing in the checkout is
# written. A second run in the same folder reuses mutmut's cache of the mutants that did not change; delete the
# folder to start over. MAX_CHILDREN (default: the number of cores) is how many mutants are tested at once.
set -euo pipefail

PACKAGE=${1:?"usage: scripts/mutation.sh evaluation|outputs|train|mixture [MAX_CHILDREN]"}
CHILDREN=${2:-$(nproc)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=$(command -v python)
WORK=${MUTATION_WORK:-/tmp/drmix-mutation}/$PACKAGE

case "$PACKAGE" in
  evaluation)   # the metrics, the paired tests and intervals, the comparison of evaluated models
    MUTATE="src/drmix/evaluation/metrics.py src/drmix/evaluation/significance.py src/drmix/evaluation/compare.py"
    TESTS="tests/evaluation/test_metrics.py tests/evaluation/test_significance.py tests/evaluation/test_compare.py
           tests/evaluation/test_compare_query_sets.py" ;;
  outputs)      # the output contract: what a command may write where
    MUTATE="src/drmix/outputs.py"
    TESTS="tests/test_outputs.py tests/test_output_contract.py" ;;
  train)        # the non-finite guard, the logged window (accumulated and window-mean losses), the resume check
    # trainer.py, checkpoint.py and objective.py would add 1,261 mutants that only training runs reach (hours on
    # 2 cores), so they are not mutated; the runs below check the loop they make up (docs/testing.md)
    MUTATE="src/drmix/train/guard.py src/drmix/train/window.py src/drmix/train/resume_check.py"
    # the runs that decide the step, the guard, the window and the resume (1-5 s each); the two-process DDP run
    # (30 s) and the output, evaluation and card runs are left out so a run stays under 30 minutes on 2 cores
    TESTS="tests/train/test_window.py tests/train/test_guard.py tests/train/test_resume_check.py
           tests/train/test_step.py
           tests/train/test_trainer.py::test_resume_gives_identical_weights
           tests/train/test_trainer.py::test_gradient_accumulation_matches_the_big_batch_without_in_batch_negatives"
    # as for mixture: the text of log lines and error messages is not mutated
    PATTERNS='raise \w+Error\(' ;;
  mixture)      # the mixture algorithms (tDRO, DoReMi, GroupDRO, iDRO, Inf-DDS, MultiDDS, transfer), COCO, InfoNCE
    MUTATE="src/drmix/mixture/*.py src/drmix/mixture/influence/*.py src/drmix/recipes/optimize.py src/drmix/pretrain/coco.py
            src/drmix/model/losses.py"
    # the trainer runs and spawned processes (30-60 s each) are left out so a run stays under 30 minutes on 2
    # cores; the rules they exercise are covered by the transcription tests (docs/testing.md)
    TESTS="tests/mixture tests/recipes/test_optimize.py tests/model/test_losses.py tests/pretrain/test_coco.py
           tests/recipes/test_tdro.py::test_stage1_config_is_the_authors_setting_and_overrides_win
           tests/recipes/test_tdro.py::test_stage1_fill_rules_from_the_config
           tests/recipes/test_tdro.py::test_mine_missing_negatives_tops_every_example_up
           tests/recipes/test_tdro.py::test_fill_missing_negatives_uses_other_examples_of_the_same_collection
           --deselect tests/mixture/test_influence.py::test_trainer_run_writes_trajectory_and_resumes_exactly
           --deselect tests/mixture/test_influence.py::test_policy_moves_towards_dev_like_collection
           --deselect tests/mixture/test_idro.py::test_idro_run_refreshes_clusters_writes_weights_and_resumes
           --deselect tests/mixture/test_idro.py::test_grad_cache_gives_the_per_cluster_gradients_of_the_uncached_batch
           --deselect tests/mixture/test_idro.py::test_idro_rejects_more_clusters_than_queries
           --deselect tests/mixture/test_strategy_contract.py::test_strategy_contract
           --deselect tests/mixture/test_file_weights.py::test_trainer_mixes_by_the_yaml_weight_keys
           --deselect tests/mixture/test_dro.py::test_ddp_ranks_make_the_global_update
           --deselect tests/mixture/test_transfer.py::test_drmix_train_with_transfer_drops_low_weight_collections"
    # the text of log lines and error messages is not mutated (each such mutant only changes a message; the
    # conditions that log or raise, and the error types, still are)
    PATTERNS='^\s*log\.(debug|info|warning|error|exception)\(
              raise \w+Error\(
              ^\s*logging\.getLogger\(__name__\)\.warning\(' ;;
  *) echo "unknown package '$PACKAGE': use evaluation, outputs, train or mixture" >&2; exit 2 ;;
esac

mkdir -p "$WORK"
# the tracked files as they are in the checkout (edits included), never mutmut's own folder
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^mutants/' \
   | tar --null -T - -cf -) | (cd "$WORK" && tar -xf -)
{
  echo "[mutmut]"
  echo "source_paths = src"
  echo "only_mutate ="
  for f in $MUTATE; do echo "    $f"; done
  echo "pytest_add_cli_args_test_selection ="
  for t in $TESTS; do echo "    $t"; done
  echo "pytest_add_cli_args = -p no:cacheprovider"
  if [ -n "${PATTERNS:-}" ]; then
    echo "do_not_mutate_patterns ="
    while read -r pat; do [ -n "$pat" ] && echo "    $pat"; done <<< "$PATTERNS"
  fi
} > "$WORK/setup.cfg"

cd "$WORK"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
unset PYTHONPATH          # mutmut puts mutants/src first; nothing else may shadow it
"$PYTHON" -m mutmut run --max-children "$CHILDREN" || true
"$PYTHON" -m mutmut results --all true > results.txt || true
"$PYTHON" - <<'EOF'
import collections
import re

counts = collections.Counter()
by_module = collections.defaultdict(collections.Counter)
for line in open("results.txt", encoding="utf-8"):
    m = re.match(r"\s*(\S+): (.+)$", line)
    if m:
        counts[m.group(2).strip()] += 1
        by_module[re.split(r"\.x(?:_|ǁ)", m.group(1))[0]][m.group(2).strip()] += 1
total = sum(counts.values())
killed = counts.get("killed", 0)
print("| module | mutants | killed | survived | score |\n|---|---:|---:|---:|---:|")
for module, c in sorted(by_module.items()):
    n = sum(c.values())
    print(f"| `{module}` | {n:,} | {c['killed']:,} | {n - c['killed']:,} | {100 * c['killed'] / n:.1f}% |")
print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
print(f"score: {killed} of {total} mutants killed ({100 * killed / max(total, 1):.1f}%)")
EOF
