#!/usr/bin/env bash
# The runs of the primary tests (results/primary_tests.toml), in two lanes of one llama.cpp
# thread each. Both lanes work through one queue: a lane takes the first run that is neither
# finished nor held by the other lane (a flock per run), so they finish together instead of one
# idling for hours. Resumable: an unfinished run goes on from its last answered question.
# Usage: bash data_scripts/primary_lanes.sh 1   (and 2, in parallel; the number names the log)
set -euo pipefail
cd "$(dirname "$0")/.."
export DYNAKRAG_N_THREADS=1
# recorded as --data-dir ../shared/data (relative, never resolved): the commands paste anywhere
export DYNAKRAG_DATA_DIR="${DYNAKRAG_DATA_DIR:-../shared/data}"
LANE="${1:?lane 1 or 2}"
# Both overridable only so tests/test_primary_lanes.py can run the queue with a fake experiment.
ME="${PRIMARY_LANES_COMMAND:-python data_scripts/main_experiment.py --generator qwen2.5-coder-1.5b}"
RESULTS="${PRIMARY_LANES_RESULTS:-results/primary}"
LOCKS="$RESULTS/.locks"  # git-ignored
mkdir -p "$LOCKS"

# flags of one split and dataset, and the number of questions that finishes a run there
flags() { case "$1 $2" in
  "check hotpotqa") echo "--out-root $RESULTS/check --split train --offset 330
        --eval-limit 100 --n-eval 150
        --selector results/selectors/hotpotqa-sentence-selector-first330.joblib";;
  "eval musique") echo "--out-root $RESULTS/eval --n-eval 100 --eval-limit 100";;
  eval*) echo "--out-root $RESULTS/eval --n-eval 150 --eval-limit 150";;
esac; }
size() { case "$1 $2" in "eval musique"|check*) echo 100;; *) echo 150;; esac; }
finished() {  # split dataset run: its summary.json counts every question of the split
  local summary="$RESULTS/$1/$2/qwen2.5-coder-1.5b/$3/summary.json"
  [[ -f $summary ]] && python -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["n"] < int(sys.argv[2]))' "$summary" "$(size "$1" "$2")"
}

# Longest runs first within a dataset (fixed_k12 reads 12 documents); a stop-at-2 schedule
# waits for its full run, whose first calls it replays from the call cache.
QUEUE=()
for d in hotpotqa 2wikimultihopqa musique; do
  for r in fixed_k12 uniform-seed13 uniform-seed14 uniform-seed15 fixed_k6 dynakrag-cont \
           dynakrag-cont-stop2 uniform-seed13-stop2 uniform-seed14-stop2 uniform-seed15-stop2; do
    QUEUE+=("eval $d $r"); done; done
for r in fixed_k12 uniform-seed13 uniform-seed14 uniform-seed15 fixed_k6 dynakrag-cont; do
  QUEUE+=("check hotpotqa $r"); done

declare -A done tried  # tried: ended unfinished (questions that keep failing), not retried
is_done() { [[ -n ${done[$1]:-} ]] || { finished $1 && done[$1]=1; }; }
while :; do
  pending=0 started=0
  for item in "${QUEUE[@]}"; do
    is_done "$item" && continue
    [[ -n ${tried[$item]:-} ]] && continue
    read -r split d run <<< "$item"
    parent="$split $d ${run%-stop2}"  # the item itself unless a stop-at-2 schedule
    [[ $parent != "$item" && -n ${tried[$parent]:-} ]] && { tried[$item]=1; continue; }
    pending=1
    [[ $parent == "$item" ]] || is_done "$parent" || continue
    exec {lock}> "$LOCKS/$split-$d-$run.lock"
    flock -n "$lock" || { exec {lock}>&-; continue; }  # the other lane holds it
    rc=0
    # the other lane may have finished it between the check above and the lock
    # shellcheck disable=SC2046 # flags() is a word list on purpose
    is_done "$item" || $ME $(flags "$split" "$d") --dataset "$d" --runs "$run" || rc=$?
    exec {lock}>&-
    [[ $rc != 0 ]] && { echo "lane $LANE: $item failed ($rc)" >&2; exit "$rc"; }
    is_done "$item" || { tried[$item]=1; echo "lane $LANE: $item unfinished" >&2; }
    started=1; break                      # back to the head of the queue
  done
  [[ $pending == 0 ]] && { echo "lane $LANE: no primary run left to start"; exit 0; }
  [[ $started == 0 ]] && sleep "${PRIMARY_LANES_WAIT:-60}"  # only runs the other lane holds
done
