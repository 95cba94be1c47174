"""`make publish` (data_scripts/publish.py): a built book lands on a gh-pages branch.

A tiny fake ``_build/html`` is published from a throwaway repository to a local bare one
(``git init --bare``) with the real ghp-import: the remote's gh-pages branch then holds
index.html, the static files and a .nojekyll; publishing again adds a commit on top (history
kept) and the publishing repository's own branch, index and working tree are untouched.
Not tested here: a push to GitHub and GitHub Pages serving the branch.
"""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from helpers import load_script, missing

REPO = Path(__file__).resolve().parents[1]


publish = load_script("publish")


def git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def world(tmp_path, monkeypatch):
    if importlib.util.find_spec("ghp_import") is None:  # a skip here, a failure under CI
        missing("ghp-import is not installed (pip install -r requirements.txt)")
    for k, v in {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path),
                 "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                 "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}.items():
        monkeypatch.setenv(k, v)
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    work = tmp_path / "work"
    git(tmp_path, "init", "-q", str(work))
    git(work, "config", "user.name", "t")
    git(work, "config", "user.email", "t@example.org")
    (work / "README.md").write_text("book source\n")
    git(work, "add", "README.md")
    git(work, "commit", "-q", "-m", "source")
    git(work, "remote", "add", "origin", str(bare))
    html = work / "_build" / "html"
    (html / "_static").mkdir(parents=True)
    (html / "index.html").write_text("<html>v1</html>\n")
    (html / "_static" / "book.css").write_text("body{}\n")
    (html / "book" / "01.html").parent.mkdir()
    (html / "book" / "01.html").write_text("<html>chapter</html>\n")
    return {"bare": bare, "work": work, "html": html}


def files_on(bare: Path, branch="gh-pages") -> set[str]:
    return set(git(bare, "ls-tree", "-r", "--name-only", branch).split())


def test_publish_to_a_bare_repository(world):
    bare, work, html = world["bare"], world["work"], world["html"]
    status = git(work, "status", "--porcelain")
    assert publish.main(["--repo", str(work), "--build-dir", str(html)]) == 0
    assert files_on(bare) == {"index.html", ".nojekyll", "_static/book.css", "book/01.html"}
    assert git(bare, "show", "gh-pages:index.html") == "<html>v1</html>\n"
    head = git(work, "rev-parse", "HEAD").strip()
    assert head[:7] in git(bare, "log", "-1", "--format=%s", "gh-pages")
    # The publishing repository is as it was: same branch, same files, nothing staged.
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(work, "status", "--porcelain") == status

    # A second publish keeps the history and replaces the content.
    (html / "index.html").write_text("<html>v2</html>\n")
    (html / "book" / "01.html").unlink()
    assert publish.main(["--repo", str(work), "--build-dir", str(html)]) == 0
    assert git(bare, "show", "gh-pages:index.html") == "<html>v2</html>\n"
    assert files_on(bare) == {"index.html", ".nojekyll", "_static/book.css"}
    assert git(bare, "rev-list", "--count", "gh-pages").strip() == "2"


def test_publish_refuses_without_a_build_or_a_remote(world, capsys):
    work = world["work"]
    assert publish.main(["--repo", str(work), "--build-dir", str(work / "nothing")]) == 1
    assert "no index.html" in capsys.readouterr().err
    assert publish.main(["--repo", str(work), "--build-dir", str(world["html"]),
                         "--remote", "upstream"]) == 1
    assert "no git remote named 'upstream'" in capsys.readouterr().err
    with pytest.raises(subprocess.CalledProcessError):
        git(world["bare"], "rev-parse", "--verify", "gh-pages")  # nothing was pushed


def test_no_push_commits_locally_only(world):
    work, bare = world["work"], world["bare"]
    assert publish.main(["--repo", str(work), "--build-dir", str(world["html"]),
                         "--no-push"]) == 0
    assert {"index.html", ".nojekyll"} <= set(
        git(work, "ls-tree", "-r", "--name-only", "gh-pages").split())
    with pytest.raises(subprocess.CalledProcessError):
        git(bare, "rev-parse", "--verify", "gh-pages")
