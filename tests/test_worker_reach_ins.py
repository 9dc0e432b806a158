"""Every private attribute of Faust, mode, aiokafka or asyncio that the worker reads or
overrides (the list in worker/runtime.py's docstring) still exists in the installed
versions: an upgrade that removes or renames one fails here, not in production. No broker:
the clients are made, never started."""

from __future__ import annotations

import asyncio
import inspect

import aiokafka
import faust
import pytest
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

from ndd_stream.worker import runtime


def _assigned_in(cls: type, attribute: str) -> bool:
    """Whether ``cls.__init__`` (or a method of ``cls``) assigns ``self.<attribute>``."""
    return f"self.{attribute} =" in inspect.getsource(cls) or (
        f"self.{attribute}:" in inspect.getsource(cls))


@pytest.mark.parametrize("method", ["_create_worker_consumer", "_fetch_records"])
def test_fausts_consumer_thread_still_has_the_methods_overridden(method: str) -> None:
    assert callable(getattr(faust_aiokafka.AIOKafkaConsumerThread, method))
    assert method in vars(runtime._ConsumerThread)


def test_fausts_consumer_and_table_manager_still_have_the_methods_used() -> None:
    from faust.tables import TableManager

    assert callable(faust_aiokafka.Consumer._new_consumer_thread)  # runtime._Consumer
    assert callable(TableManager._update_channels)  # runtime._TableManager.on_start


def test_aiokafkas_consumer_still_reads_the_fetch_wait_and_isolation_it_is_given() -> None:
    async def made() -> aiokafka.AIOKafkaConsumer:
        return aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9",
                                         fetch_max_wait_ms=123,
                                         isolation_level="read_committed")

    consumer = asyncio.run(made())
    assert consumer._fetch_max_wait_ms == 123  # runtime._ConsumerThread
    assert consumer._isolation_level == "read_committed"  # runtime._ReadCommittedThread
    assert "_fetcher" in vars(consumer) and "_coordinator" in vars(consumer)


def test_aiokafkas_fetcher_still_keeps_its_ordered_buffer() -> None:
    assert _assigned_in(Fetcher, "_records")  # runtime.take_turns moves partitions in it


def test_aiokafkas_group_coordinator_still_knows_its_instance_id() -> None:
    assert _assigned_in(GroupCoordinator, "_group_instance_id")  # runtime.group_member
    for public in ("generation", "member_id"):
        assert _assigned_in(GroupCoordinator, public)


def test_fausts_consumer_still_keeps_its_thread_and_partition_sets() -> None:
    assert "_thread" in faust_aiokafka.Consumer.__annotations__  # group_member, stall._end
    assert "_consumer" in faust_aiokafka.AIOKafkaConsumerThread.__annotations__
    base = faust_consumer.Consumer
    assert callable(base._get_active_partitions)  # stall.unblock
    for held in ("_paused_partitions", "_buffered_partitions"):
        assert _assigned_in(base, held)


def test_asyncios_futures_still_mark_a_blocking_wait() -> None:
    async def check() -> None:
        future = asyncio.get_running_loop().create_future()
        assert future._asyncio_future_blocking is False  # runtime._resumed
    asyncio.run(check())


def test_the_installed_versions_are_within_the_pinned_ranges() -> None:
    """pyproject.toml pins each library below its next minor release: the attributes
    above are checked against what is installed, and a new release is taken on purpose."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    pinned = {r.name: r.specifier for r in map(Requirement, project["project"]["dependencies"])}
    for name in ("faust-streaming", "aiokafka", "mode-streaming"):
        assert any(s.operator == "<" for s in pinned[name]), f"{name} has no upper bound"
        assert pinned[name].contains(version(name)), name
    assert faust.__version__ == version("faust-streaming")
