"""Command line: ``python -m dynakrag_lite <command>``.

    index           --data FILE [--embedder NAME] [--out DIR]
    retrieval-eval  --data FILE [--k 3,6,12]                  (SR@k as JSON on stdout)
    generate        --generator SPEC --prompt TEXT             (text + token counts as JSON)
    train           --data FILE --generator SPEC --out POLICY [--limit N]
    evaluate        --data FILE --method NAME [--policy P] --generator SPEC [--limit N]
                    [--out DIR] [--no-compression] [--no-sufficiency] [--retrieval-cap N]
    models          list | fetch NAME                           (bundled offline GGUF models)

``--data`` takes a file path or a dataset name (hotpotqa, 2wikimultihopqa, musique, library);
names are looked up in ``--data-dir`` or $DYNAKRAG_DATA_DIR. Train and evaluate share one
deterministic split of FILE (``--n-eval`` questions held out, seed ``--split-seed``), so a
policy is never evaluated on its training questions. Errors go to stderr, exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .policy import PolicyError

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="JSONL file or dataset name")
    p.add_argument("--data-dir", default=None, help="folder of normalized benchmark files")
    p.add_argument("--corpus", default=None, help="own corpus JSONL (default: pooled from data)")
    p.add_argument("--embedder", default="all-MiniLM-L6-v2")


def _add_split(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--split", choices=("train", "eval", "all"), default=default)
    p.add_argument("--n-eval", type=int, default=100, help="questions held out for evaluation")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="first N questions of the split")


def _config(args, dataset: str):
    from .actions import ControlConfig
    return ControlConfig.for_dataset(
        dataset, use_compression=not args.no_compression,
        use_sufficiency=not args.no_sufficiency, retrieval_cap=args.retrieval_cap,
        max_steps=args.max_steps, max_docs=args.max_docs, per_action=args.per_action,
        doc_chars=args.doc_chars or None)


def _add_control(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-compression", action="store_true")
    p.add_argument("--no-sufficiency", action="store_true")
    p.add_argument("--retrieval-cap", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=4)
    p.add_argument("--max-docs", type=int, default=12)
    p.add_argument("--per-action", type=int, default=3)
    p.add_argument("--doc-chars", type=int, default=600, help="0 = whole documents")


def default_policy_path(dataset: str, generator: str) -> Path | None:
    """results/policies/<dataset>-<generator>.joblib, else any policy for the dataset."""
    folder = RESULTS / "policies"
    exact = folder / f"{dataset}-{generator.replace('/', '_').replace(':', '_')}.joblib"
    if exact.exists():
        return exact
    found = sorted(folder.glob(f"{dataset}-*.joblib"))
    return found[0] if found else None


# -- commands ----------------------------------------------------------------------------
def cmd_index(args) -> int:
    t0 = time.perf_counter()
    setup, _ = _setup(args)
    r = setup.retriever
    print(json.dumps({"documents": len(setup.corpus), "index_dir": str(r.index_dir),
                      "loaded_from_disk": r.loaded_from_disk,
                      "encode_seconds": round(r.encode_seconds, 2),
                      "load_seconds": round(r.load_seconds, 3),
                      "passages_per_second": round(len(setup.corpus) / r.encode_seconds, 1)
                      if r.encode_seconds else None,
                      "seconds": round(time.perf_counter() - t0, 2)}))
    return 0


def cmd_retrieval_eval(args) -> int:
    from .corpus import gold_titles
    from .metrics import support_recall
    setup, questions = _setup(args)
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


def cmd_generate(args) -> int:
    from .generators import make_generator
    gen = make_generator(args.generator, cache=not args.no_cache)
    g = gen.generate([{"role": "user", "content": args.prompt}], max_tokens=args.max_tokens)
    print(json.dumps({"text": g.text, "prompt_tokens": g.prompt_tokens,
                      "completion_tokens": g.completion_tokens, "seconds": round(g.seconds, 3),
                      "cached": g.cached, "generator": args.generator}))
    return 0


def _setup(args, generator: str | None = None):
    """Questions, corpus, retriever, generator and the train/eval split, as build_setup does."""
    from .pipeline import build_setup
    setup = build_setup(args.data, generator=generator, data_dir=args.data_dir,
                        embedder=args.embedder, n_eval=args.n_eval,
                        split_seed=args.split_seed, corpus_file=args.corpus,
                        index_dir=getattr(args, "index_dir", None))
    if hasattr(args, "no_compression"):  # train/evaluate take control flags; index doesn't
        setup.env.config = _config(args, setup.dataset)
    qs = {"train": setup.train, "eval": setup.eval, "all": setup.questions}[args.split]
    return setup, qs[: args.limit] if args.limit else qs


def cmd_train(args) -> int:
    from .policy import train_policy
    from .trajectories import collect
    setup, train_qs = _setup(args, args.generator)
    env = setup.env
    t0 = time.perf_counter()
    data = collect(train_qs, env, seed=args.seed)
    pol = train_policy(data, n_estimators=args.trees, min_samples_leaf=args.min_leaf,
                       seed=args.seed, veto_threshold=args.veto_threshold, meta={
                           "dataset": setup.dataset, "generator": args.generator,
                           "generator_model_id": env.generator.model_id,
                           "embedder": args.embedder, "doc_chars": env.config.doc_chars,
                           "per_action": env.config.per_action,
                           "train_ids": [q.id for q in train_qs],
                           "command": " ".join(["python -m dynakrag_lite"] + sys.argv[1:])})
    path = pol.save(args.out)
    print(json.dumps({"policy": str(path), "questions": len(train_qs),
                      "samples": pol.meta["n_samples"], "prefixes": pol.meta["n_prefixes"],
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


def cmd_evaluate(args) -> int:
    from .experiments import evaluate
    from .policy import Policy
    policy, path = None, None
    if args.method == "dynakrag" and args.policy:  # fail fast, before indexing anything
        path = Path(args.policy)
        policy = Policy.load(path)
    setup, eval_qs = _setup(args, args.generator)
    dataset, env = setup.dataset, setup.env
    if args.method == "dynakrag" and policy is None:
        path = default_policy_path(dataset, args.generator)
        if path is None:
            raise PolicyError(f"no policy for dataset '{dataset}' in {RESULTS / 'policies'}; "
                              "pass --policy or run 'train' first")
        policy = Policy.load(path)
    if policy is not None:
        if args.lam is not None:
            policy.lam = args.lam
        if args.veto_threshold is not None:
            policy.veto_threshold = args.veto_threshold
    out = Path(args.out or f"runs/{dataset}-{args.method}")
    summary = evaluate(eval_qs, args.method, env, out, policy=policy, dataset=dataset,
                       generator=args.generator, fixed_k=args.fixed_k, seed=args.seed,
                       run_info={"command": " ".join(["python -m dynakrag_lite"] + sys.argv[1:]),
                                 "generator_model_id": env.generator.model_id,
                                 "config": dict(env.config.__dict__),
                                 "policy": str(path) if path else None,
                                 "policy_generator": policy.meta.get("generator")
                                 if policy else None})
    print(json.dumps({k: summary[k] for k in summary if k != "run"}))
    return 0


def cmd_models(args) -> int:
    from . import models
    if args.action == "list":
        for name in models.list_models():
            print(name)
        return 0
    path = models.gguf_path(args.name)
    print(json.dumps({"model": args.name, "path": str(path)}))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lite", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("index", help="build (or load) the dense index of a corpus")
    _add_data(p)
    _add_split(p, "all")
    p.add_argument("--out", dest="index_dir", default=None,
                   help="index folder (default: a cache folder keyed by corpus and embedder)")
    p.set_defaults(func=cmd_index)
    p = sub.add_parser("retrieval-eval", help="support recall of one-shot retrieval")
    _add_data(p)
    _add_split(p, "all")
    p.add_argument("--k", default="3,6,12")
    p.set_defaults(func=cmd_retrieval_eval)
    p = sub.add_parser("generate", help="one chat call through a generator")
    p.add_argument("--generator", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--no-cache", action="store_true")
    p.set_defaults(func=cmd_generate)
    for name, fn, split in (("train", cmd_train, "train"), ("evaluate", cmd_evaluate, "eval")):
        p = sub.add_parser(name)
        _add_data(p)
        _add_split(p, split)
        _add_control(p)
        p.add_argument("--generator", required=True)
        p.add_argument("--seed", type=int, default=13)
        if name == "train":
            p.add_argument("--out", required=True)
            p.add_argument("--trees", type=int, default=300)
            p.add_argument("--min-leaf", type=int, default=8)
            p.add_argument("--veto-threshold", type=float, default=0.05)
        else:
            from .experiments import METHODS
            p.add_argument("--method", required=True, choices=METHODS)
            p.add_argument("--policy", default=None)
            p.add_argument("--out", default=None)
            p.add_argument("--fixed-k", type=int, default=None)
            p.add_argument("--lam", type=float, default=None, help="lambda (cost weight)")
            p.add_argument("--veto-threshold", type=float, default=None)
        p.set_defaults(func=fn)
    p = sub.add_parser("models", help="bundled offline generators")
    p.add_argument("action", choices=("list", "fetch"))
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_models)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .data import DataError
    from .generators import GeneratorError
    from .models import ModelError
    try:
        return args.func(args)
    except (DataError, PolicyError, GeneratorError, ModelError, FileNotFoundError,
            ValueError) as e:
        print(f"error: {e}", file=sys.stderr)  # a clear one-line error, not a traceback
        return 2
