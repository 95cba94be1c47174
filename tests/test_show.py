"""dynakrag_lite.show: the book shows the library's source as it is."""
from __future__ import annotations

import inspect

import pytest

from dynakrag_lite.show import show_source, source_text, where
from dynakrag_lite.state import EvidenceState
from dynakrag_lite.validity import valid_actions


def test_the_source_is_the_package_s_own_with_its_file_named():
    text = source_text(valid_actions)
    assert text.startswith("# dynakrag_lite/validity.py: valid_actions\n")
    assert inspect.getsource(valid_actions).rstrip() in text


def test_several_objects_and_a_class():
    text = source_text(EvidenceState, valid_actions)
    assert "class EvidenceState" in text and "def valid_actions" in text
    assert where(EvidenceState) == "dynakrag_lite/state.py: EvidenceState"


def test_the_markdown_fence_is_not_closed_by_the_source():
    def f():
        """A docstring with ``` inside."""
    md = show_source(f).data
    fence = md.split("python", 1)[0]
    assert fence == "````" and md.endswith("\n" + fence)
    assert "def f()" in md


def test_nothing_to_show_is_an_error():
    with pytest.raises(ValueError):
        source_text()
