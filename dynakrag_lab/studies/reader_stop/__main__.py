"""Reader confidence as a stop signal (method: ``dynakrag_lab.studies.reader_stop``).

Score the reader's answer at every depth of the continuation controller's stop-at-k schedules
(one line per question and depth, resumable; one llama.cpp call pair each):

    DYNAKRAG_N_THREADS=1 nice python -m dynakrag_lab.studies.reader_stop collect \\
        --dataset hotpotqa --root results/experiments \\
        --out results/diagnostics/reader-stop/hotpotqa-qwen2.5-coder-1.5b-eval.jsonl

(``--root results/diagnostics/train-split`` for the training questions' schedules). Then choose
each rule's parameter on the training grid and read the evaluation grid once (no model call):

    python -m dynakrag_lab.studies.reader_stop report --dataset hotpotqa \\
        --out results/diagnostics/reader-stop/hotpotqa-qwen2.5-coder-1.5b.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm.auto import tqdm

from dynakrag_lite.data import Corpus, load_dataset
from dynakrag_lite.generators import make_generator
from dynakrag_lite.storage import atomic_write_json, relative_command
from dynakrag_lab.report.claims import READER, stop_grid
from dynakrag_lab.report.results import json_clean, read_run
from dynakrag_lab.studies import reader_stop as R

FOLDER = "results/diagnostics/reader-stop"
TRAIN_ROOT = "results/diagnostics/train-split"
EVAL_ROOT = "results/experiments"


def scores_path(folder: str | Path, dataset: str, reader: str, split: str) -> Path:
    return Path(folder) / f"{dataset}-{reader}-{split}.jsonl"


def schedules(root: str, dataset: str, reader: str) -> dict[int, list[dict]]:
    out = {}
    for k in range(1, 9):
        rows, _ = read_run(dataset, reader, f"dynakrag-cont-stop{k}", root)
        if rows:
            out[k] = rows
    if not out:
        raise SystemExit(f"no dynakrag-cont-stop<k> schedules under {root}/{dataset}/{reader}")
    return out


def doc_chars_of(root: str, dataset: str, reader: str, k: int) -> int | None:
    run = json.loads((Path(root) / dataset / reader / f"dynakrag-cont-stop{k}" / "run.json")
                     .read_text())
    return run["fingerprint"]["budgets"]["doc_chars"] or None


def policy_in_sample(root: str, dataset: str, reader: str) -> int:
    """How many of the training grid's questions the policy was trained on (evaluate
    --policy-train-questions records it per schedule; the most over the schedules)."""
    runs = sorted((Path(root) / dataset / reader).glob("dynakrag-cont*/summary.json"))
    return max((json.loads(f.read_text()).get("policy", {}).get("training_questions_run", 0)
                for f in runs), default=0)


def cmd_collect(a: argparse.Namespace) -> int:
    by_k = schedules(a.root, a.dataset, a.reader)
    corpus = Corpus.from_questions(load_dataset(a.dataset, data_root=a.data_dir),
                                   name=a.dataset)
    gen = make_generator(a.reader)
    out = Path(a.out)
    meta = out.with_suffix(".meta.json")
    if not meta.exists():
        atomic_write_json(meta, {"command": relative_command(sys.argv, "python"),
                                 "reader": a.reader,
                                 "model_id": getattr(gen, "model_id", None),
                                 "schedules": f"{a.root}/{a.dataset}/{a.reader}"})
    got = R.collect(by_k, gen, lambda row: [corpus[d["id"]] for d in row["docs"]], out,
                    doc_chars_of(a.root, a.dataset, a.reader, min(by_k)),
                    progress=lambda ids: tqdm(ids, desc=f"{a.dataset} reader scores"))
    print(json.dumps({"scored": len(got), "file": str(out)}))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    grids = {}
    for split, root in (("train", a.train_root), ("eval", a.eval_root)):
        scores = R.read_scores(scores_path(a.folder, a.dataset, a.reader, split))
        grids[split] = R.reader_grid(stop_grid(a.dataset, a.reader, root), scores)
    rep = R.rule_report(grids["train"], grids["eval"])
    # the test's power at the evaluation's n, from the training grid alone
    rep["power"] = R.power_curve(grids["train"], n=grids["eval"].n)
    # 2Wiki's and MuSiQue's policies saw every training question: their grids are in-sample
    rep = {"dataset": a.dataset, "reader": a.reader, **rep,
           "train_policy_in_sample": policy_in_sample(a.train_root, a.dataset, a.reader),
           "command": relative_command(sys.argv, "python")}
    atomic_write_json(a.out, json_clean(rep))
    print(json.dumps(json_clean(rep), indent=1))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.studies.reader_stop",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("collect")
    p.add_argument("--dataset", required=True)
    p.add_argument("--root", default=EVAL_ROOT)
    p.add_argument("--reader", default=READER)
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_collect)
    p = sub.add_parser("report")
    p.add_argument("--dataset", required=True)
    p.add_argument("--reader", default=READER)
    p.add_argument("--folder", default=FOLDER)
    p.add_argument("--train-root", default=TRAIN_ROOT)
    p.add_argument("--eval-root", default=EVAL_ROOT)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_report)
    a = ap.parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
