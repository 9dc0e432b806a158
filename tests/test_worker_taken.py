"""Exactly-once agents take their batches from an inbox the consumer fills a fetch at a
time (worker/runtime.py, ``Inbox``, ``_Consumer.getmany``, ``taken``), and every input is
decoded as bytes (``_Bytes``).

Faust acknowledges nothing of these inputs, so neither its conductor (an event and a
channel queue per record) nor its stream (its iterator, sensors and a buffer task) runs
for them; what Faust would still do is kept: records fetched before the last rebalance are
passed over, a full inbox holds the next fetch back. Faust's own app and topics; no
broker (the broker suites run the consumer's side)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from faust.types import Message

from ndd_stream.worker.runtime import INBOXES, Inbox, _Consumer, agent_input, inbox_of, taken


def _stream(maxsize: int | None = None) -> tuple[Any, Any, Inbox]:
    app = faust.App("taken-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    topic = agent_input(app, "raw", pattern=None, maxsize=maxsize, acks=False)
    (registered, inbox), = getattr(app, INBOXES)
    assert registered is topic
    return app, app.stream(topic), inbox


def _message(offset: int, generation: int = 1, value: bytes | None = b"v") -> Message:
    return Message("raw", 0, offset, 0.0, 0, [("h", b"1")], b"k", value, None,
                   generation_id=generation)


def test_input_records_are_their_bytes() -> None:
    async def run() -> None:
        _, stream, _ = _stream()
        event = await stream.channel.decode(_message(3, value=None), propagate=True)
        assert (event.key, event.value, event.message.offset) == (b"k", None, 3)
        event = await stream.channel.decode(_message(4), propagate=True)
        assert (event.key, event.value, event.headers) == (b"k", b"v", {"h": b"1"})
        assert stream.channel.acks is False and stream.channel.allow_empty

    asyncio.run(run())


def test_only_unacknowledged_inputs_have_an_inbox() -> None:
    app = faust.App("taken-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    agent_input(app, "acked", pattern=None, maxsize=None, acks=True)
    assert getattr(app, INBOXES, []) == []
    agent_input(app, pattern="^raw-.*", maxsize=7, acks=False)
    (_, inbox), = getattr(app, INBOXES)
    assert inbox.limit == 7


def test_the_consumer_finds_each_topics_inbox_by_name_or_pattern() -> None:
    app = faust.App("taken-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    agent_input(app, "scoped", pattern=None, maxsize=None, acks=False)
    agent_input(app, pattern="^raw-.*", maxsize=None, acks=False)
    (_, scoped), (_, raw) = inboxes = getattr(app, INBOXES)
    consumer = object.__new__(_Consumer)  # no transport: only the lookup is under test
    consumer._inbox_of = {}
    assert consumer._inbox("scoped", inboxes) is scoped
    assert consumer._inbox("raw-news", inboxes) is raw
    assert consumer._inbox("other", inboxes) is None
    assert consumer._inbox("raw-news", inboxes) is raw  # looked up once


def test_an_agents_stream_reads_its_topics_inbox() -> None:
    """An agent's stream reads a clone of its topic: the inbox is found by the names."""
    app = faust.App("taken-test", broker="kafka://127.0.0.1:1", web_enabled=False)
    agent_input(app, "scoped", pattern=None, maxsize=None, acks=False)
    agent_input(app, pattern="^raw-.*", maxsize=None, acks=False)
    acked = agent_input(app, "acked", pattern=None, maxsize=None, acks=True)
    (scoped_topic, scoped), (raw_topic, raw) = getattr(app, INBOXES)

    async def handle(stream: Any) -> None:
        async for _ in stream:
            pass

    async def run() -> None:
        streams = [app.agent(t, name=f"agent-{i}")(handle).stream()
                   for i, t in enumerate((scoped_topic, raw_topic, acked))]
        assert streams[0].channel is not scoped_topic
        assert [inbox_of(s) for s in streams] == [scoped, raw, None]

    asyncio.run(run())


def test_a_batch_is_what_arrived_within_the_wait_up_to_most() -> None:
    async def run() -> None:
        app, stream, inbox = _stream()
        app.consumer_generation_id = 1
        app.flow_control.resume()
        inbox.put([_message(offset) for offset in range(5)])  # one fetch
        batches = taken(stream, inbox, 3, 0.05)
        first = await anext(batches)
        assert [m.offset for m in first] == [0, 1, 2]  # at most 3
        second = asyncio.ensure_future(anext(batches))
        await asyncio.sleep(0.01)
        inbox.put([_message(5)])  # within the wait: joins the batch
        assert [m.offset for m in await second] == [3, 4, 5]
        await batches.aclose()

    asyncio.run(run())


def test_records_of_another_generation_are_passed_over() -> None:
    async def run() -> None:
        app, stream, inbox = _stream()
        app.consumer_generation_id = 2
        app.flow_control.resume()
        inbox.put([_message(0, generation=1), _message(1, generation=2)])
        batches = taken(stream, inbox, 10, 0.01)
        assert [m.offset for m in await anext(batches)] == [1]
        await batches.aclose()

    asyncio.run(run())


def test_nothing_is_handed_out_while_the_flow_is_suspended() -> None:
    async def run() -> None:
        app, stream, inbox = _stream()
        app.consumer_generation_id = 1
        app.flow_control.suspend()
        inbox.put([_message(0)])
        batches = taken(stream, inbox, 10, 0.01)
        pending = asyncio.ensure_future(anext(batches))
        await asyncio.sleep(0.05)
        assert not pending.done()  # the suspended batch was dropped, the next waited for
        app.flow_control.resume()
        inbox.put([_message(1)])
        assert [m.offset for m in await asyncio.wait_for(pending, 5)] == [1]
        await batches.aclose()

    asyncio.run(run())


def test_a_full_inbox_holds_the_next_fetch_until_the_agent_takes() -> None:
    async def run() -> None:
        _, _, inbox = _stream(maxsize=4)
        inbox.put([_message(offset) for offset in range(5)])  # a fetch may overshoot
        assert inbox.full()
        waiting = asyncio.ensure_future(inbox.wait_room(5.0))
        await asyncio.sleep(0.02)
        assert not waiting.done()
        assert [m.offset for m in await inbox.take(1, 0.0)] == [0]  # 4 left: still full
        await asyncio.sleep(0.02)
        assert not waiting.done()
        assert [m.offset for m in await inbox.take(2, 0.0)] == [1, 2]
        await asyncio.wait_for(waiting, 1.0)
        assert not inbox.full()

    asyncio.run(run())
