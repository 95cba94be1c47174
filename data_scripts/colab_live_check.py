#!/usr/bin/env python
"""A live check of the Colab install cells: real pip, a real clone over HTTP, real chapter runs.

``tests/test_colab_setup.py`` runs the generated install cell against a fake pip; this script
runs the real cells of three chapters as one fresh Colab runtime would (05 on the embedded
library set, 11 on HotpotQA with the 1.5B reader, 12 on the committed results). Only the
``google.colab`` module is faked, and what this machine cannot reach is served from 127.0.0.1
by ``colab_serve.py``: GitHub, and the official dev files rebuilt from the data folder
(``--data-dir``, default ``$DYNAKRAG_DATA_DIR``, else ``../shared/data``)::

    python data_scripts/colab_live_check.py              # make colab-live-check: 05, 11, 12
    python data_scripts/colab_live_check.py --chapter 05 --chapter 11b,98 --work DIR

Shared steps (venv, runtime, data, serve), then each chapter's (its install cell, a decode after
the first cell installing a model, papermill running it) in the same venv and clone, as a user
opening one chapter after another; each is a method of :class:`LiveCheck`. A failed shared step
skips everything after it, a failed chapter step the rest of that chapter. Every command is
printed, logged and recorded in the JSON report, whose paths read ``<work>``, ``<checkout>`` and
``<data>``. Children get no host project settings (``DYNAKRAG_*`` but ``DYNAKRAG_N_THREADS``,
``PYTHONPATH``) and keep their caches in the work folder. Exit 1 when a step fails; the temporary
work folder is then kept.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "data_scripts") not in sys.path:  # the sibling scripts, run from anywhere
    sys.path.insert(0, str(ROOT / "data_scripts"))

import colab  # noqa: E402
import colab_serve  # noqa: E402
import install_llama  # noqa: E402
import prepare_data  # noqa: E402  (puts ROOT on sys.path: the library of this checkout)
from execute_chapters import cache_rows, resolve_chapters  # noqa: E402

from dynakrag_lite.data.sources import DATASET_FILES, data_dir  # noqa: E402
from dynakrag_lite.storage import atomic_write_json, sha256_file  # noqa: E402

# The default run: the embedded set, benchmark data with the 1.5B reader, the results chapter.
CHAPTERS = ("05_atomic_actions.ipynb", "11_baselines.ipynb", "12_results.ipynb")
KERNEL = "dynakrag-colab-live"
DEFAULT_OUT = ROOT / "results" / "diagnostics" / "colab-live-check.json"
# Host variables that stay: the thread caps a shared machine needs (a Colab user has none).
KEEP_HOST = ("DYNAKRAG_N_THREADS",)
DROP_HOST = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "JUPYTER_PATH",
             "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "IPYTHONDIR", "HF_HOME")

DECODE = r'''
import importlib.metadata as md, json, sys, time
import llama_cpp
import dynakrag_lite
from dynakrag_lite.generators import models


def size(name):  # bytes in the model's weight packages: "smallest" without assembling a GGUF
    return sum(f.size or 0 for d in models.REGISTRY[name].distributions
               for f in (md.distribution(d.split("==")[0]).files or ()))


names = [n for n in models.REGISTRY if models.is_installed(n)]
if not names:
    sys.exit("no bundled model is installed")
name = min(names, key=size)
t0 = time.perf_counter()
llm = llama_cpp.Llama(model_path=str(models.gguf_path(name)), n_ctx=256, n_threads=1,
                      verbose=False)
r = llm.create_completion("The capital of France is", max_tokens=8, temperature=0.0)
info = llama_cpp.llama_print_system_info()
llm.close()
print("DECODE " + json.dumps({
    "model": name, "installed": names, "prompt": "The capital of France is",
    "text": r["choices"][0]["text"], "tokens": r["usage"]["completion_tokens"],
    "seconds": round(time.perf_counter() - t0, 2), "llama_cpp": llama_cpp.__version__,
    "llama_cpp_file": llama_cpp.__file__, "dynakrag_lite_file": dynakrag_lite.__file__,
    "system_info": info.decode() if isinstance(info, bytes) else str(info)}))
'''


# -- paths in the report ----------------------------------------------------------------------
def scrub(obj: Any, places: Mapping[str | Path, str]) -> Any:
    """``obj`` (JSON-like) with each path of ``places`` replaced by its label in every string,
    longest path first (a work folder inside the checkout is still called ``<work>``)."""
    pairs = sorted(((str(p), label) for p, label in places.items() if len(str(p)) > 1),
                   key=lambda pair: -len(pair[0]))

    def one(s: str) -> str:
        for path, label in pairs:
            s = s.replace(path, label)
        return s

    if isinstance(obj, str):
        return one(obj)
    if isinstance(obj, Mapping):
        return {one(str(k)): scrub(v, places) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, places) for v in obj]
    return obj


def write_report(report: Mapping, out: Path, places: Mapping[str | Path, str]) -> Path:
    """Write ``report`` with paths scrubbed, atomically (a half-written report never lands)."""
    return atomic_write_json(out, scrub(report, places), indent=1)



# -- what the outputs say ---------------------------------------------------------------------
def portable_wheel_dir(checkout: Path, builds: Any = install_llama) -> Path | None:
    """The folder of the portable llama-cpp-python wheel `make install` built (``builds``:
    install_llama.py names it), else of any portable build of the pinned version, or None."""
    exact = checkout / builds.wheel_dir("portable").relative_to(builds.ROOT)
    if any(exact.glob("llama_cpp_python-*.whl")):
        return exact
    found = sorted(d for d in (checkout / ".cache" / "wheels").glob(
        f"llama_cpp_python-{builds.VERSION}-portable-*") if any(d.glob("*.whl")))
    return found[0] if found else None


_PIP_SOURCE = re.compile(r"^\s*(Processing|Downloading|Using cached|Obtaining)\s+"
                         r"(\S*llama[_-]cpp[_-]python\S*)", re.I | re.M)


def wheel_source(pip_output: str) -> str | None:
    """The file or URL pip says it installed llama-cpp-python from, if it says so."""
    m = _PIP_SOURCE.search(pip_output)
    return f"{m.group(1)} {m.group(2)}" if m else None


def index_failures(pip_output: str, index_url: str) -> list[str]:
    """pip's lines saying a request to the index ``index_url`` failed (pip names the index by
    its host in some messages and only by its path in its retry warnings)."""
    parts = urllib.parse.urlsplit(index_url)
    where = [x for x in (parts.hostname, parts.path.rstrip("/")) if x]
    return [ln.strip() for ln in pip_output.splitlines()
            if any(w in ln for w in where) and re.search(r"Retrying|Could not|[Ee]rror", ln)]


_NAN = re.compile(r"(?<![A-Za-z])nan(?![A-Za-z])", re.I)


def check_notebook(nb: Mapping, marker: str = colab.MARKER) -> dict:
    """Errors, "nan" in text outputs, stderr outputs and the install cell's log lines of an
    executed notebook."""
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    errors, nans, stderr, setup = [], [], 0, []
    for i, cell in enumerate(code):
        is_setup = "".join(cell.get("source", "")).startswith(marker)
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                errors.append({"code_cell": i,
                               "error": f"{out.get('ename')}: {out.get('evalue')}"})
                continue
            texts = []
            if kind == "stream":
                stderr += out.get("name") == "stderr"
                texts.append(out.get("text", ""))
            for mime, value in (out.get("data") or {}).items():
                if mime in ("text/plain", "text/markdown"):
                    texts.append(value)
            for text in texts:
                text = "".join(text) if isinstance(text, list) else str(text)
                for m in _NAN.finditer(text):
                    nans.append({"code_cell": i, "context": text[max(0, m.start() - 40):
                                                                  m.end() + 40].strip()})
                if is_setup:
                    setup += [ln for ln in text.splitlines() if ln.startswith("[colab setup]")]
    return {"code_cells": len(code),
            "executed": sum(c.get("execution_count") is not None for c in code),
            "errors": errors, "nan": nans, "stderr_outputs": stderr, "install_cell": setup}


def cell_data(need: colab.Needs, out: str, state: Mapping | None, clone: Path,
              served: Mapping[str, Mapping]) -> dict:
    """What data an install cell got: its and prepare_data.py's lines about each dataset, its
    DYNAKRAG_DATA_DIR, each prepared file's sha256 (is it the served file normalized here?)."""
    if not need.data:
        return {"needed": [], "note": "the chapter reads the bundled library dataset or "
                                      "committed results: the cell runs no prepare_data.py"}
    folder = clone / ".cache" / "data"
    prepared = {}
    for ds in need.data:
        path = folder / DATASET_FILES[ds]
        sha = sha256_file(path) if path.exists() else None
        prepared[ds] = {"sha256": sha, "is_the_served_file_normalized": (
            ds in served and sha == served[ds]["normalized"]["sha256"])}
    # prepare_data.py's lines, the cell's own, and a failed fetch from the mirror
    said = (*(f"{ds}: " for ds in need.data), *(f"[colab setup] {ds}:" for ds in need.data),
            "error: could not fetch")
    return {"needed": list(need.data),
            "lines": [ln for ln in out.splitlines() if ln.startswith(said)],
            "DYNAKRAG_DATA_DIR": (state or {}).get("env", {}).get("DYNAKRAG_DATA_DIR"),
            "prepared": prepared,
            "stood_in": {ds: "served from 127.0.0.1, rebuilt from the data folder "
                             "(real_and_stood_in)" if ds in served else
                         "not served: the cell could not prepare it" for ds in need.data}}


def cell_findings(out: str, need: colab.Needs, clone: Path,
                  served: Mapping[str, Mapping]) -> dict:
    """What an install cell's output and the clone say: its ``[colab setup]`` lines, the state
    it left (colab.STATE_PROBE), how pip got llama-cpp-python, the models, the data, the clone."""
    setup = [ln for ln in out.splitlines() if ln.startswith("[colab setup]")]
    state = colab.cell_state(out)
    failed = index_failures(out, colab.LLAMA_CPU_INDEX)
    return {"setup_lines": setup, "state_left": state,
            "llama": {"compiled": colab.COMPILE_WARNING in out, "pip_took": wheel_source(out),
                      "index_lookups_failed": len(failed),
                      "index_first_failure": failed[0][:300] if failed else None},
            "models": [ln.split("model ", 1)[1] for ln in setup if "[colab setup] model " in ln],
            "data": cell_data(need, out, state, clone, served),
            "clone": {"path": str(clone), "shallow": (clone / ".git" / "shallow").exists(),
                      "commit": colab_serve.git_out("-C", clone, "rev-parse", "HEAD",
                                                    check=False)}}


def cell_problem(found: Mapping, clone: Path, commit: str, served: Mapping) -> str | None:
    """What is wrong with what a cell left (:func:`cell_findings`), or None: it must print its
    state, leave the clone's book folder current and an LLM cache set, have made a shallow clone
    of ``commit`` and prepared each served dataset as the served file normalized."""
    state = found["state_left"]
    if state is None:
        return "the cell printed no state"
    if state["cwd"] != str(clone / "book") or not state["env"]["DYNAKRAG_LLM_CACHE"]:
        return (f"the cell left cwd={state['cwd']}, "
                f"DYNAKRAG_LLM_CACHE={state['env']['DYNAKRAG_LLM_CACHE']}")
    if found["clone"]["commit"] != commit or not found["clone"]["shallow"]:
        return f"the clone is not a shallow clone of {commit}: {found['clone']}"
    wrong = [ds for ds, p in (found["data"].get("prepared") or {}).items()
             if ds in served and not p["is_the_served_file_normalized"]]
    if wrong:
        return f"the cell's {', '.join(wrong)} data is not the served file normalized"
    return None


def child_env(base: Mapping[str, str], venv_bin: Path, caches: Path) -> tuple[dict, list[str]]:
    """The environment of every child: the host's without its project settings (Colab has
    none), the venv first on PATH, caches under ``caches``. Returns it and the dropped names."""
    dropped = sorted(k for k in base if k in DROP_HOST or (
        k.startswith("DYNAKRAG_") and k not in KEEP_HOST))
    env = {k: v for k, v in base.items() if k not in dropped}
    # A proxy of the host must not carry the clone from the loopback server.
    host_no_proxy = base.get("no_proxy") or base.get("NO_PROXY", "")
    loopback = ",".join(x for x in (host_no_proxy, "127.0.0.1,localhost") if x)
    env.update(no_proxy=loopback, NO_PROXY=loopback,
               PATH=f"{venv_bin}{os.pathsep}{base.get('PATH', '')}",
               XDG_CACHE_HOME=str(caches), DYNAKRAG_CACHE_DIR=str(caches / "dynakrag_lite"),
               IPYTHONDIR=str(caches / "ipython"), MPLCONFIGDIR=str(caches / "matplotlib"))
    return env, dropped


# -- steps --------------------------------------------------------------------------------------
class StepFailed(RuntimeError):
    """A step's command failed or its result is not what the cell promises."""


class Check:
    """Runs and records steps: each command printed, logged to a file, timed."""

    def __init__(self, logs: Path, env: Mapping[str, str], echo: Callable[[str], None] = print):
        self.logs = logs
        self.env = dict(env)
        self.echo = echo
        self.steps: list[dict] = []

    @property
    def ok(self) -> bool:
        return all(s.get("ok") for s in self.steps)

    @contextlib.contextmanager
    def step(self, name: str, what: str) -> Iterator[dict]:
        rec: dict = {"name": name, "what": what, "ok": False, "seconds": 0.0, "commands": [],
                     "found": {}}
        self.steps.append(rec)
        self.echo(f"== {name}: {what}")
        t0 = time.monotonic()
        try:
            yield rec
            rec["ok"] = True
        except Exception as e:  # recorded: the report is written whatever failed
            rec["error"] = str(e) if isinstance(e, StepFailed) else f"{type(e).__name__}: {e}"
            self.echo(f"   FAILED: {rec['error']}")
        finally:
            rec["seconds"] = round(time.monotonic() - t0, 1)
            codes = [c["exit_code"] for c in rec["commands"]]
            rec["exit_code"] = next((c for c in codes if c != 0), 0) if codes else None

    def skip(self, name: str, what: str, why: str) -> None:
        self.steps.append({"name": name, "what": what, "ok": False, "skipped": why})
        self.echo(f"== {name}: skipped ({why})")

    def run(self, cmd: Sequence[str | Path], *, extra_env: Mapping[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 600.0, check: bool = True) -> str:
        """Run ``cmd`` (stdout and stderr to a log file), record it; return its output. With
        ``check``, a command that fails or outlives ``timeout`` raises :class:`StepFailed`."""
        rec = self.steps[-1]
        shown = colab.command_line(cmd, extra_env)
        stem = re.sub(r"[^\w.-]", "_", rec["name"])  # "cell:05_x" -> cell_05_x-1.log
        log = self.logs / f"{stem}-{len(rec['commands']) + 1}.log"
        self.echo(f"$ {shown}" + (f"   (in {cwd})" if cwd else ""))
        t0 = time.monotonic()
        with open(log, "wb") as fh:
            # own session: a timeout ends the command's whole process group (pip's children)
            proc = subprocess.Popen([str(c) for c in cmd], stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True,
                                    env={**self.env, **(extra_env or {})})
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
                _end_group(proc)
        seconds = round(time.monotonic() - t0, 1)
        out = log.read_text(encoding="utf-8", errors="replace")
        entry = {"command": shown, "exit_code": rc, "seconds": seconds, "log": str(log)}
        if cwd:
            entry["cwd"] = str(cwd)
        if rc is None:
            entry["timeout"] = timeout
        if rc != 0:
            entry["tail"] = out.splitlines()[-25:]
        rec["commands"].append(entry)
        self.echo(f"   exit {rc} in {seconds} s (log: {log})")
        if check and rc != 0:
            raise StepFailed(f"{exit_problem(entry)}: {shown}")
        return out


def _end_group(proc: subprocess.Popen) -> None:
    """End ``proc``'s process group: TERM, then KILL for whatever outlives 10 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    # Also when the leader ended on TERM: a child of it that ignores TERM is still running.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def exit_problem(entry: Mapping) -> str | None:
    """What went wrong with a recorded command (``exit code 3``, ``no exit within 600 s``)."""
    if entry["exit_code"] is None:
        return f"no exit within {entry['timeout']:.0f} s"
    return f"exit code {entry['exit_code']}" if entry["exit_code"] else None


def _pin(requirements: str, name: str) -> str:
    m = re.search(rf"^{re.escape(name)}\s*==\s*([^\s#;]+)", requirements, re.M)
    if not m:
        raise StepFailed(f"requirements.txt pins no {name} version")
    return f"{name}=={m.group(1)}"


# -- chapters, and the order of their steps ----------------------------------------------------
Step = tuple[str, str, Callable[[dict], None]]  # name, what, body (fills rec["found"])


def run_steps(check: Check, shared: Sequence[Step],
              chapters: Mapping[str, Sequence[Step]]) -> dict[str, list[dict]]:
    """Run the shared steps, then each chapter's; each chapter's step records. A failed chapter
    step skips the rest of that chapter only (the next one runs, as a user's next one would)."""
    for name, what, fn in shared:
        if not check.ok:
            check.skip(name, what, "an earlier step failed")
            continue
        with check.step(name, what) as rec:
            fn(rec)
    shared_ok = check.ok
    done: dict[str, list[dict]] = {}
    for chapter, steps in chapters.items():
        recs = done[chapter] = []
        for name, what, fn in steps:
            if not shared_ok:
                check.skip(name, what, "a shared step failed")
            elif not all(r.get("ok") for r in recs):
                check.skip(name, what, f"an earlier step of {chapter} failed")
            else:
                with check.step(name, what) as rec:
                    fn(rec)
            check.steps[-1]["chapter"] = chapter
            recs.append(check.steps[-1])
    return done


def step_outcomes(steps: Sequence[Mapping]) -> dict[str, list[str]]:
    """The names of the steps that failed and of those skipped, as the report lists them."""
    return {"failed_steps": [s["name"] for s in steps if not s.get("ok") and "skipped" not in s],
            "skipped_steps": [s["name"] for s in steps if "skipped" in s]}


def chapter_result(chapter: str, needs: colab.Needs, steps: Sequence[Mapping]) -> dict:
    """One chapter's entry of the report, from its step records."""
    kind = {s["name"].split(":", 1)[0]: s for s in steps}
    cell = kind.get("cell", {}).get("found", {})
    ran = kind.get("chapter", {}).get("found", {})
    return {"chapter": chapter, "ok": bool(steps) and all(s.get("ok") for s in steps),
            "seconds": round(sum(s.get("seconds", 0.0) for s in steps), 1),
            **step_outcomes(steps),
            "needs": {"models": list(needs.models), "data": list(needs.data)},
            "models": cell.get("models"), "data": cell.get("data"),
            "cells": {"code": ran.get("code_cells"), "executed": ran.get("executed")},
            "errors": ran.get("errors"), "nan": ran.get("nan"),
            "live_model_calls": ran.get("live_model_calls")}


def up_front(wheels: Path | None, datasets: Sequence[str], data_root: Path | None) -> list[str]:
    """What will make this run slow or leave a chapter without data, said before it starts."""
    out = []
    if wheels is None:
        out.append("no portable llama-cpp-python wheel under .cache/wheels "
                   "(install_llama.wheel_dir('portable')): the first install cell will compile "
                   "llama-cpp-python (several minutes on 2 cores)")
    out += [f"{ds}: {why} ({data_root}); the mirror answers 404 and the cell reports it "
            "unavailable" for ds in datasets if (why := colab_serve.unserved(ds, data_root))]
    return out


def stop_server(check: Check, server: colab_serve.GitHTTPServer) -> None:
    """The last step: stop ``server`` (at most 10 s) and record the requests it answered."""
    with check.step("stop-server", "stop the HTTP server (at most 10 s)") as rec:
        rec["found"] = {"stopped": server.stop(timeout=10.0), "requests": len(server.requests),
                        "first_requests": server.requests[:6],
                        "mirror_requests": server.mirror_requests()}
        if not rec["found"]["stopped"]:
            raise StepFailed("the server thread did not end within 10 s")


# -- the run -------------------------------------------------------------------------------------
class LiveCheck:
    """One run in ``work``: its folders, one method per step (each fills its record's ``found``
    and raises StepFailed) and what the steps leave for the later ones and the report."""

    def __init__(self, work: Path, chapters: Sequence[str], data_root: Path | None,
                 echo: Callable[[str], None], probe: Callable[[str], bool]) -> None:
        self.t_start = time.monotonic()
        self.work, self.chapters = work, list(chapters)
        self.data_root, self.echo, self.probe = data_root, echo, probe
        self.venv, self.fake, self.content, self.files = (
            work / d for d in ("venv", "fakecolab", "content", "mirror"))
        self.vpy = self.venv / "bin" / "python"
        (work / "logs").mkdir(parents=True)
        self.env, self.dropped = child_env(os.environ, self.vpy.parent, work / "cache")
        self.check = Check(work / "logs", self.env, echo)
        self.repo = colab.read_repo(ROOT / "_config.yml")
        self.needs = {ch: colab.needs_for(ch) for ch in chapters}
        self.datasets = list(dict.fromkeys(ds for n in self.needs.values() for ds in n.data))
        self.clone = self.content / self.repo.name
        self.commit = colab_serve.git_out("-C", ROOT, "rev-parse", "HEAD")
        self.wheels = portable_wheel_dir(ROOT, install_llama)
        self.server: colab_serve.GitHTTPServer | None = None  # set by serve_step
        self.served: dict[str, dict] = {}  # dataset -> what the mirror offers (data_step)
        self.cell_env: dict[str, str] = {}  # for the cells and papermill (serve_step)

    def run(self) -> dict:
        """Every step, then the server stopped whatever failed; the report, paths not scrubbed."""
        report = self.header()
        self.echo(f"colab live check of {', '.join(self.chapters)} at {self.commit[:12]}; "
                  "llama-cpp-python: " + (f"portable wheel {self.wheels.name}" if self.wheels
                                          else "no portable wheel"))
        for w in report["warnings"]:
            self.echo(f"WARNING: {w}")
        try:
            recs = run_steps(self.check, *self.plan())
        finally:
            if self.server is not None:
                stop_server(self.check, self.server)
        report.update(
            chapters=[chapter_result(ch, self.needs[ch], recs[ch]) for ch in self.chapters],
            real_and_stood_in=real_and_stood_in(self.wheels, self.served,
                                                platform.python_version()),
            ok=self.check.ok, **step_outcomes(self.check.steps),
            seconds=round(time.monotonic() - self.t_start, 1))
        return report

    def header(self) -> dict:
        """The report as it stands before the first step (``steps`` fills as they run)."""
        kept = (*KEEP_HOST, "OMP_NUM_THREADS", "PIP_FIND_LINKS", "PIP_INDEX_URL",
                "PIP_EXTRA_INDEX_URL")
        return {
            "check": "colab-live-check", "what": __doc__.split("\n\n")[0],
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "cpu": {"model": install_llama.cpu_model(), "cores": os.cpu_count(),
                    "load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
            "python": platform.python_version(), "platform": platform.platform(),
            "commit": self.commit, "worktree_changes_not_served": bool(colab_serve.git_out(
                "-C", ROOT, "status", "--porcelain", "--untracked-files=no")),
            "chapters_checked": self.chapters,
            "warnings": up_front(self.wheels, self.datasets, self.data_root),
            "environment": {"dropped_from_host": self.dropped,
                            "kept_from_host": {k: os.environ[k] for k in kept if k in os.environ},
                            "set": {k: self.env[k] for k in ("XDG_CACHE_HOME",
                                                             "DYNAKRAG_CACHE_DIR")}},
            "portable_wheel_dir": str(self.wheels) if self.wheels else None,
            # Relative to the checkout: the report names its absolute path <data>.
            "data_folder": os.path.relpath(self.data_root, ROOT) if self.data_root else None,
            "steps": self.check.steps}

    def plan(self) -> tuple[list[Step], dict[str, list[Step]]]:
        """The shared steps and each chapter's, as :func:`run_steps` takes them."""
        shared: list[Step] = [
            ("venv", "a fresh virtual environment with pip", self.venv_step),
            ("runtime", "what Colab has and the cells do not install; a fake google.colab",
             self.runtime_step)]
        if self.datasets:
            shared.append(("data", f"{', '.join(self.datasets)} in the official layout, rebuilt "
                                   "from the data folder", self.data_step))
        shared.append(("serve", "the checkout's HEAD as a bare repository over HTTP on 127.0.0.1"
                       + (", and the rebuilt data files" if self.datasets else ""),
                       self.serve_step))
        first_with_model = next((ch for ch in self.chapters if self.needs[ch].models), None)
        decode: Step = ("decode", "llama_cpp decodes with the smallest installed bundled model",
                        self.decode_step)
        return shared, {ch: [
            (f"cell:{Path(ch).stem}", f"the install cell of {ch}, real pip",
             functools.partial(self.cell_step, ch)),
            *([decode] if ch == first_with_model else []),
            (f"chapter:{Path(ch).stem}", f"papermill runs {ch} in quick mode in the venv's kernel",
             functools.partial(self.chapter_step, ch))] for ch in self.chapters}

    def versions(self, *dists: str) -> dict[str, str]:
        """The versions of ``dists`` installed in the venv."""
        code = ("import importlib.metadata as m, json; "
                f"print(json.dumps({{d: m.version(d) for d in {dists!r}}}))")
        return json.loads(self.check.run([self.vpy, "-c", code]).splitlines()[-1])

    # -- the steps, in their order -----------------------------------------------------------
    def venv_step(self, rec: dict) -> None:
        """A fresh ``python -m venv`` with pip, in the work folder."""
        self.check.run([sys.executable, "-m", "venv", self.venv], timeout=600)
        out = self.check.run([self.vpy, "-c",
                              "import sys, pip; print(sys.version.split()[0], pip.__version__)"])
        rec["found"]["python"], rec["found"]["pip"] = out.split()[-2:]

    def runtime_step(self, rec: dict) -> None:
        """What Colab has and the cells do not install: requirements.txt's torch pin (Colab ships
        its own: colab.COLAB_SKIP), ipykernel and papermill; and a fake ``google.colab`` (an
        empty module imported at start-up, as Colab's kernel has it) only the kernel sees."""
        check, vpy = self.check, self.vpy
        torch = _pin((ROOT / "requirements.txt").read_text(encoding="utf-8"), "torch")
        check.run([vpy, "-m", "pip", "install", torch, "ipykernel", "papermill"], timeout=3600)
        colab.write_fake_colab(self.fake)
        check.run([vpy, "-m", "ipykernel", "install", "--prefix", self.venv, "--name", KERNEL,
                   "--display-name", "Python 3 (colab live check)"])
        spec = self.venv / "share" / "jupyter" / "kernels" / KERNEL / "kernel.json"
        kernel = json.loads(spec.read_text(encoding="utf-8"))
        kernel["env"] = {"PYTHONPATH": str(self.fake)}
        spec.write_text(json.dumps(kernel, indent=1), encoding="utf-8")
        rec["found"]["versions"] = self.versions("torch", "ipykernel", "papermill")
        rec["found"]["kernel"] = {"name": KERNEL, "spec": str(spec), "env": kernel["env"]}

    def data_step(self, rec: dict) -> None:
        """Each official dev file the check can rebuild (:func:`colab_serve.rebuild_official`)
        written in its official layout; what cannot be served, and why."""
        found = rec["found"]
        found.update(needed=self.datasets, served=self.served, not_served={},
                     data_folder=str(self.data_root) if self.data_root else None)
        self.files.mkdir()
        for ds in self.datasets:
            if why := colab_serve.unserved(ds, self.data_root):
                found["not_served"][ds] = why
            else:
                self.served[ds] = colab_serve.rebuild_official(
                    ds, self.data_root / DATASET_FILES[ds], self.files, self.work / "expected",
                    self.probe, ROOT / "results")

    def serve_step(self, rec: dict) -> None:
        """HEAD as branch ``repository.branch`` of a bare repository, served on 127.0.0.1 by
        git's smart HTTP protocol (as GitHub: over the dumb one git refuses the cell's shallow
        clone), with the rebuilt files under :data:`colab_serve.MIRROR_PATH`, the cells'
        ``DYNAKRAG_DATA_MIRROR``; checked by ``git ls-remote`` and by downloading each file."""
        repo, commit = self.repo, self.commit
        bare = self.work / "served" / f"{repo.name}.git"
        sha = colab_serve.make_bare(ROOT, bare, repo.branch, commit,
                                    lambda cmd: self.check.run(cmd, timeout=600))
        if sha != commit:
            raise StepFailed(f"served {sha}, checkout HEAD is {commit}")
        self.server = colab_serve.GitHTTPServer(bare.parent,
                                                files=self.files if self.datasets else None)
        url = self.server.start().url(bare.name)
        refs = self.check.run(["git", "ls-remote", url], timeout=60)
        rec["found"].update(url=url, commit=sha, branch=repo.branch, bound_to="127.0.0.1",
                            protocol="git smart HTTP (git http-backend)",
                            ls_remote=refs.strip().splitlines())
        self.cell_env.update(PYTHONPATH=str(self.fake), DYNAKRAG_COLAB_REPO=url,
                             DYNAKRAG_COLAB_HOME=str(self.content))
        links = [x for x in (os.environ.get("PIP_FIND_LINKS", ""), str(self.wheels or "")) if x]
        if links:
            self.cell_env["PIP_FIND_LINKS"] = " ".join(links)
        if not self.datasets:
            return
        # Also for a dataset not served: a quick 404, not the internet.
        mirror = self.server.url(colab_serve.MIRROR_PATH.strip("/"))
        self.cell_env[prepare_data.MIRROR_ENV] = mirror
        files: dict[str, dict] = {}
        rec["found"]["data_mirror"] = {"url": mirror, "files": files}
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for ds, info in self.served.items():
            info["url"] = prepare_data.mirror_url(ds, mirror)
            with no_proxy.open(info["url"], timeout=60) as resp:
                files[ds] = {"url": info["url"], "bytes": len(resp.read())}
            if files[ds]["bytes"] != info["bytes"]:
                raise StepFailed(f"the mirror sent {files[ds]['bytes']} bytes of {info['file']}, "
                                 f"not {info['bytes']}")

    def cell_step(self, chapter: str, rec: dict) -> None:
        """The chapter's install cell (colab.install_cell_source of its needs, checked to be the
        one committed in the served chapter) run by the venv's python with the real pip, the
        served URL as ``DYNAKRAG_COLAB_REPO`` and the portable wheel `make install` built
        offered through ``PIP_FIND_LINKS`` (without one the cell compiles llama-cpp-python);
        then what it left (:func:`cell_findings`, :func:`cell_problem`)."""
        need, found, book = self.needs[chapter], rec["found"], self.repo.path_to_book
        cell = colab.install_cell_source(self.repo, need, chapter)
        committed = json.loads(colab_serve.git_out("-C", ROOT, "show",
                                                   f"{self.commit}:{book}/{chapter}"))
        found["cell_is_the_chapters"] = cell == colab.find_install_cell(committed)
        if not found["cell_is_the_chapters"]:
            raise StepFailed(f"the generated cell is not the one committed in {chapter} "
                             "(run `make colab-cells` and commit)")
        script = self.work / f"cell-{Path(chapter).stem}.py"
        script.write_text(cell + "\n" + colab.STATE_PROBE, encoding="utf-8")
        self.content.mkdir(exist_ok=True)
        # Not checked here: what pip did is read from the output of a failed cell too.
        out = self.check.run([self.vpy, script], extra_env=self.cell_env, cwd=self.work,
                             timeout=3600 if self.wheels else 10800, check=False)
        found.update(cell_findings(out, need, self.clone, self.served))
        if problem := exit_problem(rec["commands"][-1]):
            raise StepFailed(f"the cell: {problem}")
        found["torch_after"] = self.versions("torch")["torch"]
        if problem := cell_problem(found, self.clone, self.commit, self.served):
            raise StepFailed(problem)

    def decode_step(self, rec: dict) -> None:
        """The venv's ``llama_cpp`` decodes 8 tokens with the smallest bundled model installed."""
        out = self.check.run([self.vpy, "-c", DECODE], cwd=self.work, timeout=900)
        line = next((ln for ln in out.splitlines() if ln.startswith("DECODE ")), None)
        if line is None:
            raise StepFailed("the decode printed no result")
        res = json.loads(line.removeprefix("DECODE "))
        info = res.pop("system_info")
        res["features_on"] = sorted(k for k, v in install_llama.features(info).items() if v)
        rec["found"].update(res)
        if res["tokens"] <= 0:
            raise StepFailed("decoded no token")

    def chapter_step(self, chapter: str, rec: dict) -> None:
        """papermill executes the clone's chapter in quick mode in the venv's kernel, its own
        install cell first (finding the clone and the finished steps, as on Colab). It must hold
        no error output and no "nan" in its text outputs; the rows the recorded-call cache
        gained are its live model calls."""
        found, book = rec["found"], self.clone / self.repo.path_to_book
        cache = self.clone / ".cache" / "llm_calls.sqlite"
        before = cache_rows(cache)
        out_nb = self.work / "executed" / chapter
        out_nb.parent.mkdir(exist_ok=True)
        # The kernelspec gives the kernel its PYTHONPATH (google.colab); papermill runs without.
        self.check.run([self.vpy, "-m", "papermill", book / chapter, out_nb, "-k", KERNEL,
                        "--cwd", book, "-p", "quick", "True", "--no-progress-bar",
                        "--execution-timeout", "1800"],
                       extra_env={k: v for k, v in self.cell_env.items() if k != "PYTHONPATH"},
                       cwd=self.work, timeout=3600, check=False)
        found.update(check_notebook(json.loads(out_nb.read_text(encoding="utf-8"))
                                    if out_nb.exists() else {}))
        after = cache_rows(cache)
        found["llm_cache_rows"] = {"before": before, "after": after}
        found["live_model_calls"] = None if None in (before, after) else after - before
        problems = []
        if papermill := exit_problem(rec["commands"][-1]):
            problems.append(f"papermill: {papermill}")
        if found["errors"]:
            problems.append(f"{len(found['errors'])} error output(s)")
        if found["nan"]:
            problems.append(f"'nan' in {len(found['nan'])} text output(s)")
        if not any(ln.startswith("[colab setup] done") for ln in found["install_cell"]):
            problems.append("the install cell did not run its Colab path")
        if problems:
            raise StepFailed("; ".join(problems))


def run_check(work: Path, chapters: Sequence[str] = CHAPTERS, data_root: Path | None = None,
              echo: Callable[[str], None] = print,
              probe: Callable[[str], bool] = colab_serve.reachable) -> dict:
    """The report (paths not scrubbed) of every step run in ``work``, an empty folder, for
    ``chapters`` (book file names); ``probe`` says whether an official URL answers. POSIX only."""
    # resolved: the cell reports os.getcwd(), a resolved path, to compare with
    return LiveCheck(work.resolve(), chapters, data_root, echo, probe).run()


def real_and_stood_in(wheels: Path | None, served: Mapping[str, Mapping],
                      python: str) -> dict:
    """The report's plain account of what ran for real and what stood in for Colab."""
    return {
        "real": [
            "each chapter's install cell as committed, colab.setup() from the clone, pip with "
            "the package indexes this machine offers (requirements, the library, the model "
            "weight packages), git clone --depth 1 over git's smart HTTP protocol",
            "prepare_data.py fetching over HTTP and normalizing, for the data it was served",
            "papermill executing each chapter in quick mode, its hidden install cell first, "
            "replaying the committed recorded calls (book/_llm_cache.sqlite)"],
        "stood_in": [
            f"Colab's runtime: a fresh venv on this machine (Python {python}) holding what the "
            "cells do not install (the torch requirements.txt pins, ipykernel, papermill) and an "
            "empty google.colab module",
            "GitHub: this checkout's HEAD commit, served from 127.0.0.1",
            ("llama-cpp-python: the portable wheel built on this machine, offered through "
             "PIP_FIND_LINKS (the cell tries its prebuilt CPU index first)") if wheels else
            ("llama-cpp-python: no portable wheel was offered; whether pip found a prebuilt "
             "wheel or the cell compiled it is in each cell step's llama"),
            *(colab_serve.stand_in_note(ds, info) for ds, info in served.items())]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=None,
                    help="an empty or new folder for the venv, clone and logs (default: a "
                         "temporary folder, removed after a successful check)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary folder after a successful check (a --work folder "
                         "is always kept)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the JSON report")
    ap.add_argument("--chapter", action="append", default=None, metavar="CHAPTER",
                    help="a chapter to check: its number (05, 11b), name or file name, or a "
                         "comma list; repeatable (default: " + ", ".join(CHAPTERS) + ")")
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="the folder of normalized benchmark files the served official-layout "
                         "files are rebuilt from (default: $DYNAKRAG_DATA_DIR, else "
                         "../shared/data)")
    args = ap.parse_args(argv)
    try:
        chapters = [p.name for p in resolve_chapters(args.chapter or CHAPTERS, ROOT / "book")]
    except ValueError as e:
        ap.error(str(e))
    data_root = data_dir(args.data_dir)  # read before children drop $DYNAKRAG_DATA_DIR
    data_root = data_root.resolve() if data_root else None
    if args.work is not None:
        work = args.work.resolve()
        if work.exists() and any(work.iterdir()):
            ap.error(f"--work {work} is not empty (the check needs a fresh environment)")
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="colab-live-check-")).resolve()
    try:
        report = run_check(work, chapters, data_root)
    except BaseException:  # no report (setup outside the steps failed, or ^C): say where
        print(f"work folder kept: {work}", file=sys.stderr)
        raise
    report["command"] = shlex.join(["python", "data_scripts/colab_live_check.py",
                                    *(argv if argv is not None else sys.argv[1:])])
    places = {work: "<work>", ROOT: "<checkout>", Path.home(): "~"}
    if data_root:
        places[data_root] = "<data>"
    out = write_report(report, args.out, places)
    for r in report["chapters"]:
        print(f"{r['chapter']}: {'ok' if r['ok'] else 'FAILED'}, {r['cells']['executed']} of "
              f"{r['cells']['code']} code cells run, {len(r['errors'] or [])} errors, "
              f"{r['live_model_calls']} live model calls, {r['seconds']} s")
    verdict = "ok" if report["ok"] else "FAILED: " + ", ".join(report["failed_steps"])
    print(f"report: {out}  ({verdict}, {report['seconds']} s)")
    if args.work is None and report["ok"] and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder kept: {work}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
