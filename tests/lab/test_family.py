"""The primary tests' reader (dynakrag_lab.report.family) on synthetic run folders: Holm over a
family, the four verdicts, seed averaging, pending runs, llama.cpp build mismatches and the
minimal detectable effect, each against numbers computed by hand."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from dynakrag_lab.report import family

GEN = "qwen2.5-coder-1.5b"
BUILD = {"llama_cpp": "0.3.36", "cpu": ["AVX2"]}
OTHER_BUILD = {"llama_cpp": "0.3.36", "cpu": ["AVX2", "AVX512"]}


def result_row(qid: str, f1: float, tokens: int = 500) -> dict:
    """A predictions.jsonl row with the keys of a committed run's rows."""
    return {"id": qid, "question": f"question {qid}?", "type": "bridge", "method": "dynakrag",
            "prediction": "an answer", "answers": ["an answer"], "em": float(f1 == 1.0),
            "f1": f1, "support_recall": 1.0, "all_support": 1.0, "n_gold": 2, "docs": [],
            "n_docs": 6, "tokens": tokens, "prompt_tokens": tokens - 20,
            "completion_tokens": 20, "llm_calls": 2, "retrieval_calls": 2, "seconds": 0.3,
            "snippets": [], "stop_reason": "policy", "trace": [], "diagnostics": {}}


def error_row(qid: str) -> dict:
    return {"id": qid, "question": f"question {qid}?", "type": "bridge", "method": "dynakrag",
            "answers": ["an answer"], "error": {"type": "RuntimeError", "message": "boom"},
            "seconds": 0.1}


def write_run(root: Path, dataset: str, run: str, f1: dict[str, float], *,
              complete: bool = True, n_expected: int | None = None, build: dict | None = BUILD,
              tokens: int = 500, errors: tuple[str, ...] = ()) -> Path:
    """A run folder as evaluate() leaves it: predictions.jsonl, summary.json, run.json."""
    folder = root / dataset / GEN / run
    folder.mkdir(parents=True)
    rows = [result_row(q, v, tokens) for q, v in f1.items()] + [error_row(q) for q in errors]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    built = {"llama_build": build} if build else {}
    (folder / "summary.json").write_text(json.dumps({
        "method": "dynakrag", "dataset": dataset, "generator": GEN, "n": len(f1),
        "f1": sum(f1.values()) / max(1, len(f1)), "errors": len(errors),
        "run": {"command": "synthetic", **built, "complete": complete,
                "n_expected": len(f1) if n_expected is None else n_expected}}))
    (folder / "run.json").write_text(json.dumps({"fingerprint": {}, "command": "synthetic",
                                                 **built, "created_at": "2026-12-06"}))
    return folder


def write_toml(path: Path, root: Path, datasets: dict[str, int],
               tests: list[tuple[str, str, str]], resamples: int = 2000) -> Path:
    """A toml shaped like results/primary_tests.toml: one family "eval" of ``tests``
    (name, a, b), margin "uniform" for each."""
    ds = ", ".join(f"{d} = {n}" for d, n in datasets.items())
    margins = "\n".join(f"{d} = 0.05" for d in datasets)
    body = "".join(f'\n[[family.eval.test]]\nname = "{name}"\na = "{a}"\nb = "{b}"\n'
                   f'margin = "uniform"\n' for name, a, b in tests)
    path.write_text(f"""equivalence_margin = 0.03
alpha = 0.05
power = 0.80
bootstrap_resamples = {resamples}
metric = "f1"
generator = "{GEN}"
seeds = [13, 14, 15]

[paper_margin.uniform]
{margins}

[family.eval]
root = "{root.as_posix()}"
datasets = {{ {ds} }}
{body}""")
    return path


def ids(n: int) -> list[str]:
    return [f"q{i:03d}" for i in range(n)]


def only_test(report: dict) -> dict:
    (fam,) = report["families"]
    (t,) = fam["tests"]
    return t


# -- Holm over a family ---------------------------------------------------------------------
def fake_test(p: float | None, diff: float = 0.1) -> dict:
    if p is None:
        return {"complete": False, "status": "pending (3 of 20)"}
    return {"complete": True, "status": "complete", "p": p, "diff": diff, "p_tost": 1.0,
            "equivalent": False, "margin": 0.03}


def test_holm_adjusts_over_every_dataset_and_test_of_the_family(monkeypatch, tmp_path):
    cfg = family.load_tests(write_toml(tmp_path / "t.toml", tmp_path, {"hotpotqa": 20,
                                                                        "musique": 20},
                                       [("one", "a1", "b1"), ("two", "a2", "b2")]))
    ps = iter([0.01, 0.04, 0.03, 0.005])  # hotpotqa one, two; musique one, two
    monkeypatch.setattr(family, "read_test", lambda *a: fake_test(next(ps)))
    fam = family.read_family(cfg, "eval")
    # sorted: .005 x4 = .02, .01 x3 = .03, .03 x2 = .06, .04 x1 = .04 -> .06 (step-down max)
    assert [t["p_holm"] for t in fam["tests"]] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [t["verdict"] for t in fam["tests"]] == ["better", family.INCONCLUSIVE,
                                                    family.INCONCLUSIVE, "better"]
    assert fam["complete"] and fam["size"] == 4


def test_a_pending_test_counts_as_p_one_in_holm_and_marks_the_family_incomplete(
        monkeypatch, tmp_path):
    cfg = family.load_tests(write_toml(tmp_path / "t.toml", tmp_path, {"hotpotqa": 20,
                                                                        "musique": 20},
                                       [("one", "a1", "b1"), ("two", "a2", "b2")]))
    ps = iter([0.01, 0.04, 0.03, None])
    monkeypatch.setattr(family, "read_test", lambda *a: fake_test(next(ps)))
    fam = family.read_family(cfg, "eval")
    # m = 4 still: .01 x4 = .04, .03 x3 = .09, .04 x2 = .08 -> .09; the pending one is last
    assert [t.get("p_holm") for t in fam["tests"]] == pytest.approx([0.04, 0.09, 0.09, None])
    assert fam["tests"][3]["verdict"] == "pending (3 of 20)"
    assert not fam["complete"] and fam["pending"] == 1


# -- the four verdicts --------------------------------------------------------------------------
@pytest.fixture
def four_pairs(tmp_path):
    """A clear win, a clear loss, an exactly equal pair and a noisy one, 20 questions each."""
    q = ids(20)
    root = tmp_path / "runs"
    write_run(root, "hotpotqa", "win-a", dict.fromkeys(q, 1.0))
    write_run(root, "hotpotqa", "win-b", dict.fromkeys(q, 0.0))
    write_run(root, "hotpotqa", "loss-a", dict.fromkeys(q, 0.0))
    write_run(root, "hotpotqa", "loss-b", dict.fromkeys(q, 1.0))
    same = {k: (i % 5) / 4 for i, k in enumerate(q)}
    write_run(root, "hotpotqa", "same-a", same, tokens=300)
    for s in (13, 14, 15):
        write_run(root, "hotpotqa", f"same-b-seed{s}", same, tokens=600)
    write_run(root, "hotpotqa", "noisy-a", {k: float(i % 2) for i, k in enumerate(q)})
    write_run(root, "hotpotqa", "noisy-b", {k: float(1 - i % 2) for i, k in enumerate(q)})
    return write_toml(tmp_path / "t.toml", root, {"hotpotqa": 20}, [
        ("win", "win-a", "win-b"), ("loss", "loss-a", "loss-b"),
        ("same", "same-a", "same-b-seed{seed}"), ("noisy", "noisy-a", "noisy-b")])


def test_each_of_the_four_verdicts_is_reached(four_pairs):
    report = family.read_families(four_pairs)
    win, loss, same, noisy = report["families"][0]["tests"]
    assert win["verdict"] == "better" and win["diff"] == 1.0 and win["p_holm"] < 0.05
    assert loss["verdict"] == "worse" and loss["diff"] == -1.0
    assert same["verdict"] == "equivalent within ±.03"
    assert same["p_tost"] == 0.0 and same["p_holm"] == 1.0
    assert noisy["verdict"] == family.INCONCLUSIVE
    assert noisy["p_tost"] > 0.05 and noisy["p_holm"] > 0.05
    # the paper's margin (.05) lies above the upper bound of an exact tie only
    assert same["paper_margin_excluded"] and not win["paper_margin_excluded"]
    assert same["tokens_a"] == 300 and same["tokens_b"] == 600
    assert same["token_ratio"] == 0.5 and same["token_saving"] == 0.5
    assert report["complete"]


def test_a_loss_inside_the_margin_is_worse_and_says_it_lies_within_the_margin(tmp_path):
    root = tmp_path / "runs"
    q = ids(20)
    b = {k: 0.25 + (i % 4) / 4 for i, k in enumerate(q)}
    # A loses .015 or .005 on every question: mean -.01, told apart from 0, inside +-.03
    write_run(root, "hotpotqa", "a", {k: v - 0.01 * (i % 2 == 0) - 0.005
                                      for i, (k, v) in enumerate(b.items())})
    write_run(root, "hotpotqa", "b", b)
    report = family.read_families(write_toml(tmp_path / "t.toml", root, {"hotpotqa": 20},
                                             [("t", "a", "b")]))
    t = only_test(report)
    assert t["verdict"] == "worse" and t["equivalent"]
    assert family.verdict_text(t) == "worse, within ±.03"
    assert family.verdict_sentences(report)[0].startswith("HotpotQA, t: worse, within ±.03 (")


def test_tost_is_the_larger_one_sided_t_p_and_agrees_with_the_90_percent_interval(tmp_path):
    root = tmp_path / "runs"
    q = ids(10)
    # differences .1 and -.05 alternating: mean .025, sd computed by hand below
    write_run(root, "hotpotqa", "a", {k: 0.5 + (0.1 if i % 2 == 0 else -0.05)
                                      for i, k in enumerate(q)})
    write_run(root, "hotpotqa", "b", dict.fromkeys(q, 0.5))
    t = only_test(family.read_families(write_toml(tmp_path / "t.toml", root, {"hotpotqa": 10},
                                                  [("t", "a", "b")])))
    sd = math.sqrt(10 * 0.075 ** 2 / 9)  # every |d - mean| = .075
    se = sd / math.sqrt(10)
    from scipy import stats
    p_upper = stats.t.cdf((0.025 - 0.03) / se, 9)  # the binding side: .025 is near +.03
    assert t["p_tost"] == pytest.approx(p_upper)
    assert t["tost_hi"] == pytest.approx(0.025 + stats.t.ppf(0.95, 9) * se)
    assert (t["p_tost"] < 0.05) == (-0.03 < t["tost_lo"] and t["tost_hi"] < 0.03)


# -- seeds ----------------------------------------------------------------------------------
def test_seed_averaging_takes_per_question_means_over_questions_every_seed_answered(tmp_path):
    root = tmp_path / "runs"
    a = {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 1.0, "q5": 1.0}
    write_run(root, "hotpotqa", "a", a)
    seeds = {13: {"q1": 0.0, "q2": 0.5, "q3": 1.0, "q4": 0.0, "q5": 0.0, "q6": 1.0},
             14: {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 0.0},  # q5 failed: an error row
             15: {"q1": 0.5, "q2": 0.5, "q3": 0.5, "q4": 0.5, "q5": 1.0}}
    for s, f1 in seeds.items():
        write_run(root, "hotpotqa", f"u-seed{s}", f1, errors=("q5",) if s == 14 else ())
    t = only_test(family.read_families(write_toml(tmp_path / "t.toml", root, {"hotpotqa": 4},
                                                  [("t", "a", "u-seed{seed}")])))
    assert t["n"] == 4  # q5 lacks seed 14, q6 lacks A
    per_q = [(0 + 1 + .5) / 3, .5, (1 + 0 + .5) / 3, (0 + 0 + .5) / 3]
    assert t["mean_b"] == pytest.approx(sum(per_q) / 4)
    assert t["mean_a"] == pytest.approx((1 + .5 + 0 + 1) / 4)
    assert t["diff"] == pytest.approx(t["mean_a"] - sum(per_q) / 4)
    s = t["seeds"]
    assert s["seeds"] == [13, 14, 15]
    assert s["f1_b"] == pytest.approx([1.5 / 4, 1.5 / 4, 2.0 / 4])
    assert s["diff"] == pytest.approx([2.5 / 4 - 1.5 / 4, 2.5 / 4 - 1.5 / 4, 2.5 / 4 - 2 / 4])
    assert s["diff_spread"]["min"] == pytest.approx(0.125)
    assert s["diff_spread"]["max"] == pytest.approx(0.25)
    # SD (n - 1) of (.25, .25, .125): mean 5/24, deviations 1/24, 1/24, -2/24
    assert s["diff_spread"]["sd"] == pytest.approx(math.sqrt((1 + 1 + 4) / 576 / 2))


# -- pending runs -----------------------------------------------------------------------------
def test_incomplete_missing_short_or_damaged_runs_leave_the_test_pending(tmp_path):
    root = tmp_path / "runs"
    q = ids(10)
    write_run(root, "hotpotqa", "a", dict.fromkeys(q, 1.0))
    write_run(root, "hotpotqa", "partial", dict.fromkeys(q[:6], 0.0), complete=False,
              n_expected=10)
    write_run(root, "hotpotqa", "short", dict.fromkeys(q[:7], 0.0))  # complete, yet 7 < 10
    bad = write_run(root, "hotpotqa", "damaged", dict.fromkeys(q, 0.0))
    text = (bad / "predictions.jsonl").read_text().splitlines()
    (bad / "predictions.jsonl").write_text("\n".join([text[0], "{not json", *text[1:]]) + "\n")
    toml = write_toml(tmp_path / "t.toml", root, {"hotpotqa": 10}, [
        ("partial", "a", "partial"), ("missing", "a", "never-run"), ("short", "a", "short"),
        ("damaged", "a", "damaged")])
    report = family.read_families(toml)
    tests = report["families"][0]["tests"]
    assert [t["verdict"] for t in tests] == ["pending (6 of 10)", "pending (0 of 10)",
                                            "pending (7 of 10)", "pending (0 of 10)"]
    assert all("diff" not in t and "p_holm" not in t for t in tests)
    assert "line 2" in tests[3]["problems"][0]
    assert not report["complete"] and report["families"][0]["pending"] == 4
    assert "**incomplete**: 4 of 4 tests pending" in family.family_markdown(report)
    assert family.verdict_sentences(report)[0] == "HotpotQA, partial: pending (6 of 10)"


# -- llama.cpp builds -----------------------------------------------------------------------------
def test_runs_of_one_test_decoded_by_two_builds_are_flagged(tmp_path):
    root = tmp_path / "runs"
    q = ids(5)
    write_run(root, "hotpotqa", "a", dict.fromkeys(q, 1.0))
    write_run(root, "hotpotqa", "same", dict.fromkeys(q, 0.0))
    for s in (13, 14, 15):
        write_run(root, "hotpotqa", f"mixed-seed{s}", dict.fromkeys(q, 0.0),
                  build=OTHER_BUILD if s == 14 else BUILD)
    write_run(root, "hotpotqa", "unrecorded", dict.fromkeys(q, 0.0), build=None)
    report = family.read_families(write_toml(tmp_path / "t.toml", root, {"hotpotqa": 5}, [
        ("same", "a", "same"), ("mixed", "a", "mixed-seed{seed}"),
        ("unrecorded", "a", "unrecorded")]))
    same, mixed, unrecorded = report["families"][0]["tests"]
    assert same["one_build"] and same["builds_a"] == same["builds_b"] == [BUILD]
    assert not mixed["one_build"] and mixed["builds_b"] == [BUILD, OTHER_BUILD]
    assert not unrecorded["one_build"] and unrecorded["builds_b"] == [None]
    md = family.family_markdown(report)
    assert "one recorded llama.cpp build: HotpotQA mixed; HotpotQA unrecorded." in md


def test_a_build_change_recorded_in_the_summary_counts_as_a_second_build(tmp_path):
    root = tmp_path / "runs"
    q = ids(5)
    write_run(root, "hotpotqa", "a", dict.fromkeys(q, 1.0))
    b = write_run(root, "hotpotqa", "b", dict.fromkeys(q, 0.0))
    summary = json.loads((b / "summary.json").read_text())
    summary["run"].update(llama_build=OTHER_BUILD, llama_build_first=BUILD)
    (b / "summary.json").write_text(json.dumps(summary))
    t = only_test(family.read_families(write_toml(tmp_path / "t.toml", root, {"hotpotqa": 5},
                                                  [("t", "a", "b")])))
    assert not t["one_build"] and t["builds_b"] == [BUILD, OTHER_BUILD]


# -- the minimal detectable effect ----------------------------------------------------------
def test_the_minimal_detectable_effect_is_z_sum_times_sd_over_root_n(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "hotpotqa", "a", {"q1": 1.0, "q2": 0.0, "q3": 1.0, "q4": 0.0})
    write_run(root, "hotpotqa", "b", dict.fromkeys(["q1", "q2", "q3", "q4"], 0.0))
    t = only_test(family.read_families(write_toml(tmp_path / "t.toml", root, {"hotpotqa": 4},
                                                  [("t", "a", "b")])))
    # d = 1, 0, 1, 0: sd (n - 1) = sqrt(1/3); z_.975 = 1.959964, z_.8 = 0.841621
    assert t["sd_diff"] == pytest.approx(math.sqrt(1 / 3))
    assert t["mde"] == pytest.approx((1.959964 + 0.841621) * math.sqrt(1 / 3) / 2, abs=1e-6)


# -- the command line and the sentences ------------------------------------------------------
def test_the_command_writes_json_and_markdown_and_one_sentence_per_test(four_pairs, tmp_path):
    out = tmp_path / "family"
    report = family.main(["--toml", str(four_pairs), "--out", str(out)])
    saved = json.loads((out / "family.json").read_text())
    assert [t["verdict"] for t in saved["families"][0]["tests"]] == [
        "better", "worse", "equivalent within ±.03", family.INCONCLUSIVE]
    md = (out / "family.md").read_text()
    assert md.count("\n| HotpotQA |") == 5  # four tests, one seeded spread row
    sentences = family.verdict_sentences(report)
    assert len(sentences) == 4
    assert re.fullmatch(r"HotpotQA, noisy: inconclusive at this n \(\.000 \[-\.\d{3}, "
                        r"\+\.\d{3}\], Holm p 1\.00; detectable at 80 % power: \.\d{3}\)",
                        sentences[3]), sentences[3]


def test_the_project_files_are_found_from_a_folder_outside_the_project(tmp_path, monkeypatch):
    # `python -m dynakrag_lab.report.family` run from anywhere reads and writes the project's
    # own toml, family folder and README, never new ones in the working directory
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[2]
    for name in (family.TOML, family.OUT, family.README):
        assert family.locate(name).resolve() == root / name
    assert family.locate("results/no-such-file").resolve() == tmp_path / "results/no-such-file"


def test_a_toml_without_a_needed_field_is_refused_naming_the_field(tmp_path):
    toml = write_toml(tmp_path / "t.toml", tmp_path, {"hotpotqa": 5}, [("t", "a", "b")])
    toml.write_text(toml.read_text().replace("hotpotqa = 0.05", ""))
    with pytest.raises(ValueError, match=r"t\.toml: field 'paper_margin\.uniform\.hotpotqa'"):
        family.load_tests(toml)


# -- the committed family, recomputed by hand from predictions.jsonl -----------------------------
ROOT = Path(__file__).resolve().parents[2]
COMMITTED = json.loads((ROOT / "results/primary/family/family.json").read_text("utf-8"))
DONE = [t for f in COMMITTED["families"] for t in f["tests"] if t["complete"]]


def _f1_by_id(folder: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").open(encoding="utf-8")]
    return {r["id"]: float(r["f1"]) for r in rows if "error" not in r}


@pytest.mark.parametrize("test", DONE, ids=[f"{t['family']}-{t['dataset']}-{t['test']}"
                                           for t in DONE])
def test_a_complete_committed_test_is_what_a_reader_recomputes_from_its_rows(test):
    """The mean difference, its n, the detectable effect and the verdict word of every
    complete test in the committed family.json, recomputed with plain Python from the run
    folders' per-question F1 (B's seeds averaged per question): a stale or mis-read
    family.json fails here."""
    fam = next(f for f in COMMITTED["families"] if f["family"] == test["family"])
    folder = ROOT / fam["root"] / test["dataset"] / COMMITTED["generator"]
    a = _f1_by_id(folder / test["a"])
    bs = [_f1_by_id(folder / b) for b in test["b"]]
    ids = [q for q in a if all(q in b for b in bs)]
    d = [a[q] - sum(b[q] for b in bs) / len(bs) for q in ids]
    n, mean = len(d), sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    assert n == test["n"] == test["n_expected"]
    assert mean == pytest.approx(test["diff"], abs=1e-4)
    assert test["lo"] < mean < test["hi"]
    assert (1.959964 + 0.841621) * sd / math.sqrt(n) == pytest.approx(test["mde"], abs=1e-3)
    word = ("better" if mean > 0 else "worse") if test["p_holm"] < COMMITTED["alpha"] else (
        "equivalent" if test["equivalent"] else "inconclusive at this n")
    assert test["verdict"].startswith(word)
