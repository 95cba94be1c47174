#!/usr/bin/env python
"""Publish the built book to a ``gh-pages`` branch with ghp-import (jupyter-book 1.x's way).

    python data_scripts/publish.py [--build-dir _build/html] [--remote origin]
                                   [--branch gh-pages] [--no-push] [--cname DOMAIN]

``make publish`` builds the book (``make book``) and then runs this. It checks that the build
folder holds an ``index.html``, then runs ``ghp-import --no-jekyll --push --force``: the
folder's files become one new commit on the local ``gh-pages`` branch (on top of the remote's
``gh-pages`` when it exists, so the history is kept), with a ``.nojekyll`` file so GitHub
Pages serves ``_static/`` and ``_images/`` as they are, and that branch is pushed to
``--remote``. Your working tree, index and current branch are not touched.

On GitHub, set Settings -> Pages -> Source to "Deploy from a branch", branch ``gh-pages``,
folder ``/``. (The workflow in .github/workflows/book.yml deploys with actions/deploy-pages
instead; use one or the other.) Needs ``pip install ghp-import`` (in requirements.txt).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class PublishError(RuntimeError):
    pass


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def publish(build_dir: str | Path = ROOT / "_build" / "html", repo: str | Path = ROOT,
            remote: str = "origin", branch: str = "gh-pages", push: bool = True,
            message: str | None = None, cname: str | None = None) -> str:
    """Commit ``build_dir`` to ``branch`` of ``repo`` (and push it to ``remote``); return the
    new commit of ``branch``."""
    repo, build = Path(repo).resolve(), Path(build_dir).resolve()
    if not (build / "index.html").is_file():
        raise PublishError(f"{build} has no index.html: build the book first (make book)")
    if _git(repo, "rev-parse", "--git-dir").returncode:
        raise PublishError(f"{repo} is not a git repository")
    if push and _git(repo, "remote", "get-url", remote).returncode:
        raise PublishError(f"no git remote named {remote!r} in {repo} (git remote -v)")
    if message is None:
        head = _git(repo, "rev-parse", "--short", "HEAD").stdout.strip() or "an unborn HEAD"
        message = f"Publish the book built from {head}"
    if push:
        # Build on the remote's branch when it has one (keeps its history); a first publish
        # or an unreachable remote just starts a new branch.
        _git(repo, "fetch", "--quiet", remote,
             f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}")
    cmd = [sys.executable, "-m", "ghp_import", "--no-jekyll", "--remote", remote,
           "--branch", branch, "--message", message]
    if cname:
        cmd += ["--cname", cname]
    if push:
        cmd += ["--push", "--force"]
    p = subprocess.run(cmd + [str(build)], cwd=repo, capture_output=True, text=True)
    if p.returncode:
        hint = " (pip install ghp-import)" if "No module named ghp_import" in p.stderr else ""
        raise PublishError(f"ghp-import failed{hint}:\n{p.stdout}{p.stderr}")
    return _git(repo, "rev-parse", f"refs/heads/{branch}").stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", type=Path, default=ROOT / "_build" / "html")
    ap.add_argument("--repo", type=Path, default=ROOT, help="the git repository to publish from")
    ap.add_argument("--remote", default="origin")
    ap.add_argument("--branch", default="gh-pages")
    ap.add_argument("--message", default=None)
    ap.add_argument("--cname", default=None, help="custom domain (writes a CNAME file)")
    ap.add_argument("--no-push", action="store_true",
                    help="only commit to the local branch")
    args = ap.parse_args(argv)
    try:
        sha = publish(args.build_dir, args.repo, args.remote, args.branch, not args.no_push,
                      args.message, args.cname)
    except PublishError as e:
        print(f"publish: {e}", file=sys.stderr)
        return 1
    where = "local branch" if args.no_push else f"{args.remote}/{args.branch}"
    print(f"published {args.build_dir} as {sha[:12]} to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
