"""Faust's per-record hand-off, run at once when nothing waits (worker/runtime.py).

Faust's fetch loop hands every record to the agents' queue through ``wait_first``
against the flow being suspended; these tests use Faust's own consumer object and no
broker."""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from ndd_stream.worker.runtime import _Consumer


def _consumer() -> Any:
    app = faust.App("handoff-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    app.transport.Consumer = _Consumer  # type: ignore[misc]
    consumer = app.consumer
    assert isinstance(consumer, _Consumer)
    return consumer


async def _waiting_hand_off() -> tuple[Any, asyncio.Queue[int], asyncio.Future[Any]]:
    """A consumer whose hand-off of 2 waits: the queue is full (it holds 1)."""
    consumer, queue = _consumer(), asyncio.Queue[int](maxsize=1)
    queue.put_nowait(1)
    waiting = asyncio.ensure_future(
        consumer.wait_first(queue.put(2), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    return consumer, queue, waiting


def test_a_hand_off_with_room_is_the_winner_without_a_task() -> None:
    async def run() -> None:
        consumer, queue = _consumer(), asyncio.Queue[int](maxsize=1)
        suspended = consumer.suspend_flow.wait()
        tasks_before = len(asyncio.all_tasks())
        result = await consumer.wait_first(queue.put(7), suspended)
        assert len(asyncio.all_tasks()) == tasks_before
        assert not result.stopped and result.results == [None]
        assert queue.get_nowait() == 7
        assert suspended.cr_frame is None  # closed, never left waiting

    asyncio.run(run())


def test_a_hand_off_to_a_full_queue_waits_for_room() -> None:
    async def run() -> None:
        _, queue, waiting = await _waiting_hand_off()
        assert queue.get_nowait() == 1  # room: the hand-off goes on
        result = await asyncio.wait_for(waiting, 5)
        assert not result.stopped and len(result.done) == 1
        assert queue.get_nowait() == 2

    asyncio.run(run())


def test_a_flow_suspended_while_the_hand_off_waits_cancels_it() -> None:
    """As Faust's own: the record is not handed on (its fetch is sought again after the
    rebalance), and the queue keeps no waiter for it."""
    async def run() -> None:
        consumer, queue, waiting = await _waiting_hand_off()
        consumer.suspend_flow.set()
        result = await asyncio.wait_for(waiting, 5)
        assert result.done and result.done[0] is not None
        assert queue.get_nowait() == 1 and queue.empty()
        assert not queue._putters  # type: ignore[attr-defined]

    asyncio.run(run())


def test_a_suspended_flow_leaves_the_hand_off_to_faust() -> None:
    async def run() -> None:
        consumer, queue = _consumer(), asyncio.Queue[int](maxsize=1)
        consumer.suspend_flow.set()
        result = await consumer.wait_first(queue.put(3), consumer.suspend_flow.wait())
        assert not result.stopped and result.done

    asyncio.run(run())


def test_a_hand_off_that_fails_raises() -> None:
    async def run() -> None:
        consumer = _consumer()

        async def broken() -> None:
            raise ValueError("no such channel")

        suspended = consumer.suspend_flow.wait()
        try:
            await consumer.wait_first(broken(), suspended)
        except ValueError:
            assert suspended.cr_frame is None  # closed, never left waiting
            return
        raise AssertionError("the hand-off's error was swallowed")

    asyncio.run(run())
