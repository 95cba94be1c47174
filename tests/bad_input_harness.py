"""Harness of the bad-input tests (test_bad_input.py, test_bad_input_train.py; issue 23).

Everything goes through the command line in a child process (``python -m dynakrag_lite``),
so the tests do not depend on where a module lives inside the package. Each test gets its
own cache files in its tmp_path (LLM calls, embeddings, entities); the dense indexes of the
small synthetic dataset below are shared (a content-addressed, checksummed build product,
as conftest.py shares them), except in the tests about indexes, which build their own.

The generator is a scriptable OpenAI-compatible server on loopback (:class:`FakeLLM`), so
no model is loaded: one call per question with ``--method fixed_k``, answered at once.
The query encodes of the synthetic questions are warmed once per module (:func:`make_warm`)
and copied into each test's embedding cache, so a run that needs no new encode never loads
the embedder.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_TIMEOUT = 240.0  # seconds per command; today's code runs some bad inputs to the end

# -- a small synthetic multi-hop dataset ------------------------------------------------------
PEOPLE = ["Orla Venn", "Tamsin Quill", "Idris Marrow", "Bea Lindqvist", "Cato Ferreira",
          "Nell Ashdown", "Ravi Okonkwo", "Ysolde Brack"]
LABELS = ["Hollow Finch Records", "Saltmarsh Audio", "Copperline Music", "Blue Vesper Records",
          "Tidewell Sound", "Greyhaven Discs", "Lantern Moth Records", "Quarry Bell Music"]
TOWNS = ["Kestrelford", "Millbrae Cross", "Dunmore Vale", "Ashcombe", "Pellworth",
         "Harrowgate Sands", "Orrin Bay", "Stillwater Ford"]
N_SYN = len(LABELS)


def syn_records() -> list[dict]:
    """Eight two-hop questions (label -> founder -> birthplace) with two distractors each."""
    out = []
    for i, (label, person, town) in enumerate(zip(LABELS, PEOPLE, TOWNS)):
        other = TOWNS[(i + 3) % N_SYN]
        out.append({
            "id": f"syn-{i}", "dataset": "syn", "type": "bridge",
            "question": f"In which town was the founder of {label} born?",
            "answers": [town],
            "paragraphs": [
                {"title": label, "is_supporting": True,
                 "text": f"{label} is an independent record label founded in {1970 + i} by "
                         f"the songwriter {person}, who ran it for two decades."},
                {"title": person, "is_supporting": True,
                 "text": f"{person} is a songwriter and producer who was born in {town} and "
                         "later moved to the capital to record with local bands."},
                {"title": other, "is_supporting": False,
                 "text": f"{other} is a small market town known for its stone bridge, its "
                         "river mills and an annual autumn fair."},
                {"title": f"{LABELS[(i + 5) % N_SYN]} (album)", "is_supporting": False,
                 "text": f"{LABELS[(i + 5) % N_SYN]} is also the title of a 1990s compilation "
                         "album of folk recordings from coastal villages."},
            ]})
    return out


def write_jsonl(path: Path, records, *, prefix: bytes = b"") -> Path:
    path.write_bytes(prefix + "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                      for r in records).encode("utf-8"))
    return path


def write_syn(path: Path) -> Path:
    return write_jsonl(path, syn_records())


def syn_corpus() -> list[dict]:
    """The pooled paragraphs of the synthetic dataset, as an own ``--corpus`` file holds
    them, with explicit ids (so an edit of a text keeps its id)."""
    seen, docs = set(), []
    for r in syn_records():
        for p in r["paragraphs"]:
            if (p["title"], p["text"]) not in seen:
                seen.add((p["title"], p["text"]))
                docs.append({"id": f"doc{len(docs)}", "title": p["title"], "text": p["text"]})
    return docs


# -- a scriptable OpenAI-compatible server ------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def do_GET(self):  # /v1/models: what a client may ask to check the server
        self._send(200, {"object": "list", "data": [{"id": "m", "object": "model",
                                                     "owned_by": "test"}]})

    def do_POST(self):
        fake: FakeLLM = self.server.fake
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])
        fake.prompts.append(prompt)
        problem = fake.fail(prompt) if fake.fail else None
        if problem:
            self._send(400, {"error": {"message": problem, "type": "invalid_request_error",
                                       "param": None, "code": None}})
            return
        self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                         "model": "m", "choices": [{
                             "index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": fake.reply}}],
                         "usage": {"prompt_tokens": max(1, len(prompt) // 4),
                                   "completion_tokens": 3,
                                   "total_tokens": max(1, len(prompt) // 4) + 3}})


class FakeLLM:
    """An OpenAI-compatible chat server on loopback that answers every prompt with ``reply``,
    or with HTTP 400 and the message ``fail(prompt)`` when that returns one."""

    def __init__(self, reply: str = "Answer: Kestrelford",
                 fail: Callable[[str], str | None] | None = None):
        self.reply, self.fail = reply, fail
        self.prompts: list[str] = []
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.srv.daemon_threads = True
        self.srv.fake = self
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"
        self.spec = f"openai:m@{self.url}"

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


# -- running the command line ------------------------------------------------------------------
def shared_assets_dir() -> Path:
    env = os.environ.get("DYNAKRAG_TEST_ASSETS")
    return Path(env).expanduser() if env else REPO / ".cache" / "test-assets"


def make_cache(root: Path, share_indexes: bool = True) -> Path:
    """A cache root whose models/ and embedders/ (and indexes/ unless ``share_indexes`` is
    False) are the shared, verified build products."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("models", "embedders") + (("indexes",) if share_indexes else ()):
        (shared_assets_dir() / name).mkdir(parents=True, exist_ok=True)
        link = root / name
        if not link.exists():
            link.symlink_to(shared_assets_dir() / name, target_is_directory=True)
    return root


def cli_env(cache: Path) -> dict:
    env = dict(os.environ)
    env.update({
        "DYNAKRAG_CACHE_DIR": str(cache),
        "DYNAKRAG_LLM_CACHE": str(cache / "llm_calls.sqlite"),
        "DYNAKRAG_EMBED_CACHE": str(cache / "embeddings.sqlite"),
        "DYNAKRAG_ENTITY_CACHE": str(cache / "entities.sqlite"),
        "DYNAKRAG_N_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
        # the package of this checkout, wherever the tests are started from
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])]),
    })
    for k in ("DYNAKRAG_REPLAY_ONLY", "DYNAKRAG_GEN_TIMEOUT"):
        env.pop(k, None)
    return env


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        lines = [x for x in self.stdout.splitlines() if x.strip().startswith("{")]
        assert lines, f"no JSON on stdout of {self.args}:\n{self.tail()}"
        return json.loads(lines[-1])

    def tail(self, n: int = 3000) -> str:
        return (f"exit code {self.returncode}\n--- stdout ---\n{self.stdout[-n:]}\n"
                f"--- stderr ---\n{self.stderr[-n:]}")


class Cli:
    """``python -m dynakrag_lite ...`` in ``root`` (the working directory) with the cache
    files of ``cache``."""

    def __init__(self, root: Path, cache: Path):
        self.root, self.cache = root, cache
        self.env = cli_env(cache)

    def command(self, *args: str, prefix: tuple[str, ...] = ()) -> list[str]:
        return [*prefix, sys.executable, "-m", "dynakrag_lite", *map(str, args)]

    def run(self, *args: str, env: dict | None = None, unset: tuple[str, ...] = (),
            prefix: tuple[str, ...] = (), timeout: float = RUN_TIMEOUT) -> Result:
        full = {**self.env, **(env or {})}
        for k in unset:
            full.pop(k, None)
        cmd = self.command(*args, prefix=prefix)
        try:
            p = subprocess.run(cmd, cwd=self.root, env=full, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            pytest.fail(f"{' '.join(map(str, args))} did not finish within {timeout:g} s "
                        f"(a bad input should be refused at once)\n{err[-2000:]}{out[-500:]}",
                        pytrace=False)
        return Result(list(map(str, args)), p.returncode, p.stdout, p.stderr)


# a cheap train run: two questions, no sufficiency calibration, no answer calls, no tuning
TRAIN_ARGS = ("--trees", "5", "--no-sufficiency", "--continuation-target", "sr",
              "--tune-folds", "0")


def make_warm(root: Path, train: bool = False) -> Path:
    """A cache folder holding the embeddings (and with ``train``, the entities) of every text
    the tests' runs encode on the synthetic dataset (and, shared, its index): copied into each
    test's cache."""
    cache = make_cache(root / "cache")
    cli = Cli(root, cache)
    write_syn(root / "syn.jsonl")
    fake = FakeLLM()
    try:
        res = cli.run("evaluate", "--data", "syn.jsonl", "--split", "all", "--method",
                      "fixed_k", "--generator", fake.spec, "--out", "warm-run")
        assert res.returncode == 0, res.tail()
        if train:
            res = cli.run("train", "--data", "syn.jsonl", "--generator", fake.spec,
                          "--out", "warm.joblib", *TRAIN_ARGS)
            assert res.returncode == 0, res.tail()
    finally:
        fake.close()
    return cache


def make_cli(tmp_path: Path, warm: Path, share_indexes: bool = True) -> Cli:
    """A Cli in ``tmp_path`` with its own cache files, the warm embeddings copied in."""
    cache = make_cache(tmp_path / "cache", share_indexes=share_indexes)
    for f in [*warm.glob("embeddings.sqlite*"), *warm.glob("entities.sqlite*")]:
        shutil.copy(f, cache / f.name)
    write_syn(tmp_path / "syn.jsonl")
    return Cli(tmp_path, cache)



# -- what a refusal looks like --------------------------------------------------------------
# "error: ..." from the package, or "python -m dynakrag_lite CMD: error: ..." from argparse
ERROR_LINE = re.compile(r"^(python -m dynakrag_lite[\w -]*: )?error: ")


def error_lines(res: Result) -> list[str]:
    return [x for x in res.stderr.splitlines() if ERROR_LINE.match(x)]


def assert_refused(res: Result, *names: str) -> str:
    """Exit code 2, no traceback, exactly one ``error:`` line, naming each of ``names``
    (a file, line, field or flag). Returns that line."""
    assert "Traceback (most recent call last)" not in res.stderr, \
        f"a traceback instead of one error line:\n{res.tail()}"
    errs = error_lines(res)
    assert res.returncode == 2 and len(errs) == 1, \
        f"expected exit code 2 and one 'error:' line:\n{res.tail()}"
    for name in names:
        assert name in errs[0], f"the error line does not name {name!r}: {errs[0]}"
    return errs[0]


def warning_lines(res: Result, about: str) -> list[str]:
    """stderr lines that warn (``warning``/``Warning`` in them) and mention ``about``."""
    return [x for x in res.stderr.splitlines() if "warning" in x.lower() and about in x]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the lock file aside) with its bytes."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def rows(folder: Path) -> list[dict]:
    path = folder / "predictions.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def assert_refused_or_done_without_it(res: Result, name: str, out: Path, n: int) -> None:
    """A broken cache file ``name``: either refused up front (exit 2, one error line naming
    it, no row written) or the run is done without it (exit 0, ``n`` real rows, no error row,
    one warning naming it). Never error rows with exit code 0, never a traceback."""
    assert "Traceback (most recent call last)" not in res.stderr, res.tail()
    if res.returncode == 2:
        assert_refused(res, name)
        assert rows(out) == [], "refused, yet rows were written"
        return
    got = rows(out)
    assert res.returncode == 0 and len(got) == n and not any("error" in r for r in got), \
        f"expected a refusal or {n} real rows; rows: {[r.get('error') for r in got]}\n" \
        f"{res.tail()}"
    assert len(warning_lines(res, name)) == 1, \
        f"expected one warning naming {name}:\n{res.tail()}"


def closed_port() -> int:
    import socket
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def no_dac_override() -> tuple[str, ...]:
    """A command prefix under which file permissions apply (root ignores them): setpriv
    drops the capabilities that override them. () when not root."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file permissions cannot be tested")
    return ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
