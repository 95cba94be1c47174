"""dynakrag_lite.features: every feature of phi(s, a) is described, and only those."""
from __future__ import annotations

from dynakrag_lite.features import (ACTION_FEATURE_NAMES, FEATURE_DESCRIPTIONS, FEATURE_NAMES,
                                    STATE_FEATURE_NAMES, action_features, state_features)
from dynakrag_lite.state import ACTIONS, EvidenceState


def test_every_feature_has_a_description():
    for name in STATE_FEATURE_NAMES + ACTION_FEATURE_NAMES:
        text = FEATURE_DESCRIPTIONS.get(name)
        assert isinstance(text, str) and text.strip(), f"{name} has no description"


def test_no_description_for_a_feature_that_does_not_exist():
    assert set(FEATURE_DESCRIPTIONS) - set(FEATURE_NAMES) == set()
    assert list(FEATURE_DESCRIPTIONS) == list(FEATURE_NAMES)  # listed in phi's order


def test_described_names_are_the_computed_ones():
    """The names are those the feature functions really produce (a renamed feature must take
    its description along)."""
    assert tuple(state_features(EvidenceState(question="Who founded Velmora?"))) == \
        STATE_FEATURE_NAMES
    assert tuple(action_features(ACTIONS[0], 1.0)) == ACTION_FEATURE_NAMES
    # Each templated family names its own member.
    for a in ACTIONS:
        for prefix in ("count_", "last_", "act_"):
            assert a in FEATURE_DESCRIPTIONS[prefix + a]
    assert len(set(FEATURE_DESCRIPTIONS.values())) == len(FEATURE_DESCRIPTIONS)
