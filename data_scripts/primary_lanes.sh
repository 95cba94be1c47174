#!/usr/bin/env bash
# The runs of the primary tests (results/primary_tests.toml), in two lanes of one llama.cpp
# thread each. Both lanes work through one queue: a lane takes the first run that is neither
# finished nor held by the other lane (a flock per run), so they finish together instead of one
# idling for hours. Resumable: an unfinished run goes on from its last answered question.
# Usage: bash data_scripts/primary_lanes.sh 1   (and 2, in parallel; the number names the log)
# Ends 0 when every run is finished, 1 naming the runs left unfinished, else a failed run's code.
set -euo pipefail
cd "$(dirname "$0")/.."
export DYNAKRAG_N_THREADS=1
# recorded as --data-dir ../shared/data (relative, never resolved): the commands paste anywhere
export DYNAKRAG_DATA_DIR="${DYNAKRAG_DATA_DIR:-../shared/data}"
LANE="${1:?lane 1 or 2}"
# Both overridable only so tests/test_primary_lanes.py can run the queue with a fake experiment.
ME="python data_scripts/main_experiment.py --generator qwen2.5-coder-1.5b"
ME="${PRIMARY_LANES_COMMAND:-$ME}"
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
  [[ -f $summary ]] || return 1
  # one line, not a traceback, for a summary cut short or edited: the run goes on from its rows
  python - "$summary" "$(size "$1" "$2")" <<'PY'
import json, sys
try:
    n = int(json.load(open(sys.argv[1]))["n"])
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit(f"{sys.argv[1]}: unreadable ({e!r}), counted as unfinished")
sys.exit(n < int(sys.argv[2]))
PY
}

# Longest runs first within a dataset (fixed_k12 reads 12 documents); a stop-at-2 schedule
# waits for its full run, whose first calls it replays from the call cache.
QUEUE=()
for d in hotpotqa 2wikimultihopqa musique; do
  for r in fixed_k12 uniform-seed13 uniform-seed14 uniform-seed15 fixed_k6 dynakrag-cont \
           dynakrag-cont-stop2 uniform-seed13-stop2 uniform-seed14-stop2 uniform-seed15-stop2; do
    QUEUE+=("eval $d $r"); done; done
# The check set's runs cheapest test first (top-6 needs the two shortest runs, top-12 one more,
# uniform-valid three seeds): a session that ends midway commits complete tests, not parts.
for r in dynakrag-cont fixed_k6 fixed_k12 uniform-seed13 uniform-seed14 uniform-seed15; do
  QUEUE+=("check hotpotqa $r"); done

# A run that ends unfinished (questions that keep failing) is marked in $LOCKS, so neither lane
# retries it, nor its stop-at-2 schedule; marks older than this lane's start are ignored: running
# the lanes again retries those questions.
STARTED="$LOCKS/lane-$LANE.started"
touch "$STARTED"
declare -A complete tried  # seen finished (they stay so); ended unfinished in this lane
is_done() { [[ -n ${complete[$1]:-} ]] || { finished $1 && complete[$1]=1; }; }
mark() { echo "$LOCKS/${1// /-}.unfinished"; }
gave_up() { [[ -n ${tried[$1]:-} || $(mark "$1") -nt $STARTED ]]; }
while :; do
  pending=0 started=0 left=()
  for item in "${QUEUE[@]}"; do
    is_done "$item" && continue
    read -r split d run <<< "$item"
    parent="$split $d ${run%-stop2}"  # the item itself unless a stop-at-2 schedule
    if gave_up "$item" || { gave_up "$parent" && ! is_done "$parent"; }; then
      left+=("$item"); continue; fi
    pending=1
    [[ $parent == "$item" ]] || is_done "$parent" || continue
    exec {lock}> "$LOCKS/$split-$d-$run.lock"
    flock -n "$lock" || { exec {lock}>&-; continue; }  # the other lane holds it
    rc=0
    # the other lane may have finished it, or given up on it, between the checks and the lock
    # shellcheck disable=SC2046 # flags() is a word list on purpose
    is_done "$item" || gave_up "$item" ||
      $ME $(flags "$split" "$d") --dataset "$d" --runs "$run" || rc=$?
    exec {lock}>&-
    [[ $rc != 0 ]] && { echo "lane $LANE: $item failed ($rc)" >&2; exit "$rc"; }
    is_done "$item" || gave_up "$item" ||
      { tried[$item]=1; touch "$(mark "$item")"; echo "lane $LANE: $item unfinished" >&2; }
    started=1; break                      # back to the head of the queue
  done
  # runs left to start, or held by the other lane (then wait for it)
  [[ $pending == 0 ]] || { [[ $started == 1 ]] || sleep "${PRIMARY_LANES_WAIT:-60}"; continue; }
  # nothing left to start or wait for: every run finished, or some ended unfinished
  (( ${#left[@]} == 0 )) && { echo "lane $LANE: every primary run finished"; exit 0; }
  printf -v list '%s, ' "${left[@]}"
  echo "lane $LANE: left unfinished: ${list%, } (run the lanes again to retry)" >&2
  exit 1
done
