"""What the Colab live check serves on 127.0.0.1 for what this machine cannot reach.

A Colab install cell clones the repository from GitHub and fetches the official benchmark dev
files; ``colab_live_check.py`` runs the cells on a machine that may reach neither, so both are
served from the loopback interface instead:

* :class:`GitHTTPServer`: a commit of the checkout (:func:`make_bare`) over git's smart HTTP
  protocol (the dumb one cannot do the cell's shallow clone), and a folder's files under
  :data:`MIRROR_PATH`, the cells' ``DYNAKRAG_DATA_MIRROR``;
* :func:`rebuild_official`: an official dev file rebuilt in its official layout from the data
  folder's normalized file (:func:`official_hotpotqa`), what that layout could not carry, how
  prepare_data.py's reading of it compares with the data folder (:func:`compare_questions`),
  and the report's account of what stood in (:func:`stand_in_note`).

Imported by colab_live_check.py (and its tests); not a command.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "data_scripts") not in sys.path:  # prepare_data.py, however this is loaded
    sys.path.insert(0, str(ROOT / "data_scripts"))

import prepare_data  # noqa: E402  (puts ROOT on sys.path: the library of this checkout)

from dynakrag_lite.data.sources import DATASET_FILES, load_questions  # noqa: E402
from dynakrag_lite.storage import sha256_file  # noqa: E402

MIRROR_PATH = "/mirror/"  # where the server offers the rebuilt official files
# Questions in each official dev file (the data folder's README), for the report's notes.
OFFICIAL_DEV_QUESTIONS = {"hotpotqa": 7405, "2wikimultihopqa": 12576, "musique": 2417}


# -- git over smart HTTP, loopback only ------------------------------------------------------
class _GitHandler(BaseHTTPRequestHandler):
    """One request -> one ``git http-backend`` (CGI) run; headers and status passed on. A GET
    under :data:`MIRROR_PATH` is answered with a file of the server's ``files`` folder."""
    server: "GitHTTPServer"

    def do_GET(self) -> None:
        if self.server.files is not None and self.path.startswith(MIRROR_PATH):
            self._file()
        else:
            self._backend()

    def do_POST(self) -> None:
        self._backend()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded in server.requests, not printed per line

    def _reply(self, status: int, payload: bytes,
               headers: Sequence[tuple[str, str]] = (("Content-Type", "text/plain"),)) -> None:
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.server.requests.append(f"{self.command} {self.path} {status}")

    def _file(self) -> None:
        name = urllib.parse.unquote(self.path[len(MIRROR_PATH):].partition("?")[0])
        path = self.server.files / name
        # A file directly in the folder, by its exact name: no sub-folder, no "..".
        if not name or "/" in name or "\\" in name or name.startswith(".") or not path.is_file():
            self._reply(404, b"no such file\n")
        else:
            self._reply(200, path.read_bytes(), [("Content-Type", "application/octet-stream")])

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []  # git sends large requests chunked; the CGI gets the decoded body
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _backend(self) -> None:
        path, _, query = self.path.partition("?")
        body = self._body() if self.command == "POST" else b""
        env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""),
               "GIT_PROJECT_ROOT": str(self.server.root), "GIT_HTTP_EXPORT_ALL": "1",
               "REQUEST_METHOD": self.command, "PATH_INFO": urllib.parse.unquote(path),
               "QUERY_STRING": query, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": self.client_address[0],
               "SERVER_PROTOCOL": self.request_version}
        for header, var in (("Content-Encoding", "HTTP_CONTENT_ENCODING"),
                            ("Git-Protocol", "HTTP_GIT_PROTOCOL")):  # gzip bodies; protocol v2
            if self.headers.get(header):
                env[var] = self.headers[header]
        try:
            out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                 capture_output=True, timeout=300).stdout
        except subprocess.TimeoutExpired:
            out = b""
        end = min((i for i in (out.find(b"\r\n\r\n"), out.find(b"\n\n")) if i >= 0), default=-1)
        if end < 0:
            self._reply(502, b"no reply from git http-backend\n")
            return
        status, headers = 200, []
        for line in out[:end].decode("latin-1").splitlines():
            key, _, value = line.partition(":")
            if key.strip().lower() == "status":
                status = int(value.split()[0])
            elif key.strip() and key.strip().lower() != "content-length":
                headers.append((key.strip(), value.strip()))
        payload = out[end + 4:] if out[end:end + 4] == b"\r\n\r\n" else out[end + 2:]
        self._reply(status, payload, headers)


class GitHTTPServer(ThreadingHTTPServer):
    """The bare repositories under ``root`` at ``http://127.0.0.1:PORT/<name>.git`` by git's smart
    HTTP protocol and ``files``' files under /mirror/, from a thread; a context manager."""
    daemon_threads = True  # a stuck request never holds up stop()

    def __init__(self, root: Path, port: int = 0, files: Path | None = None):
        super().__init__(("127.0.0.1", port), _GitHandler)  # loopback only
        self.root = Path(root)
        self.files = Path(files) if files is not None else None
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def mirror_requests(self) -> list[str]:
        """The requests it answered for files under :data:`MIRROR_PATH`."""
        return [r for r in self.requests if r.split()[1].startswith(MIRROR_PATH)]

    def start(self) -> "GitHTTPServer":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop serving within ``timeout`` seconds; True when the thread has ended."""
        if self._thread.is_alive():
            stopper = threading.Thread(target=self.shutdown, daemon=True)
            stopper.start()
            stopper.join(timeout)
            self._thread.join(timeout)
        self.server_close()
        return not self._thread.is_alive()

    def __enter__(self) -> "GitHTTPServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def git_out(*args: str | Path, check: bool = True) -> str:
    """The stripped stdout of a local git command; raises when it hangs, or fails and ``check``."""
    return subprocess.run(["git", *map(str, args)], check=check, capture_output=True, text=True,
                          timeout=120).stdout.strip()


def make_bare(checkout: Path, bare: Path, branch: str, commit: str = "HEAD",
              run: Callable[[list[str]], Any] = lambda cmd: subprocess.run(
                  cmd, check=True, capture_output=True, timeout=600)) -> str:
    """A bare repository at ``bare`` whose ``branch`` (and HEAD) is ``commit`` of the checkout,
    resolved first (a commit made meanwhile does not move it); returns the commit."""
    sha = git_out("-C", checkout, "rev-parse", "--verify", f"{commit}^{{commit}}")
    run(["git", "init", "--bare", "-q", str(bare)])
    run(["git", "-C", str(bare), "fetch", "-q", "--no-tags", str(checkout),
         f"+{sha}:refs/heads/{branch}"])
    run(["git", "-C", str(bare), "symbolic-ref", "HEAD", f"refs/heads/{branch}"])
    return git_out("-C", bare, "rev-parse", f"refs/heads/{branch}")


# -- the benchmark data, in the official layout, from the data folder ---------------------------
def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def official_hotpotqa(normalized: Path, provenance: Path | None = None
                      ) -> tuple[list[dict], dict]:
    """The questions of ``normalized`` (a ``hotpotqa.jsonl`` of the project's schema) as records
    of HotpotQA's official dev file, in the same order (a chapter's split depends on it), and
    counts of what that layout could not carry over. The normalized file keeps no sentence
    splits: each paragraph is one sentence (prepare_data.py strips it, nothing else changes).
    ``supporting_facts`` take the provenance's sentence ids where it keeps them, else 0 (only
    the titles are read); ``type`` and ``level`` are null or absent where the sources lost them."""
    prov = {p["id"]: p for p in _jsonl(provenance)} if provenance is not None else {}
    records: list[dict] = []
    notes: collections.Counter = collections.Counter()
    double_spaced = 0  # questions; counted last in the notes
    for q in _jsonl(normalized):
        p = prov.get(q["id"], {})
        titles = [par["title"] for par in q["paragraphs"] if par["is_supporting"]]
        facts = p.get("supporting_facts")
        if facts and {t for t, _ in facts} == set(titles):
            notes["sentence_ids_from_provenance"] += 1
        else:
            facts = [[t, 0] for t in titles]
            notes["sentence_ids_unknown_written_as_0"] += 1
        rec = {"_id": q["id"], "answer": q["answers"][0], "question": q["question"],
               "supporting_facts": facts,
               "context": [[par["title"], [par["text"]]] for par in q["paragraphs"]],
               "type": q.get("type")}
        if "level" in p:
            rec["level"] = p["level"]
        records.append(rec)
        notes["questions"] += 1
        notes["paragraphs"] += len(q["paragraphs"])
        notes["paragraphs_with_surrounding_whitespace"] += sum(
            par["text"] != par["text"].strip() for par in q["paragraphs"])
        notes["answers_dropped"] += len(q["answers"]) - 1
        notes["type_unknown"] += q.get("type") is None
        notes["level_unknown"] += "level" not in p
        notes["ids_not_official"] += "id_note" in p  # the sources lost the official _id
        double = sum("  " in par["text"] for par in q["paragraphs"])
        notes["paragraphs_with_a_double_space"] += double
        double_spaced += double > 0
    notes["questions_with_a_double_space"] = double_spaced
    return records, dict(notes)


# The datasets whose official layout the check can rebuild from the data folder.
REBUILDS: dict[str, Callable[[Path, Path | None], tuple[list[dict], dict]]] = {
    "hotpotqa": official_hotpotqa}


def unserved(dataset: str, data_root: Path | None) -> str | None:
    """Why the mirror cannot offer ``dataset``'s official file, or None when it can."""
    if dataset not in REBUILDS:
        return "no rebuild of its official layout here"
    if data_root is None or not (data_root / DATASET_FILES[dataset]).exists():
        return "not in the data folder"
    return None


def compare_questions(got: Path, want: Path) -> dict:
    """How the questions of ``got`` differ from those of ``want`` as the library loads them (what a
    chapter sees): counts, ids in the same order, how many differ and in which fields."""
    a, b = load_questions(got), load_questions(want)
    fields: collections.Counter = collections.Counter()
    differ = []
    for x, y in zip(a, b):
        if x != y:
            differ.append(x.id)
            fields.update(f for f in ("id", "question", "answers", "type") if
                          getattr(x, f) != getattr(y, f))
            fields.update(f"paragraphs.{f}" for f in ("title", "text", "is_supporting")
                          if [getattr(p, f) for p in x.paragraphs] !=
                          [getattr(p, f) for p in y.paragraphs])
    return {"questions": len(a), "of": len(b),
            "same_ids_in_order": [q.id for q in a] == [q.id for q in b],
            "questions_that_differ": len(differ), "fields_that_differ": dict(fields),
            "first_differing_ids": differ[:10]}


def committed_data_sha256(dataset: str, results: Path) -> set[str]:
    """The ``data_sha256`` in the fingerprints of the committed runs of ``dataset``."""
    found = set()
    for run in (results / "experiments" / dataset).glob("*/*/run.json"):
        fingerprint = json.loads(run.read_text(encoding="utf-8")).get("fingerprint") or {}
        found.add(fingerprint.get("data_sha256"))
    return found - {None}


def rebuild_official(dataset: str, source: Path, folder: Path, expected: Path,
                     probe: Callable[[str], bool], results: Path) -> dict:
    """Write ``dataset``'s official dev file into ``folder``, rebuilt from ``source`` (with the
    provenance file beside it, if any), and normalize it into ``expected`` with prepare_data.py
    (the file a cell must end up with); what the mirror offers, for the report. ``probe`` says
    whether the official URL answers; ``results`` holds the committed runs."""
    provenance: Path | None = source.with_name(f"{dataset}.provenance.jsonl")
    if not provenance.exists():
        provenance = None
    records, layout = REBUILDS[dataset](source, provenance)
    raw = folder / prepare_data.SOURCES[dataset].filename
    raw.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    normalized = prepare_data.prepare(dataset, expected, raw=raw)
    sha = sha256_file(source)
    return {"file": raw.name, "bytes": raw.stat().st_size, "rebuilt_from": str(source),
            "provenance": str(provenance) if provenance else None,
            "official_reachable": probe(prepare_data.SOURCES[dataset].url),
            "data_folder_sha256": sha, "data_folder_is_the_committed_runs":
                sha in committed_data_sha256(dataset, results),
            "layout": layout,
            "normalized": {"sha256": sha256_file(normalized),
                           "vs_data_folder": compare_questions(normalized, source)}}


def reachable(url: str, timeout: float = 10.0) -> bool:
    """Whether ``url`` answers a HEAD request with a success status within ``timeout``."""
    req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "dynakrag-lite"})
    try:
        with urllib.request.urlopen(req, timeout=timeout):
            return True
    except (OSError, ValueError):  # no route, no name, refused, an error status
        return False


def stand_in_note(dataset: str, served: Mapping) -> str:
    """The report's plain statement of what stood in for ``dataset``'s official file."""
    layout, same = served["layout"], served["normalized"]["vs_data_folder"]
    src = prepare_data.SOURCES[dataset]
    subset = ("the subset the committed runs read" if served["data_folder_is_the_committed_runs"]
              else "not the file the committed runs read")
    return (
        f"{dataset}: the official file ({src.url}) "
        + ("answers from this machine but was not used" if served["official_reachable"] else
           "is not reachable from this machine")
        + f"; served from 127.0.0.1 (DYNAKRAG_DATA_MIRROR) an official-layout {src.filename} "
        f"rebuilt from {served['rebuilt_from']}: its {layout['questions']} questions in its "
        f"order ({subset}), not the official file's "
        f"{OFFICIAL_DEV_QUESTIONS.get(dataset, 0):,}. Each paragraph is one sentence (the data "
        f"folder keeps no sentence splits: lost); supporting_facts carry the provenance's "
        f"sentence ids (of the official sentences) for "
        f"{layout.get('sentence_ids_from_provenance', 0)} questions and sentence 0 for the "
        f"other {layout.get('sentence_ids_unknown_written_as_0', 0)}; type unknown for "
        f"{layout.get('type_unknown', 0)}, level for {layout.get('level_unknown', 0)}, "
        f"{layout.get('ids_not_official', 0)} ids are not the official _id. prepare_data.py "
        f"turned it into {same['questions']} questions, {same['questions_that_differ']} of them "
        f"unlike the data folder's as loaded ({same['fields_that_differ'] or 'none'}). On Colab "
        "the cell gets the official file instead: a chapter that builds its split or corpus from "
        "it sees other questions and other paragraphs, so its prompts are not among the recorded "
        "calls and its model calls run live. Even the same question may read differently there: "
        f"{layout.get('paragraphs_with_a_double_space', 0)} paragraphs of "
        f"{layout.get('questions_with_a_double_space', 0)} questions here hold a double space, "
        "and the official file's sentences begin with one space and are joined with nothing "
        "by prepare_data.py, so where a double space joins two sentences here the official "
        "file gives one.")
