"""Exactly-once agents take their batches from the channel's queue (worker/runtime.py,
``taken``), and every input is decoded as bytes (``_Bytes``).

Faust acknowledges nothing of these inputs, so its stream, which would hand each event
through its iterator, sensors and a buffer task, is not run; what it would still do is
kept: events fetched before the last rebalance are passed over, and the channel's end
ends the batches. Faust's own app, topic and events; no broker."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from faust.types import Message

from ndd_stream.worker.runtime import agent_input, taken


def _stream() -> tuple[Any, Any]:
    app = faust.App("taken-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    return app, app.stream(agent_input(app, "raw", pattern=None, maxsize=None, acks=False))


def _message(offset: int, generation: int = 1, value: bytes | None = b"v") -> Message:
    return Message("raw", 0, offset, 0.0, 0, [("h", b"1")], b"k", value, None,
                   generation_id=generation)


async def _put(stream: Any, message: Message) -> None:
    """As Faust's conductor hands a fetched record to the agent's channel."""
    stream.channel.queue.put_nowait(await stream.channel.decode(message, propagate=True))


def test_input_records_are_their_bytes() -> None:
    async def run() -> None:
        _, stream = _stream()
        event = await stream.channel.decode(_message(3, value=None), propagate=True)
        assert (event.key, event.value, event.message.offset) == (b"k", None, 3)
        event = await stream.channel.decode(_message(4), propagate=True)
        assert (event.key, event.value, event.headers) == (b"k", b"v", {"h": b"1"})
        assert stream.channel.acks is False and stream.channel.allow_empty

    asyncio.run(run())


def test_a_batch_is_what_arrived_within_the_wait_up_to_most() -> None:
    async def run() -> None:
        app, stream = _stream()
        app.consumer_generation_id = 1
        app.flow_control.resume()
        for offset in range(5):
            await _put(stream, _message(offset))
        batches = taken(stream, 3, 0.05)
        first = await anext(batches)
        assert [e.message.offset for e in first] == [0, 1, 2]  # at most 3
        second = asyncio.ensure_future(anext(batches))
        await asyncio.sleep(0.01)
        await _put(stream, _message(5))  # within the wait: joins the batch
        assert [e.message.offset for e in await second] == [3, 4, 5]
        await batches.aclose()

    asyncio.run(run())


def test_events_of_another_generation_are_passed_over() -> None:
    async def run() -> None:
        app, stream = _stream()
        app.consumer_generation_id = 2
        app.flow_control.resume()
        await _put(stream, _message(0, generation=1))  # fetched before the rebalance
        await _put(stream, _message(1, generation=2))
        batches = taken(stream, 10, 0.01)
        assert [e.message.offset for e in await anext(batches)] == [1]
        await batches.aclose()

    asyncio.run(run())


def test_nothing_is_handed_out_while_the_flow_is_suspended() -> None:
    async def run() -> None:
        app, stream = _stream()
        app.consumer_generation_id = 1
        app.flow_control.suspend()
        await _put(stream, _message(0))
        batches = taken(stream, 10, 0.01)
        pending = asyncio.ensure_future(anext(batches))
        await asyncio.sleep(0.05)
        assert not pending.done()  # the suspended batch was dropped, the next waited for
        app.flow_control.resume()
        await _put(stream, _message(1))
        assert [e.message.offset for e in await asyncio.wait_for(pending, 5)] == [1]
        await batches.aclose()

    asyncio.run(run())


def test_the_channels_end_ends_the_batches() -> None:
    async def run() -> None:
        _, stream = _stream()
        batches = taken(stream, 10, 0.01)
        pending = asyncio.ensure_future(anext(batches))
        await asyncio.sleep(0.01)
        await stream.channel.throw(StopAsyncIteration())  # as Faust ends a stopped stream
        try:
            await asyncio.wait_for(pending, 5)
        except StopAsyncIteration:
            return
        raise AssertionError("a batch after the channel ended")

    asyncio.run(run())
