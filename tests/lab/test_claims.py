"""The result as stated (README, preface, results chapter) is the result the committed runs
give, and the shuffled-stop test behind its second sentence can tell an informed stop from an
uninformed one."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dynakrag_lab.report.claims import (StopGrid, claim_sentences, fmt_diff,
                                        fmt_p, headline_claims, horizon_table, results_table,
                                        stop_shuffle)
from dynakrag_lab.report.comparison import PairedDifference
from dynakrag_lab.report.family import (README_BEGIN, README_END, STATED_FILE, read_families,
                                        stated_result, verdict_sentences, write_readme)
from dynakrag_lite.experiments.folder import ResultsError

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "results" / "experiments"


def _flat(text: str) -> str:
    """Markdown as prose: line breaks and runs of spaces are one space."""
    return re.sub(r"\s+", " ", text)


def _markdown(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def _outputs(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", ())]
    return "\n".join("".join(o.get("text", ""))
                     + "".join(o.get("data", {}).get("text/markdown", "")) for o in outputs)


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return claim_sentences(headline_claims(root=EXPERIMENTS))


@pytest.mark.parametrize("where", ["README.md", "results/README.md", "book/00_preface.ipynb",
                                   "book/12_results.ipynb"])
def test_the_stated_result_matches_the_committed_runs(sentences, where):
    path = ROOT / where
    text = _flat(_markdown(path) + "\n" + _outputs(path) if path.suffix == ".ipynb"
                 else path.read_text("utf-8"))
    stale = [s for s in sentences if _flat(s) not in text]
    assert not stale, (f"{where} does not state the result the runs give; replace its text "
                       f"with: {stale}")


@pytest.mark.parametrize("where", ["README.md", "book/00_preface.ipynb", "book/12_results.ipynb"])
def test_the_primary_tests_are_stated_once_complete_and_pending_before(where):
    """Before every run of the primary family is complete the text calls its readings
    exploratory and the primary tests pending; after, it states each primary test's verdict
    as the family report words it (chapter 12 in its outputs)."""
    report = read_families(ROOT / "results" / "primary_tests.toml")
    path = ROOT / where
    text = path.read_text("utf-8") if path.suffix == ".md" else (
        _markdown(path) + "\n" + _outputs(path))  # the preface and 12 print it
    text = _flat(text)
    if report["complete"]:
        missing = [s for s in verdict_sentences(report) if _flat(s) not in text]
        assert not missing, f"{where} does not state these primary results: {missing}"
    else:
        assert "exploratory" in text.lower() and "pending" in text.lower(), (
            f"{where}: the primary family is incomplete, so its readings must be called "
            "exploratory and the primary tests pending")


def test_readme_the_preface_and_the_written_file_state_what_the_committed_runs_give(sentences):
    """README's stated result is :func:`stated_result` of the committed runs, word for word:
    after committing rows, ``python -m dynakrag_lab.report.family --readme`` rewrites it."""
    readme = (ROOT / "README.md").read_text("utf-8")
    stated = readme[readme.index(README_BEGIN) + len(README_BEGIN):readme.index(README_END)]
    want = stated_result(read_families(ROOT / "results" / "primary_tests.toml"), sentences)
    assert stated.strip() == want.strip(), (
        "README's stated result is stale: run python -m dynakrag_lab.report.family --readme")
    written = (ROOT / "results" / "primary" / "family" / STATED_FILE).read_text("utf-8")
    assert written == want, f"{STATED_FILE} is stale: run python -m dynakrag_lab.report.family"
    # the preface prints that file: the committed output is the file's text
    preface = _flat(_outputs(ROOT / "book" / "00_preface.ipynb"))
    assert _flat(written).strip() in preface, (
        "the preface prints an older stated result: python data_scripts/execute_chapters.py 00")


def _test(dataset: str, name: str, complete: bool, family: str = "eval", n: int = 150) -> dict:
    t = {"family": family, "dataset": dataset, "test": name, "complete": complete, "n": n,
         "n_expected": 150}
    if complete:
        t.update(verdict="better", equivalent=False, ci="+.050 [+.010, +.090]", p_holm=0.01,
                 mde=0.04)
    else:
        t.update(verdict=f"pending ({n} of 150)")
    return t


def _report(tests: list[dict]) -> dict:
    fams = list(dict.fromkeys(t["family"] for t in tests))  # in order of appearance
    families = [{"family": f, "tests": [t for t in tests if t["family"] == f],
                 "complete": all(t["complete"] for t in tests if t["family"] == f)}
                for f in fams]
    return {"toml": "results/primary_tests.toml", "power": 0.8, "families": families,
            "complete": all(t["complete"] for t in tests)}


def test_the_stated_result_lists_complete_tests_and_groups_the_pending_ones():
    report = _report([_test("hotpotqa", "a", True), _test("musique", "a", False, n=40),
                      _test("musique", "b", False, n=12),
                      _test("hotpotqa", "b", False, family="check", n=0)])
    text = stated_result(report, ["first reading"])
    assert "- HotpotQA, a: better (+.050 [+.010, +.090], Holm p .01;" in text
    assert "1 of 4 complete, so each Holm p is an upper bound" in text
    assert "MuSiQue, 2 tests (12 of 150); HotpotQA (check set), 1 test (0 of 150)." in text
    assert text.index("**Exploratory readings**") < text.index("1. first reading")
    done = stated_result(_report([_test("hotpotqa", "a", True)]), [])
    assert "all complete" in done and "pending" not in done.lower()


def test_the_stated_result_with_no_complete_test_claims_no_holm_p():
    text = stated_result(_report([_test("hotpotqa", "a", False, n=3),
                                  _test("musique", "a", False, n=0)]), ["first reading"])
    head = text.splitlines()[0]
    assert "none of 2 complete yet" in head and "Holm p" not in head, head
    assert "- none" not in text  # no empty list; the pending line says it
    assert "HotpotQA, 1 test (3 of 150); MuSiQue, 1 test (0 of 150)." in text


def test_the_stated_result_calls_a_holm_p_an_upper_bound_only_in_a_family_with_pending_tests():
    eval_done = [_test("hotpotqa", "a", True), _test("musique", "a", True)]
    head = stated_result(_report(eval_done + [_test("hotpotqa", "b", False, family="check")]),
                         []).splitlines()[0]
    assert "2 of 3 complete" in head and "upper bound" not in head, head
    mixed = eval_done + [_test("hotpotqa", "b", True, family="check"),
                         _test("musique", "b", False, family="check")]
    head = stated_result(_report(mixed), []).splitlines()[0]
    assert "3 of 4 complete; a Holm p is an upper bound while its family has tests pending" in head
    assert "**Exploratory readings**" not in stated_result(_report(mixed), [])  # none to list


def test_write_readme_keeps_the_rest_byte_for_byte(tmp_path):
    readme = tmp_path / "README.md"
    # the end line also quoted above the block, Windows line ends, a text without its last \n
    head = f"# X\r\nthe block ends at {README_END}\r\n{README_BEGIN}\r\n"
    readme.write_bytes(f"{head}old\r\n{README_END}\r\nafter\r\n".encode())
    write_readme("new\nlines", readme)
    assert readme.read_bytes() == f"{head}new\r\nlines\r\n{README_END}\r\nafter\r\n".encode()


def test_write_readme_replaces_only_the_marked_block_and_names_a_readme_without_it(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# X\nbefore\n{README_BEGIN}\nold text\n{README_END}\nafter\n")
    write_readme("new text\n", readme)
    assert readme.read_text() == f"# X\nbefore\n{README_BEGIN}\nnew text\n{README_END}\nafter\n"
    readme.write_text("# X\nno markers\n")
    with pytest.raises(ResultsError, match="README.md: needs the line"):
        write_readme("new text\n", readme)
    assert readme.read_text() == "# X\nno markers\n"  # nothing half-written


def _grid(f1: np.ndarray, depth: np.ndarray) -> StopGrid:
    n, k = f1.shape
    return StopGrid("toy", [str(i) for i in range(n)], ["bridge"] * n, list(range(1, k + 1)),
                    f1, np.tile(np.arange(1, k + 1, dtype=float) * 100, (n, 1)), depth)


def test_a_stop_that_knows_each_question_beats_its_shuffle():
    rng = np.random.default_rng(0)
    n = 60
    best = rng.integers(1, 5, size=n)  # the one depth at which each question is answered
    f1 = np.zeros((n, 4))
    f1[np.arange(n), best - 1] = 1.0
    s = stop_shuffle(_grid(f1, best), n_shuffles=2000)
    assert s.f1 == 1.0 and s.shuffled_f1 < 0.5
    assert s.p_value == pytest.approx(1 / 2001)


def test_a_stop_whose_depth_does_not_matter_never_beats_its_shuffle():
    n = 40
    f1 = np.tile([0.2, 0.4, 0.4, 0.3], (n, 1))  # F1 depends on the depth, not on the question
    depth = np.array([2, 3] * (n // 2))
    s = stop_shuffle(_grid(f1, depth), n_shuffles=500)
    assert s.p_value == 1.0
    assert s.best_fixed_depth == 2  # ties go to the cheaper depth
    assert s.depths == {2: n // 2, 3: n // 2}


def test_depths_outside_the_schedules_are_clipped():
    f1 = np.tile([0.1, 0.9], (4, 1))
    s = stop_shuffle(_grid(f1, np.array([0, 1, 2, 7])), n_shuffles=10)
    assert s.depths == {1: 2, 2: 2}


def test_horizon_table_pairs_each_schedule_with_uniform_at_the_same_k(tmp_path):
    """Learned minus uniform at k, paired by question id (uniform's order may differ); a k
    with only one of the two runs gives no row."""
    def write(run, f1s):
        folder = tmp_path / "hotpotqa" / "reader" / run
        folder.mkdir(parents=True)
        rows = [{"id": str(i), "f1": f, "tokens": 100 * (i + 1), "prediction": str(f),
                 "trace": [{"action": "retrieve_more"}] * (1 + (run[0] == "u" and i == 1))}
                for i, f in f1s]
        (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write("dynakrag-cont-stop2", [(0, 1.0), (1, .5), (2, 0.0)])
    write("uniform-stop2", [(2, 0.0), (1, .5), (0, .4)])
    write("dynakrag-cont-stop3", [(0, 1.0)])  # no uniform-stop3: no row
    t = horizon_table("reader", tmp_path, datasets=("hotpotqa",))
    assert list(t.k) == [2] and t.n.item() == 3
    assert t["learned - uniform"].item() == pytest.approx(.2)
    assert t["F1 uniform"].item() == pytest.approx(.3)
    assert t["tokens learned"].item() == t["tokens uniform"].item() == 200
    # question 1 took one more action under uniform; question 0 answered differently
    assert t["same actions"].item() == 2 and t["same answer"].item() == 2


def test_the_readme_states_the_k1_build_floor_the_runs_give():
    """README's llama.cpp section: at k = 1 learned and uniform take the same actions, yet the
    runs' answers differ on some questions (two builds); its counts are horizon_table's."""
    t = horizon_table(ks=(1,)).set_index("dataset")
    hp, mu = t.loc["HotpotQA"], t.loc["MuSiQue"]
    differ = [int(r.n - r["same answer"]) for r in (hp, mu)]
    f1 = [f"{r['learned - uniform']:+.3f}".replace("0.", ".", 1) for r in (hp, mu)]
    stated = (f"({hp['same actions']}/{hp.n} HotpotQA and {mu['same actions']}/{mu.n} MuSiQue "
              f"questions), yet the runs decoded by different builds give a different final "
              f"answer on {differ[0]} of {hp.n} and {differ[1]} of {mu.n} questions, "
              f"{sum(differ)} of {hp.n + mu.n} (F1 {f1[0]} and {f1[1]};")
    assert _flat(stated) in _flat((ROOT / "README.md").read_text("utf-8")), stated


def test_differences_and_p_values_are_written_as_the_book_writes_them():
    d = PairedDifference("f1", 150, .4, .35, .052, .005, .102, .038, 40, 30)
    assert fmt_diff(d) == "+.052 [+.005, +.102]"
    assert fmt_diff(PairedDifference("f1", 9, 0, 0, -.036, -.103, .028, .3, 1, 2)) == \
        "-.036 [-.103, +.028]"
    assert (fmt_p(.297), fmt_p(.0042), fmt_p(.0001)) == (".30", ".004", "<.001")


# -- wording the results contradict -----------------------------------------------------------
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))


def _chapter_texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) of every cell source and every committed output of a chapter."""
    out = []
    for i, c in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        out.append((f"{path.name} cell {i}", "".join(c["source"])))
        out += [(f"{path.name} cell {i} output", json.dumps(o)) for o in c.get("outputs", [])]
    return out


def _prose() -> list[tuple[str, str]]:
    texts = [(p.name, p.read_text("utf-8")) for p in (ROOT / "README.md",
                                                     ROOT / "results" / "README.md")]
    texts += [(str(p.relative_to(ROOT)), p.read_text("utf-8"))
              for pkg in ("dynakrag_lite", "dynakrag_lab") for p in (ROOT / pkg).rglob("*.py")]
    return texts + [t for p in CHAPTERS for t in _chapter_texts(p)]


def oracle_called_a_bound(text: str) -> list[str]:
    """Sentences that call the oracle an upper bound (or say it bounds something) without
    denying it."""
    out = []
    for sentence in re.split(r"(?<=[.!?])\s+|\\n", text):
        if re.search(r"oracle", sentence, re.I) and re.search(r"upper bound|\bbounds\b", sentence) \
                and not re.search(r"\bnot\b[^.]{0,60}\bbound", sentence):
            out.append(" ".join(sentence.split())[:160])
    return out


def test_the_oracle_is_not_an_upper_bound_here_and_no_text_calls_it_one():
    t = results_table(root=EXPERIMENTS)
    beaten = [d for d, g in t.groupby("dataset")
              if g[g.method != "oracle"].f1.max() > g[g.method == "oracle"].f1.max()]
    assert beaten, "no run is above the oracle's F1 any more: revisit this test's premise"
    found = [f"{where}: {s}" for where, text in _prose() for s in oracle_called_a_bound(text)]
    assert not found, "the oracle is a greedy reference, not a bound:\n" + "\n".join(found)


def test_the_oracle_wording_check_catches_the_old_sentences():
    assert oracle_called_a_bound("The oracle: an upper bound that reads the gold labels.")
    assert oracle_called_a_bound("The oracle bounds what evidence control could reach.")
    assert not oracle_called_a_bound("The oracle is a heuristic, not an upper bound on F1.")


def test_no_chapter_speaks_of_issue_numbers_or_shows_a_literal_glue_role():
    issues = [w for p in CHAPTERS for w, t in _chapter_texts(p)
              if re.search(r"\b[Ii]ssues? #?\d+", t)]
    glue = [w for p in CHAPTERS for w, t in _chapter_texts(p)
            if w.endswith("output") and "{glue:" in t]
    assert not issues, f"a reader has no issue tracker: {issues}"
    assert not glue, f"an output shows an unrendered glue role: {glue}"


EVERY_DATASET = re.compile(r"\b(all three|three|every|each|all) (datasets?|benchmarks)\b", re.I)
# words that state a comparison's outcome (the old "ties" / "matches" among them)
OUTCOME = re.compile(r"\b(ties?|tied|matches|beats?|better|worse|no better|equivalent|"
                     r"inconclusive|outperforms?|wins?|loses)\b", re.I)


def _markdown_prose() -> list[tuple[str, str]]:
    texts = [(p.name, p.read_text("utf-8")) for p in (ROOT / "README.md",
                                                     ROOT / "results" / "README.md")]
    return texts + [(p.name, _markdown(p)) for p in CHAPTERS]


def generalised_outcomes(text: str, computed: list[str]) -> list[str]:
    """Sentences that state an outcome for every dataset at once in prose, unless the
    sentence is (part of) one of the ``computed`` sentences, which give each dataset's own
    numbers. A verdict "on all three datasets" that holds on one of them went stale before
    (12's reader-stop rule); per-dataset sentences are computed, so they cannot."""
    flat = [_flat(c) for c in computed]
    out = []
    blocks = re.split(r"\n\s*\n|\n\s*(?:[*-]|\d+\.|#+)\s", text)  # paragraphs, items, headings
    for sentence in (s for b in blocks for s in re.split(r"(?<=[.!?])\s+", _flat(b))):
        if EVERY_DATASET.search(sentence) and OUTCOME.search(sentence) and not any(
                sentence.strip() in c for c in flat):
            out.append(sentence.strip()[:200])
    return out


def test_no_prose_states_one_verdict_for_every_dataset(sentences):
    found = [f"{where}: {s}" for where, text in _markdown_prose()
             for s in generalised_outcomes(text, sentences)]
    assert not found, ("state each dataset's own result (computed, as claim_sentences does), "
                       "not one word for all of them:\n" + "\n".join(found))


def test_the_generalisation_check_catches_the_old_reader_stop_sentence():
    old = ("The signals do rank states, but no rule beats its own shuffle on any of the three "
           "datasets. The rule that does best stops at depth 2 on each dataset.")
    assert generalised_outcomes("Learned choice ties uniform on every dataset.", [])
    assert generalised_outcomes(old, []) and not generalised_outcomes(old, [old])
