"""data_scripts/prepare_data.py fetching from a mirror ($DYNAKRAG_DATA_MIRROR) instead of the
official host: the URL it builds, a fetch over HTTP and from a folder, and a failing mirror
that is reported without a fall back to the internet; and the embedded library set written
to JSONL (`--dataset library`), whose `--raw` is refused."""
from __future__ import annotations

import json
import threading
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dynakrag_lite.data import load_questions
from dynakrag_lite.data.library import build_library
from helpers import load_script

prepare_data = load_script("prepare_data")

HOTPOT = {
    "_id": "5a8b57f25542995d1e6f1371", "type": "comparison", "level": "medium",
    "question": "Which river is longer, the Ostrel or the Kaviss?", "answer": "Ostrel",
    "context": [["Ostrel River", ["The Ostrel River is a river.", " It is 412 km long."]],
                ["Kaviss River", ["The Kaviss River", " runs 90 km."]]],
    "supporting_facts": [["Ostrel River", 1], ["Kaviss River", 1]],
}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass


@pytest.fixture
def mirror(tmp_path: Path):
    """A folder holding HotpotQA's dev file under its official name, and its URL on a server
    on 127.0.0.1."""
    folder = tmp_path / "site" / "data"
    folder.mkdir(parents=True)
    (folder / "hotpot_dev_distractor_v1.json").write_text(json.dumps([HOTPOT]))
    srv = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder.parent)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{srv.server_address[1]}/data/"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def fetched(monkeypatch):
    """Records every URL the script opens."""
    urls: list[str] = []
    real = urllib.request.urlopen

    def urlopen(req, *args, **kwargs):
        urls.append(req.full_url if isinstance(req, urllib.request.Request) else req)
        return real(req, *args, **kwargs)
    monkeypatch.setattr(prepare_data.urllib.request, "urlopen", urlopen)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return urls


def test_mirror_url_is_the_official_file_name_under_a_url_or_a_folder(tmp_path):
    assert prepare_data.mirror_url("hotpotqa", "http://h:1/data/") == \
        "http://h:1/data/hotpot_dev_distractor_v1.json"
    assert prepare_data.mirror_url("musique", "https://h/x") == \
        "https://h/x/musique_ans_v1.0_dev.jsonl"  # the file inside the official archive
    assert prepare_data.mirror_url("2wikimultihopqa", str(tmp_path)) == \
        (tmp_path / "dev.json").as_uri()


def test_a_mirror_url_replaces_the_official_download_and_is_named(mirror, fetched, tmp_path,
                                                                  monkeypatch, capsys):
    _, url = mirror
    monkeypatch.setenv(prepare_data.MIRROR_ENV, url)
    assert prepare_data.main(["--dataset", "hotpotqa", "--out", str(tmp_path / "out")]) == 0
    assert fetched == [url + "hotpot_dev_distractor_v1.json"]
    out = capsys.readouterr().out
    assert f"hotpotqa: fetched {url}hotpot_dev_distractor_v1.json (mirror: " \
           "$DYNAKRAG_DATA_MIRROR)" in out
    [q] = load_questions(tmp_path / "out" / "hotpotqa.jsonl")
    assert q.id == HOTPOT["_id"] and q.paragraphs[0].text == \
        "The Ostrel River is a river. It is 412 km long."


def test_a_mirror_folder_is_read_from_disk(mirror, fetched, tmp_path, monkeypatch):
    folder, _ = mirror
    monkeypatch.setenv(prepare_data.MIRROR_ENV, str(folder))
    assert prepare_data.main(["--dataset", "hotpotqa", "--out", str(tmp_path / "out")]) == 0
    assert fetched == [(folder / "hotpot_dev_distractor_v1.json").as_uri()]
    assert load_questions(tmp_path / "out" / "hotpotqa.jsonl")[0].answers == ("Ostrel",)


def test_a_mirror_without_the_file_fails_naming_it_and_never_tries_the_official_host(
        mirror, fetched, tmp_path, monkeypatch, capsys):
    url = mirror[1].replace("/data/", "/empty/")  # no such folder: 404
    monkeypatch.setenv(prepare_data.MIRROR_ENV, url)
    assert prepare_data.main(["--dataset", "hotpotqa", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"from the mirror {url}hotpot_dev_distractor_v1.json" in err
    assert f"$DYNAKRAG_DATA_MIRROR={url}" in err and "404" in err
    assert fetched == [url + "hotpot_dev_distractor_v1.json"]
    assert not (tmp_path / "out" / "hotpotqa.jsonl").exists()


def test_without_a_mirror_the_official_url_is_fetched(fetched, tmp_path, monkeypatch):
    monkeypatch.delenv(prepare_data.MIRROR_ENV, raising=False)

    def offline(req, *args, **kwargs):
        fetched.append(req.full_url)
        raise OSError("no network in a test")
    monkeypatch.setattr(prepare_data.urllib.request, "urlopen", offline)
    with pytest.raises(OSError, match="Download it by hand from https://hotpotqa.github.io"):
        prepare_data.download("hotpotqa", tmp_path)
    assert fetched == [prepare_data.SOURCES["hotpotqa"].url]


def test_a_bad_file_from_the_mirror_is_named_by_its_url_not_a_temporary_path(
        mirror, fetched, tmp_path, monkeypatch, capsys):
    folder, url = mirror
    (folder / "hotpot_dev_distractor_v1.json").write_text('[{"_id": "x"')  # cut short
    monkeypatch.setenv(prepare_data.MIRROR_ENV, url)
    assert prepare_data.main(["--dataset", "hotpotqa", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"error: bad input: {url}hotpot_dev_distractor_v1.json, line 1: malformed JSON" in err
    assert not (tmp_path / "out" / "hotpotqa.jsonl").exists()


def test_the_library_is_written_as_generated_and_reads_back_the_same(tmp_path, capsys):
    out = tmp_path / "out"
    assert prepare_data.main(["--dataset", "library", "--out", str(out), "--limit", "12",
                              "--seed", "3"]) == 0
    assert [p.name for p in out.iterdir()] == ["library.jsonl"]  # no temporary file left
    want = build_library(12, 3)
    assert load_questions(out / "library.jsonl") == want  # validated on reading
    said = capsys.readouterr().out
    assert said.startswith("library: wrote 12 questions (") and "bridge=" in said
    assert want != build_library(12, 0)  # so --seed reached the generator


@pytest.mark.parametrize("extra, said", [
    (["--raw", "hotpot_dev_distractor_v1.json"], "--raw names an official file"),
    (["--limit", "0"], "must be at least 1")])
def test_the_library_refuses_what_it_cannot_use_and_writes_nothing(tmp_path, capsys, extra,
                                                                    said):
    with pytest.raises(SystemExit) as e:
        prepare_data.main(["--dataset", "library", "--out", str(tmp_path / "out"), *extra])
    assert e.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_seed_with_an_official_dataset_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        prepare_data.main(["--dataset", "hotpotqa", "--out", str(tmp_path), "--seed", "1"])
    assert e.value.code == 2 and "library only" in capsys.readouterr().err
