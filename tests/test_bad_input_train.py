"""``train`` with each bad input of issue 23 (the ``evaluate`` and ``index`` probes are in
test_bad_input.py): refused up front with one ``error:`` line naming the file, field or flag
and exit code 2, before any trajectory is collected, and no policy file written; a broken
cache either refused so or worked around with one warning naming it.

Run folders (stub rows, run.json) do not apply to ``train``. A cheap train run: two
questions, no sufficiency calibration, no answer calls, no tuning (harness TRAIN_ARGS),
against the loopback server of bad_input_harness.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bad_input_harness import (TRAIN_ARGS, Cli, FakeLLM, Result, assert_refused, closed_port,
                               folder_bytes, make_cli, make_warm, no_dac_override, syn_records,
                               warning_lines, write_jsonl)
from helpers import require_llama


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    return make_warm(tmp_path_factory.mktemp("bad-input-train-warm"), train=True)


@pytest.fixture
def llm():
    fake = FakeLLM()
    yield fake
    fake.close()


@pytest.fixture
def cli(tmp_path, warm) -> Cli:
    return make_cli(tmp_path, warm)


def train(cli: Cli, *, data: str = "syn.jsonl", generator: str, out: str = "policy.joblib",
          split: tuple[str, ...] = ("--limit", "2"), **kw) -> Result:
    return cli.run("train", "--data", data, "--generator", generator, "--out", out, *split,
                   *TRAIN_ARGS, **kw)


def _llm_cache_with_rows(cli: Cli, llm: FakeLLM) -> Path:
    res = cli.run("generate", "--generator", llm.spec, "--prompt", "hi")
    assert res.returncode == 0, res.tail()
    return cli.cache / "llm_calls.sqlite"


# -- refused up front --------------------------------------------------------------------------
def _case(name: str, cli: Cli, llm: FakeLLM) -> tuple[dict, tuple[str, ...]]:
    """(train() keywords, what the error line must name) of one bad input."""
    root = cli.root
    (root / "taken").write_text("someone's file\n")
    if name == "gguf_file_not_gguf":
        require_llama()
        (root / "notes.gguf").write_text("these are notes, not a model\n" * 50)
        return {"generator": "gguf:notes.gguf"}, ("notes.gguf",)
    if name == "unreachable_server":
        port = closed_port()
        return {"generator": f"openai:m@http://127.0.0.1:{port}/v1"}, (f"127.0.0.1:{port}",)
    if name == "out_is_a_folder":  # today: trains, then a traceback, the policy lost
        (root / "policies").mkdir()
        (root / "policies" / "keep.txt").write_text("mine\n")
        return {"generator": llm.spec, "out": "policies"}, ("policies",)
    if name == "out_below_a_file":
        return {"generator": llm.spec, "out": "taken/policy.joblib"}, ("taken",)
    if name == "data_is_a_folder":
        (root / "datadir").mkdir()
        return {"generator": llm.spec, "data": "datadir"}, ("datadir",)
    if name == "empty_string_id":
        recs = syn_records()
        recs[2]["id"] = ""
        write_jsonl(root / "bad.jsonl", recs)
        return {"generator": llm.spec, "data": "bad.jsonl"}, ("bad.jsonl", "line 3", "id")
    if name == "limit_0":  # today: every training question (here from --offset 2: two)
        return {"generator": llm.spec, "split": ("--offset", "2", "--limit", "0")}, ("--limit",)
    if name == "n_eval_negative":  # today: 3 held out, 5 trained on
        return {"generator": llm.spec, "split": ("--n-eval", "-5")}, ("--n-eval",)
    if name == "cache_dir_is_a_file":
        return {"generator": llm.spec, "env": {"DYNAKRAG_CACHE_DIR": str(root / "taken")},
                "unset": ("DYNAKRAG_LLM_CACHE", "DYNAKRAG_EMBED_CACHE",
                          "DYNAKRAG_ENTITY_CACHE")}, ("taken",)
    raise AssertionError(name)


REFUSED = ["gguf_file_not_gguf", "unreachable_server", "out_is_a_folder", "out_below_a_file",
           "data_is_a_folder", "empty_string_id", "limit_0", "n_eval_negative",
           "cache_dir_is_a_file"]


@pytest.mark.parametrize("case", REFUSED)
def test_train_refuses_bad_input_up_front(cli, llm, case):
    kw, names = _case(case, cli, llm)
    before = folder_bytes(cli.root / "policies")
    res = train(cli, **kw)
    assert_refused(res, *names)
    assert not (cli.root / "policy.joblib").exists()
    assert folder_bytes(cli.root / "policies") == before
    assert (cli.root / "taken").read_text() == "someone's file\n"
    assert "trajectories:" not in res.stderr, "refused only after collecting trajectories"


# -- broken caches: refused, or trained without them ----------------------------------------------
def _break(case: str, cli: Cli, llm: FakeLLM) -> str:
    """Break one cache file of ``cli``; its name."""
    if case == "llm_cache_not_a_database":
        (cli.cache / "llm_calls.sqlite").write_text("my notes, not a database\n" * 20)
        return "llm_calls.sqlite"
    if case == "malformed_llm_cache":
        path = _llm_cache_with_rows(cli, llm)
        data = path.read_bytes()
        path.write_bytes(data[:4096] + b"\xa5" * (len(data) - 4096))
        return "llm_calls.sqlite"
    if case == "read_only_llm_cache":  # (tmp_path is removed by its owner: no chmod back)
        _llm_cache_with_rows(cli, llm).chmod(0o444)
        return "llm_calls.sqlite"
    if case == "embedding_cache_not_a_database":
        for f in cli.cache.glob("embeddings.sqlite-*"):
            f.unlink()
        (cli.cache / "embeddings.sqlite").write_text("my notes, not a database\n" * 20)
        return "embeddings.sqlite"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["llm_cache_not_a_database", "malformed_llm_cache",
                                  "read_only_llm_cache", "embedding_cache_not_a_database"])
def test_train_with_a_broken_cache_is_refused_or_done_without_it(cli, llm, case):
    name = _break(case, cli, llm)
    prefix = no_dac_override() if case == "read_only_llm_cache" else ()
    res = train(cli, generator=llm.spec, prefix=prefix)
    assert "Traceback (most recent call last)" not in res.stderr, res.tail()
    if res.returncode == 2:
        assert_refused(res, name)
        assert not (cli.root / "policy.joblib").exists()
        return
    assert res.returncode == 0, res.tail()
    assert json.loads(res.stdout.strip().splitlines()[-1])["questions"] == 2
    assert (cli.root / "policy.joblib").is_file()
    assert len(warning_lines(res, name)) == 1, f"expected one warning naming {name}:\n" \
        f"{res.tail()}"
