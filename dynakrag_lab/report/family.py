"""The primary tests, read as ``results/primary_tests.toml`` names them: for each family, each
dataset and each test, run A against run B in per-question F1, paired over the questions both
answered, with Holm's adjustment over the family and one of four verdict words.

Per test (:func:`read_test`):

* the difference A - B, its paired bootstrap 95 % interval and the two-sided sign-flip
  permutation p (:func:`~.comparison.paired_difference`, the one bootstrap of the lab). When B
  names ``{seed}`` (uniform-valid), B's per-question F1 is the mean over the toml's seeds, on
  the questions answered under every seed; each seed's mean F1 and A minus that seed are
  reported beside it, with their min / max / SD across seeds;
* the minimal detectable effect: ``(z_{1-alpha/2} + z_power) * sd_diff / sqrt(n)``;
* TOST with the toml's ``equivalence_margin`` m, **t-based**: ``p_lower`` tests
  H0 diff <= -m, ``p_upper`` H0 diff >= m, both one-sided Student t on n - 1 degrees of
  freedom; ``p_tost`` is the larger. ``p_tost < alpha`` is the same event as the t-based
  90 % interval (``tost_lo``, ``tost_hi``) lying inside +-m. A t test rather than the bootstrap
  because its p and its interval are one computation, so the verdict cannot depend on which of
  the two is read;
* the paper's margin for the comparison, *excluded* when the one-sided 95 % upper bound
  (``tost_hi``) lies below it;
* tokens per question of A and of B (B: over its seeds), their ratio and the saving 1 - ratio;
* the llama.cpp builds every run of the test recorded (run.json ``llama_build``, summary.json
  ``run.llama_build`` and ``run.llama_build_first``) and whether they are one build.

A test whose runs are missing or not complete (summary.json ``run.complete`` not true, or fewer
answered questions than the dataset's n) is *pending*: it reports how many questions all its
runs answered so far and no number, so that nobody reads a test before its runs are done. The
family is then incomplete: the complete tests are Holm-adjusted over the family's full size
with each pending test counted as p = 1. Holm's adjusted p-values only fall when an input p
falls, so those are upper bounds of the final ones and a "better" / "worse" read early stands.

Verdicts (the toml's rules): "better" / "worse" when the Holm-adjusted p < alpha, by the sign of
the difference; else "equivalent within +-m" when ``p_tost < alpha``; else "inconclusive at this
n". Only reads the run folders; :func:`main` writes ``family.json``, ``family.md`` and
``stated-result.md`` (the text README and the preface print: :func:`stated_result`).
"""
from __future__ import annotations

import argparse
import json
import math
import tomllib
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from dynakrag_lite.experiments.folder import RUN_FILE, SUMMARY_FILE, ResultsError
from dynakrag_lite.storage import atomic_write_json, atomic_write_text

from .claims import LABELS, claim_sentences, fmt_diff, fmt_p, headline_claims
from .comparison import SEED, paired_difference, paired_rows
from .results import json_clean, locate, read_run
from .verdicts import (BETTER, INCONCLUSIVE, WORSE, Rules, four_words, holm, num as _num,
                       TOML, read_differences, rules, within_words)

__all__ = ["TOML", "OUT", "BETTER", "WORSE", "INCONCLUSIVE", "load_tests", "run_names",
           "read_test", "verdict_word", "verdict_text", "read_family", "read_families",
           "family_markdown", "verdict_sentences", "stated_result", "write_readme", "STATED_FILE",
           "main"]

OUT = "results/primary/family"
STATED_FILE = "stated-result.md"  # :func:`stated_result`, which README and the preface print
README = "README.md"
# README's stated result lies between these two lines; `--readme` rewrites what is between.
README_BEGIN = ("<!-- stated result: written by `python -m dynakrag_lab.report.family --readme`;"
                " edit there, not here -->")
README_END = "<!-- end of the stated result -->"
SEED_FIELD = "{seed}"


# -- the toml -------------------------------------------------------------------------------------
def _need(d: Mapping, key: str, where: str, path: Path):
    if key not in d:
        raise ValueError(f"{path}: field '{where}{key}' is missing")
    return d[key]


def load_tests(path: str | Path = TOML) -> dict:
    """The parsed toml, with every field this reader needs checked (a clear error names the
    file and the field)."""
    path = locate(path)
    cfg = tomllib.loads(Path(path).read_text())
    for key in ("equivalence_margin", "alpha", "power", "bootstrap_resamples", "metric",
                "generator", "seeds", "paper_margin", "family"):
        _need(cfg, key, "", path)
    for name, fam in cfg["family"].items():
        where = f"family.{name}."
        _need(fam, "root", where, path)
        _need(fam, "datasets", where, path)
        for i, test in enumerate(_need(fam, "test", where, path)):
            for key in ("name", "a", "b", "margin"):
                _need(test, key, f"{where}test[{i}].", path)
            margins = _need(cfg["paper_margin"], test["margin"], "paper_margin.", path)
            for ds in fam["datasets"]:
                _need(margins, ds, f"paper_margin.{test['margin']}.", path)
    return cfg


def run_names(run: str, seeds: Sequence[int]) -> list[str]:
    """The folders a run name stands for: one per seed when it holds ``{seed}``."""
    return [run.format(seed=s) for s in seeds] if SEED_FIELD in run else [run]


# -- one run folder -----------------------------------------------------------------------------
def _builds(folder: Path) -> list:
    """Every llama.cpp build a run folder records (None: none recorded)."""
    found = []
    for name, keys in ((RUN_FILE, ("llama_build",)),
                       (SUMMARY_FILE, ("llama_build", "llama_build_first"))):
        try:
            rec = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        rec = rec if name == RUN_FILE else (rec.get("run") or {})
        found += [rec[k] for k in keys if rec.get(k)]
    return _distinct(found) or [None]


def _distinct(items: Sequence) -> list:
    seen = {}
    for x in items:
        seen.setdefault(json.dumps(x, sort_keys=True), x)
    return list(seen.values())


def _read(root: str | Path, dataset: str, generator: str, run: str, n: int
          ) -> tuple[list[dict], bool, list, str | None]:
    """(answered rows, complete, builds, problem) of one run; a damaged predictions file is
    a problem, not an exception: the family report is read while runs are written."""
    try:
        rows, rec = read_run(dataset, generator, run, root)
    except ResultsError as e:
        return [], False, [None], str(e)
    complete = rec["complete"] is True and rec["answered"] >= n
    return rows, complete, _builds(locate(root) / dataset / generator / run), None


# -- one test -----------------------------------------------------------------------------------
def _spread(x: Sequence[float]) -> dict:
    a = np.asarray(x, dtype=float)
    return {"min": float(a.min()), "max": float(a.max()),
            "sd": float(a.std(ddof=1)) if len(a) > 1 else 0.0}


def read_test(cfg: Mapping, family: str, dataset: str, test: Mapping) -> dict:
    """One test on one dataset: its status and, once every run is complete, its numbers (all
    but the Holm p and the verdict, which need the whole family: :func:`read_family`)."""
    fam = cfg["family"][family]
    n_want = int(fam["datasets"][dataset])
    seeds = list(cfg["seeds"])
    gen, root, metric = cfg["generator"], fam["root"], cfg["metric"]
    b_runs = run_names(test["b"], seeds)
    margin_name = test["margin"]
    out = {"family": family, "dataset": dataset, "test": test["name"],
           "claim": test.get("claim", ""), "a": test["a"], "b": b_runs,
           "n_expected": n_want, "paper_margin": float(cfg["paper_margin"][margin_name][dataset])}
    rows_a, done_a, builds_a, prob_a = _read(root, dataset, gen, test["a"], n_want)
    read_b = [_read(root, dataset, gen, r, n_want) for r in b_runs]
    builds_b = _distinct([b for _, _, bs, _ in read_b for b in bs])
    out["builds_a"], out["builds_b"] = builds_a, builds_b
    out["one_build"] = None not in builds_a + builds_b and len(_distinct(builds_a + builds_b)) == 1
    out["problems"] = [p for p in [prob_a, *(r[3] for r in read_b)] if p]
    # Each B run paired with A by question id (error rows left out); a question counts when
    # A and every B run answered it.
    maps = [{str(a["id"]): b for a, b in paired_rows(rows_a, rows)} for rows, *_ in read_b]
    pairs = [(a, [m[str(a["id"])] for m in maps]) for a in rows_a
             if all(str(a["id"]) in m for m in maps)]
    out["n"] = len(pairs)
    complete = done_a and all(done for _, done, *_ in read_b) and len(pairs) > 0
    out["complete"] = complete
    if not complete:
        out["status"] = f"pending ({len(pairs)} of {n_want})"
        return out
    out["status"] = "complete"
    a = np.array([float(r[metric]) for r, _ in pairs])
    b_seed = np.array([[float(r[metric]) for r in bs] for _, bs in pairs])  # questions x seeds
    b = b_seed.mean(axis=1)
    pd_ = paired_difference(a, b, metric, int(cfg["bootstrap_resamples"]), SEED)
    d = a - b
    sd = float(d.std(ddof=1)) if len(d) > 1 else math.nan
    rd = read_differences(d, math.nan, rules(data=cfg))  # its Holm p: read_family's
    tok_a = float(np.mean([float(r["tokens"]) for r, _ in pairs]))
    tok_b = float(np.mean([[float(x["tokens"]) for x in bs] for _, bs in pairs]))
    seed_f1 = b_seed.mean(axis=0).tolist()
    seed_diff = (a[:, None] - b_seed).mean(axis=0).tolist()
    out.update(ci=fmt_diff(pd_), mean_a=pd_.mean_a, mean_b=pd_.mean_b, diff=pd_.diff,
               lo=pd_.lo, hi=pd_.hi, p=pd_.p_value, wins=pd_.wins, losses=pd_.losses, sd_diff=sd,
               mde=rd.mde, margin=rd.rules.margin, p_tost=rd.p_tost, equivalent=rd.equivalent,
               tost_lo=rd.tost_lo, tost_hi=rd.tost_hi,
               paper_margin_excluded=rd.excludes(out["paper_margin"]),
               tokens_a=tok_a, tokens_b=tok_b, token_ratio=tok_a / tok_b if tok_b else math.nan,
               token_saving=1 - tok_a / tok_b if tok_b else math.nan)
    if len(b_runs) > 1:
        out["seeds"] = {"seeds": seeds, "f1_b": seed_f1, "diff": seed_diff,
                        "f1_b_spread": _spread(seed_f1), "diff_spread": _spread(seed_diff)}
    return out


def verdict_word(t: Mapping, alpha: float) -> str:
    """The toml's four words (:func:`.verdicts.four_words`) for a complete test with its Holm
    p; pending tests keep their status."""
    if not t["complete"]:
        return t["status"]
    return four_words(t["diff"], t["p_holm"], t["p_tost"], Rules(alpha, t["margin"], math.nan))


def verdict_text(t: Mapping) -> str:
    """The verdict word, and for a win or a loss that still lies inside the equivalence
    margin, that too ("worse, within ±.03"): told apart from 0, yet too small to matter."""
    if t["verdict"] in (BETTER, WORSE) and t["equivalent"]:
        return f"{t['verdict']}, {within_words(t['margin'])}"
    return t["verdict"]


# -- a family -----------------------------------------------------------------------------------
def read_family(cfg: Mapping, family: str) -> dict:
    """Every dataset x test of one family, Holm-adjusted together (pending tests as p = 1: see
    the module docstring), each with its verdict."""
    fam = cfg["family"][family]
    tests = [read_test(cfg, family, ds, t) for ds in fam["datasets"] for t in fam["test"]]
    adjusted = holm([t["p"] if t["complete"] else 1.0 for t in tests])
    alpha = float(cfg["alpha"])
    for t, p in zip(tests, adjusted):
        if t["complete"]:
            t["p_holm"] = p
        t["verdict"] = verdict_word(t, alpha)
    pending = sum(not t["complete"] for t in tests)
    return {"family": family, "root": str(fam["root"]), "size": len(tests),
            "pending": pending, "complete": pending == 0, "tests": tests}


def read_families(path: str | Path = TOML) -> dict:
    """The whole report of the toml at ``path``: one :func:`read_family` per family."""
    cfg = load_tests(path)
    fams = [read_family(cfg, name) for name in cfg["family"]]
    return {"toml": str(path), "generator": cfg["generator"], "metric": cfg["metric"],
            "alpha": cfg["alpha"], "power": cfg["power"],
            "equivalence_margin": cfg["equivalence_margin"], "seeds": cfg["seeds"],
            "complete": all(f["complete"] for f in fams), "families": fams}


# -- reading it out -------------------------------------------------------------------------------
def _label(t: Mapping) -> str:
    name = LABELS.get(t["dataset"], t["dataset"])
    return name if t["family"] == "eval" else f"{name} ({t['family']} set)"


def _family_note(f: Mapping) -> str:
    if f["complete"]:
        return f"complete: {f['size']} tests, Holm-adjusted together."
    return (f"**incomplete**: {f['pending']} of {f['size']} tests pending; the others' Holm p "
            "counts each pending test as p = 1 (an upper bound of the final p).")


def family_markdown(report: Mapping) -> str:
    """One table per family (dataset, test, n, difference [95 % interval], Holm p, MDE,
    paper margin excluded?, verdict), then the spread across B's seeds and any test whose
    runs were decoded by more than one llama.cpp build."""
    power = f"{float(report['power']) * 100:.0f} %"
    lines = [f"# Primary tests ({report['toml']})", "",
             f"{report['metric'].upper()} of A minus B, paired per question; reader "
             f"{report['generator']}; verdicts at alpha {report['alpha']}, equivalence margin "
             f"±{_num(report['equivalence_margin'], 'g')}; MDE at {power} power."]
    for f in report["families"]:
        lines += ["", f"## Family `{f['family']}` ({f['root']})", "", _family_note(f), "",
                  "| dataset | test | n | A − B [95 % CI] | Holm p | MDE | paper margin "
                  "excluded? | verdict |", "|---|---|---|---|---|---|---|---|"]
        for t in f["tests"]:
            ds = LABELS.get(t["dataset"], t["dataset"])
            if not t["complete"]:
                lines.append(f"| {ds} | {t['test']} | {t['n']} | | | | | {t['verdict']} |")
                continue
            excl = "yes" if t["paper_margin_excluded"] else "no"
            lines.append(f"| {ds} | {t['test']} | {t['n']} | {t['ci']} | {fmt_p(t['p_holm'])} "
                         f"| {_num(t['mde'])} | {excl} ({_num(t['paper_margin'])}) "
                         f"| {verdict_text(t)} |")
        seeded = [t for t in f["tests"] if t["complete"] and "seeds" in t]
        if seeded:
            lines += ["", "Across B's seeds:", "",
                      "| dataset | test | B F1 per seed | A − B per seed: min / max / SD |",
                      "|---|---|---|---|"]
            for t in seeded:
                s, sp = t["seeds"], t["seeds"]["diff_spread"]
                per = ", ".join(f"{k}: {_num(v)}" for k, v in zip(s["seeds"], s["f1_b"]))
                lines.append(f"| {LABELS.get(t['dataset'], t['dataset'])} | {t['test']} | "
                             f"{per} | {_num(sp['min'])} / {_num(sp['max'])} / "
                             f"{_num(sp['sd'])} |")
        mixed = [t for t in f["tests"] if t["complete"] and not t["one_build"]]
        if mixed:
            lines += ["", "Runs not decoded by one recorded llama.cpp build: " + "; ".join(
                f"{LABELS.get(t['dataset'], t['dataset'])} {t['test']}" for t in mixed) + "."]
    return "\n".join(lines) + "\n"


def verdict_sentences(report: Mapping) -> list[str]:
    """One sentence per test, for README and the preface, e.g. "2Wiki, learned choice at
    equal horizon: inconclusive at this n (+.041 [-.011, +.092], Holm p .41; detectable at
    80 % power: .070)"."""
    out = []
    power = f"{float(report['power']) * 100:.0f} %"
    for f in report["families"]:
        for t in f["tests"]:
            head = f"{_label(t)}, {t['test']}: {verdict_text(t)}"
            if t["complete"]:
                head += (f" ({t['ci']}, Holm p {fmt_p(t['p_holm'])}; detectable at {power} "
                         f"power: {_num(t['mde'])})")
            out.append(head)
    return out


def stated_result(report: Mapping, exploratory: Sequence[str]) -> str:
    """The result as README and the preface state it (markdown): each complete primary test's
    verdict sentence, the pending tests in one line, then the exploratory readings
    (:func:`.claims.claim_sentences`), called so. One text for both places, so the two cannot
    drift apart, and a pending family reads as pending everywhere."""
    tests = [t for f in report["families"] for t in f["tests"]]
    done = [s for t, s in zip(tests, verdict_sentences(report)) if t["complete"]]
    pending: dict[str, list[Mapping]] = {}
    for t in tests:
        if not t["complete"]:
            pending.setdefault(_label(t), []).append(t)
    # A Holm p is an upper bound only while its own family has pending tests (p = 1 for them).
    bounded = [not f["complete"] for f in report["families"] for t in f["tests"] if t["complete"]]
    if report["complete"]:
        state = "all complete"
    elif not done:
        state = f"none of {len(tests)} complete yet"
    else:
        state = f"{len(done)} of {len(tests)} complete" + (
            ", so each Holm p is an upper bound" if all(bounded) else
            "; a Holm p is an upper bound while its family has tests pending" if any(bounded)
            else "")
    toml = TOML if str(report["toml"]).endswith(TOML) else Path(report["toml"]).name
    lines = [f"**Primary tests** (named in `{toml}` before their runs; "
             f"Holm over each family; {state}):"]
    lines += ([""] + [f"- {s}." for s in done]) if done else []
    if pending:
        groups = [f"{label}, {len(ts)} test{'s' if len(ts) > 1 else ''} "
                  f"({min(t['n'] for t in ts)} of {ts[0]['n_expected']})"
                  for label, ts in pending.items()]
        lines += ["", "Pending until their runs finish (questions every run of a test has "
                  "answered so far): " + "; ".join(groups) + "."]
    if exploratory:
        lines += ["", "**Exploratory readings** (runs read before any test was named, with one "
                  "draw of the random chooser and runs decoded by two llama.cpp builds):", ""]
        lines += [f"{i}. {s}" for i, s in enumerate(exploratory, 1)]
    return "\n".join(lines) + "\n"


def write_readme(text: str, path: str | Path = README) -> None:
    """Put ``text`` between README's two stated-result lines, leaving the rest byte for byte
    (its line ends too: read undecoded, the block written with the file's own)."""
    path = Path(path)
    old = path.read_bytes().decode("utf-8")
    begin = old.find(README_BEGIN)
    end = old.find(README_END, begin + len(README_BEGIN)) if begin >= 0 else -1
    if end < 0:
        raise ResultsError(f"{path}: needs the line {README_BEGIN!r} and, after it, "
                           f"{README_END!r}; the stated result goes between them")
    nl = "\r\n" if "\r\n" in old else "\n"
    body = ("\n" + text.rstrip("\n") + "\n").replace("\n", nl)
    atomic_write_text(path, old[:begin + len(README_BEGIN)] + body + old[end:])


def main(argv: Sequence[str] | None = None) -> dict:
    """Read the toml's tests and write ``family.json``, ``family.md`` and the stated result
    (``stated-result.md``, with the exploratory readings) into ``--out``; with ``--readme``,
    also into README's marked block."""
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.report.family",
                                 description="Read the primary tests named in the toml.")
    ap.add_argument("--toml", default=TOML)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--readme", action="store_true",
                    help=f"also rewrite the stated result in {README} (between its markers)")
    args = ap.parse_args(argv)
    report = read_families(args.toml)
    out = locate(args.out)  # the project's folder when run from elsewhere
    atomic_write_json(out / "family.json", json_clean(report))
    atomic_write_text(out / "family.md", family_markdown(report))
    # the exploratory readings are this project's runs (results/experiments) read by its own
    # toml's rules; another toml states its own tests only
    own = locate(args.toml).resolve() == locate(TOML).resolve()
    stated = stated_result(report, claim_sentences(headline_claims()) if own else [])
    atomic_write_text(out / STATED_FILE, stated)
    state = "complete" if report["complete"] else "incomplete"
    print(f"{out / 'family.json'}, {out / 'family.md'}, {out / STATED_FILE}: {state}")
    if args.readme:
        write_readme(stated, locate(README))
        print(f"{README}: stated result rewritten")
    return report


if __name__ == "__main__":
    main()
