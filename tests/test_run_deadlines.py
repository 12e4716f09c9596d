"""The runs inside fences end at their own deadlines, though one loop timer serves them all."""

from __future__ import annotations

import asyncio
import time

import pytest

from writesafe.idempotency._fence import Fence
from writesafe.ledger._task_deadlines import TaskDeadlines

LEASE = 60.0  # the fence stays open: the tools' timeouts end these runs


def _fence() -> Fence:
    return Fence("k", 1, time.monotonic(), LEASE)


async def _run(fence: Fence, deadlines: TaskDeadlines, limit: float | None, work: float) -> float:
    """Run `work` seconds inside `fence` with the tool's timeout `limit`; the seconds it ran."""
    began = time.monotonic()
    with fence.running(deadlines, limit):
        await asyncio.sleep(work)
    return time.monotonic() - began


async def test_a_run_with_an_earlier_deadline_than_the_timers_ends_at_its_own() -> None:
    deadlines = TaskDeadlines()
    long, short = _fence(), _fence()
    waiting = asyncio.create_task(_run(long, deadlines, 30, 30))
    await asyncio.sleep(0)  # the long run set the timer for its deadline
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await _run(short, deadlines, 0.1, 30)
    assert time.monotonic() - began < 5
    assert short.timed_out()
    assert not short.closed_the_task()
    assert not waiting.done(), "the long run keeps its own deadline"
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not long.timed_out(), "a cancel from elsewhere is not its timeout"


async def test_a_later_run_ends_though_the_timer_was_set_for_one_that_ended() -> None:
    """The timer was set for a run that ended early; the run that remains is ended all the same."""
    deadlines = TaskDeadlines()
    await _run(_fence(), deadlines, 0.1, 0)  # ends at once; the timer stays set for 0.1 s
    later = _fence()
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        await _run(later, deadlines, 0.3, 30)
    assert 0.25 < time.monotonic() - began < 5
    assert later.timed_out()


async def test_a_closed_fence_ends_its_run_at_once() -> None:
    deadlines = TaskDeadlines()
    fence = _fence()
    running = asyncio.create_task(_run(fence, deadlines, None, 30))
    await asyncio.sleep(0.05)
    fence.revoke()  # a renewal was refused
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(running, 5)
    assert fence.closed_the_task()
    assert not fence.timed_out()


async def test_a_cancel_from_elsewhere_as_the_deadline_passes_is_not_a_timeout() -> None:
    """Like `asyncio.timeout`: when the task was also cancelled by someone else, the
    cancellation goes on up rather than turning into a `TimeoutError`."""
    deadlines, fence = TaskDeadlines(), _fence()
    loop = asyncio.get_running_loop()

    async def blocked_past_both() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop.call_at(loop.time() + 0.15, task.cancel)  # the other cancel, after the deadline
        with fence.running(deadlines, 0.1):
            time.sleep(0.2)  # noqa: ASYNC251 (both are due when the loop next turns)
            await asyncio.sleep(30)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(blocked_past_both())
    assert fence.timed_out(), "the deadline had passed as well"


async def test_many_runs_end_each_at_its_own_deadline() -> None:
    deadlines = TaskDeadlines()
    began = time.monotonic()

    async def ended(limit: float) -> float:
        """When the run with the timeout `limit` ended, from `began`."""
        fence = _fence()
        with pytest.raises(TimeoutError):
            await _run(fence, deadlines, limit, 30)
        assert fence.timed_out()
        return time.monotonic() - began

    timeouts = [2.1, 0.3, 1.5, 0.9]
    ends = await asyncio.gather(*(ended(limit) for limit in timeouts))
    for timeout, end in zip(timeouts, ends, strict=True):
        assert timeout <= end < timeout + 0.5, (timeout, end)  # the next one is 0.6 s later
