#!/usr/bin/env bash
# What a run folder guarantees and how bad input is refused, on the embedded library with
# smollm2-135m: part 1 kills, tears, corrupts and doubles a run; part 2 feeds it bad input.
# Each part runs in its own subshell and temporary folder. About two minutes.
cd "$(dirname "$0")/.."
echo "#### Part 1: kill, torn line, corrupt line, a second process, another budget"
(
# What a run folder guarantees, shown on the embedded library with smollm2-135m: kill mid-run, resume, corrupt mid-file, re-run, concurrent run.
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
)
echo "#### Part 2: bad input refused up front"
(
# Bad input is refused up front and nothing in a run folder is mixed (issue 23), shown on the
# embedded library with smollm2-135m and a 40-document corpus: 1 an edited corpus, 2 a lost
# run.json, 3 a stub row, 5 broken caches, 6 a generator that cannot answer, 7 nonsense
# numbers. A refusal is one "error:" line and exit code 2. (part 1 shows kills, torn
# lines, locks.) About a minute once smollm2-135m is assembled in the demo's cache.
D=${TMPDIR:-/tmp}/dynakrag-demo-bad
export DYNAKRAG_CACHE_DIR=$D/cache DYNAKRAG_N_THREADS=1 TQDM_DISABLE=1
unset DYNAKRAG_LLM_CACHE DYNAKRAG_EMBED_CACHE DYNAKRAG_REPLAY_ONLY
# fresh run folders, LLM calls and indexes (the 40-document indexes take seconds to build)
W=$D/work; rm -rf "$W" "$D/cache/llm_calls.sqlite"* "$D/cache/indexes"; mkdir -p "$W"
LLM=$D/cache/llm_calls.sqlite EMB=$D/cache/embeddings.sqlite
EVAL=(python -m dynakrag_lite evaluate --data library --method fixed_k --generator smollm2-135m
      --split all --corpus "$W/c1.jsonl")
# the command's exit code and its error/warning/note lines (a Python warning's source line and
# progress output left out)
show() {
    "$@" > "$W/stdout" 2> "$W/stderr"; local code=$?
    sed 's/^.*it\/s\]//' "$W/stderr" | grep -iE "^(error|warning|note)|: error: |Warning: " |
        cut -c1-250
    echo "   -> exit code $code"
}
rows() { python -c "import json,sys;r=[json.loads(x) for x in open(sys.argv[1])];print(len(r),'rows,',sum('error' in x for x in r),'error rows')" "$1"; }

python - "$W" <<'PY'
import json, sys
from dynakrag_lite.data.corpus import Corpus
from dynakrag_lite.data.sources import load_dataset
docs = Corpus.from_questions(load_dataset("library")).documents[:40]
w = sys.argv[1]
with open(f"{w}/c1.jsonl", "w") as f1, open(f"{w}/c2.jsonl", "w") as f2:
    for i, d in enumerate(docs):  # c2: the same ids and titles, every text replaced
        f1.write(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n")
        f2.write(json.dumps({"id": d.id, "title": d.title,
                             "text": docs[(i + 1) % len(docs)].text}) + "\n")
PY

echo "== 1. an edited corpus (same ids and titles, new texts): a new index, and no resume"
for c in c1 c2 c1; do
    python -m dynakrag_lite index --data library --corpus "$W/$c.jsonl" 2>/dev/null |
        python -c "import json,sys;d=json.loads(sys.stdin.read().splitlines()[-1]);print('   $c: loaded_from_disk =',d['loaded_from_disk'])"
done
show "${EVAL[@]}" --limit 1 --out "$W/run1"
echo "   the same run, resumed with --corpus c2.jsonl:"
show "${EVAL[@]/c1.jsonl/c2.jsonl}" --limit 2 --out "$W/run1"

echo "== 2. run.json deleted, resumed with another --fixed-k: refused from summary.json"
show "${EVAL[@]}" --fixed-k 5 --limit 2 --out "$W/run2"
rm "$W/run2/run.json"
show "${EVAL[@]}" --fixed-k 3 --limit 3 --out "$W/run2"
echo "   rows: $(rows "$W/run2/predictions.jsonl"); the same setup resumes and restores run.json:"
show "${EVAL[@]}" --fixed-k 5 --limit 3 --out "$W/run2"
ls "$W/run2" | tr '\n' ' '; echo

echo "== 3. a stub row ({\"id\": ...} only) on line 2 of predictions.jsonl"
python - "$W/run2/predictions.jsonl" <<'PY'
import json, sys
p = sys.argv[1]; lines = open(p).read().splitlines()
lines[1] = json.dumps({"id": json.loads(lines[1])["id"]}); open(p, "w").write("\n".join(lines) + "\n")
PY
before=$(sha256sum "$W/run2/predictions.jsonl" | cut -c1-16)
show "${EVAL[@]}" --fixed-k 5 --limit 3 --out "$W/run2"
echo "   predictions.jsonl sha256 before $before, after $(sha256sum "$W/run2/predictions.jsonl" | cut -c1-16)"

echo "== 5. broken caches: the run goes on, every computed answer kept, one warning each"
cp "$LLM" "$W/llm.bak"
RO=(); if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
    RO=(setpriv --bounding-set=-dac_override,-dac_read_search); fi  # root ignores chmod
chmod 444 "$LLM"
echo "-- a read-only LLM call cache"
show "${RO[@]}" "${EVAL[@]}" --limit 3 --out "$W/run5a"; echo "   $(rows "$W/run5a/predictions.jsonl")"
chmod 644 "$LLM"; rm -f "$LLM"-*
echo "-- an LLM call cache with a valid header and garbage pages"
python -c "import sys;p=sys.argv[1];b=open(p,'rb').read();open(p,'wb').write(b[:4096]+b'\xa5'*(len(b)-4096))" "$LLM"
show "${EVAL[@]}" --limit 2 --out "$W/run5b"; echo "   $(rows "$W/run5b/predictions.jsonl")"
cp "$W/llm.bak" "$LLM"
echo "-- an embedding cache that is not a database"
mv "$EMB" "$W/emb.bak"; rm -f "$EMB"-*; yes "my notes" | head -50 > "$EMB"
show "${EVAL[@]}" --limit 2 --out "$W/run5c"; echo "   $(rows "$W/run5c/predictions.jsonl")"
mv "$W/emb.bak" "$EMB"
echo "-- an LLM call cache that is not a database: refused, the file left as it is"
mv "$LLM" "$W/llm.bak2"; yes "my notes" | head -50 > "$LLM"
show "${EVAL[@]}" --limit 2 --out "$W/run5d"
mv "$W/llm.bak2" "$LLM"

echo "== 6. a generator that cannot answer: refused before the first question"
yes "these are notes, not a model" | head -50 > "$W/notes.gguf"
show "${EVAL[@]/smollm2-135m/gguf:$W/notes.gguf}" --limit 2 --out "$W/run6"
show "${EVAL[@]/smollm2-135m/openai:m@http://127.0.0.1:9/v1}" --limit 2 --out "$W/run6"
echo "   rows written: $(cat "$W/run6/predictions.jsonl" 2>/dev/null | wc -l)"

echo "== 7. nonsense numbers"
show "${EVAL[@]}" --limit 0 --out "$W/run7"
show "${EVAL[@]}" --limit -1 --out "$W/run7"
show "${EVAL[@]}" --split eval --n-eval -5 --out "$W/run7"
show "${EVAL[@]}" --fixed-k -1 --limit 2 --out "$W/run7"
show python -m dynakrag_lite retrieval-eval --data library --corpus "$W/c1.jsonl" --split eval --n-eval 1000
python -c "import json,sys;d=json.loads(open(sys.argv[1]).read().splitlines()[-1]);print('   retrieval-eval on',d['n'],'held-out questions')" "$W/stdout"
)
