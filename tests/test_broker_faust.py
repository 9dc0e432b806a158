"""faust-streaming on the embedded Tansu broker: the settings the worker relies on.

A Faust app whose agent forwards every record from one topic to another, adding a header,
runs as a real worker process (this file is also its script: ``python test_broker_faust.py
BOOTSTRAP SRC DST APP_ID NAME``). The tests check end-to-end delivery with headers, the
committed offsets, that a restarted worker resumes after them, and that two workers in
one group share the partitions and hand them over on shutdown. See docs/TANSU.md.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import (
    Names,
    Outgoing,
    Record,
    TopicFactory,
    committed_offsets,
    consume,
    produce,
    wait_until,
)
from harness.worker import Process

from ndd_stream.kafka.broker import EmbeddedBroker

pytestmark = pytest.mark.broker

PARTITIONS = 4


def make_app(bootstrap: str, src: str, dst: str, app_id: str, name: str) -> Any:
    """The Faust app under test, with the settings docs/TANSU.md recommends."""
    import faust

    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",  # no state here; the worker keeps its own RocksDB
        web_enabled=False,  # or web_port=<free port>: each worker needs its own
        broker_session_timeout=6.0,  # Tansu delays every group join by half of it
        broker_heartbeat_interval=1.0,
        broker_commit_interval=0.5,
        consumer_auto_offset_reset="earliest",
        topic_allow_declare=False,  # topics come from `topics apply`, never from Faust
        topic_disable_leader=True,  # no <app_id>-__assignor-__leader topic needed
        producer_acks=-1,
        key_serializer="raw",
        value_serializer="raw",
    )
    source = app.topic(src, key_type=bytes, value_type=bytes)
    sink = app.topic(dst, key_type=bytes, value_type=bytes)

    @app.agent(source)
    async def forward(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            headers = dict(event.headers or {})
            headers["forwarded-by"] = name.encode()
            headers["source"] = f"{message.partition}:{message.offset}".encode()
            await sink.send(key=event.key, value=event.value, headers=headers)

    return app


def _worker_main(argv: list[str]) -> None:
    import faust

    bootstrap, src, dst, app_id, name = argv
    app = make_app(bootstrap, src, dst, app_id, name)
    # Blocks until SIGTERM/SIGINT, then stops the app (committing offsets), closes the
    # loop and exits with SystemExit(0).
    faust.Worker(app, loglevel="INFO").execute_from_commandline()


@contextmanager
def worker(tmp_path: Path, *args: str) -> Iterator[Process]:
    """This file as a Faust worker (``python test_broker_faust.py ...``), stopped on exit."""
    proc = Process([sys.executable, __file__, *args], tmp_path / f"worker-{args[-1]}.log",
                   cwd=Path(__file__).resolve().parent.parent).start()
    try:
        yield proc
    finally:
        proc.stop()


def _batch(start: int, stop: int) -> list[Outgoing]:
    return [
        Outgoing(
            value=b"v%d" % i,
            key=b"k%d" % i,
            headers=[("n", b"%d" % i)],
            partition=i % PARTITIONS,  # spread evenly: a few keys can hash to few partitions
        )
        for i in range(start, stop)
    ]


def test_forward_with_headers_commit_and_resume(
    broker: EmbeddedBroker, names: Names, make_topics: TopicFactory, tmp_path: Path
) -> None:
    src, dst, app_id = names.topic("src"), names.topic("dst"), names.app_id()
    make_topics(src, dst, partitions=PARTITIONS)
    produce(broker.bootstrap, src, _batch(0, 30), one_per_batch=False)

    with worker(tmp_path, broker.bootstrap, src, dst, app_id, "a") as first:
        out = consume(broker.bootstrap, dst, n=30, timeout=60)
        assert len(out) == 30, first.log_tail()
        assert first.stop() == 0, first.log_tail()

    assert sorted(_n(r) for r in out) == list(range(30))  # each exactly once
    for record in out:
        assert record.header("forwarded-by") == b"a"
        n = _n(record)
        assert record.value == b"v%d" % n and record.key == b"k%d" % n

    # Offsets were committed on shutdown: one past the last record of every partition.
    committed = committed_offsets(broker.bootstrap, app_id, src)
    assert committed == Counter(i % PARTITIONS for i in range(30))

    produce(broker.bootstrap, src, _batch(30, 40), one_per_batch=False)
    with worker(tmp_path, broker.bootstrap, src, dst, app_id, "b") as second:
        out = consume(broker.bootstrap, dst, n=40, timeout=60)
        assert len(out) == 40, second.log_tail()
        assert second.stop() == 0, second.log_tail()
    # Stopped cleanly, the worker has nothing more on its way: read everything there is.
    extra = consume(broker.bootstrap, dst, timeout=20, idle=2)
    assert len(extra) == 40, "the restarted worker re-processed committed records"
    resumed = [r for r in out if r.header("forwarded-by") == b"b"]
    assert sorted(_n(r) for r in resumed) == list(range(30, 40))


def test_two_workers_share_partitions_and_hand_over(
    broker: EmbeddedBroker, names: Names, make_topics: TopicFactory, tmp_path: Path
) -> None:
    src, dst, app_id = names.topic("src"), names.topic("dst"), names.app_id()
    make_topics(src, dst, partitions=PARTITIONS)
    args = (broker.bootstrap, src, dst, app_id)
    produce(broker.bootstrap, src, _batch(0, 10))

    with worker(tmp_path, *args, "a") as a:
        assert len(consume(broker.bootstrap, dst, n=10, timeout=60)) == 10, a.log_tail()
        with worker(tmp_path, *args, "b") as b:
            # Let the rebalance finish: b joins after half a session timeout, a rejoins.
            assert wait_until(lambda: _settled_together(a, b), timeout=45), (
                a.log_tail() + b.log_tail()
            )
            produce(broker.bootstrap, src, _batch(10, 60))
            out = consume(broker.bootstrap, dst, n=60, timeout=60)
            assert len(out) == 60, a.log_tail() + b.log_tail()
            assert b.stop() == 0, b.log_tail()
        by_worker = Counter(r.header("forwarded-by") for r in out if _n(r) >= 10)
        assert by_worker[b"a"] > 0 and by_worker[b"b"] > 0, by_worker

        produce(broker.bootstrap, src, _batch(60, 80))  # b is gone: a takes everything
        out = consume(broker.bootstrap, dst, n=80, timeout=60)
        assert len(out) == 80, a.log_tail()
        assert a.stop() == 0, a.log_tail()
    assert sorted(_n(r) for r in out) == list(range(80))
    assert {r.header("forwarded-by") for r in out if _n(r) >= 60} == {b"a"}
    taken_over = {r.header("source") for r in out if _n(r) >= 60}
    assert {int((s or b"").split(b":")[0]) for s in taken_over} == set(range(PARTITIONS))


def _n(record: Record) -> int:
    return int(record.header("n") or b"-1")


_JOINED = re.compile(r"Joined group '[^']+' \(generation (\d+)\)")


def _settled_together(*procs: Process) -> bool:
    """All workers joined the same (latest) generation and finished handling it."""
    generations = set()
    for proc in procs:
        log = proc.log_text()
        joined = _JOINED.findall(log)
        if not joined or log.count("Worker ready") < len(joined):
            return False
        generations.add(joined[-1])
    return len(generations) == 1


if __name__ == "__main__":
    _worker_main(sys.argv[1:])
