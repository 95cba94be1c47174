#!/usr/bin/env bash
# The runs of the primary tests (results/primary_tests.toml), in two lanes of one llama.cpp
# thread each. Resumable: a finished run is skipped in seconds, an unfinished one goes on from
# its last answered question. Usage: bash data_scripts/primary_lanes.sh 1   (and 2, in parallel)
set -euo pipefail
cd "$(dirname "$0")/.."
export DYNAKRAG_N_THREADS=1
# recorded as --data-dir ../shared/data (relative, never resolved): the commands paste anywhere
export DYNAKRAG_DATA_DIR="${DYNAKRAG_DATA_DIR:-../shared/data}"
ME="python data_scripts/main_experiment.py --generator qwen2.5-coder-1.5b"
EVAL="--out-root results/primary/eval"
CHECK="--out-root results/primary/check --split train --offset 330 --eval-limit 100 --n-eval 150
       --selector results/selectors/hotpotqa-sentence-selector-first330.joblib"
# A full run before its stop-at-2 schedule: the schedule replays the run's first calls.
CONTROL="dynakrag-cont,uniform-seed13,uniform-seed14,uniform-seed15,dynakrag-cont-stop2"
CONTROL="$CONTROL,uniform-seed13-stop2,uniform-seed14-stop2,uniform-seed15-stop2"
size() { case "$1" in musique) echo "--n-eval 100 --eval-limit 100";;
                      *) echo "--n-eval 150 --eval-limit 150";; esac; }
case "${1:?lane 1 or 2}" in
  # about 9 h of one core each from scratch (2026-12-07 pace): lane 1 ends with the check
  # set's controller run, which lane 2 would otherwise reach last
  1) for d in hotpotqa 2wikimultihopqa musique; do
       $ME $EVAL --dataset $d $(size $d) --runs "$CONTROL"; done
     $ME $CHECK --dataset hotpotqa --runs dynakrag-cont ;;
  2) for d in hotpotqa 2wikimultihopqa musique; do
       $ME $EVAL --dataset $d $(size $d) --runs fixed_k6,fixed_k12; done
     $ME $CHECK --dataset hotpotqa \
       --runs fixed_k6,fixed_k12,uniform-seed13,uniform-seed14,uniform-seed15 ;;
esac
