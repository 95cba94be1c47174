"""Command line: ``python -m dynakrag_lite <command>``.

    index           --data FILE [--embedder NAME] [--out DIR]
    retrieval-eval  --data FILE [--k 3,6,12]                  (SR@k as JSON on stdout)
    generate        --generator SPEC --prompt TEXT             (text + token counts as JSON)
    train           --data FILE --generator SPEC --out POLICY [--limit N] [--workers N]
                    [--save-data FILE.npz | --from-data FILE.npz [--signal-from POLICY]]
    upgrade-data    FILE.npz --signal-from POLICY --out NEW.npz [train's options, the run's]
                    (a format-1 --save-data file made format 2: run settings, calibration)
    evaluate        --data FILE --method NAME [--policy P] --generator SPEC [--limit N]
                    [--out DIR] [--no-compression] [--no-sufficiency] [--retrieval-cap N]
                    [--compressor llm|extractive --selector FILE] [--workers N]
    models          list | fetch NAME                           (bundled offline GGUF models)

``--data`` takes a file path or a dataset name (hotpotqa, 2wikimultihopqa, musique, library);
names are looked up in ``--data-dir`` or $DYNAKRAG_DATA_DIR. Train and evaluate share one
deterministic split of FILE (``--n-eval`` questions held out, seed ``--split-seed``), so a
policy is never evaluated on its training questions. Errors go to stderr, exit code 2.

``evaluate --method dynakrag`` without ``--policy`` uses ``results/policies/<dataset>-
<generator>.joblib`` and nothing else; a policy of another generator must be named with
``--policy`` (generator transfer). The policy is checked against the run first
(``policy.check_policy``). ``--policy`` with ``uniform`` or ``oracle`` takes only the policy's
calibrated sufficiency signal, so the three controllers see the same verdicts. ``evaluate``
resumes into ``--out`` (see :mod:`dynakrag_lite.experiments.run`): it refuses a folder of another setup, a folder another
process is evaluating into, and a damaged predictions file; questions that failed are retried.
Recorded commands have relative paths and no credentials (``storage.relative_command``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..data.schema import DataError
from ..generators.base import GeneratorError
from ..generators.models import ModelError
from ..policy import PolicyError
from ..retriever import DEFAULT_EF_SEARCH, DEFAULT_NPROBE
from ..storage import LockedError, redact, relative_command
from ..sufficiency import SIGNAL_CHOICES

RESULTS = Path(__file__).resolve().parents[2] / "results"


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
    p.add_argument("--nprobe", type=int, default=DEFAULT_NPROBE,
                   help="IVF lists probed per query")
    p.add_argument("--ef-search", type=int, default=DEFAULT_EF_SEARCH,
                   help="HNSW candidates per query")
    p.add_argument("--vectors", default=None, metavar="FILE.npy",
                   help="stream the corpus embeddings to this file (reused by a later build "
                   "with another --index-factory) instead of holding them in memory")


def _add_split(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--split", choices=("train", "eval", "all"), default=default)
    p.add_argument("--n-eval", type=int, default=100, help="questions held out for evaluation")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--offset", type=int, default=0,
                   help="skip the first M questions of the split (before --limit), e.g. to "
                   "measure on training questions a policy was not trained on")
    p.add_argument("--limit", type=int, default=None, help="first N questions of the split")


def _check_control_args(args) -> None:
    """Flag combinations that cannot run, refused before anything is indexed or loaded."""
    if args.compressor == "extractive" and not args.selector:
        raise ValueError("--compressor extractive needs --selector FILE (a sentence selector, "
                         "e.g. results/selectors/hotpotqa-sentence-selector.joblib, built by "
                         "data_scripts/compression_diagnostics.py)")
    if args.selector and not Path(args.selector).is_file():
        raise ValueError(f"--selector {args.selector}: no such file")
    method = getattr(args, "method", None)
    if getattr(args, "policy", None) and method not in ("dynakrag", "uniform", "oracle"):
        raise ValueError(f"--policy is for dynakrag, uniform and oracle, not {method}")


def _check_selector(args, eval_ids: list[str]) -> None:
    """Refuse a sentence selector trained on any evaluated question (its fit questions are
    in its metadata), as check_policy does for a policy: the extractive compressor would
    otherwise have seen those questions' gold sentences."""
    if not (getattr(args, "selector", None) and args.compressor == "extractive"):
        return
    from ..compression import load_selector
    train = set(map(str, load_selector(args.selector).meta.get("train_ids") or ()))
    overlap = [i for i in dict.fromkeys(map(str, eval_ids)) if i in train]
    if overlap:
        raise ValueError(f"--selector {args.selector}: {len(overlap)} evaluation question(s) "
                         f"were among its training questions (e.g. {overlap[0]!r}); build a "
                         "selector on this split's training questions (data_scripts/"
                         "compression_diagnostics.py --n-eval N)")


def _config(args, dataset: str):
    from ..actions import ControlConfig
    return ControlConfig.for_dataset(
        dataset, use_compression=not args.no_compression,
        use_sufficiency=not args.no_sufficiency, retrieval_cap=args.retrieval_cap,
        max_steps=args.max_steps, max_docs=args.max_docs, per_action=args.per_action,
        doc_chars=args.doc_chars or None, compressor=args.compressor,
        selector_path=args.selector)


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


def policy_file_name(dataset: str, generator: str) -> str:
    """``<dataset>-<generator>.joblib``, the generator spec made file-name safe."""
    return f"{dataset}-{generator.replace('/', '_').replace(':', '_')}.joblib"


def default_policy_path(dataset: str, generator: str, folder: Path | None = None) -> Path:
    """``results/policies/<dataset>-<generator>.joblib``, the policy trained with this very
    generator; nothing else is picked up silently. Raises :class:`PolicyError` saying which
    file was looked for and how to pass one (a policy of another generator may be passed
    with ``--policy``: that is the generator-transfer experiment)."""
    folder = RESULTS / "policies" if folder is None else Path(folder)
    exact = folder / policy_file_name(dataset, generator)
    if exact.exists():
        return exact
    from ..storage import relative_command
    shown = relative_command([str(exact)], prefix="")
    raise PolicyError(
        f"no policy for dataset '{dataset}' and generator '{generator}': looked for {shown}. "
        f"Train it (python -m dynakrag_lite train --data {dataset} --generator {generator} "
        f"--out {shown}) or pass --policy FILE (a policy trained with another generator is "
        "allowed: that is generator transfer)")


# -- commands ----------------------------------------------------------------------------
def cmd_index(args) -> int:
    t0 = time.perf_counter()
    setup, _ = _setup(args)
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


def cmd_retrieval_eval(args) -> int:
    from ..data.corpus import gold_titles
    from ..metrics import support_recall
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
    from ..generators.spec import make_generator
    gen = make_generator(args.generator, cache=not args.no_cache)
    g = gen.generate([{"role": "user", "content": args.prompt}], max_tokens=args.max_tokens)
    print(json.dumps({"text": g.text, "prompt_tokens": g.prompt_tokens,
                      "completion_tokens": g.completion_tokens, "seconds": round(g.seconds, 3),
                      "cached": g.cached, "generator": args.generator}))
    return 0


def _setup(args, generator: str | None = None):
    """Questions, corpus, retriever, generator and the train/eval split, as build_setup does."""
    from ..pipeline import build_setup
    setup = build_setup(args.data, generator=generator, data_dir=args.data_dir,
                        embedder=args.embedder, n_eval=args.n_eval,
                        split_seed=args.split_seed, corpus_file=args.corpus,
                        index_dir=getattr(args, "index_dir", None),
                        index_factory=getattr(args, "index_factory", None),
                        index_mmap=getattr(args, "index_mmap", False),
                        nprobe=getattr(args, "nprobe", DEFAULT_NPROBE),
                        ef_search=getattr(args, "ef_search", DEFAULT_EF_SEARCH),
                        vectors_path=getattr(args, "vectors", None))
    if hasattr(args, "no_compression"):  # train/evaluate take control flags; index doesn't
        setup.env.config = _config(args, setup.dataset)
    qs = {"train": setup.train, "eval": setup.eval, "all": setup.questions}[args.split]
    offset = getattr(args, "offset", 0) or 0
    if offset < 0 or (offset and offset >= len(qs)):
        raise ValueError(f"--offset {offset}: the {args.split} split has {len(qs)} questions")
    qs = qs[offset:]
    return setup, qs[: args.limit] if args.limit else qs


def _floats(text: str) -> list[float]:
    return [float(x) for x in str(text).split(",") if x.strip()]


def training_setup(args):
    """(setup, training questions, calibrated sufficiency signal or None) of a ``train``
    command, the environment configured with the signal: the trajectories depend on it, so a
    process that warms the cache for a training run (data_scripts/warm_cache.py train)
    must build exactly this."""
    from ..concurrency import check_workers
    from ..training.calibration import train_signal
    _check_control_args(args)
    workers = getattr(args, "workers", 1)  # train's option (upgrade-data has none)
    check_workers(workers, args.generator)  # from the spec: before any model is loaded
    setup, train_qs = _setup(args, args.generator)
    signal = None
    if setup.env.config.use_sufficiency:
        signal = train_signal(train_qs, setup.env, args.sufficiency_signal,
                              args.sufficiency_rule, args.calibration_questions or None,
                              seed=args.seed, workers=workers)
        if signal is not None:
            signal.configure(setup.env)
    return setup, train_qs, signal


# ControlConfig fields that shape collected trajectories (a --from-data run must match them).
# The compression settings are not among them: compress_answer_evidence runs only after
# stop_answer, which collection never executes.
COLLECTION_CONFIG_FIELDS = ("per_action", "max_docs", "max_steps", "retrieval_cap",
                            "ranking_depth", "doc_chars", "use_sufficiency", "max_bridges",
                            "use_spacy")


def _collection_run(args, dataset: str, config, generator_model_id: str | None,
                    hashes: bool = True) -> dict:
    """What a train run collects its trajectories under (TrainingData.run, saved with
    --save-data); :func:`_from_data_problems` compares a later run's settings with it.
    ``hashes=False``: leave the corpus and data hashes out (None), for settings parsed from
    a recorded command, whose files this run cannot vouch for."""
    from .folder import data_sha256
    from ..storage import sha256_file
    return {
        "dataset": dataset, "generator": args.generator,
        "generator_model_id": redact(generator_model_id) if generator_model_id else None,
        "embedder": args.embedder, "doc_chars": config.doc_chars,
        "per_action": config.per_action,
        "config": {f: getattr(config, f) for f in COLLECTION_CONFIG_FIELDS},
        "index_factory": args.index_factory, "nprobe": args.nprobe,
        "ef_search": args.ef_search,
        "corpus_sha256": sha256_file(args.corpus) if args.corpus and hashes else None,
        "data_sha256": data_sha256(args.data, args.data_dir) if hashes else None,
        "seed": args.seed, "continuation_target": args.continuation_target,
        "continuation_questions": args.continuation_questions,
        "sufficiency_signal": args.sufficiency_signal if config.use_sufficiency else None,
        "sufficiency_rule": args.sufficiency_rule,
        "calibration_questions": args.calibration_questions,
        "split": {"split": args.split, "n_eval": args.n_eval, "split_seed": args.split_seed,
                  "offset": args.offset, "limit": args.limit},
        "command": relative_command(getattr(args, "argv", None) or [])}


def _from_data_problems(saved: dict, now: dict, source: str = "file",
                        skip: tuple[str, ...] = ()) -> list[str]:
    """Every setting of ``now`` (this run) that differs from ``saved`` (the file's run), as
    "field: file X, this run Y" (``source`` names where ``saved`` came from; ``skip``: fields
    it cannot know). The split is not compared (serving another split is the point), nor the
    continuation target (recomputed from stored components) or the command."""
    from ..policy import _embedder_key
    keys = ["dataset", "generator", "embedder", "doc_chars", "per_action", "index_factory",
            "corpus_sha256", "data_sha256", "seed", "sufficiency_signal"]
    keys = [k for k in keys if k not in skip]
    if now["index_factory"]:  # search parameters matter for an approximate index only
        keys += ["nprobe", "ef_search"]
    if now["continuation_target"] == "f1":  # which questions carry answer F1s
        keys.append("continuation_questions")
    if now["sufficiency_signal"] not in (None, "text"):  # what the calibration used
        keys += ["sufficiency_rule", "calibration_questions"]
    out = []
    for k in keys:
        a, b = saved.get(k), now.get(k)
        if k == "embedder" and a is not None:
            a, b = _embedder_key(str(a)), _embedder_key(str(b))
        if a != b:
            out.append(f"{k}: {source} {saved.get(k)!r}, this run {now.get(k)!r}")
    conf = saved.get("config") or {}
    for k in COLLECTION_CONFIG_FIELDS:
        if k not in ("doc_chars", "per_action") and conf.get(k) != now["config"][k]:
            out.append(f"config.{k}: {source} {conf.get(k)!r}, this run {now['config'][k]!r}")
    return out


def _split_ids(questions, split: str, n_eval: int, split_seed: int, offset: int | None,
               limit: int | None) -> tuple[list[str], list[str]]:
    """(ids of the questions a run with these split options takes, in order; ids of the
    split's evaluation questions): the split build_setup makes (pipeline.build_setup), then
    --offset/--limit as _setup does."""
    from ..data.sources import split_questions
    train, evals = split_questions(questions, min(n_eval, len(questions) // 2), split_seed)
    qs = {"train": train, "eval": evals, "all": questions}[split]
    offset = offset or 0
    if offset < 0 or (offset and offset >= len(qs)):
        raise ValueError(f"--offset {offset}: the {split} split has {len(qs)} questions")
    qs = qs[offset:]
    return [q.id for q in (qs[:limit] if limit else qs)], [q.id for q in evals]


def _recorded_train_args(command: str, where: str) -> argparse.Namespace:
    """The options of a recorded ``python -m dynakrag_lite train ...`` command (a policy's
    meta "command", written by storage.relative_command), parsed by this version's parser
    (defaults filled in). ValueError naming ``where`` when it is not one."""
    import contextlib
    import io
    import shlex
    try:
        tokens = shlex.split(command or "")
    except ValueError as e:
        raise ValueError(f"{where}: its recorded command cannot be read ({e})") from None
    at = next((i for i, t in enumerate(tokens) if t.endswith("dynakrag_lite")), None)
    if at is None or tokens[at + 1: at + 2] != ["train"]:
        raise ValueError(f"{where}: its recorded command is not a train command: {command!r}")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = build_parser().parse_args(tokens[at + 1:])
    except SystemExit:
        why = (err.getvalue().strip().splitlines() or ["?"])[-1]
        raise ValueError(f"{where}: this version cannot parse its recorded command ({why}): "
                         f"{command}") from None
    return ns


def _same_file(recorded: str, path: Path) -> bool:
    """``recorded`` (a path as a recorded command holds it: relative to the directory that
    run started in, normally the project root) names ``path``."""
    import os
    rec = Path(os.path.normpath(recorded))
    where = [rec] if rec.is_absolute() else [Path.cwd() / rec, RESULTS.parent / rec]
    target = path.resolve()
    return any(w.resolve() == target for w in where)


def _signal_source(args, data, path: Path, shown: str, questions, dataset: str, now: dict
                   ) -> tuple[object, dict, dict]:
    """``--signal-from POLICY`` for a format-1 ``--from-data`` file (no run metadata, no
    calibration states): (the policy's calibrated sufficiency signal, the file's run settings
    as the policy records them, policy-meta extras).

    The policy must be the one trained by the run that wrote the file: its recorded command
    saved this very file (--save-data), and its train_ids, data_hash (sample features and
    targets), prefix count and continuation target are the file's. Its settings (meta first;
    what the meta lacks from its recorded command, parsed by this version's parser) must be
    this run's, listed as in :func:`_from_data_problems`. The dataset hash is recorded by
    neither, so the policy's split is re-made on this run's data instead and must give its
    train_ids. Raises ValueError naming the files and every mismatching field."""
    import os
    import sklearn
    from ..policy import Policy, data_hash
    pol = Policy.load(args.signal_from)  # a committed one is checked against its manifest
    prov = pol.provenance()
    pshown = relative_command([str(args.signal_from)], prefix="")
    where = f"--signal-from {pshown}"
    meta = pol.meta
    lacks = [k for k in ("command", "train_ids", "data_hash", "dataset", "generator",
                         "embedder", "doc_chars", "per_action") if meta.get(k) is None]
    if lacks:
        raise ValueError(f"{where}: its metadata lacks {lacks}, so it cannot vouch for "
                         f"{shown}; collect the trajectories again with train --save-data")
    ns = _recorded_train_args(meta["command"], where)
    # 1. provenance: this policy was fitted, in the same run, on exactly this file
    prov_problems = []
    if ns.save_data is None:
        prov_problems.append("save_data: its recorded command has no --save-data"
                             + (f" (it read --from-data {ns.from_data})" if ns.from_data
                                else ""))
    elif not _same_file(ns.save_data, path):
        prov_problems.append(f"save_data: policy {ns.save_data!r}, file {shown!r}")
    ids = [str(q) for q in meta["train_ids"]]
    if ids != list(data.questions):
        common = len(set(ids) & set(data.questions))
        prov_problems.append(
            f"train_ids: policy {len(ids)} questions, file {len(data.questions)} ("
            + ("the same ones in another order" if common == len(ids) == len(data.questions)
               else f"{common} in common") + ")")
    file_hash = data_hash(data)
    if meta["data_hash"] != file_hash:
        prov_problems.append(f"data_hash: policy {meta['data_hash']!r}, file {file_hash!r}")
    for k, theirs in (("n_prefixes", len(data.prefixes)),
                      ("continuation_target", data.continuation_target)):
        if k in meta and meta[k] != theirs:
            prov_problems.append(f"{k}: policy {meta[k]!r}, file {theirs!r}")
    if prov_problems:
        raise ValueError(f"{where} is not the policy trained by the run that wrote {shown}: "
                         + "; ".join(prov_problems) + ". Pass the policy of the train run "
                         f"whose --save-data wrote {shown}")
    # 2. the file's run settings, as the policy records them, against this run's
    config = _config(ns, dataset)
    rf = meta.get("rf") or {}
    # the recorded command's settings, overridden by what the policy's meta states
    run = {**_collection_run(ns, meta["dataset"], config, meta.get("generator_model_id"),
                             hashes=False),
           "generator": meta["generator"], "embedder": meta["embedder"],
           "doc_chars": meta["doc_chars"], "per_action": meta["per_action"],
           "corpus": ns.corpus, "seed": rf.get("random_state", ns.seed),
           "continuation_target": meta.get("continuation_target", ns.continuation_target),
           "command": meta["command"]}
    problems = _from_data_problems(run, now, source="policy",
                                   skip=("corpus_sha256", "data_sha256"))
    here = os.path.relpath(Path(args.corpus).resolve()) if args.corpus else None
    there = os.path.normpath(ns.corpus) if ns.corpus else None
    if here != there:
        problems.append(f"corpus: policy {there!r}, this run {here!r}")
    if meta.get("sklearn") != sklearn.__version__:  # the learned signal is a forest too
        problems.append(f"sklearn: policy {meta.get('sklearn')!r}, this run "
                        f"{sklearn.__version__!r}")
    if not problems:  # no data hash anywhere: the policy's split of this data is its train_ids
        try:
            again, _ = _split_ids(questions, ns.split, ns.n_eval, ns.split_seed, ns.offset,
                                  ns.limit)
        except ValueError as e:
            again = [f"({e})"]
        if again != ids:
            problems.append(f"split: the policy's split (--n-eval {ns.n_eval} --split-seed "
                            f"{ns.split_seed} --offset {ns.offset} --limit {ns.limit}) of this "
                            f"run's data gives {len(set(again) & set(ids))} of its "
                            f"{len(ids)} train_ids (other data than the policy's?)")
    if problems:
        raise ValueError(f"{shown} (run settings from {where}) was collected under other "
                         "settings than this run: " + "; ".join(problems) + ". Run with the "
                         "policy's settings (its recorded command) or collect again")
    extra = {"signal_from": pshown, "signal_from_sha256": prov["sha256"],
             "run_metadata_from": "signal_from"}
    return pol.sufficiency if config.use_sufficiency else None, run, extra


def _data_from_file(args):
    """(training data, calibrated signal or None, dataset, policy-meta extras, summary) of
    ``train --from-data``: the file checked against this run's settings and cut to this
    split's training questions (after --offset/--limit). No index, no generator."""
    import hashlib
    from ..data.sources import load_dataset
    from ..training.files import load_training_data_bytes
    path = Path(args.from_data)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"--from-data {args.from_data}: cannot read it ({e})") from None
    data = load_training_data_bytes(raw, path)  # hash exactly the bytes that are used
    shown = relative_command([str(path)], prefix="")
    if data.run and args.signal_from:
        raise ValueError(f"--signal-from {relative_command([args.signal_from], prefix='')}: "
                         f"{shown} has its own run metadata "
                         "and calibration states (the signal is recalibrated from them); "
                         "--signal-from is only for files written before those existed "
                         "(format 1): drop it")
    if not data.run and not args.signal_from:
        raise ValueError(f"{shown}: written before train --from-data existed, it lacks the "
                         "'run' metadata (dataset, generator, embedder, doc_chars, "
                         "per_action, seed, ...) needed to check it against this run; pass "
                         "--signal-from POLICY.joblib, the policy trained by the train run "
                         "that wrote it (its settings and calibrated sufficiency signal are "
                         "then used), or collect the trajectories again with train --save-data")
    questions = load_dataset(args.data, data_root=args.data_dir)
    dataset = questions[0].dataset
    config = _config(args, dataset)
    now = _collection_run(args, dataset, config, None)
    source = None
    if args.signal_from:
        source = _signal_source(args, data, path, shown, questions, dataset, now)
        data.run = source[1]
    else:
        problems = _from_data_problems(data.run, now)
        if problems:
            raise ValueError(f"{shown} was collected under other settings than this run: "
                             + "; ".join(problems) + ". Run with the file's settings or "
                             "collect again (without --from-data)")
    wanted, eval_list = _split_ids(questions, args.split, args.n_eval, args.split_seed,
                                   args.offset, args.limit)
    have = set(data.questions)
    want = set(wanted)
    eval_ids = set(eval_list) if args.split == "train" else set()
    kept = [q for q in data.questions if q in want]
    if not kept:
        raise ValueError(f"{shown}: none of its {len(have)} questions is among this run's "
                         f"{len(wanted)} training questions")
    counts = {"in_file": len(have), "kept": len(kept),
              "moved_to_eval": len(have & eval_ids),  # dropped: now evaluation questions
              "not_selected": len(have - want - eval_ids),  # dropped by --offset/--limit
              "missing": len(want - have)}  # this run's questions the file never collected
    file_ids = list(data.questions)
    data = data.subset(kept)
    if args.continuation_target != data.continuation_target:
        try:  # exact: the stored components give every target the file has answers for
            data.set_continuation_target(args.continuation_target)
        except ValueError as e:
            raise ValueError(f"{shown}: field 'continuation_target' is "
                             f"{data.run.get('continuation_target')!r} in the file; "
                             f"{e}") from None
    if source is not None:
        # Not recalibrated (a format-1 file has no calibration states): the signal was
        # calibrated on all the file's questions, so a dropped one may not be evaluated now.
        signal, _, sig_extra = source
        outside = [q for q in file_ids if q not in set(kept)]
        leaked = [q for q in outside if q in set(eval_list) - want]
        if leaked:
            raise ValueError(f"--signal-from {sig_extra['signal_from']}: its sufficiency signal "
                             f"was calibrated on all {len(have)} questions of {shown}, "
                             f"{len(leaked)} of which are evaluation questions of this split "
                             f"(e.g. {leaked[0]!r}); it cannot be recalibrated on the kept "
                             "questions (a format-1 file has no calibration states). Train on "
                             "the policy's split (its recorded command) or collect again with "
                             "--save-data")
        extra = {"from_data": shown, "from_data_sha256": hashlib.sha256(raw).hexdigest(),
                 "from_data_questions": counts,
                 "collection": {k: data.run.get(k) for k in ("command", "split")},
                 "sufficiency_recalibrated": False, **sig_extra,
                 "signal_train_ids_outside_training": outside}
        return data, signal, dataset, extra, counts
    signal, recalibrated = None, False
    if config.use_sufficiency and args.sufficiency_signal != "text":
        table = data.calibration
        if table is None:
            raise ValueError(f"{shown}: --sufficiency-signal {args.sufficiency_signal} needs "
                             "the calibration states, which this file lacks (written before "
                             "train --save-data kept them); collect again with --save-data")
        if table.reproduced is False:
            raise ValueError(f"{shown}: its calibration table did not reproduce the run's "
                             "sufficiency signal when it was written; collect again")
        # On the kept questions only: calibrated on a question now in evaluation, the
        # signal would have seen its gold support.
        signal = table.signal()
        recalibrated = len(kept) < len(have) or table.signal_info != (
            signal.describe() if signal is not None else None)
    extra = {"from_data": shown, "from_data_sha256": hashlib.sha256(raw).hexdigest(),
             "from_data_questions": counts,
             "collection": {k: data.run.get(k) for k in ("command", "split")},
             "sufficiency_recalibrated": recalibrated, "run_metadata_from": "from_data"}
    return data, signal, dataset, extra, counts


def cmd_train(args) -> int:
    """Calibrate the sufficiency signal, collect trajectories, tune lambda and the veto
    threshold by cross-validation (all on the training split), fit and save the policy.
    With --from-data: the trajectories (and the calibration states) come from a file saved
    by --save-data, cut to this split's training questions; no model call. A format-1 file
    (no run settings, no calibration states) needs --signal-from, the policy its run trained:
    that policy's recorded settings stand for the file's and its signal is reused."""
    from ..concurrency import check_workers
    from ..policy import GAIN_LAMBDA_GRID, LAMBDA_GRID, VETO_GRID, train_policy, tune_continuation
    t0 = time.perf_counter()
    extra: dict = {}
    check_workers(args.workers, args.generator)  # from the spec: before anything is loaded
    if args.signal_from and not args.from_data:
        raise ValueError("--signal-from POLICY.joblib only goes with --from-data FILE.npz (a "
                         "file written before the run settings were saved); a collecting run "
                         "calibrates its own sufficiency signal")
    if args.from_data:
        _check_control_args(args)
        data, signal, dataset, extra, counts = _data_from_file(args)
        cfg = _config(args, dataset)
        model_id = data.run.get("generator_model_id")
        train_ids = list(data.questions)
        if counts["moved_to_eval"] or counts["missing"]:
            print(f"note: {counts['moved_to_eval']} question(s) of {extra['from_data']} are "
                  f"evaluation questions of this split and were dropped; {counts['missing']} "
                  "training question(s) of this split have no trajectories there",
                  file=sys.stderr)
        outside = extra.get("signal_train_ids_outside_training")
        if outside:
            print(f"note: the sufficiency signal of {extra['signal_from']} was calibrated on "
                  f"{len(outside)} question(s) outside this run's training questions (none "
                  "of them an evaluation question of this split); the policy's meta lists "
                  "them (signal_train_ids_outside_training): do not evaluate it on them",
                  file=sys.stderr)
        if extra["sufficiency_recalibrated"]:
            print("note: the sufficiency signal was recalibrated on the kept questions; the "
                  "trajectories were collected under the file's signal "
                  f"({(data.calibration.signal_info or {}).get('kind')})", file=sys.stderr)
    else:
        from ..training.files import build_calibration, save_training_data
        from ..trajectories import collect
        setup, train_qs, signal = training_setup(args)
        env, dataset = setup.env, setup.dataset
        cfg = env.config
        model_id = env.generator.model_id
        train_ids = [q.id for q in train_qs]
        calibration = None
        if args.save_data and signal is not None:
            # The calibration states, so that --from-data can recalibrate on any subset of
            # these questions (retrieval only; the LLM signals' calls are cache hits).
            calibration = build_calibration(
                train_qs, env, args.sufficiency_signal, args.sufficiency_rule,
                args.calibration_questions or None, seed=args.seed, live_signal=signal)
            if not calibration.reproduced:
                print("warning: the saved calibration states do not reproduce this run's "
                      "sufficiency signal; --from-data will refuse them", file=sys.stderr)
        data = collect(train_qs, env, seed=args.seed, continuation=args.continuation_target,
                       answer_questions=args.continuation_questions or None,
                       workers=args.workers)
        data.run = _collection_run(args, dataset, env.config, model_id)
        data.calibration = calibration
        if args.save_data:
            save_training_data(data, args.save_data)
    grid = GAIN_LAMBDA_GRID if args.stop_rule == "gain" else LAMBDA_GRID
    lams = [args.lam] if args.lam is not None else (_floats(args.lambdas) or list(grid))
    thrs = [args.veto_threshold] if args.veto_threshold is not None else \
        (_floats(args.veto_thresholds) or list(VETO_GRID))
    lam, thr, tuning = lams[0], (thrs[0] if len(thrs) == 1 else 0.05), None
    if args.tune_folds >= 2 and len(train_ids) >= 2 and len(lams) * len(thrs) > 1:
        metric = args.tune_metric or ("f1" if args.continuation_target == "f1" else "sr")
        lam, thr, frame = tune_continuation(
            data, lams, thrs, folds=args.tune_folds, metric=metric, seed=args.seed,
            n_estimators=args.trees, min_samples_leaf=args.min_leaf,
            stop_rule=args.stop_rule)
        tuning = {"metric": metric, "folds": args.tune_folds,
                  "grid": frame.round(6).to_dict("records")}
    pol = train_policy(data, n_estimators=args.trees, min_samples_leaf=args.min_leaf,
                       seed=args.seed, lam=lam, veto_threshold=thr, sufficiency=signal,
                       stop_rule=args.stop_rule, meta={
                           "dataset": dataset, "generator": args.generator,
                           "generator_model_id": model_id,
                           "embedder": args.embedder, "doc_chars": cfg.doc_chars,
                           "per_action": cfg.per_action,
                           "train_ids": train_ids,
                           "action_gains": data.action_gains(),
                           "tuning": tuning, **extra,
                           "command": relative_command(args.argv)})
    path = pol.save(args.out)
    from ..policy import register_policy
    register_policy(path)  # keep results/policies/MANIFEST.sha256 in step with the file
    print(json.dumps({"policy": str(path), "questions": len(train_ids),
                      "samples": pol.meta["n_samples"], "prefixes": pol.meta["n_prefixes"],
                      "continuation_target": args.continuation_target,
                      "sufficiency": None if signal is None else
                      {"kind": signal.kind, "threshold": signal.threshold,
                       "gates": signal.gates},
                      "lam": lam, "veto_threshold": thr, "stop_rule": args.stop_rule,
                      **({"from_data": extra["from_data"],
                          "from_data_questions": extra["from_data_questions"]}
                         if args.from_data else {}),
                      **({"signal_from": extra["signal_from"],
                          "signal_from_sha256": extra["signal_from_sha256"]}
                         if args.signal_from else {}),
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


def cmd_upgrade_data(args) -> int:
    """Write a format-2 copy of a format-1 ``--save-data`` file (no run settings, no
    calibration states), so that ``train --from-data`` can recalibrate the sufficiency signal
    on any subset of its questions (a split that moves some of them into evaluation).

    ``--signal-from POLICY``, the policy trained by the run that wrote the file, is checked and
    gives the run settings exactly as ``train --from-data --signal-from`` does
    (:func:`_signal_source`; this command takes train's options, which must be that run's).
    The data and corpus hashes, which a policy does not record, are this command's files
    (whose split :func:`_signal_source` checked gives the policy's train_ids); ``run`` also
    says where it was upgraded from. The calibration table is rebuilt with
    ``training_data.build_calibration`` on the file's questions, with the recorded run's
    signal settings; the learned signal needs retrieval only (no generator is built), the LLM
    signals replay their calls from the call cache ($DYNAKRAG_REPLAY_ONLY: a miss is an
    error). A table that does not reproduce the policy's signal is refused and nothing is
    written. The input is never overwritten (nor is any existing --out); the write is atomic."""
    from ..generators.base import REPLAY_ONLY_ENV
    before = os.environ.get(REPLAY_ONLY_ENV)
    os.environ[REPLAY_ONLY_ENV] = "1"  # never generate: a cache miss stops with an error
    try:
        return _upgrade_data(args)
    finally:  # this process only (a caller of main() keeps its own setting)
        if before is None:
            os.environ.pop(REPLAY_ONLY_ENV, None)
        else:
            os.environ[REPLAY_ONLY_ENV] = before


def _upgrade_data(args) -> int:
    """:func:`cmd_upgrade_data`, replay-only mode set."""
    import hashlib
    from ..data.sources import load_dataset
    from .folder import data_sha256
    from ..storage import sha256_file
    from ..training.files import build_calibration, load_training_data_bytes, save_training_data
    t0 = time.perf_counter()
    _check_control_args(args)
    path, out = Path(args.from_data), Path(args.out)
    shown = relative_command([str(path)], prefix="")
    oshown = relative_command([str(out)], prefix="")
    if out.resolve() == path.resolve():
        raise ValueError(f"--out {oshown}: that is the input file {shown}; the upgrade never "
                         "overwrites it, name another file")
    if out.exists():
        raise ValueError(f"--out {oshown}: the file exists; remove it or name another one")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{shown}: cannot read it ({e})") from None
    data = load_training_data_bytes(raw, path)
    if data.run or data.calibration is not None:
        field = "run" if data.run else "calibration"
        raise ValueError(f"{shown}: already format 2 (it has its own {field!r} field); "
                         "nothing to upgrade, use it with train --from-data as it is")
    questions = load_dataset(args.data, data_root=args.data_dir)
    dataset = questions[0].dataset
    config = _config(args, dataset)
    now = _collection_run(args, dataset, config, None)
    signal, run, sig_extra = _signal_source(args, data, path, shown, questions, dataset, now)
    run = dict(run)
    run["data_sha256"] = data_sha256(args.data, args.data_dir)
    run["corpus_sha256"] = sha256_file(args.corpus) if args.corpus else None
    run["upgraded_from"] = {"file": shown, "sha256": hashlib.sha256(raw).hexdigest(),
                            "signal_from": sig_extra["signal_from"],
                            "signal_from_sha256": sig_extra["signal_from_sha256"],
                            "command": relative_command(args.argv)}
    kind = run.get("sufficiency_signal")
    table = None
    if signal is not None and kind not in (None, "text"):
        by_id = {str(q.id): q for q in questions}
        absent = [q for q in data.questions if q not in by_id]
        if absent:
            raise ValueError(f"{shown}: field 'questions' holds {len(absent)} id(s) not in "
                             f"--data {args.data} (e.g. {absent[0]!r})")
        qs = [by_id[q] for q in data.questions]  # the run's training order
        # learned: calibration states are retrieval only, so no generator at all
        setup, _ = _setup(args, None if kind == "learned" else args.generator)
        signal.configure(setup.env)  # as training_setup does before build_calibration
        table = build_calibration(qs, setup.env, kind, run["sufficiency_rule"],
                                  run["calibration_questions"] or None, seed=run["seed"],
                                  live_signal=signal, generator=run["generator"])
        if not table.reproduced:
            raise ValueError(f"{shown}: the calibration states rebuilt on its "
                             f"{len(data.questions)} questions do not reproduce the sufficiency "
                             f"signal of --signal-from {sig_extra['signal_from']} (its meta "
                             f"field 'sufficiency': {signal.describe()}); nothing written")
    data.run, data.calibration = run, table
    written = save_training_data(data, out)
    print(json.dumps({"upgraded": shown, "out": relative_command([str(written)], prefix=""),
                      "questions": len(data.questions), "samples": len(data.samples),
                      "prefixes": len(data.prefixes),
                      "calibration_states": None if table is None else len(table),
                      "reproduced": None if table is None else table.reproduced,
                      "sufficiency": None if signal is None else
                      {"kind": signal.kind, "threshold": signal.threshold},
                      "signal_from": sig_extra["signal_from"],
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


@dataclass
class EvaluationSetup:
    """What an ``evaluate`` command runs (:func:`evaluation_setup`): its questions in order,
    its run folder, and every other argument it passes to :func:`experiments.run.evaluate`
    (``options``: method, env, policy, dataset, generator, fixed_k, seed, run_info,
    data_sha256, policy_sha256, summary_extra, demos, workers)."""
    questions: list
    out: Path
    options: dict

    @property
    def env(self):
        return self.options["env"]

    def fingerprint(self) -> dict:
        """The fingerprint the run records in ``out/run.json``."""
        from .run import evaluation_fingerprint
        o = self.options
        return evaluation_fingerprint(self.questions, o["method"], o["env"], policy=o["policy"],
                                      policy_sha256=o["policy_sha256"],
                                      data_sha256=o["data_sha256"], fixed_k=o["fixed_k"],
                                      seed=o["seed"], demos=o["demos"])

    def run(self, questions=None, out: str | Path | None = None, **changes) -> dict:
        """:func:`experiments.run.evaluate` of this setup, on ``questions`` into ``out`` when given
        (a subset run makes the calls the whole run makes for those questions: every choice
        is seeded per question, IRCoT's demonstrations were drawn for the whole list), with
        ``changes`` to the other arguments."""
        from .run import evaluate
        return evaluate(self.questions if questions is None else list(questions),
                        out_dir=self.out if out is None else Path(out),
                        **{**self.options, **changes})


def evaluation_setup(args) -> EvaluationSetup:
    """The questions, folder and setup of an ``evaluate`` command (its parsed ``args``), every
    check made: what :func:`cmd_evaluate` runs, and what a process warming the LLM cache for
    that run (data_scripts/warm_cache.py evaluate) must build."""
    from ..concurrency import check_workers
    from .folder import data_sha256
    from ..policy import Policy, check_policy
    _check_control_args(args)
    check_workers(args.workers, args.generator)  # from the spec: before any model is loaded
    policy, path = None, None
    if args.policy:  # fail fast, before indexing anything
        path = Path(args.policy)
        policy = Policy.load(path)
    setup, eval_qs = _setup(args, args.generator)
    dataset, env = setup.dataset, setup.env
    if args.method == "dynakrag" and policy is None:
        path = default_policy_path(dataset, args.generator)
        policy = Policy.load(path)
    _check_selector(args, [q.id for q in eval_qs])
    extra = {}
    if policy is not None:
        # Refuse a policy that does not fit this run (features, embedder, budgets, sklearn,
        # training questions among the evaluation questions) before any question runs.
        check_policy(policy, embedder=args.embedder, doc_chars=env.config.doc_chars,
                     per_action=env.config.per_action, eval_ids=[q.id for q in eval_qs])
        extra["policy"] = policy.provenance()
        # Its calibrated sufficiency signal, before the fingerprint. uniform and oracle take
        # only this from the policy, so that every controller sees the same sufficiency
        # verdicts and differs only in how it chooses.
        policy.configure(env)
        if args.method != "dynakrag":
            extra["policy"]["used_for"] = "sufficiency signal only"
            policy = None
        if policy is not None and args.lam is not None:
            policy.lam = args.lam
        if policy is not None and args.veto_threshold is not None:
            policy.veto_threshold = args.veto_threshold
    out = Path(args.out or f"runs/{dataset}-{args.method}")
    demos = None
    if args.method == "ircot":  # few-shot, as the original: demonstrations from training
        from ..demonstrations import build_ircot_demos
        # Never one of the evaluated questions (a run on the training split draws its
        # demonstrations from the rest of that split).
        evaluated = {q.id for q in eval_qs}
        demos = build_ircot_demos([q for q in setup.train if q.id not in evaluated],
                                  seed=args.split_seed,
                                  eval_ids=[q.id for q in eval_qs])
        extra["ircot_demos"] = sorted(demos.ids)
    return EvaluationSetup(list(eval_qs), out, dict(
        method=args.method, env=env, policy=policy, dataset=dataset, generator=args.generator,
        fixed_k=args.fixed_k, seed=args.seed,
        run_info={"command": relative_command(args.argv),
                  "generator_model_id": redact(env.generator.model_id),
                  "config": dict(env.config.__dict__)},
        data_sha256=data_sha256(args.data, args.data_dir),
        policy_sha256=extra["policy"]["sha256"] if "policy" in extra else None,
        summary_extra=extra, demos=demos, workers=args.workers))


def cmd_evaluate(args) -> int:
    summary = evaluation_setup(args).run()
    print(json.dumps({k: summary[k] for k in summary
                      if k not in ("run", "fingerprint", "diagnostics", "policy")}))
    d = summary["diagnostics"]
    if d["errors"]:  # visible, not only in the file: these questions are not in the means
        print(f"warning: {d['errors']} question(s) failed ({d['error_types']}); they are "
              "error rows in predictions.jsonl and the next run of this command retries them",
              file=sys.stderr)
    return 0


def cmd_models(args) -> int:
    from ..generators import models
    if args.action == "list":
        for name in models.list_models():
            print(name)
        return 0
    path = models.gguf_path(args.name)
    print(json.dumps({"model": args.name, "path": str(path)}))
    return 0


def _add_save_or_from_data(p: argparse.ArgumentParser) -> None:
    """train's --save-data | --from-data [--signal-from]."""
    once = p.add_mutually_exclusive_group()  # collect (and save), or read a file
    once.add_argument("--save-data", default=None,
                      help="also write the collected trajectories here (.npz, no "
                      "pickle), with the run's settings and the sufficiency "
                      "calibration states: --from-data rebuilds a policy and "
                      "data_scripts/stop_rule.py re-tunes from it, without model "
                      "calls")
    once.add_argument("--from-data", default=None, metavar="FILE.npz",
                      help="collect nothing: build the policy from trajectories "
                      "saved by --save-data (no model call, no index), cut to this "
                      "split's training questions (--n-eval, --offset, --limit); "
                      "refused when the file was collected under other settings")
    p.add_argument("--signal-from", default=None, metavar="POLICY.joblib",
                   help="with --from-data and a file written before it kept run "
                   "settings and calibration states (format 1): the policy trained "
                   "by the train run that wrote the file (its --save-data); its "
                   "recorded settings are checked against this run and its calibrated "
                   "sufficiency signal is reused as is (not recalibrated)")


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
    for name, fn, split in (("train", cmd_train, "train"), ("evaluate", cmd_evaluate, "eval"),
                            ("upgrade-data", cmd_upgrade_data, "train")):
        p = sub.add_parser(name, help="format-1 --save-data file -> format 2 (run settings "
                           "and calibration states, from the policy its run trained); takes "
                           "train's options, which must be that run's"
                           if name == "upgrade-data" else None)
        _add_data(p)
        _add_split(p, split)
        _add_control(p)
        p.add_argument("--generator", required=True)
        p.add_argument("--seed", type=int, default=13)
        if name in ("train", "upgrade-data"):
            p.add_argument("--out", required=True,
                           help="the format-2 copy (.npz)" if name != "train" else None)
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
            p.add_argument("--lambdas", default="", help="lambda grid, comma-separated")
            p.add_argument("--veto-thresholds", default="", help="veto threshold grid")
            p.add_argument("--stop-rule", choices=("level", "gain"), default="level",
                           help="what stop_answer is worth: level = the paper's v = SR(s); "
                           "gain = 0 SR gain, priced like the other actions (lambda then "
                           "trades support against tokens); see policy.select")
            if name == "upgrade-data":
                p.add_argument("from_data", metavar="FILE.npz",
                               help="a format-1 file written by train --save-data")
                p.add_argument("--signal-from", required=True, metavar="POLICY.joblib",
                               help="the policy trained by the train run that wrote FILE.npz")
                p.set_defaults(save_data=None)
            else:
                _add_save_or_from_data(p)
            p.add_argument("--lam", type=float, default=None, help="fix lambda (no tuning)")
            p.add_argument("--veto-threshold", type=float, default=None,
                           help="fix the veto threshold (no tuning)")
            if name == "train":
                p.add_argument("--workers", type=int, default=1,
                               help="training questions (and calibration states) collected "
                               "at once; > 1 only with a server generator "
                               "(openai:<model>@<base_url>); the trajectories are the "
                               "sequential run's")
        else:
            from .run import METHODS
            p.add_argument("--method", required=True, choices=METHODS)
            p.add_argument("--policy", default=None)
            p.add_argument("--out", default=None)
            p.add_argument("--fixed-k", type=int, default=None)
            p.add_argument("--lam", type=float, default=None, help="lambda (cost weight)")
            p.add_argument("--veto-threshold", type=float, default=None)
            p.add_argument("--workers", type=int, default=1,
                           help="questions run at once; > 1 only with a server generator "
                           "(openai:<model>@<base_url>); predictions.jsonl keeps the "
                           "question order")
            p.add_argument("--replay-only", action="store_true",
                           help="never call the model: a call missing from the LLM call "
                           "cache stops the run with an error naming the question (as "
                           "$DYNAKRAG_REPLAY_ONLY=1 does)")
        p.set_defaults(func=fn)
    p = sub.add_parser("models", help="bundled offline generators")
    p.add_argument("action", choices=("list", "fetch"))
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_models)
    return ap


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a command line of this package reports as a user's error (a missing or
    foreign file, a bad field or option value) rather than as a bug."""
    # ValueError: also ResultsError, FingerprintError
    return (DataError, PolicyError, GeneratorError, ModelError, FileNotFoundError,
            LockedError, ValueError)


def run_reporting_errors(func: Callable[..., int], *args,
                         also: tuple[type[BaseException], ...] = ()) -> int:
    """``func(*args)``, an exit code; a user error (:func:`user_errors`, and ``also``: the
    calling module's own error classes) becomes one line ``error: MESSAGE`` on stderr and exit
    code 2 instead of a traceback. Every entry point ends this way: ``python -m dynakrag_lite``,
    ``python -m dynakrag_lite.generators.cache``, ``python -m dynakrag_lite.policy``."""
    errors = (*user_errors(), *also)
    try:
        return func(*args)
    except errors as e:
        print(f"error: {e}", file=sys.stderr)  # a clear one-line error, not a traceback
        return 2


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # what ran, for the records (relative paths, no credentials)
    if getattr(args, "replay_only", False):
        from ..generators.base import REPLAY_ONLY_ENV
        os.environ[REPLAY_ONLY_ENV] = "1"  # read by every cached call of this process
    return run_reporting_errors(args.func, args)
