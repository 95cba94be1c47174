"""The library's own source on a page of the book (chapters 1-11): what a chapter explains is
what ran, read with :func:`inspect.getsource` from the installed package, never retyped."""
from __future__ import annotations

import inspect
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def where(obj: object) -> str:
    """The object's file in the package and its name: ``dynakrag_lite/state.py: EvidenceState``."""
    path = Path(inspect.getsourcefile(obj) or "?").resolve()
    shown = path.relative_to(PACKAGE.parent).as_posix() if PACKAGE in path.parents else path.name
    return f"{shown}: {obj.__qualname__}"


def source_text(*objs: object) -> str:
    """The source of each object under a comment line naming its file."""
    if not objs:
        raise ValueError("show_source needs at least one function, class or method")
    return "\n\n".join(f"# {where(o)}\n" + inspect.getsource(o).rstrip() for o in objs) + "\n"


def show_source(*objs: object):
    """The source of `objs` as a Markdown code block, rendered in the page's code style."""
    from IPython.display import Markdown  # heavy optional dependency (the book only)

    text = source_text(*objs)
    fence = "```"
    while fence in text:  # a docstring holding a fence must not close ours
        fence += "`"
    return Markdown(f"{fence}python\n{text}{fence}")
