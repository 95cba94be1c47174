"""The counts and settings a chapter states agree with the committed records (issue 25).

Every committed chapter is read as JSON (nothing executed): its prose, its printed outputs and
its glued values are scanned for statements of

* a number of evaluated questions or the evaluation split (one run's n summed over the datasets
  it ran on counts too: a pooled n): ``--n-eval 150``, ``n_eval = 150``,
  ``split is 150``, ``150 held-out questions``, ``(150 questions)``, ``n = 150``;
* a training size: ``300 training questions``, ``trained on 300``;
* the veto threshold: ``tau = 0.05``, ``τ = 0.05``, ``veto threshold 0.05``;
* the token price: ``lambda = 0``, ``λ = 0``.

A stated value must be one the committed records of its context hold (:func:`facts`,
:func:`allowed`; the context is the datasets and readers the sentence names, else the
chapter's own parameters): the run summaries
under ``results/`` (answered n, requested n, the ``--n-eval`` and ``--limit`` of the recorded
command, the policy's training size and the lambda and tau of its fingerprint), the number of
questions any two runs of one dataset share (a paired n), the committed policies' metadata
(training questions, continuation questions, lambda, tau), the stop-rule and control-diagnosis
reports (a tau or lambda from those only where the sentence says which rule chose it). A
chapter's own settings count too: the literals of its parameters cell, such as a live slice's
``n_questions = 4`` (never for the evaluation split, which is the record's).

So a typed "the experiments' split is 100" beside runs of 150, "trained on 30 questions"
beside a policy of 300, or a tau the committed policy does not have, fails here.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import pytest

from dynakrag_lab.report.records import DEFAULT_N_EVAL, command_options

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))
RECORD = "application/papermill.record/"

NUM = r"(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:e-?\d+)?)"
PATTERNS = {
    "split": [rf"--n-eval\s+{NUM}", rf"\bn_eval\s*=\s*{NUM}", rf"\bsplit (?:is|of) {NUM}\b"],
    "n": [rf"\b{NUM} held-out questions", rf"\({NUM} questions\)", rf"\bn\s*=\s*{NUM}\b"],
    "train": [rf"\b{NUM} training questions", rf"\btrained on {NUM}\b",
              rf"\b{NUM} questions for the committed"],
    "tau": [rf"(?:\btau|τ)\s*=\s*{NUM}", rf"veto threshold (?:tau\s*=\s*|τ\s*=\s*)?{NUM}"],
    "lam": [rf"(?:\blambda|λ)\s*=\s*{NUM}"],
}
RULE_CHOSE = re.compile(r"rule chose", re.I)
# a sentence that attributes its numbers to the paper states no record of ours
ATTRIBUTED = re.compile(r"\bpaper\b|\bWu et al\b|\{cite(?::[\w-]+)?\}", re.I)


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _variant(name: str) -> str:
    """The policy variant of a run or policy name: "gain", "continuation" or "" (the main)."""
    return ("continuation" if "-cont" in name else "gain" if "-gain" in name else "")


@lru_cache(maxsize=None)
def facts() -> list[dict]:
    """One fact per committed record: ``kind`` (n, train, tau, lam, tau_rule, lam_rule),
    ``value``, and where it holds: ``dataset``, ``reader`` (None: any) and ``variant``."""
    out = []

    def add(kind, value, dataset=None, reader=None, variant="", part="eval"):
        if value is not None and str(value).replace(".", "", 1).lstrip("-").isdigit():
            out.append({"kind": kind, "value": float(value), "dataset": dataset,
                        "reader": reader, "variant": variant, "part": part})

    ids: dict[str, list[set[str]]] = {}
    pooled: dict[tuple[str, str, str], dict[str, float]] = {}  # (reader, run, part) -> n per dataset
    for summary in sorted(RESULTS.glob("**/summary.json")):
        dataset, folder, run = summary.parts[-4:-1]
        reader = folder.split("-policy-")[0]
        # runs on the training split (diagnostics) may predate the committed policies
        variant, part = _variant(run), "train" if "train-split" in summary.parts else "eval"
        s = json.loads(summary.read_text(encoding="utf-8"))
        info = s.get("run") or {}
        opts = command_options(info.get("command"))
        for v in (s.get("n"), info.get("n_expected"), opts.get("--n-eval"), opts.get("--limit")):
            add("n", v, dataset, reader, part=part)
        if s.get("n") is not None:
            pooled.setdefault((reader, run, part), {})[dataset] = s["n"]
        add("split", opts.get("--n-eval", DEFAULT_N_EVAL), dataset, reader, part=part)
        add("train", (s.get("policy") or {}).get("n_train"), dataset, reader, variant, part)
        fp = (s.get("fingerprint") or {}).get("policy") or {}
        add("tau", fp.get("veto_threshold"), dataset, reader, variant, part)
        add("lam", fp.get("lam"), dataset, reader, variant, part)
        preds = summary.parent / "predictions.jsonl"
        if preds.exists():
            rows = [json.loads(line) for line in preds.read_text(encoding="utf-8").splitlines()
                    if line.strip()]
            ids.setdefault(f"{dataset}/{part}", []).append({str(r["id"]) for r in rows if not r.get("error")})
    for (reader, _, part), per_dataset in pooled.items():  # a pooled n: one run over datasets
        if len(per_dataset) > 1:
            add("n", sum(per_dataset.values()), None, reader, part=part)
    for key, runs in ids.items():  # a paired n: the questions two runs of a dataset share
        dataset, part = key.split("/")
        for n in {len(a & b) for a, b in combinations(runs, 2)}:
            add("n", n, dataset, part=part)
    from dynakrag_lite.compression import load_selector  # heavy: sklearn models
    from dynakrag_lite.data.sources import load_dataset
    from dynakrag_lite.policy import Policy
    for path in sorted((RESULTS / "policies").glob("*.joblib")):
        p = Policy.load(path)
        dataset, reader, variant = p.meta.get("dataset"), p.meta.get("generator"), \
            _variant(path.stem.replace("-gain_stop", "-gain").replace("-continuation", "-cont"))
        for v in (p.meta.get("n_questions"), p.meta.get("n_continuation_questions"),
                  (p.meta.get("sufficiency") or {}).get("n_questions")):
            add("train", v, dataset, reader, variant)
        add("tau", p.veto_threshold, dataset, reader, variant)
        add("lam", p.lam, dataset, reader, variant)
    for path in sorted((RESULTS / "diagnostics").glob("*-stop-rule.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        dataset, _, reader = Path(r["trajectories"]).stem.partition("-")
        add("train", r["questions"], dataset, reader)
        for rule in r["rules"].values():
            add("tau_rule", rule["veto_threshold"], dataset, reader)
            add("lam_rule", rule["lam"], dataset, reader)
    diag = RESULTS / "diagnostics" / "control-diagnosis.json"
    if diag.exists():
        for key, r in json.loads(diag.read_text(encoding="utf-8"))["results"].items():
            dataset, _, reader = key.partition("/")
            add("train", r["n_questions"], dataset, reader)
    for path in sorted((RESULTS / "diagnostics" / "answer-stage").glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))  # python -m dynakrag_lab.studies.answer_stage
        add("train", r["choose_on"]["n"], r["dataset"], r["reader"])
        add("n", r["choose_on"]["n"], r["dataset"], r["reader"], part="train")
        for chk in r["checks"]:
            add("n", chk["n"], r["dataset"], r["reader"])
    for path in sorted((RESULTS / "selectors").glob("*.joblib")):
        meta = load_selector(path).meta
        add("train", meta["n_questions"], meta["dataset"])
        add("split", meta["n_eval"], meta["dataset"])
    # a policy trained live on the embedded library has the defaults of Policy
    defaults = {f.name: f.default for f in dataclasses.fields(Policy)}
    add("tau", defaults["veto_threshold"], "library")
    add("lam", defaults["lam"], "library")
    # the embedded library's split, which the early chapters read (the CLI's default n_eval)
    lib = len(load_dataset("library"))
    add("split", min(DEFAULT_N_EVAL, lib // 2), "library")
    add("n", min(DEFAULT_N_EVAL, lib // 2), "library")
    add("train", lib - min(DEFAULT_N_EVAL, lib // 2), "library")
    return out


DATASET_NAMES = {"hotpotqa": "hotpotqa", "2wikimultihopqa": "2wikimultihopqa",
                 "2wiki": "2wikimultihopqa", "musique": "musique", "library": "library"}
DATASET_WORDS = re.compile(r"hotpotqa|2wikimultihopqa|2wiki|musique|library", re.I)
READER_WORDS = re.compile(r"(?:[\w.]+-)*\d+(?:\.\d+)?b\b", re.I)  # qwen2.5-coder-0.5b, 1.5B


def context(nb: dict) -> tuple[set[str], set[str]]:
    """The chapter's own dataset and readers, from its parameters cell (its ``dataset``
    parameter and the generator names it sets); empty: any."""
    for c in nb["cells"]:
        if c["cell_type"] == "code" and "parameters" in c.get("metadata", {}).get("tags", []):
            src = "".join(c["source"])
            m = re.search(r'^dataset\s*(?::\s*\w+)?\s*=\s*"([^"]+)"', src, re.M)
            datasets = {DATASET_NAMES.get(m.group(1).lower(), m.group(1))} if m else set()
            readers = {r.lower() for r in re.findall(r'"([^"]*\d+(?:\.\d+)?b)"', src, re.I)}
            return datasets, readers
    return set(), set()


def allowed(kind: str, datasets: set[str], readers: set[str], variants: set[str]
            ) -> set[float]:
    """The recorded values of ``kind`` for the datasets, readers and policy variants named
    (an empty set: any); runs on the training split count only where ``variants`` holds
    "train-split" (a sentence about them)."""
    parts = {"eval"} | ({"train"} if "train-split" in variants else set())

    def fits(f):
        return ((not datasets or f["dataset"] is None or f["dataset"] in datasets)
                and (not readers or f["reader"] is None
                     or any(f["reader"].endswith(r) for r in readers))
                and f["part"] in parts
                and (kind in ("n", "split") or f["variant"] in variants))
    return {f["value"] for f in facts() if f["kind"] == kind and fits(f)}


def code_literals(nb: dict, every_cell: bool = False) -> set[float]:
    """The numeric literals of the chapter's parameters cell (its own settings, such as a
    live slice's size), or of every code cell."""
    found: set[float] = set()
    for c in nb["cells"]:
        if c["cell_type"] != "code" or not every_cell and \
                "parameters" not in c.get("metadata", {}).get("tags", []):
            continue
        src = "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line)
                        for line in "".join(c["source"]).splitlines())
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                    and not isinstance(node.value, bool):
                found.add(float(node.value))
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                    and isinstance(node.operand, ast.Constant) \
                    and isinstance(node.operand.value, (int, float)):
                found.add(-float(node.operand.value))
    return found


# a definition in math or a setting in code is not a claim about a record
MATH_OR_CODE = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$|`[^`\n]+`", re.S)


def texts(nb: dict) -> list[tuple[str, str]]:
    """(where, text) of the prose, the printed outputs and the glued values."""
    out = []
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "markdown":
            text = "".join(c["source"])
            if "{admonition} Exercise" not in text:  # an exercise proposes settings
                out.append((f"markdown cell {i}", MATH_OR_CODE.sub(" ", text)))
            continue
        for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
            data = o.get("data") or {}
            name = (o.get("metadata") or {}).get("scrapbook", {}).get("name")
            keys = ((RECORD + "text/markdown", RECORD + "text/plain") if name else
                    ("text/markdown", "text/plain"))
            key = next((k for k in keys if k in data), None)
            if key:
                out.append((f"cell {i}" + (f" glue {name}" if name else ""),
                            "".join(data[key])))
            if o.get("output_type") == "stream":
                out.append((f"cell {i} output", "".join(o.get("text", ""))))
    return out


def _matches(value: float, allowed: set[float]) -> bool:
    return any(math.isclose(value, a, rel_tol=1e-9, abs_tol=5e-4) for a in allowed)


def stated_mismatches(nb: dict, values=allowed) -> list[str]:
    """Every stated value no record of its context holds. A sentence's context is the
    datasets and readers it names, else the chapter's own (:func:`context`); its variant is
    the continuation or gain policy when it names one, else the main policy. A chapter's code
    literals count for the embedded library only (its live slices' settings)."""
    own = code_literals(nb)
    code = code_literals(nb, every_cell=True)  # the embedded library's live settings
    base_datasets, base_readers = context(nb)
    problems = []
    for where, text in texts(nb):
        for sentence in re.split(r"\n|(?<=\.)\s+", text):
            if ATTRIBUTED.search(sentence):
                continue
            datasets = {DATASET_NAMES[w.lower()] for w in DATASET_WORDS.findall(sentence)} \
                or base_datasets
            readers = {w.lower().split("-")[-1] for w in READER_WORDS.findall(sentence)} \
                or {r.split("-")[-1] for r in base_readers}
            variants = {""} | ({"continuation"} if re.search(r"continuation|-cont", sentence)
                               else set()) | ({"gain"} if re.search(r"\bgain\b|-gain", sentence)
                                              else set()) \
                | ({"train-split"} if re.search(r"train(?:ing)?[ -]split", sentence) else set())
            for kind, pats in PATTERNS.items():
                ok = values(kind, datasets, readers, variants)
                if kind in ("tau", "lam") and RULE_CHOSE.search(sentence):
                    ok = ok | values(f"{kind}_rule", datasets, readers, variants)
                if kind != "split":  # a split size is the record's, never a typed setting
                    ok = ok | own | (code if datasets <= {"library"} else set())
                for pat in pats:
                    for m in re.finditer(pat, sentence):
                        if not _matches(_num(m.group(1)), ok):
                            problems.append(f"{where}: {kind} {m.group(1)} in: "
                                            f"{' '.join(sentence.split())[:160]}")
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_states_only_recorded_counts_and_settings(path):
    problems = stated_mismatches(json.loads(path.read_text(encoding="utf-8")))
    assert not problems, (f"{path.name}: {len(problems)} stated value(s) no committed record "
                          "holds (read them from the record and glue them):\n"
                          + "\n".join(problems[:20]))


# -- the checker on synthetic notebooks ---------------------------------------------------------
def _nb(markdown: str = "", stream: str = "", code: str = "x = 1") -> dict:
    return {"cells": [{"cell_type": "markdown", "source": markdown, "metadata": {}},
                      {"cell_type": "code", "source": code, "metadata": {"tags": ["parameters"]},
                       "outputs": [{"output_type": "stream", "name": "stdout",
                                    "text": stream}]}]}


REC = {"split": {150.0}, "n": {150.0, 100.0}, "train": {300.0}, "tau": {0.05}, "lam": {0.0},
       "tau_rule": {0.02}, "lam_rule": {0.005}}


def rec(kind, datasets, readers, variants):
    return REC[kind]


def test_stale_statements_are_caught():
    nb = _nb("The policy was trained on 30 questions. It has 30 training questions.",
             "the experiments' split is 100 and 0\npolicy: lambda = 0.0, veto threshold "
             "tau = 0.02, stop rule 'level'\n--n-eval 120 (77 questions)\n")
    found = "\n".join(stated_mismatches(nb, rec))
    for what in ("train 30", "tau 0.02", "split 100", "split 120", "n 77"):
        assert what in found, what
    assert "n 100" not in found and "lam 0.0" not in found


def test_recorded_values_code_literals_and_rule_choices_pass():
    nb = _nb("A policy trained on 300 training questions, n = 150, τ = 0.05 and λ = 0. "
             "The gain rule chose λ = 0.005, τ = 0.02. A live policy trained on 4.",
             "(150 questions)\n", code="n_train = 4\nreplace(policy, veto_threshold=1.0)")
    assert stated_mismatches(nb, rec) == []
    assert stated_mismatches(_nb("", "tau = 1.0", code="x = 2"), rec)  # not that chapter's
    assert stated_mismatches(_nb("The paper trains on 1,000 training questions."), rec) == []


def test_committed_records_decide_in_the_chapter_s_context():
    from dynakrag_lab.report.records import run_record
    r = run_record("hotpotqa", "qwen2.5-coder-0.5b", "dynakrag", RESULTS / "experiments")
    params = 'dataset: str = "hotpotqa"\ngenerator: str = "qwen2.5-coder-0.5b"'
    right = _nb(f"The committed HotpotQA policy has {r['n_train']} training questions.",
                f"the run's split is {r['n_eval']}; policy: lambda = {r['lam']:g}, veto "
                f"threshold tau = {r['tau']:g}\ndynakrag ({r['n']} questions)\n", code=params)
    assert stated_mismatches(right) == []
    wrong = _nb("The committed HotpotQA policy: 31 questions for the committed policy.",
                "the experiments' split is 7\nlambda = 0.5, veto threshold tau = 0.123\n"
                "dynakrag (77 questions)\n", code=params)
    found = "\n".join(stated_mismatches(wrong))
    for what in ("train 31", "split 7", "lam 0.5", "tau 0.123", "n 77"):
        assert what in found, what
