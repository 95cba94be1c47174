#!/usr/bin/env bash
# What a run folder guarantees, shown on the embedded library with smollm2-135m: kill mid-run, resume, corrupt mid-file, re-run, concurrent run.
cd "$(dirname "$0")/.."
export DYNAKRAG_CACHE_DIR=${TMPDIR:-/tmp}/dynakrag-demo/cache DYNAKRAG_N_THREADS=1 TQDM_DISABLE=1
OUT=${TMPDIR:-/tmp}/dynakrag-demo/run; rm -rf $OUT
CMD="python -m dynakrag_lite evaluate --data library --method fixed_k --generator smollm2-135m --limit 8 --out $OUT"
echo "== 1. start, kill -9 once 3 questions are written"
$CMD > /dev/null 2>&1 &
PID=$!
while [ "$(cat $OUT/predictions.jsonl 2>/dev/null | wc -l)" -lt 3 ]; do sleep 0.5; done
kill -9 $PID; wait $PID 2>/dev/null; echo "killed (exit $?)"
echo "lines: $(wc -l < $OUT/predictions.jsonl), summary n=$(python -c "import json;print(json.load(open('$OUT/summary.json'))['n'])"), complete=$(python -c "import json;print(json.load(open('$OUT/summary.json'))['run']['complete'])")"
echo "== 2. tear the last line (as a kill in the middle of a write would), then resume"
python - <<PY
p="$OUT/predictions.jsonl"; b=open(p,"rb").read(); lines=b.splitlines(keepends=True)
open(p,"wb").write(b"".join(lines[:-1]) + lines[-1][:40]); print("torn last line:", lines[-1][:40])
PY
$CMD 2>&1 | tail -2
echo "lines: $(wc -l < $OUT/predictions.jsonl), ids unique: $(python -c "import json;ids=[json.loads(l)['id'] for l in open('$OUT/predictions.jsonl')];print(len(ids)==len(set(ids)), len(ids))")"
echo "== 3. corrupt line 4 in the middle, re-run"
python - <<PY
p="$OUT/predictions.jsonl"; L=open(p,encoding="utf-8").read().splitlines(keepends=True)
L[3]=L[3][:25]+"#garbage#"+L[3][25:]; open(p,"w",encoding="utf-8").writelines(L)
PY
before=$(sha256sum $OUT/predictions.jsonl | cut -c1-16)
$CMD; echo "exit code $?"
after=$(sha256sum $OUT/predictions.jsonl | cut -c1-16)
echo "file sha before $before after $after"
echo "== 4. a second process into the same folder while one runs"
python - <<PY
p="$OUT/predictions.jsonl"; L=open(p,encoding="utf-8").read().splitlines(keepends=True)
L[3]=L[3].replace("#garbage#",""); open(p,"w",encoding="utf-8").writelines(L[:5])
PY
$CMD --limit 16 > /dev/null 2>&1 &
P1=$!
until grep -qx "$P1" $OUT/.lock 2>/dev/null; do sleep 0.2; done  # the first one holds the lock
$CMD --limit 16; echo "second process exit code $?"
wait $P1; echo "first process exit code $?"
echo "== 5. resume with another budget into the same folder"
$CMD --limit 16 --max-docs 6; echo "exit code $?"
