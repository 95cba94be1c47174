"""Does today's code still make the committed runs? Re-runs the first N questions of committed
run folders with their recorded commands (into scratch folders, never the committed ones) and
compares, question by question, the prediction, the documents and the tokens; and checks that
each committed fingerprint, read in today's terms (``experiments.fingerprint.upgrade``), is the
one today's code records, so the committed folder would resume.

    python dynakrag_lab/scripts/rerun_check.py --limit 10 \
        results/experiments/hotpotqa/qwen2.5-coder-0.5b/{dynakrag,fixed_k3,ircot,self_ask,uniform,oracle}

Writes results/diagnostics/rerun-check.json (per folder: questions compared, equal rows, the
fields that differ, the fingerprint verdict, seconds). Model calls go through the LLM cache;
``--scratch`` (default runs/rerun-check/) holds the new runs.
"""
from __future__ import annotations

import argparse
import functools
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.data.corpus import Corpus  # noqa: E402
from dynakrag_lite.data.sources import load_dataset  # noqa: E402
from dynakrag_lite.experiments.fingerprint import fingerprint_diff, upgrade  # noqa: E402
from dynakrag_lite.experiments.folder import (PREDICTIONS_FILE, RUN_FILE,  # noqa: E402
                                              SUMMARY_FILE, latest_rows, read_predictions)
from dynakrag_lite.storage import atomic_write_json  # noqa: E402
from dynakrag_lab.report.records import command_options  # noqa: E402

COMPARED = ("prediction", "docs", "tokens", "llm_calls", "retrieval_calls")


def recorded_command(folder: Path) -> list[str]:
    """The evaluate argv the folder records (the summary's, which a resumed run updates; else
    run.json's), without ``python -m dynakrag_lite``."""
    for name, key in ((SUMMARY_FILE, ("run", "command")), (RUN_FILE, ("command",))):
        path = folder / name
        if path.exists():
            obj = json.loads(path.read_text())
            for k in key:
                obj = obj.get(k) if isinstance(obj, dict) else None
            if obj:
                argv = shlex.split(obj)
                return argv[argv.index("dynakrag_lite") + 1:]
    raise SystemExit(f"{folder}: no recorded command")


@functools.lru_cache(maxsize=None)
def corpus_of(dataset: str, data_dir: str) -> Corpus:
    """The pooled corpus of ``dataset`` (loaded once for all the folders of one dataset)."""
    return Corpus.from_questions(load_dataset(dataset, data_root=ROOT / data_dir))


def with_option(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def compare(old: list[dict], new: list[dict]) -> dict:
    by_id = {r["id"]: r for r in old}
    diffs: dict[str, int] = {}
    equal = 0
    for r in new:
        o = by_id.get(r["id"])
        bad = [k for k in COMPARED if o is None or o.get(k) != r.get(k)]
        for k in bad:
            diffs[k] = diffs.get(k, 0) + 1
        equal += not bad
    return {"compared": len(new), "equal": equal, "differing_fields": diffs}


def check(folder: Path, limit: int, scratch: Path) -> dict:
    argv = recorded_command(folder)
    out = scratch / folder.relative_to(ROOT / "results")
    if out.exists():
        shutil.rmtree(out)
    argv = with_option(with_option(argv, "--limit", str(limit)), "--out",
                       str(out.relative_to(ROOT)))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dynakrag_lite", *argv], cwd=ROOT,
                          capture_output=True, text=True)
    res = {"folder": str(folder.relative_to(ROOT)), "command": shlex.join(argv),
           "exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    if proc.returncode:
        res["stderr"] = proc.stderr[-2000:]
        return res
    new = latest_rows(read_predictions(out / PREDICTIONS_FILE), errors=False)
    old = latest_rows(read_predictions(folder / PREDICTIONS_FILE), errors=False)
    res.update(compare(old, new))
    # the committed fingerprint in today's terms against today's record of the same setup
    recorded = json.loads((folder / RUN_FILE).read_text())["fingerprint"]
    today = json.loads((out / RUN_FILE).read_text())["fingerprint"]
    opts = command_options(shlex.join(argv))
    corpus = corpus_of(opts["--data"], opts.get("--data-dir", "../shared/data"))
    res["fingerprint_diff"] = fingerprint_diff(upgrade(recorded, corpus), today)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--scratch", default=str(ROOT / "runs" / "rerun-check"))
    ap.add_argument("--out", default=str(ROOT / "results" / "diagnostics" / "rerun-check.json"))
    args = ap.parse_args(argv)
    results = []
    for f in args.folders:
        res = check(Path(f).resolve(), args.limit, Path(args.scratch).resolve())
        print(json.dumps({k: res.get(k) for k in ("folder", "exit", "compared", "equal",
                                                   "differing_fields", "fingerprint_diff",
                                                   "seconds")}), flush=True)
        results.append(res)
    atomic_write_json(args.out, {"limit": args.limit, "runs": results,
                                 "command": "python dynakrag_lab/scripts/rerun_check.py "
                                 + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))})
    return 0 if all(r.get("exit") == 0 and r.get("equal") == r.get("compared") and
                    not r.get("fingerprint_diff") for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
