"""A run's fingerprint: what decides its rows, recorded in ``DIR/run.json`` so that results of
two setups never mix in one folder (:func:`check_run_folder`).

It hashes *behaviour*, not module bytes: the prompt module is probed (:func:`prompts_digest`),
the corpus hashed by ids, titles and texts, the selector and policy by their files' sha256. So
moving code leaves run folders resumable, while an edited prompt, corpus or model does not.
:func:`upgrade` reads version-1 fingerprints (prompts.py bytes, corpus ids, selector path) in
version 2 terms where the old record proves the same setup.

Kept out: the question selection (checked beside it) and the llama.cpp build (:func:`llama_build`,
recorded for :func:`build_change`): the portable and AVX-512 builds gave different greedy
answers on 14 of 250 identical prompts, so compared runs must share a build."""
from __future__ import annotations

import hashlib
import inspect
import json
import warnings
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from .. import prompts
from ..config import Environment, RunSettings
from ..data.corpus import Corpus, doc_id_for
from ..data.schema import Question
from ..generators.llamacpp import LlamaCppGenerator
from ..state import RetrievedDoc
from ..storage import atomic_write_json, redact, sha256_file
from .folder import PREDICTIONS_FILE, RUN_FILE, SUMMARY_FILE
from .selection import SELECTION_FIELD, recorded_selection, selection_diff

FINGERPRINT_VERSION = 2
# Budget fields added after runs were recorded, with the behaviour those runs had.
ADDED_BUDGETS = {"answer_docs_up_to": 0}

# sha256 of a prompts.py whose runs are committed -> prompts_digest() of that file (computed
# from commit f5a80f6's file; a test checks today's module still behaves so).
LEGACY_PROMPTS = {
    "92d5a11b253992098533614f6566c497703353828fff335273d65884775cea09":
        "6cc28d9870586585bdce461b70070141fd343cc74300db8235bd37bb994a5249",
}


class FingerprintError(ValueError):
    """A run folder holds results of another setup than the one asked to resume into it."""


# -- the probed behaviour of the prompt module ---------------------------------------------
_PROBE_DOCS = (RetrievedDoc("d1", "Velmora Records", "Velmora Records is a record label "
                            "founded in 1987 by Ada Brenn in Halvik. It publishes folk-rock.",
                            0.9, "retrieve_more", 0),
               RetrievedDoc("d2", "Ada Brenn", "Ada Brenn (born 12 May 1950) is a Norvian "
                            "music producer. She was born in Kessford.", 0.7, "gap_query", 1))
_PROBE_QUESTIONS = ("In which town was the founder of Velmora Records born?",
                    "Are Velmora Records and Osk Tide both record labels?")
_PROBE_REPLIES = (
    "", "Kessford", "Answer: Kessford.", "SUFFICIENT", "INSUFFICIENT: birthplace of Ada Brenn",
    "yes", "No, the documents do not say.", "Search query: Ada Brenn birthplace",
    "[2] Ada Brenn (born 12 May 1950) is a Norvian music producer.",
    "- Velmora Records was founded by Ada Brenn [1]\n- Ada Brenn was born in Kessford [2]",
    "1. fact one\n2) fact two\nplain line",
    "Ada Brenn founded Velmora Records. So the answer is: Kessford.",
    "Follow up: Who founded Velmora Records?\nIntermediate answer: Ada Brenn",
    "So the final answer is: Kessford", "none", "Thought: the label was founded in Halvik.")
_PROBE_ARGS: dict[str, tuple] = {
    "docs": (_PROBE_DOCS,), "paragraphs": (_PROBE_DOCS,), "max_chars": (None, 40),
    "fact_table": (False, True), "max_snippets": (2, 8), "snippets": ("- a fact\n- another",),
    "thoughts": ((), ("Velmora Records was founded by Ada Brenn.",)),
    "previous": ((), ("Ada Brenn founded Velmora Records.",)),
    "qa_pairs": ((), (("Who founded Velmora Records?", "Ada Brenn"),)),
    "steps": ((), (("Who founded Velmora Records?", "Ada Brenn"),)),
    "titles": ((), ("Ada Brenn",)), "fallback": ("FALLBACK",), "demos": ((),),
    "chain": (("Velmora Records was founded by Ada Brenn.",),), "start": (1,),
}


def _plainify(x: Any) -> Any:
    if hasattr(x, "__dataclass_fields__"):
        return {k: _plainify(v) for k, v in asdict(x).items()}
    if isinstance(x, (list, tuple)):
        return [_plainify(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _plainify(v) for k, v in x.items()}
    return x if isinstance(x, (str, int, float, bool, type(None))) else repr(x)


def _calls(fn: Callable) -> list[dict]:
    """``fn`` on every combination of probe values of its parameters (text parameters get the
    probe questions / replies)."""
    combos: list[dict] = [{}]
    for name, p in inspect.signature(fn).parameters.items():
        if name in _PROBE_ARGS:
            values = _PROBE_ARGS[name]
        elif name in ("question",):
            values = _PROBE_QUESTIONS
        elif name in ("text", "reply", "answer"):
            values = _PROBE_REPLIES
        elif p.default is not inspect.Parameter.empty:
            continue
        else:
            raise TypeError(f"prompts_digest: no probe value for {fn.__name__}({name})")
        combos = [dict(c, **{name: v}) for c in combos for v in values]
    return combos


def prompts_digest(module: ModuleType = prompts) -> str:
    """sha256 of what the prompt module does: every public ``*_messages`` builder and ``parse_*``
    parser on the probe inputs, and every upper-case constant."""
    record: dict[str, Any] = {}
    for name in sorted(dir(module)):
        obj = getattr(module, name)
        if name.isupper() and isinstance(obj, (str, int, float, list, tuple)):
            record[name] = _plainify(obj)
        elif callable(obj) and getattr(obj, "__module__", None) == module.__name__ and (
                name.endswith("_messages") or name.startswith("parse_")):
            record[name] = [[_plainify(kw), _plainify(obj(**kw))] for kw in _calls(obj)]
    blob = json.dumps(record, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# -- what else decides the rows ------------------------------------------------------------
def corpus_sha256(corpus: Corpus) -> str:
    """The corpus's content hash (ids, titles and texts; ``Corpus.content_hash``)."""
    return corpus.content_hash()


def legacy_corpus_hash(corpus: Corpus) -> str:
    """The version-1 corpus hash: ids only, 16 hex digits."""
    h = hashlib.sha256()
    for d in corpus.documents:
        h.update(d.id.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def ids_from_content(corpus: Corpus) -> bool:
    """True when every id is derived from its document's title and text."""
    return all(d.id == doc_id_for(d.title, d.text) for d in corpus.documents)


def policy_digest(policy: Any) -> str:
    """A stable id of an in-memory policy (no file at hand): sha256 of its metadata, which
    holds the training-data hash, the forest parameters and the training date."""
    meta = json.dumps(policy.meta, sort_keys=True, default=str)
    return hashlib.sha256(meta.encode()).hexdigest()


def run_fingerprint(settings: RunSettings, env: Environment, *, policy: Any = None,
                    policy_sha256: str | None = None, data_sha256: str | None = None,
                    demos: Any = None, questions: Sequence[Question] = ()) -> dict:
    """Everything that decides a run's rows (:func:`check_run_folder` refuses another): the
    method, ``fixed_k``, ``seed``, ``stop_after``, the policy's and selector's sha256 and
    decision settings, IRCoT's ``demos`` by id (refused when one is among ``questions``)."""
    method = settings.method
    gen = env.generator
    retriever = env.retriever
    pol = None
    if policy is not None and method == "dynakrag":
        pol = {"sha256": policy_sha256 or policy_digest(policy),
               "lam": policy.lam, "veto_threshold": policy.veto_threshold}
        if policy.stop_after is not None:  # absent before schedules existed: equal to None
            pol["stop_after"] = policy.stop_after
    fingerprint = {
        "version": FINGERPRINT_VERSION,
        "method": method,
        # a test double may have no model id: None, as recorded by every earlier run
        "generator": {"spec": redact(str(getattr(gen, "spec", None))),
                      "model_id": redact(str(getattr(gen, "model_id", None)))}
        if gen is not None else None,
        "embedder": retriever.embedder_name,
        # None for the exact flat index; an approximate index changes what is retrieved
        "index": _index_fingerprint(retriever),
        "corpus_sha256": corpus_sha256(retriever.corpus),
        "policy": pol,
        "budgets": budget_record(env.config),
        "selector_sha256": env.compressor.selector.sha256 if env.compressor else None,
        "prompts_sha256": prompts_digest(),
        "data_sha256": data_sha256,
        "fixed_k": settings.fixed_k,
        "seed": settings.seed,
    }
    if method == "uniform" and settings.stop_after is not None:  # absent before: None
        fingerprint["stop_after"] = settings.stop_after
    if demos is not None and method == "ircot":
        # never an evaluated question; part of the setup a resumed run must share
        demos.check_disjoint(q.id for q in questions)
        fingerprint["demos"] = {"ids": sorted(demos.ids), "sha256": demos.digest()}
    return fingerprint


def budget_record(config: Any) -> dict:
    """The config's fields; a field added later is left out at its default, the value every
    folder recorded before it existed had, so those folders stay resumable."""
    out = asdict(config)
    for name, default in ADDED_BUDGETS.items():
        if out.get(name) == default:
            out.pop(name, None)
    return out


def _index_fingerprint(retriever: Any) -> dict | None:
    """An approximate index changes what is retrieved, so it enters the fingerprint (mmap does
    not); None for the exact flat index and for retrievers without index options."""
    factory = getattr(retriever, "index_factory", None)
    if factory is None:
        return None
    return {"factory": factory, "nprobe": retriever.nprobe, "ef_search": retriever.ef_search,
            "train_size": retriever.train_size, "train_seed": retriever.seed}


# -- comparing and upgrading -----------------------------------------------------------------
def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


def fingerprint_diff(old: dict, new: dict) -> list[str]:
    """Human-readable differences ``field: old -> new`` (nested fields dotted)."""
    a, b = _flatten(old), _flatten(new)
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def upgrade(old: dict, corpus: Corpus | None) -> dict:
    """A recorded fingerprint in today's terms (version 2 unchanged); what cannot be proven equal
    gets a value naming why, so the comparison fails and says so."""
    if old.get("version", 1) >= FINGERPRINT_VERSION:
        return old
    new = json.loads(json.dumps(old))
    new["version"] = FINGERPRINT_VERSION
    legacy = old.get("prompts_sha256")
    new["prompts_sha256"] = LEGACY_PROMPTS.get(legacy, f"prompts.py {legacy} (not known)")
    recorded = old.get("corpus_sha256")
    if corpus is not None and recorded == legacy_corpus_hash(corpus) and \
            ids_from_content(corpus):
        new["corpus_sha256"] = corpus_sha256(corpus)
    else:
        new["corpus_sha256"] = f"ids-only hash {recorded} (texts not recorded)"
    budgets = new.get("budgets") or {}
    path = budgets.pop("selector_path", None)
    if path is None:
        new["selector_sha256"] = None
    else:
        try:
            new["selector_sha256"] = sha256_file(path)
        except OSError:
            new["selector_sha256"] = f"{path} (file not found)"
    return new


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _recorded(out: Path) -> tuple[dict | None, str, list[tuple[str, dict]]]:
    """(the fingerprint recorded in ``out``, the file it was found in, the folder's run records
    as (where, record) from run.json and summary.json's ``"run"`` block)."""
    for name in (RUN_FILE, SUMMARY_FILE):
        path = out / name
        if not path.exists():
            continue
        try:
            data = _read_json(path)
            fp = data["fingerprint"]
            if not isinstance(fp, dict):
                raise TypeError("not an object")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FingerprintError(
                f"{path}: unreadable run fingerprint ({e}); refusing to resume into this "
                f"folder. Restore the file (e.g. `git checkout -- {path}`) or evaluate into "
                "another --out folder") from None
        records = [(str(path), data)] if name == RUN_FILE else []
        try:  # the summary only adds evidence: an unreadable one is no record
            run = _read_json(out / SUMMARY_FILE).get("run")
        except (OSError, ValueError, AttributeError):
            run = None
        if isinstance(run, dict):
            records.append((f'{out / SUMMARY_FILE} ("run")', run))
        return fp, name, records
    return None, "", []


def check_recorded_run(out: str | Path, fingerprint: dict, selection: dict | None = None,
                       corpus: Corpus | None = None) -> tuple[dict | None, dict | None, str]:
    """The checks of a resume into ``out``, reading only: :class:`FingerprintError` for another
    setup, another question list, or predictions with no fingerprint. Returns (the recorded
    fingerprint, it upgraded, the file it was found in); (None, None, "") for no run."""
    out = Path(out)
    old, source, records = _recorded(out)
    if old is None:
        if (out / PREDICTIONS_FILE).exists() and (out / PREDICTIONS_FILE).stat().st_size:
            raise FingerprintError(
                f"{out / PREDICTIONS_FILE} has rows but the folder records no fingerprint "
                f"(no {RUN_FILE}, no {SUMMARY_FILE}): their setup cannot be checked. Move "
                "them away or evaluate into another --out folder")
        return None, None, ""
    seen = upgrade(old, corpus)
    diff = fingerprint_diff(seen, fingerprint)
    if diff:
        raise FingerprintError(
            f"{out} holds a run with another setup (recorded in {source}); differing fields: "
            + "; ".join(diff) + ". Evaluate into another --out folder: resuming would mix "
            "results of two setups")
    # Which questions: compared apart from the fingerprint (see selection.py).
    allowed = recorded_selection(records) if selection is not None else []
    if allowed and selection not in [a for a, _ in allowed]:
        said = [f"{'; '.join(selection_diff(a, selection))} (in {where})" for a, where in allowed]
        raise FingerprintError(
            f"{out} holds the rows of another question list than this command selects: "
            + ", or ".join(said) + ". Resuming would mix rows of two question lists in one "
            "predictions file; run with the folder's split options (only --limit may change: "
            "a larger one extends the run) or evaluate into another --out folder")
    return old, seen, source


def llama_build(generator: Any) -> dict | None:
    """The llama.cpp build behind ``generator`` (through cache wrappers): {"llama_cpp":
    version, "cpu": the CPU features it was compiled with}; None for other backends."""
    inner = generator
    while hasattr(inner, "inner"):  # CachedGenerator and friends wrap the decoding one
        inner = inner.inner
    if not isinstance(inner, LlamaCppGenerator):
        return None
    import llama_cpp  # optional heavy dependency; already imported by this backend's use

    info = llama_cpp.llama_print_system_info()
    info = info.decode() if isinstance(info, bytes) else str(info)
    on = [k.split(":")[-1].strip() for k, _, v in
          (part.rpartition("=") for part in info.replace("\n", "|").split("|"))
          if k.strip() and v.strip() == "1"]
    return {"llama_cpp": llama_cpp.__version__, "cpu": on}


def build_change(out: str | Path, build: dict | None) -> dict | None:
    """The build run.json records when it differs from ``build`` (rows of this folder were
    then decoded by two builds), else None."""
    try:
        recorded = json.loads((Path(out) / RUN_FILE).read_text()).get("llama_build")
    except (OSError, ValueError):
        return None
    return recorded if recorded and build and recorded != build else None


def check_run_folder(out: str | Path, fingerprint: dict, command: str | None = None,
                     corpus: Corpus | None = None, selection: dict | None = None,
                     build: dict | None = None) -> dict:
    """Write ``out/run.json`` if the folder holds no run; else refuse a different fingerprint
    or question list (:func:`check_recorded_run`). An equal version-1 record is rewritten in
    version 2 (old one under ``"upgraded_from"``); a lost run.json is restored from summary.json."""
    out = Path(out)
    path = out / RUN_FILE
    old, seen, source = check_recorded_run(out, fingerprint, selection, corpus)
    record = {"fingerprint": fingerprint, "command": command}
    if selection is not None:
        record[SELECTION_FIELD] = selection
    if build is not None:
        record["llama_build"] = build
    record["created_at"] = _now()
    if old is None:
        atomic_write_json(path, record)
        return fingerprint
    if source != RUN_FILE or seen is not old:
        if seen is not old:
            record["upgraded_from"] = old
        if source != RUN_FILE:
            warnings.warn(f"{path} was missing; restored from {out / source}",
                          RuntimeWarning, stacklevel=2)
        atomic_write_json(path, record)
    return fingerprint


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
