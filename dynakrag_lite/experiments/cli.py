"""Command line: ``python -m dynakrag_lite <command>``, the project's one entry point.

    index           --data FILE [--embedder NAME] [--out DIR]
    retrieval-eval  --data FILE [--k 3,6,12]                  (SR@k as JSON on stdout)
    generate        --generator SPEC --prompt TEXT             (text + token counts as JSON)
    train           --data FILE --generator SPEC --out POLICY [--limit N] [--workers N]
                    [--save-data FILE.npz | --from-data FILE.npz]
    evaluate        --data FILE --method NAME [--policy P] --generator SPEC [--limit N]
                    [--out DIR] [--no-compression] [--no-sufficiency] [--retrieval-cap N]
                    [--compressor llm|extractive --selector FILE] [--workers N]
    evaluate        --config results/configs/NAME.toml --run RUN [FLAGS]  (a run named in a file)
    models          list | fetch NAME                           (bundled offline GGUF models)
    cache merge     SRC DST [--missing-ok] [--vacuum]           (LLM call cache files)
    policy-manifest [--check | --update] [FOLDER | FILE ...]    (results/policies/MANIFEST.sha256)

``--data`` takes a file or a dataset name (looked up in ``--data-dir`` or $DYNAKRAG_DATA_DIR).
Train and evaluate share one deterministic split (``--n-eval`` held out, ``--split-seed``), so a
policy never sees its evaluation questions; errors go to stderr, exit code 2. ``dynakrag``
without ``--policy`` uses ``results/policies/<dataset>-<generator>.joblib`` (another generator's
policy must be named); ``uniform`` and ``oracle`` take only its calibrated sufficiency signal.
``evaluate`` resumes into ``--out`` (only ``--limit`` may change) and retries failed questions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from typing import Callable

from ..ann import DEFAULT_EF_SEARCH, DEFAULT_NPROBE
from ..config import RunSettings
from ..data.corpus import gold_titles
from ..data.schema import DataError
from ..generators import models
from ..generators.base import REPLAY_ONLY_ENV, GeneratorError
from ..generators.cache import CacheError
from ..generators.models import ModelError
from ..generators.spec import make_generator
from ..methods import METHODS
from ..metrics import support_recall
from ..pipeline import run_setup
from ..policy import STOP_RULES, PolicyError
from ..storage import LockedError
from ..sufficiency import SIGNAL_CHOICES
from ..training.recipe import train
from .artifacts import register_policy
from .commands import evaluation_setup, training_recipe
from .configs import expand_config
from .maintenance import add_maintenance_commands
from .run import FailedQuestionsWarning
from .selection import NON_NEGATIVE, add_split_options


def _add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="JSONL file or dataset name")
    p.add_argument("--data-dir", default=None, help="folder of normalized benchmark files")
    p.add_argument("--corpus", default=None, help="own corpus JSONL (default: pooled from data)")
    p.add_argument("--embedder", default="all-MiniLM-L6-v2")
    p.add_argument("--index-factory", default=None, metavar="FACTORY",
                   help='FAISS index-factory string for large corpora, e.g. "IVF4096,PQ48" or '
                   '"HNSW32" (default: the exact flat index)')
    p.add_argument("--index-mmap", action="store_true",
                   help="memory-map the saved index instead of reading it into memory")
    p.add_argument("--nprobe", type=int, default=DEFAULT_NPROBE, help="IVF lists probed per query")
    p.add_argument("--ef-search", type=int, default=DEFAULT_EF_SEARCH,
                   help="HNSW candidates per query")
    p.add_argument("--vectors", default=None, metavar="FILE.npy",
                   help="stream the corpus embeddings to this file (reused by a later build "
                   "with another --index-factory) instead of holding them in memory")


def _add_control(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-compression", action="store_true")
    p.add_argument("--no-sufficiency", action="store_true")
    p.add_argument("--retrieval-cap", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--max-docs", type=int, default=12)
    p.add_argument("--per-action", type=int, default=3)
    p.add_argument("--doc-chars", type=int, default=600, help="0 = whole documents")
    p.add_argument("--compressor", choices=("llm", "extractive"), default="llm",
                   help="terminal compression: llm (the paper's, validated snippets) or "
                   "extractive (a learned sentence selector, no LLM call; needs --selector)")
    p.add_argument("--selector", default=None, help="sentence selector joblib")
    p.add_argument("--answer-docs-up-to", type=int, default=0, metavar="K",
                   help="answer from the documents, uncompressed, when the final state holds at "
                   "most K of them (0: always compress, the paper's; chosen by "
                   "python -m dynakrag_lab.studies.answer_stage)")


def _floats(text: str) -> tuple[float, ...]:
    """An argparse type: a comma-separated grid of numbers."""
    return tuple(float(x) for x in str(text).split(",") if x.strip())


# -- commands ----------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    setup, _ = run_setup(RunSettings.from_args(args))
    r = setup.retriever
    print(json.dumps({"documents": len(setup.corpus), "index_dir": str(r.index_dir),
                      "index_factory": r.index_factory or "Flat", "mmapped": r.mmapped,
                      "loaded_from_disk": r.loaded_from_disk,
                      "encode_seconds": round(r.encode_seconds, 2),
                      "build_seconds": round(r.build_seconds, 2),
                      "load_seconds": round(r.load_seconds, 3),
                      "passages_per_second": round(len(setup.corpus) / r.encode_seconds, 1)
                      if r.encode_seconds else None,
                      "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


def cmd_retrieval_eval(args: argparse.Namespace) -> int:
    setup, questions = run_setup(RunSettings.from_args(args))
    ks = [int(k) for k in str(args.k).split(",")]
    hits = setup.retriever.search_many([q.question for q in questions], max(ks))
    out = {"dataset": setup.dataset, "n": len(questions), "documents": len(setup.corpus),
           "embedder": args.embedder}
    for k in ks:
        vals = [support_recall([h.doc.title for h in hs[:k]], gold_titles(q))
                for q, hs in zip(questions, hits)]
        out[f"SR@{k}"] = round(sum(vals) / len(vals), 4)
    print(json.dumps(out))
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    gen = make_generator(args.generator, cache=not args.no_cache)
    g = gen.generate([{"role": "user", "content": args.prompt}], max_tokens=args.max_tokens)
    print(json.dumps({"text": g.text, "prompt_tokens": g.prompt_tokens,
                      "completion_tokens": g.completion_tokens, "seconds": round(g.seconds, 3),
                      "cached": g.cached, "generator": args.generator}))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """:func:`dynakrag_lite.training.recipe.train`; a policy saved into results/policies is
    added to its manifest."""
    t0 = time.perf_counter()
    _, path, report = train(training_recipe(args))
    register_policy(path)  # keep results/policies/MANIFEST.sha256 in step with the file
    print(json.dumps({**report, "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Run the evaluation; exit code 1 when every question failed (error rows only)."""
    with warnings.catch_warnings():  # said once, below, with the error types
        warnings.simplefilter("ignore", FailedQuestionsWarning)
        summary = evaluation_setup(args).run()
    print(json.dumps({k: summary[k] for k in summary
                      if k not in ("run", "fingerprint", "diagnostics", "policy")}))
    d = summary["diagnostics"]
    if d["errors"] and not summary["n"]:
        print(f"error: every question failed ({d['errors']}: {d['error_types']}); they are "
              "error rows in predictions.jsonl, retried by the next run of this command",
              file=sys.stderr)
        return 1
    if d["errors"]:  # visible, not only in the file: these questions are not in the means
        print(f"warning: {d['errors']} question(s) failed ({d['error_types']}); they are "
              "error rows in predictions.jsonl and the next run of this command retries them",
              file=sys.stderr)
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "list":
        for name in models.list_models():
            print(name)
        return 0
    path = models.gguf_path(args.name)
    print(json.dumps({"model": args.name, "path": str(path)}))
    return 0


def _add_save_or_from_data(p: argparse.ArgumentParser) -> None:
    """train's --save-data | --from-data."""
    once = p.add_mutually_exclusive_group()  # collect (and save), or read a file
    once.add_argument("--save-data", default=None,
                      help="also write the collected trajectories here (.npz, no "
                      "pickle), with the run's settings and the sufficiency "
                      "calibration states: --from-data rebuilds a policy and "
                      "python -m dynakrag_lab.studies.stop_rule re-tunes from it, without "
                      "model calls")
    once.add_argument("--from-data", default=None, metavar="FILE.npz",
                      help="collect nothing: build the policy from trajectories "
                      "saved by --save-data (no model call, no index), cut to this "
                      "split's training questions (--n-eval, --offset, --limit); "
                      "refused when the file was collected under other settings")


def _add_run_options(p: argparse.ArgumentParser, split: str) -> None:
    """The options train and evaluate share: data, split, budgets, generator, seed."""
    _add_data(p)
    add_split_options(p, split)
    _add_control(p)
    p.add_argument("--generator", required=True)
    p.add_argument("--seed", type=int, default=13)


def add_train_command(sub) -> None:
    """The ``train`` subcommand: every option it takes."""
    p = sub.add_parser("train")
    _add_run_options(p, "train")
    p.add_argument("--out", required=True)
    p.add_argument("--trees", type=int, default=300)
    p.add_argument("--min-leaf", type=int, default=8)
    p.add_argument("--continuation-target", choices=("f1", "sr", "onestep"),
                   default="f1", help="f1: answer F1 at the rollout's end minus F1 "
                   "now (one answer call per prefix); sr: the same with support "
                   "recall (no calls); onestep: best one-step SR gain")
    p.add_argument("--continuation-questions", type=int, default=0,
                   help="with --continuation-target f1: answer calls on the first N "
                   "training questions only (0 = all); the value model uses all")
    p.add_argument("--sufficiency-signal", default="auto", choices=SIGNAL_CHOICES,
                   help="auto: calibrate text/margin/learned on training states and "
                   "keep the best informative one; text: the plain probe")
    p.add_argument("--sufficiency-rule", default="youden",
                   help="threshold rule: youden | precision:P")
    p.add_argument("--calibration-questions", type=int, default=100,
                   help="training questions whose states score the LLM signals "
                   "(0 = all)")
    p.add_argument("--tune-folds", type=int, default=5,
                   help="CV folds (by question) for lambda/veto threshold; 0 = off")
    p.add_argument("--tune-metric", choices=("f1", "sr"), default=None)
    p.add_argument("--lambdas", type=_floats, default=(), help="lambda grid, comma-separated")
    p.add_argument("--veto-thresholds", type=_floats, default=(), help="veto threshold grid")
    p.add_argument("--stop-rule", choices=STOP_RULES, default="level",
                   help="what stop_answer is worth: level = the paper's v = SR(s); "
                   "gain = 0 SR gain, priced like the other actions (lambda then "
                   "trades support against tokens); continuation = stop iff the "
                   "continuation model's estimate is below tau (--veto-threshold), "
                   "else the best acquisition; see policy.select")
    p.add_argument("--token-price", type=float, default=0.0,
                   help="tuning objective: metric - PRICE x tokens (1e-5 trades .01 F1 "
                   "for 1,000 tokens); 0 = the metric alone")
    _add_save_or_from_data(p)
    p.add_argument("--lam", type=float, default=None, help="fix lambda (no tuning)")
    p.add_argument("--veto-threshold", type=float, default=None,
                   help="fix the veto threshold (no tuning)")
    p.add_argument("--workers", type=int, default=1,
                   help="training questions (and calibration states) collected "
                   "at once; > 1 only with a server generator "
                   "(openai:<model>@<base_url>); the trajectories are the "
                   "sequential run's")
    p.set_defaults(func=cmd_train)


def add_evaluate_command(sub) -> None:
    """The ``evaluate`` subcommand: every option it takes."""
    p = sub.add_parser("evaluate")
    _add_run_options(p, "eval")
    p.add_argument("--method", required=True, choices=tuple(METHODS))
    p.add_argument("--policy", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--fixed-k", type=NON_NEGATIVE, default=None)
    p.add_argument("--lam", type=float, default=None, help="lambda (cost weight)")
    p.add_argument("--veto-threshold", type=float, default=None)
    p.add_argument("--stop-after", type=int, default=None, metavar="K",
                   help="dynakrag: a stop-at-K schedule (the policy's choices, stop_answer "
                   "withheld before K acquisitions and forced after); uniform: its random "
                   "valid choices, stop_answer forced after K acquisitions")
    p.add_argument("--policy-train-questions", action="store_true",
                   help="with --split train: allow the policy's own training questions (a "
                   "diagnostic grid where no unseen training question is left); summary.json "
                   "records how many were run")
    p.add_argument("--workers", type=int, default=1,
                   help="questions run at once; > 1 only with a server generator "
                   "(openai:<model>@<base_url>); predictions.jsonl keeps the "
                   "question order")
    p.add_argument("--config", metavar="FILE.toml", help="take the settings of --run from this "
                   "config (results/configs/); flags given besides win (configs.expand_config)")
    p.add_argument("--run", metavar="NAME", help="a run of --config ([runs.NAME])")
    p.add_argument("--replay-only", action="store_true",
                   help="never call the model: a call missing from the LLM call "
                   "cache stops the run with an error naming the question (as "
                   "$DYNAKRAG_REPLAY_ONLY=1 does)")
    p.set_defaults(func=cmd_evaluate)


def command_args(mode: str, command: list[str]) -> list[str]:
    """A recorded command's arguments for :func:`build_parser`, led by ``mode``: ``command``
    as run.json or a policy records it (``python -m dynakrag_lite <mode> ...``), without the
    interpreter part, or bare; ValueError when it is a command of another mode."""
    cmd = list(command)
    if "dynakrag_lite" in cmd[:3]:
        cmd = cmd[cmd.index("dynakrag_lite") + 1:]
    if cmd and not cmd[0].startswith("-"):
        if cmd[0] != mode:
            raise ValueError(f"the recorded command is {cmd[0]!r}, not {mode!r}")
        cmd = cmd[1:]
    return [mode, *cmd]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # also: a command's own error classes, reported as user errors too (run_reporting_errors)
    ap.set_defaults(index_dir=None, replay_only=False, also=())
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("index", help="build (or load) the dense index of a corpus")
    _add_data(p)
    add_split_options(p, "all")
    p.add_argument("--out", dest="index_dir", default=None,
                   help="index folder (default: a cache folder keyed by corpus and embedder)")
    p.set_defaults(func=cmd_index)
    p = sub.add_parser("retrieval-eval", help="support recall of one-shot retrieval")
    _add_data(p)
    add_split_options(p, "all")
    p.add_argument("--k", default="3,6,12")
    p.set_defaults(func=cmd_retrieval_eval)
    p = sub.add_parser("generate", help="one chat call through a generator")
    p.add_argument("--generator", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--no-cache", action="store_true")
    p.set_defaults(func=cmd_generate)
    add_train_command(sub)
    add_evaluate_command(sub)
    p = sub.add_parser("models", help="bundled offline generators")
    p.add_argument("action", choices=("list", "fetch"))
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_models)
    add_maintenance_commands(sub)
    return ap


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a command line of this package reports as a user's error (a bad file,
    option or path) rather than as a bug."""
    # ValueError: also ResultsError, FingerprintError; OSError: also FileNotFoundError
    return (DataError, PolicyError, GeneratorError, ModelError, CacheError, LockedError,
            ValueError, OSError)


def error_message(e: BaseException) -> str:
    """One line for a user error: an OSError as "PATH: what went wrong" (its repr-like
    default, "[Errno 20] Not a directory: 'x'", reads as a crash)."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split("\n"))


def run_reporting_errors(func: Callable[..., int], *args,
                         also: tuple[type[BaseException], ...] = ()) -> int:
    """``func(*args)``, an exit code; a user error (:func:`user_errors`, and ``also``) becomes
    one line ``error: MESSAGE`` on stderr and exit code 2 instead of a traceback."""
    errors = (*user_errors(), *also)
    try:
        return func(*args)
    except errors as e:
        # a clear one-line error, not a traceback
        print(f"error: {error_message(e)}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # evaluate --config FILE --run NAME: the config's flags, recorded as such
    argv = expand_config(list(sys.argv[1:] if argv is None else argv), parser)
    args = parser.parse_args(argv)
    args.argv = argv  # what ran, for the records (relative paths, no credentials)
    if args.replay_only:
        os.environ[REPLAY_ONLY_ENV] = "1"  # read by every cached call of this process
    return run_reporting_errors(args.func, args, also=args.also)
