"""The shutdown's bookkeeping (:mod:`hearth.shutdown`): phases timed from the beginning, streams ended by kind.

The whole sequence against a real process is tests/e2e/test_graceful_shutdown.py.
"""

from __future__ import annotations

import asyncio

import pytest

from hearth.runtime import check_shutdown_bound
from hearth.settings import Settings
from hearth.shutdown import OpenStreams, Shutdown


async def test_followers_end_when_shutdown_begins_and_answers_when_the_grace_is_over() -> None:
    shutdown = Shutdown(stream_grace_s=0.2, task_grace_s=1.0, timeout_s=30.0)
    ended: list[str] = []
    shutdown.streams.add(lambda: ended.append("answer"), answer=True)
    shutdown.streams.add(lambda: ended.append("follower"), answer=False)
    claims = []
    shutdown.on_begin(lambda: claims.append("stopped"))

    assert shutdown.begin() is True
    assert shutdown.begin() is False  # once
    assert ended == ["follower"] and claims == ["stopped"]
    assert 0.9 < shutdown.left(1.0) <= 1.0
    await asyncio.sleep(0.3)
    assert ended == ["follower", "answer"]
    shutdown.finished()


async def test_a_stream_opened_after_its_kind_began_ending_is_ended_at_once() -> None:
    streams = OpenStreams()
    streams.end_followers()
    ended: list[str] = []
    streams.add(lambda: ended.append("late follower"), answer=False)
    streams.add(lambda: ended.append("answer"), answer=True)
    await asyncio.sleep(0)
    assert ended == ["late follower"]


async def test_one_failing_stream_does_not_keep_the_others_open() -> None:
    streams = OpenStreams()
    ended: list[int] = []

    def broken() -> None:
        raise RuntimeError("boom")

    streams.add(broken, answer=True)
    streams.add(lambda: ended.append(1), answer=True)
    assert streams.end_answers() == 2 and ended == [1]


async def test_not_begun_a_phase_has_all_of_its_time_and_no_watchdog_runs() -> None:
    shutdown = Shutdown(stream_grace_s=1.0, task_grace_s=5.0, timeout_s=0.01)
    assert shutdown.left(5.0) == 5.0
    shutdown.begin()  # not the process's owner: the bound does not exit a test process
    await asyncio.sleep(0.05)
    shutdown.finished()


def test_a_bound_shorter_than_the_graces_plus_the_flushes_is_refused_at_start() -> None:
    with pytest.raises(SystemExit, match="shutdown_timeout_s"):
        check_shutdown_bound(Settings(shutdown_stream_grace_s=30, task_grace_s=10, shutdown_timeout_s=35))
    check_shutdown_bound(Settings(shutdown_stream_grace_s=30, task_grace_s=10, shutdown_timeout_s=40))
