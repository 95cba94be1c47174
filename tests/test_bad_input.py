"""Bad input to the command line is refused up front, and nothing in a run folder is lost or
mixed (issue 23). Each test is one of the issue's probes, asserting the behaviour its "Done
when" asks for: one ``error:`` line on stderr naming the file, line, field or flag, exit code
2, no traceback, the run folder as it was; a warning where the issue says warn.

Everything runs ``python -m dynakrag_lite`` in a child process against a scriptable
OpenAI-compatible server on loopback (bad_input_harness.py): ``--method fixed_k`` makes one
call per question, answered at once, so no model is loaded. ``train`` with each bad input is
in test_bad_input_train.py.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bad_input_harness import (REPO, Cli, FakeLLM, assert_refused,
                               assert_refused_or_done_without_it, closed_port, folder_bytes,
                               make_cli, make_warm, no_dac_override, rows, syn_corpus,
                               syn_records, warning_lines, write_jsonl)
from helpers import require_llama


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    return make_warm(tmp_path_factory.mktemp("bad-input-warm"))


@pytest.fixture
def llm():
    fake = FakeLLM()
    yield fake
    fake.close()


@pytest.fixture
def cli(tmp_path, warm) -> Cli:
    return make_cli(tmp_path, warm)


@pytest.fixture
def own_index_cli(tmp_path, warm) -> Cli:
    """A Cli whose indexes folder is its own (empty), for tests about index building."""
    return make_cli(tmp_path, warm, share_indexes=False)


def evaluate(cli: Cli, llm: FakeLLM, *extra: str, out: str = "run", **kw):
    return cli.run("evaluate", "--data", "syn.jsonl", "--method", "fixed_k", "--generator",
                   llm.spec, "--out", out, *extra, **kw)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- 1. an edited corpus --------------------------------------------------------------------------
def _edited_corpus(root: Path) -> None:
    """c1.jsonl and c2.jsonl: the same ids and titles, every text replaced (rotated)."""
    docs = syn_corpus()
    write_jsonl(root / "c1.jsonl", docs)
    texts = [d["text"] for d in docs]
    write_jsonl(root / "c2.jsonl", [{**d, "text": texts[(i + 1) % len(docs)]}
                                    for i, d in enumerate(docs)])


def test_edited_corpus_text_rebuilds_the_index(own_index_cli):
    cli = own_index_cli
    _edited_corpus(cli.root)
    first = cli.run("index", "--data", "syn.jsonl", "--corpus", "c1.jsonl")
    assert first.returncode == 0, first.tail()
    second = cli.run("index", "--data", "syn.jsonl", "--corpus", "c2.jsonl")
    assert second.returncode == 0, second.tail()
    assert second.json()["loaded_from_disk"] is False, \
        "the index of the old texts was loaded for the edited corpus"


def test_edited_corpus_text_refuses_to_resume_the_run(own_index_cli, llm):
    cli = own_index_cli
    _edited_corpus(cli.root)
    first = evaluate(cli, llm, "--corpus", "c1.jsonl", "--split", "all", "--limit", "2")
    assert first.returncode == 0, first.tail()
    before = folder_bytes(cli.root / "run")
    again = evaluate(cli, llm, "--corpus", "c2.jsonl", "--split", "all", "--limit", "3")
    assert_refused(again, "corpus")
    assert folder_bytes(cli.root / "run") == before


# -- 2. a deleted run.json ------------------------------------------------------------------------
def test_deleted_run_json_does_not_let_another_setup_resume_the_folder(cli, llm):
    first = evaluate(cli, llm, "--fixed-k", "5", "--split", "all", "--limit", "2")
    assert first.returncode == 0, first.tail()
    run = cli.root / "run"
    (run / "run.json").unlink()
    before = folder_bytes(run)
    again = evaluate(cli, llm, "--fixed-k", "3", "--split", "all", "--limit", "3")
    line = assert_refused(again)
    assert "fixed_k" in line or "fixed-k" in line, line
    after = folder_bytes(run)
    recovered = after.pop("run.json", None)  # a fix may write back the recovered fingerprint
    assert after == before, "the folder changed: rows of two setups would mix"
    if recovered is not None:
        assert json.loads(recovered)["fingerprint"]["fixed_k"] == 5


# -- 3. a stub row --------------------------------------------------------------------------------
def test_stub_row_in_predictions_is_refused_with_file_and_line(cli, llm):
    first = evaluate(cli, llm, "--split", "all", "--limit", "3")
    assert first.returncode == 0, first.tail()
    pred = cli.root / "run" / "predictions.jsonl"
    lines = pred.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps({"id": json.loads(lines[1])["id"]})  # a real id, nothing else
    pred.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = folder_bytes(cli.root / "run")
    again = evaluate(cli, llm, "--split", "all", "--limit", "3")
    assert_refused(again, "predictions.jsonl", "line 2")
    assert folder_bytes(cli.root / "run") == before


# -- 4 and 9. the data loader -------------------------------------------------------------------
def _bad_record(case: str) -> tuple[list[dict], str]:
    """The synthetic records with one defect on line 3, and the field it is in."""
    recs = syn_records()
    r = recs[2]
    if case == "empty_id":
        r["id"] = ""
        return recs, "id"
    if case == "boolean_id":
        r["id"] = True
        return recs, "id"
    if case == "empty_answer":
        r["answers"] = [""]
        return recs, "answers"
    if case == "empty_paragraph_text":
        r["paragraphs"][2]["text"] = ""
        return recs, "paragraphs[2].text"
    if case == "mixed_dataset":
        r["dataset"] = "hotpotqa"
        return recs, "dataset"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["empty_id", "boolean_id", "empty_answer",
                                  "empty_paragraph_text", "mixed_dataset"])
def test_loader_refuses_bad_field_with_file_line_and_field(cli, case):
    recs, field = _bad_record(case)
    write_jsonl(cli.root / "bad.jsonl", recs)
    res = cli.run("index", "--data", "bad.jsonl")
    assert_refused(res, "bad.jsonl", "line 3", field)


def test_overlong_data_line_is_refused_with_file_and_line(cli):
    """A 32 MB line (whitespace inside a valid record, so today's code reads it cheaply) is
    refused with a clear error instead of being parsed: a long text costs gigabytes."""
    recs = syn_records()
    body = "".join(json.dumps(r) + "\n" for r in recs[:2])
    body += json.dumps(recs[2])[:-1] + " " * (32 << 20) + "}\n"
    body += "".join(json.dumps(r) + "\n" for r in recs[3:])
    (cli.root / "long.jsonl").write_text(body, encoding="utf-8")
    res = cli.run("index", "--data", "long.jsonl")
    assert_refused(res, "long.jsonl", "line 3")


def test_raw_control_character_error_is_readable(cli):
    recs = syn_records()
    text = "".join(json.dumps(r) + "\n" for r in recs)
    lines = text.splitlines(keepends=True)
    lines[1] = lines[1].replace("In which town", "In which\ttown", 1)  # a raw tab in a string
    (cli.root / "tab.jsonl").write_text("".join(lines), encoding="utf-8")
    res = cli.run("index", "--data", "tab.jsonl")
    line = assert_refused(res, "tab.jsonl", "line 2")
    assert "control character" in line.lower() and " at," not in line, line


def test_utf8_bom_at_start_of_data_file_is_skipped(cli):
    write_jsonl(cli.root / "bom.jsonl", syn_records(), prefix=b"\xef\xbb\xbf")
    res = cli.run("index", "--data", "bom.jsonl")
    assert res.returncode == 0, res.tail()
    assert res.json()["documents"] == len(syn_corpus())


# -- 5. broken caches -----------------------------------------------------------------------------
def _llm_cache_with_rows(cli: Cli, llm: FakeLLM) -> Path:
    """A real LLM call cache holding one call (not one the run below needs)."""
    res = cli.run("generate", "--generator", llm.spec, "--prompt", "hi")
    assert res.returncode == 0, res.tail()
    path = cli.cache / "llm_calls.sqlite"
    assert path.is_file() and not list(cli.cache.glob("llm_calls.sqlite-*"))
    return path


def test_read_only_llm_cache_keeps_every_computed_answer(cli, llm):
    path = _llm_cache_with_rows(cli, llm)
    path.chmod(0o444)
    try:
        res = evaluate(cli, llm, "--split", "all", "--limit", "2", prefix=no_dac_override())
    finally:
        path.chmod(0o644)
    got = rows(cli.root / "run")
    assert res.returncode == 0 and len(got) == 2 and not any("error" in r for r in got), \
        f"computed answers were thrown away: {[r.get('error') for r in got]}\n{res.tail()}"
    assert len(warning_lines(res, "llm_calls.sqlite")) == 1, res.tail()


def test_malformed_llm_cache_is_named_not_turned_into_error_rows(cli, llm):
    path = _llm_cache_with_rows(cli, llm)
    data = path.read_bytes()
    assert len(data) > 4096
    path.write_bytes(data[:4096] + b"\xa5" * (len(data) - 4096))  # valid header, garbage pages
    res = evaluate(cli, llm, "--split", "all", "--limit", "2")
    assert_refused_or_done_without_it(res, "llm_calls.sqlite", cli.root / "run", 2)


def test_llm_cache_that_is_not_a_database_is_one_error_line(cli, llm):
    (cli.cache / "llm_calls.sqlite").write_text("my notes, not a database\n" * 20)
    res = evaluate(cli, llm, "--split", "all", "--limit", "2")
    assert_refused_or_done_without_it(res, "llm_calls.sqlite", cli.root / "run", 2)


def test_garbage_embedding_cache_is_named_not_turned_into_error_rows(cli, llm):
    (cli.cache / "embeddings.sqlite").write_text("my notes, not a database\n" * 20)
    for f in cli.cache.glob("embeddings.sqlite-*"):
        f.unlink()
    res = evaluate(cli, llm, "--split", "all", "--limit", "2")
    assert_refused_or_done_without_it(res, "embeddings.sqlite", cli.root / "run", 2)


# -- 6. configuration errors ----------------------------------------------------------------------
def test_gguf_file_that_is_not_gguf_is_refused_before_any_question(cli):
    require_llama()
    (cli.root / "notes.gguf").write_text("these are notes, not a model\n" * 50)
    res = cli.run("evaluate", "--data", "syn.jsonl", "--method", "fixed_k", "--generator",
                  "gguf:notes.gguf", "--split", "all", "--limit", "2", "--out", "run")
    assert_refused(res, "notes.gguf")
    assert rows(cli.root / "run") == []


def test_unreachable_server_is_refused_before_any_question(cli):
    port = closed_port()
    res = cli.run("evaluate", "--data", "syn.jsonl", "--method", "fixed_k", "--generator",
                  f"openai:m@http://127.0.0.1:{port}/v1", "--split", "all", "--limit", "2",
                  "--out", "run")
    assert_refused(res, f"127.0.0.1:{port}")
    assert rows(cli.root / "run") == []


@pytest.fixture
def long_prompt_refusing_llm():
    fake = FakeLLM(fail=lambda p: "maximum context length exceeded" if len(p) > 400 else None)
    yield fake
    fake.close()


def test_run_whose_every_question_failed_exits_nonzero(cli, long_prompt_refusing_llm):
    """The server answers a short request (so an up-front check passes) but refuses every
    real prompt (a context-length error): every row is an error row, which is not a
    successful run."""
    res = evaluate(cli, long_prompt_refusing_llm, "--split", "all", "--limit", "2")
    assert "Traceback (most recent call last)" not in res.stderr, res.tail()
    got = rows(cli.root / "run")
    assert len(got) == 2 and all("error" in r for r in got), res.tail()
    assert res.returncode != 0, f"every question failed, yet exit code 0:\n{res.tail()}"


# -- 7. nonsense numbers --------------------------------------------------------------------------
NUMBERS = [
    ("evaluate", ("--split", "all", "--limit", "0"), "--limit"),  # today: every question
    ("evaluate", ("--split", "all", "--limit", "-1"), "--limit"),  # today: drops the last one
    ("evaluate", ("--split", "eval", "--n-eval", "-5"), "--n-eval"),  # today: a 3/5 split
    ("evaluate", ("--n-eval", "0"), "--n-eval"),  # today: an empty run, exit 0
    ("retrieval-eval", ("--split", "eval", "--n-eval", "0"), "--n-eval"),  # ZeroDivisionError
    ("evaluate", ("--fixed-k", "-1", "--split", "all", "--limit", "2"), "--fixed-k"),
]


@pytest.mark.parametrize("command, extra, flag", NUMBERS,
                         ids=[f"{c}{''.join(e)}" for c, e, _ in NUMBERS])
def test_nonsense_number_is_refused_naming_the_flag(cli, llm, command, extra, flag):
    if command == "evaluate":
        res = evaluate(cli, llm, *extra)
    else:
        res = cli.run(command, "--data", "syn.jsonl", *extra)
    assert_refused(res, flag)
    assert rows(cli.root / "run") == []


def test_oversized_n_eval_is_capped_with_a_notice(cli, llm):
    """--n-eval 1000 on 8 questions holds out 4 (half): the run goes on, and says so."""
    res = evaluate(cli, llm, "--split", "eval", "--n-eval", "1000", "--limit", "1")
    assert res.returncode == 0, res.tail()
    said = [x for x in res.stderr.splitlines() if "--n-eval" in x and "1000" in x]
    assert said and any("4" in x.replace("1000", "") for x in said), \
        f"--n-eval 1000 was capped to 4 without a word:\n{res.tail()}"


# -- 8. file-system errors ------------------------------------------------------------------------
FS_CASES = ["data_is_a_folder", "out_is_a_file", "out_below_a_file", "predictions_is_a_folder",
            "cache_dir_is_a_file"]


@pytest.mark.parametrize("case", FS_CASES)
def test_file_system_error_is_one_error_line(cli, llm, case):
    root = cli.root
    (root / "taken").write_text("someone's file\n")
    if case == "data_is_a_folder":
        (root / "datadir").mkdir()
        res = cli.run("retrieval-eval", "--data", "datadir")
        assert_refused(res, "datadir")
    elif case == "out_is_a_file":
        res = evaluate(cli, llm, "--split", "all", "--limit", "2", out="taken")
        assert_refused(res, "taken")
    elif case == "out_below_a_file":
        res = evaluate(cli, llm, "--split", "all", "--limit", "2", out="taken/run")
        assert_refused(res, "taken")
    elif case == "predictions_is_a_folder":
        (root / "run" / "predictions.jsonl").mkdir(parents=True)
        res = evaluate(cli, llm, "--split", "all", "--limit", "2")
        assert_refused(res, "predictions.jsonl")
        assert (root / "run" / "predictions.jsonl").is_dir()
    else:
        res = evaluate(cli, llm, "--split", "all", "--limit", "2",
                       env={"DYNAKRAG_CACHE_DIR": str(root / "taken")},
                       unset=("DYNAKRAG_LLM_CACHE", "DYNAKRAG_EMBED_CACHE",
                              "DYNAKRAG_ENTITY_CACHE"))
        assert_refused(res, "taken")
    assert (root / "taken").read_text() == "someone's file\n"


def test_read_only_out_folder_is_one_error_line(cli, llm):
    run = cli.root / "ro-run"
    run.mkdir()
    run.chmod(0o555)
    try:
        res = evaluate(cli, llm, "--split", "all", "--limit", "2", out="ro-run",
                       prefix=no_dac_override())
    finally:
        run.chmod(0o755)
    assert_refused(res, "ro-run")
    assert folder_bytes(run) == {}


# -- 9. low ---------------------------------------------------------------------------------------
def test_policy_trained_on_another_dataset_is_warned_and_recorded(cli, llm):
    policy = REPO / "results" / "policies" / "hotpotqa-qwen2.5-coder-0.5b.joblib"
    if not policy.is_file():
        pytest.skip(f"{policy} is not in this checkout")
    res = cli.run("evaluate", "--data", "syn.jsonl", "--method", "dynakrag", "--policy",
                  str(policy), "--generator", llm.spec, "--split", "all", "--limit", "1",
                  "--out", "run")
    assert res.returncode == 0, res.tail()
    warned = [x for x in warning_lines(res, "hotpotqa") if "syn" in x]
    assert len(warned) == 1, f"a hotpotqa policy ran on dataset 'syn' silently:\n{res.tail()}"
    summary = json.loads((cli.root / "run" / "summary.json").read_text())
    assert summary["policy"]["dataset"] == "hotpotqa"
    recorded = [json.dumps(summary["policy"]), *map(str, summary.get("warnings") or [])]
    assert any("hotpotqa" in x and "syn" in x for x in recorded), \
        "summary.json (its policy block or warnings) does not record the dataset mismatch"


def test_index_without_recorded_checksum_is_rebuilt_not_vouched_for(cli):
    """An index whose meta.json lacks index_sha256 (as an older version wrote it) cannot be
    verified: its vectors, here altered, must not be loaded and then vouched for by a
    meta.json rewritten with their sha256."""
    shared = cli.run("index", "--data", "syn.jsonl")  # the shared, verified index
    assert shared.returncode == 0, shared.tail()
    idx = cli.root / "idx"
    shutil.copytree(shared.json()["index_dir"], idx)
    (idx / ".lock").unlink(missing_ok=True)
    good = sha256(idx / "index.faiss")
    meta = json.loads((idx / "meta.json").read_text())
    (idx / "meta.json").write_text(json.dumps(
        {k: v for k, v in meta.items()
         if k not in ("index_bytes", "index_sha256", "ntotal", "dim")}))
    blob = (idx / "index.faiss").read_bytes()  # the same size and count, other vectors
    (idx / "index.faiss").write_bytes(blob[:-400] + bytes(b ^ 0xFF for b in blob[-400:]))
    res = cli.run("index", "--data", "syn.jsonl", "--out", "idx")
    assert res.returncode == 0, res.tail()
    assert res.json()["loaded_from_disk"] is False, "unverifiable vectors were loaded"
    assert sha256(idx / "index.faiss") == good
    assert json.loads((idx / "meta.json").read_text()).get("index_sha256") == good


@pytest.mark.parametrize("content, cryptic", [('{"a": 1}\n', "(123)"),
                                              ("123\n", "pop from empty list")],
                         ids=["json_text", "a_number"])
def test_unreadable_policy_file_error_says_what_is_wrong(cli, llm, content, cryptic):
    (cli.root / "policy.joblib").write_text(content)
    res = cli.run("evaluate", "--data", "syn.jsonl", "--method", "dynakrag", "--policy",
                  "policy.joblib", "--generator", llm.spec, "--out", "run")
    line = assert_refused(res, "policy.joblib")
    assert cryptic not in line, f"a raw unpickling message: {line}"


def test_failed_question_is_warned_about_once(cli):
    first_question = syn_records()[0]["question"]
    fake = FakeLLM(fail=lambda p: "boom" if first_question in p else None)
    try:
        res = evaluate(cli, fake, "--split", "all", "--limit", "2")
    finally:
        fake.close()
    assert res.returncode == 0, res.tail()
    assert [("error" in r) for r in rows(cli.root / "run")] == [True, False]
    warned = [x for x in res.stderr.splitlines() if "warning" in x.lower() and "failed" in x]
    assert len(warned) == 1, f"one failure, {len(warned)} warnings:\n" + "\n".join(warned)


# -- two processes building one new index --------------------------------------------------------
def test_two_concurrent_index_builds_of_one_new_corpus_leave_a_valid_index(own_index_cli):
    cli = own_index_cli
    procs = [subprocess.Popen(cli.command("index", "--data", "syn.jsonl"), cwd=cli.root,
                              env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a concurrent index build did not finish within 300 s")
        outs.append((p.returncode, out, err))
    for code, out, err in outs:
        assert code == 0 and "Traceback" not in err, f"exit {code}\n{err[-3000:]}"
        assert json.loads(out.strip().splitlines()[-1])["documents"] == len(syn_corpus())
    after = cli.run("index", "--data", "syn.jsonl")
    assert after.returncode == 0, after.tail()
    info = after.json()
    assert info["loaded_from_disk"] is True, "no valid index was left on disk"
    folder = Path(info["index_dir"])
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["index_sha256"] == sha256(folder / "index.faiss")
    assert meta["ntotal"] == len(syn_corpus())
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert not [x for x in after.stderr.splitlines() if "warning" in x.lower()], after.stderr
