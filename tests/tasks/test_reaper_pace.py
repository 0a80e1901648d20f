"""The reaper's pace: every ``reap_s`` while its pass is quick, and no more than a twentieth of the time once
the pass has become slow (its lease scan grows while a long transaction pins the vacuum horizon)."""

from __future__ import annotations

import pytest

from hearth.tasks.worker import reaper_pause


def test_a_quick_pass_is_repeated_every_reap_interval() -> None:
    assert reaper_pause(1.0, 0.004) == 1.0


def test_a_slow_pass_takes_at_most_five_percent_of_the_time() -> None:
    assert reaper_pause(1.0, 0.6) == pytest.approx(12.0)
    assert reaper_pause(0.2, 0.02) == pytest.approx(0.4)
