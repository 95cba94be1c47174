"""The maintenance commands of ``python -m dynakrag_lite`` (:mod:`dynakrag_lite.experiments.
cli` adds them to its parser): ``cache merge`` (LLM call cache files) and ``policy-manifest``
(the ``MANIFEST.sha256`` of a folder of committed policies). The README and
``results/policies/README.md`` explain them; ``make llm-cache`` merges the book's recorded
calls into a working copy with :func:`merge_cache`."""
from __future__ import annotations

import argparse
import sqlite3
from contextlib import closing
from pathlib import Path

from ..generators.cache import CALLS_COLUMNS, CALLS_SCHEMA, CacheError, is_corruption
from ..policy import PolicyError
from ..storage import ManifestError
from .artifacts import POLICIES_DIR, display_path, manifest_problems, update_policy_manifest

__all__ = ["merge_cache", "add_maintenance_commands", "cmd_cache_merge", "cmd_policy_manifest"]


# -- merging cache files ---------------------------------------------------------------------
def _has_calls_table(conn: sqlite3.Connection, db: str, path: Path) -> bool:
    """Whether ``db`` (a schema name of ``conn``) holds a ``calls`` table of the LLM call cache's
    layout; CacheError naming ``path`` when it holds another one or is no SQLite file."""
    try:
        info = conn.execute(f"PRAGMA {db}.table_info(calls)").fetchall()
    except sqlite3.DatabaseError as e:
        raise CacheError(f"{path} is not a usable SQLite database ({e})") from e
    if not info:
        return False
    columns = sorted(row[1] for row in info)
    primary = [row[1] for row in info if row[5]]
    if columns != sorted(CALLS_COLUMNS) or primary != ["key"]:
        raise CacheError(
            f"{path}: table 'calls' has columns {columns} (primary key {primary}), expected "
            f"{sorted(CALLS_COLUMNS)} with primary key ['key']; it is not an LLM call cache of "
            "this version of dynakrag_lite, so nothing was merged")
    return True


def _damaged(conn: sqlite3.Connection, dbs) -> Path | None:
    """The first (schema name, path) of ``dbs`` whose database fails SQLite's quick_check."""
    for db, path in dbs:
        try:
            if conn.execute(f"PRAGMA {db}.quick_check(1)").fetchone()[0] != "ok":
                return path
        except sqlite3.DatabaseError:
            return path
    return None


def _uri(path: Path, mode: str) -> str:
    return f"{path.resolve().as_uri()}?mode={mode}"


def merge_cache(src: str | Path, dst: str | Path, *, vacuum: bool = False,
                timeout: float = 60.0) -> int:
    """Insert the rows of ``src`` whose key ``dst`` lacks, in one transaction; returns how many.
    ``dst``'s rows are never changed; ``vacuum`` compacts it after adding rows. :class:`CacheError`
    naming the file when ``src`` is missing or either file is not a cache database."""
    src, dst = Path(src).expanduser(), Path(dst).expanduser()
    if not src.is_file():
        raise CacheError(f"{src}: no cache file to merge from")
    if dst.is_dir():
        raise CacheError(f"{dst} is a folder, not an SQLite cache file")
    if dst.exists() and src.resolve() == dst.resolve():
        return 0
    # Check src before dst is created, so that a bad src leaves no empty dst behind.
    with closing(sqlite3.connect(_uri(src, "ro"), uri=True, timeout=timeout)) as probe:
        if not _has_calls_table(probe, "main", src):
            raise CacheError(f"{src} has no 'calls' table: not an LLM call cache")
    dst.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: the check, create and insert below commit (or roll back) together
    conn = sqlite3.connect(_uri(dst, "rwc"), uri=True, timeout=timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        _has_calls_table(conn, "main", dst)  # first, so that an error names the right file
        conn.execute("ATTACH DATABASE ? AS src", (_uri(src, "ro"),))
        _has_calls_table(conn, "src", src)
        conn.execute("BEGIN IMMEDIATE")  # take the write lock before reading the count
        try:
            conn.execute(CALLS_SCHEMA.format(db="main."))
            before = conn.execute("SELECT COUNT(*) FROM main.calls").fetchone()[0]
            cols = ", ".join(CALLS_COLUMNS)
            conn.execute(f"INSERT OR IGNORE INTO main.calls ({cols}) "
                         f"SELECT {cols} FROM src.calls")
            added = conn.execute("SELECT COUNT(*) FROM main.calls").fetchone()[0] - before
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.DatabaseError) and is_corruption(e):
                # a damaged page past the header, met only when the rows are read
                bad = _damaged(conn, (("src", src), ("main", dst))) or f"{src} or {dst}"
                raise CacheError(f"{bad} is not a usable SQLite database ({e}); nothing was "
                                 "merged") from e
            raise
        conn.execute("DETACH DATABASE src")
        if added and vacuum:
            conn.execute("VACUUM")  # itself transactional: an interrupted VACUUM loses nothing
    finally:
        conn.close()
    return added


# -- the commands ----------------------------------------------------------------------------
def cmd_cache_merge(args: argparse.Namespace) -> int:
    """``cache merge SRC DST``: :func:`merge_cache`."""
    if args.missing_ok and not args.src.exists():
        print(f"{args.src} does not exist; nothing to merge")
        return 0
    added = merge_cache(args.src, args.dst, vacuum=args.vacuum)
    # read-only: counting must not touch a file kept in git
    uri = f"{Path(args.dst).expanduser().resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        total = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    print(f"{added} new calls merged from {args.src} into {args.dst} ({total} calls)")
    return 0


def cmd_policy_manifest(args: argparse.Namespace) -> int:
    """``policy-manifest --check [FOLDER]`` or ``--update [FOLDER | FILE ...]`` (given a folder
    or nothing, rebuild from every ``*.joblib``); a bad file leaves the manifest as it was."""
    paths = args.paths
    one_folder = not paths or (len(paths) == 1 and paths[0].is_dir())
    if not args.update:
        if not one_folder:
            raise ValueError("--check takes one folder (default: results/policies)")
        folder = paths[0] if paths else POLICIES_DIR
        problems = manifest_problems(folder)
        if problems:
            raise PolicyError(f"{display_path(folder)}: the manifest does not match the folder: "
                              + "; ".join(problems) + ". If you trained these policies, run: "
                              "python -m dynakrag_lite policy-manifest --update FILE ...")
        print(f"{display_path(folder)}: every policy matches the manifest")
        return 0
    if one_folder:
        out = update_policy_manifest(paths[0] if paths else None)
    else:
        if len({p.resolve().parent for p in paths}) != 1:
            raise PolicyError("give files of one folder at a time")
        out = update_policy_manifest(paths[0].parent, files=paths)
    print(f"updated {display_path(out)}")
    return 0


def add_maintenance_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``cache merge`` and ``policy-manifest`` to the subcommands ``sub``."""
    p = sub.add_parser("cache", help="maintain LLM call cache files (SQLite)")
    cache_sub = p.add_subparsers(dest="cache_command", required=True)
    p = cache_sub.add_parser(
        "merge", help="add the calls of SRC that DST lacks",
        description="Insert every row of the cache SRC whose key DST lacks, in one "
                    "transaction. DST's rows are never changed or deleted; SRC is only read; "
                    "DST is created when missing. `make book` and `make test-nb` merge "
                    "book/_llm_cache.sqlite into .cache/llm_calls.sqlite this way.")
    p.add_argument("src", type=Path, help="cache file to read rows from")
    p.add_argument("dst", type=Path, help="cache file to add them to")
    p.add_argument("--missing-ok", action="store_true",
                   help="do nothing (exit 0) when SRC does not exist")
    p.add_argument("--vacuum", action="store_true",
                   help="compact DST after adding rows (for a file kept in git)")
    # a missing, foreign or damaged cache file; a folder that cannot be created
    p.set_defaults(func=cmd_cache_merge, also=(CacheError, OSError))
    p = sub.add_parser(
        "policy-manifest", help="check or update the MANIFEST.sha256 of a folder of policies",
        description="A joblib file is code: Policy.load unpickles a file of a folder that "
                    "keeps a MANIFEST.sha256 only when the manifest lists it with its sha256 "
                    f"(see {display_path(POLICIES_DIR / 'README.md')}).")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="verify that the manifest lists exactly the folder's *.joblib "
                      "files with their sha256 (the default)")
    mode.add_argument("--update", action="store_true",
                      help="record the sha256 of the given policy files (or, given a folder "
                      "or nothing, of every *.joblib in it) in the folder's MANIFEST.sha256")
    p.add_argument("paths", nargs="*", type=Path,
                   help=f"policy files, or one folder (default: {display_path(POLICIES_DIR)})")
    # a manifest that cannot be read or written
    p.set_defaults(func=cmd_policy_manifest, also=(ManifestError, OSError))
