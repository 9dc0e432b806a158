"""The decider pool's partition lifecycle against a real broker (changelog reads)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from kafka_helpers import SettingsFactory
from test_worker_routing import _create_topics

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings
from ndd_stream.worker.app import output_topics, topic_name
from ndd_stream.worker.deciding import PartitionDecider
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import DeciderPool

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]


def _pool(settings: Settings) -> DeciderPool:
    return DeciderPool(settings.data_dir / settings.app_id, settings.detector_config(),
                       settings.item_format(), output_topics(settings),
                       librdkafka_config(settings), WorkerMetrics(),
                       restore_timeout_s=30.0, scoped_topic=topic_name(settings, "scoped"))


def test_a_partition_open_cancelled_midway_is_not_opened_twice(
    make_settings: SettingsFactory,
) -> None:
    """A rebalance callback or a stop can cancel the coroutine waiting for a partition's
    store to open while the executor thread goes on opening it. The next waiter must get
    that store, not open the RocksDB directory a second time (its lock is held)."""
    settings = make_settings(partitions=1)
    _create_topics(settings)
    pool = _pool(settings)
    started, proceed, opened = threading.Event(), threading.Event(), threading.Event()
    open_sync = pool._open_sync

    def gated_open(partition: int) -> PartitionDecider:
        started.set()
        proceed.wait(30)
        try:
            return open_sync(partition)
        finally:
            opened.set()

    pool._open_sync = gated_open  # type: ignore[method-assign]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(pool.ensure(0))
        assert await loop.run_in_executor(None, started.wait, 30)  # opening in a thread
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        proceed.set()
        assert await loop.run_in_executor(None, opened.wait, 30)  # the store is open
        decider = await asyncio.wait_for(pool.ensure(0), timeout=60)
        assert pool.deciders == {0: decider}
        assert await pool.ensure(0) is decider

    try:
        asyncio.run(scenario())
    finally:
        pool.close()
