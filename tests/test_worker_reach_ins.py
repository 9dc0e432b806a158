"""Every private attribute of Faust or aiokafka that the worker reads or overrides (the
list in worker/runtime.py's docstring) still exists in the installed versions, and the
public ones it relies on instead still do what it relies on: an upgrade that removes or
renames one fails here, not in production. No broker: the clients are made, never
started."""

from __future__ import annotations

import asyncio
import inspect

import aiokafka
import faust
import pytest
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
    assert "_new_consumer_thread" in vars(runtime._Consumer)
    assert callable(TableManager._update_channels)  # runtime._TableManager.on_start


def test_aiokafkas_consumer_still_reads_the_fetch_wait_it_is_given() -> None:
    async def made() -> aiokafka.AIOKafkaConsumer:
        return aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9",
                                         fetch_max_wait_ms=123)

    consumer = asyncio.run(made())
    assert consumer._fetch_max_wait_ms == 123  # runtime._ConsumerThread
    assert "_coordinator" in vars(consumer)  # runtime.group_member


def test_aiokafkas_group_coordinator_still_knows_its_generation_and_member() -> None:
    for public in ("generation", "member_id"):  # runtime.group_member
        assert _assigned_in(GroupCoordinator, public)


def test_fausts_public_consumer_calls_still_do_what_the_worker_relies_on() -> None:
    """Faust's ``in_transaction`` chooses the isolation level and makes ``highwater`` the
    last stable offset (runtime._Consumer, delivery._end); ``resume_partitions`` and
    ``on_buffer_drop`` put a partition back into the fetched set (delivery.unblock)."""
    thread = faust_aiokafka.AIOKafkaConsumerThread
    assert "in_transaction" in inspect.getsource(thread._create_worker_consumer)
    assert "last_stable_offset" in inspect.getsource(thread.highwater)
    base = faust_consumer.Consumer
    assert "_get_active_partitions().update" in inspect.getsource(base.resume_partitions)
    assert "active_partitions.add" in inspect.getsource(base.on_buffer_drop)
    assert "self.in_transaction" in inspect.getsource(base.on_init_dependencies)
    assert "on_init_dependencies" in vars(runtime._Consumer)  # Faust's transactions: off


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
