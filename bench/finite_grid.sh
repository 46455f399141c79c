#!/bin/bash
# This file runs issue 12's finite-set comparison: each engine at its defaults (fitted
# hyperparameters) against a hand-tuning grid of fixed lengthscale x width, by regret
# ratio, in-process (kb-bench, synchronous, T = 300). One JSON line per run on stdout;
# bench/finite_grid.py turns them into the tables of docs/BENCHMARKS.md.
#   bench/finite_grid.sh [BUILD_DIR] > results.jsonl
# ENGINES, PROBLEMS (space-separated; "abalone" gets its --data) and SEEDS narrow the run,
# e.g. the tuning problems only: PROBLEMS="hartmann3 branin rkhs" SEEDS="1 2 3 4 5".
# ABALONE names the data file when the repository is not next to shared/ (a worktree).
set -euo pipefail
B=${1:-build}/kb-bench
DATA=${ABALONE:-$(dirname "$0")/../../shared/data/abalone.csv}
read -r -a ENGINE_LIST <<<"${ENGINES:-bbkb gp-ucb gp-ts}"
read -r -a PROBLEM_LIST <<<"${PROBLEMS:-hartmann3 branin hartmann6 rkhs matern-rkhs abalone}"
read -r -a SEED_LIST <<<"${SEEDS:-1 2 3}"
for engine in "${ENGINE_LIST[@]}"; do
  for problem in "${PROBLEM_LIST[@]}"; do
    p=$problem
    [ "$problem" = abalone ] && p="abalone --data $DATA"
    for seed in "${SEED_LIST[@]}"; do
      # shellcheck disable=SC2086
      "$B" --engine $engine --problem $p --T 300 --seed $seed | sed 's/^{/{"setting": "default", /'
      for l in 0.05 0.1 0.2 0.5 1; do
        for w in 0.5 1 2 3; do
          # shellcheck disable=SC2086
          "$B" --engine $engine --problem $p --T 300 --seed $seed --set hyperparameters=fixed \
            --set lengthscale=$l --set width=$w |
            sed "s/^{/{\"setting\": \"l=$l w=$w\", /"
        done
      done
    done
  done
done
