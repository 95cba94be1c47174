"""The persistent SQLite call cache: keys, hits, corruption handling, concurrency, persistence."""
from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import subprocess
import sys
import threading

import pytest

from dynakrag_lite.experiments.cli import main
from dynakrag_lite.experiments.maintenance import merge_cache
from dynakrag_lite.generators.base import Generation
from dynakrag_lite.generators.cache import (CacheError, CachedGenerator, CallCache,
                                            default_cache_path, make_key)

MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Who wrote Hamlet?"}]


class CountingBackend:
    """Test double with the Generator interface; counts how often it is really called."""

    backend = "test"

    def __init__(self, model_id: str = "m1") -> None:
        self.spec, self.model_id, self.calls = "test", model_id, 0
        self.decoding = {"temperature": 0.0}

    def generate(self, messages, max_tokens=64, stop=None):
        self.calls += 1
        text = f"answer#{self.calls} to {messages[-1]['content']}"
        return Generation(text=text, prompt_tokens=7, completion_tokens=3, seconds=0.5)


def test_miss_then_hit(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    gen = CachedGenerator(CountingBackend(), cache)
    g1 = gen.generate(MSGS, max_tokens=16)
    g2 = gen.generate(MSGS, max_tokens=16)
    assert not g1.cached and g2.cached
    assert (g2.text, g2.prompt_tokens, g2.completion_tokens) == (g1.text, 7, 3)
    assert gen.inner.calls == 1  # the hit never reached the backend (speed: benchmarks/)
    s = cache.stats()
    assert (s["hits"], s["misses"], s["corrupt"], s["entries"]) == (1, 1, 0, 1)


def test_key_changes_with_messages_params_and_model():
    base = make_key("llama.cpp", "sha-a", MSGS, max_tokens=64, stop=None, temperature=0.0)
    assert base == make_key("llama.cpp", "sha-a", [dict(m) for m in MSGS], max_tokens=64,
                            stop=None, temperature=0.0)
    other_msgs = MSGS[:-1] + [{"role": "user", "content": "Who wrote Macbeth?"}]
    variants = [
        make_key("llama.cpp", "sha-a", other_msgs, max_tokens=64, stop=None, temperature=0.0),
        make_key("llama.cpp", "sha-a", MSGS[1:], max_tokens=64, stop=None, temperature=0.0),
        make_key("llama.cpp", "sha-a", MSGS, max_tokens=65, stop=None, temperature=0.0),
        make_key("llama.cpp", "sha-a", MSGS, max_tokens=64, stop=["\n"], temperature=0.0),
        make_key("llama.cpp", "sha-a", MSGS, max_tokens=64, stop=None, temperature=0.7),
        make_key("llama.cpp", "sha-b", MSGS, max_tokens=64, stop=None, temperature=0.0),
        make_key("openai", "sha-a", MSGS, max_tokens=64, stop=None, temperature=0.0),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_cached_generator_key_separates_models_and_params(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    a, b = CachedGenerator(CountingBackend("m1"), cache), CachedGenerator(CountingBackend("m2"), cache)
    a.generate(MSGS)
    b.generate(MSGS)
    a.generate(MSGS, max_tokens=8)
    a.generate(MSGS, stop=["."])
    assert (a.inner.calls, b.inner.calls, len(cache)) == (3, 1, 4)


@pytest.mark.parametrize("damage", ["bad_json", "checksum_mismatch", "wrong_type", "empty_checksum"])
def test_corrupt_entry_detected_deleted_and_recomputed(tmp_path, damage):
    path = tmp_path / "c.sqlite"
    gen = CachedGenerator(CountingBackend(), CallCache(path))
    first = gen.generate(MSGS)
    key = gen.key(MSGS)
    con = sqlite3.connect(path)
    value, checksum = con.execute("SELECT value, checksum FROM calls WHERE key=?", (key,)).fetchone()
    if damage == "bad_json":
        con.execute("UPDATE calls SET value=? WHERE key=?", (value[:-5], key))
    elif damage == "checksum_mismatch":
        con.execute("UPDATE calls SET value=? WHERE key=?",
                    (value.replace("answer#1", "answer#9"), key))
    elif damage == "wrong_type":  # a well-formed row whose checksum matches but types don't
        from dynakrag_lite.generators.cache import _checksum
        bad = json.dumps({"text": 5, "prompt_tokens": "x", "completion_tokens": 1, "seconds": 0})
        con.execute("UPDATE calls SET value=?, checksum=? WHERE key=?", (bad, _checksum(key, bad), key))
    else:
        con.execute("UPDATE calls SET checksum='' WHERE key=?", (key,))
    con.commit()
    con.close()

    second = gen.generate(MSGS)
    assert not second.cached and gen.inner.calls == 2 and second.text != first.text
    assert gen.cache.stats()["corrupt"] == 1
    third = gen.generate(MSGS)  # the recomputed value was stored and is sound
    assert third.cached and third.text == second.text
    assert gen.cache.stats()["corrupt"] == 1


def test_persistence_across_instances(tmp_path):
    path = tmp_path / "c.sqlite"
    with CallCache(path) as c1:
        c1.put("k1", "hello", 3, 1, 0.25)
    c2 = CallCache(path)
    assert c2.get("k1") == {"text": "hello", "prompt_tokens": 3, "completion_tokens": 1,
                            "seconds": 0.25}
    assert "k1" in c2 and len(c2) == 1 and c2.stats()["hits"] == 1


def test_default_path_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNAKRAG_CACHE_DIR", str(tmp_path / "dk"))
    assert default_cache_path() == tmp_path / "dk" / "llm_calls.sqlite"
    c = CallCache()
    assert c.path == tmp_path / "dk" / "llm_calls.sqlite" and c.path.exists()
    assert sqlite3.connect(c.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def _worker(path: str, wid: int, n: int, q) -> None:
    cache = CallCache(path)
    bad = 0
    for i in range(n):
        k = f"shared-{i % 50}"  # every worker writes and reads the same 50 keys
        cache.put(k, f"text-{i % 50}" * 20, i % 50, 1, 0.1)
        v = cache.get(k)
        bad += v is None or v["text"] != f"text-{i % 50}" * 20
        cache.put(f"own-{wid}-{i}", "x", 1, 1, 0.0)
    q.put((bad, cache.corrupt))


def test_concurrent_processes_do_not_corrupt(tmp_path):
    path = str(tmp_path / "c.sqlite")
    CallCache(path).close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(path, w, 150, q)) for w in range(4)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results == [(0, 0)] * 4
    c = CallCache(path)
    assert len(c) == 50 + 4 * 150
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    keys = [r[0] for r in con.execute("SELECT key FROM calls")]
    assert all(c.get(k) is not None for k in keys) and c.corrupt == 0


def test_threads_share_one_instance(tmp_path):
    cache = CallCache(tmp_path / "c.sqlite")
    errors = []

    def work(t):
        try:
            for i in range(100):
                cache.put(f"{t}-{i}", str(i), 1, 1, 0.0)
                assert cache.get(f"{t}-{i}")["text"] == str(i)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) == 400 and cache.stats()["hits"] == 400


# -- merging cache files (make book / make test-nb, data_scripts/execute_chapters.py) ---------
def _cache_with(path, rows: dict) -> None:
    with CallCache(path) as c:
        for key, text in rows.items():
            c.put(key, text, 1, 1, 0.0)


def _texts(path) -> dict:
    with CallCache(path) as c:
        return {k: c.get(k)["text"] for k in
                (r[0] for r in c._connect().execute("SELECT key FROM calls"))}


def test_merge_adds_missing_rows_and_keeps_the_destination_rows(tmp_path):
    src, dst = tmp_path / "book.sqlite", tmp_path / "work.sqlite"
    _cache_with(src, {"a": "committed a", "b": "committed b", "c": "committed c"})
    _cache_with(dst, {"a": "developer a", "d": "developer d"})  # an older copy, plus own calls
    assert merge_cache(src, dst) == 2
    assert _texts(dst) == {"a": "developer a", "b": "committed b", "c": "committed c",
                           "d": "developer d"}
    assert _texts(src) == {"a": "committed a", "b": "committed b", "c": "committed c"}


def test_identical_re_merge_adds_nothing_and_leaves_the_file_unchanged(tmp_path):
    src, dst = tmp_path / "book.sqlite", tmp_path / "work.sqlite"
    _cache_with(src, {"a": "x", "b": "y"})
    assert merge_cache(src, dst, vacuum=True) == 2
    before = dst.read_bytes()
    assert merge_cache(src, dst, vacuum=True) == 0
    assert dst.read_bytes() == before  # a committed cache shows no binary change in git
    assert merge_cache(src, src) == 0


def test_merge_creates_a_missing_destination(tmp_path):
    src, dst = tmp_path / "book.sqlite", tmp_path / "new" / "folder" / "work.sqlite"
    _cache_with(src, {"a": "x"})
    assert merge_cache(src, dst) == 1
    assert _texts(dst) == {"a": "x"}  # a cache CallCache reads, checksums intact


def test_merge_into_a_cache_another_process_has_open(tmp_path):
    src, dst = tmp_path / "book.sqlite", tmp_path / "work.sqlite"
    _cache_with(src, {"a": "x"})
    with CallCache(dst) as live:  # WAL mode, as a running chapter holds it
        live.put("own", "mine", 1, 1, 0.0)
        assert merge_cache(src, dst) == 1
        assert live.get("a")["text"] == "x" and len(live) == 2


def test_a_failed_merge_leaves_the_destination_as_it_was(tmp_path):
    src, dst = tmp_path / "book.sqlite", tmp_path / "work.sqlite"
    _cache_with(src, {f"k{i}": "x" for i in range(20)})
    _cache_with(dst, {"own": "mine"})
    con = sqlite3.connect(dst)  # fail the insert part-way through, as an interruption would
    con.execute("CREATE TRIGGER boom BEFORE INSERT ON calls WHEN NEW.key = 'k10' "
                "BEGIN SELECT RAISE(ABORT, 'interrupted'); END")
    con.commit()
    con.close()
    with pytest.raises(sqlite3.DatabaseError, match="interrupted"):
        merge_cache(src, dst)
    assert _texts(dst) == {"own": "mine"}


def _foreign_cache(path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, reply TEXT)")
    con.execute("INSERT INTO calls VALUES ('a', 'x')")
    con.commit()
    con.close()


def test_merge_refuses_another_schema_naming_the_file(tmp_path):
    good, bad = tmp_path / "good.sqlite", tmp_path / "old-layout.sqlite"
    _cache_with(good, {"a": "x"})
    _foreign_cache(bad)
    with pytest.raises(CacheError, match=r"old-layout\.sqlite: table 'calls' has columns"):
        merge_cache(bad, tmp_path / "new.sqlite")
    assert not (tmp_path / "new.sqlite").exists()  # a bad source creates no destination
    before = bad.read_bytes()
    with pytest.raises(CacheError, match=r"old-layout\.sqlite: table 'calls' has columns"):
        merge_cache(good, bad)
    assert bad.read_bytes() == before
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database " * 100)
    with pytest.raises(CacheError, match=r"notes\.sqlite is not a usable SQLite database"):
        merge_cache(text, tmp_path / "new.sqlite")
    with pytest.raises(CacheError, match=r"notes\.sqlite is not a usable SQLite database"):
        merge_cache(good, text)
    with pytest.raises(CacheError, match=r"missing\.sqlite: no cache file"):
        merge_cache(tmp_path / "missing.sqlite", good)


def test_merge_command_line(tmp_path, capsys):
    src, dst = tmp_path / "book.sqlite", tmp_path / "work.sqlite"
    _cache_with(src, {"a": "x", "b": "y"})
    assert main(["cache", "merge", str(src), str(dst)]) == 0
    assert "2 new calls merged" in capsys.readouterr().out
    assert main(["cache", "merge", str(src), str(dst)]) == 0
    assert "0 new calls merged" in capsys.readouterr().out
    assert main(["cache", "merge", "--missing-ok", str(tmp_path / "none.sqlite"), str(dst)]) == 0
    assert main(["cache", "merge", str(tmp_path / "none.sqlite"), str(dst)]) == 2
    assert "none.sqlite: no cache file" in capsys.readouterr().err
    out = subprocess.run([sys.executable, "-m", "dynakrag_lite", "cache", "merge", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "SRC" in out and "DST" in out and "--missing-ok" in out


def _damaged_cache(path) -> None:
    """A cache whose header and schema read fine but whose row pages are overwritten: the
    damage shows only when the rows are read (the INSERT ... SELECT of a merge)."""
    _cache_with(path, {f"k{i}": "v" * 200 for i in range(400)})
    raw = bytearray(path.read_bytes())
    assert len(raw) > 8 * 4096
    raw[5 * 4096:8 * 4096] = b"\xff" * (3 * 4096)
    path.write_bytes(bytes(raw))


def _bad_cache(kind: str, folder):
    path = folder / f"{kind}.sqlite"
    if kind == "text":
        path.write_text("not a database " * 100)
    elif kind == "other-schema":
        _foreign_cache(path)
    elif kind == "damaged":
        _damaged_cache(path)
    return path  # "missing": never created


@pytest.mark.parametrize("kind", ["missing", "text", "other-schema", "damaged"])
def test_merge_command_reports_a_bad_source_in_one_line_with_exit_code_2(kind, tmp_path,
                                                                          capsys):
    """As python -m dynakrag_lite does: `error: ...` naming the file, exit 2, no traceback
    (an exception escaping main would fail this test)."""
    src, dst = _bad_cache(kind, tmp_path), tmp_path / "work.sqlite"
    assert main(["cache", "merge", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert str(src) in err


def test_merge_command_reports_a_bad_destination_in_one_line(tmp_path, capsys):
    src = tmp_path / "book.sqlite"
    _cache_with(src, {"a": "x"})
    dst = _bad_cache("text", tmp_path)
    before = dst.read_bytes()
    assert main(["cache", "merge", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and str(dst) in err
    assert dst.read_bytes() == before


@pytest.mark.parametrize("kind", ["text", "damaged"])
def test_python_m_cache_reports_a_bad_file_without_traceback(kind, tmp_path):
    """The command run as a program (python -m dynakrag_lite cache merge) ends the same way."""
    src = _bad_cache(kind, tmp_path)
    out = subprocess.run([sys.executable, "-m", "dynakrag_lite", "cache", "merge", str(src),
                          str(tmp_path / "work.sqlite")], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and str(src) in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1
