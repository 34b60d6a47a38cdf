"""The fast Action construction used by the builders equals the dataclass constructor."""

from __future__ import annotations

import pytest

from pipemare_lite.schedules import Action
from pipemare_lite.schedules.builders.common import actions_of


def test_actions_of_equals_the_constructor():
    order = [(kind, stage, index) for kind in "FBIWU" for stage in (0, 3) for index in (0, 7)]
    fast = actions_of(order)
    plain = [Action(stage, kind, index) for kind, stage, index in order]
    assert fast == plain
    assert [hash(a) for a in fast] == [hash(a) for a in plain]
    assert [str(a) for a in fast] == [str(a) for a in plain]
    assert sorted(fast) == sorted(plain)


@pytest.mark.parametrize("bad, message", [(("X", 0, 0), "unknown action kind 'X'"),
                                          (("F", -1, 0), "negative stage or index")])
def test_actions_of_raises_the_constructors_error(bad, message):
    with pytest.raises(ValueError, match=message):
        actions_of([("F", 0, 0), bad])
