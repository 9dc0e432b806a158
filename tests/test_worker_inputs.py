"""How the agents' inputs are declared to Faust (worker/runtime.py, ``agent_input``).

Exactly-once nothing is acknowledged to Faust (the transactions move the offsets), so
Faust's acknowledgement bookkeeping must be off: with it on, its fetch loop kept a gap for
each transaction marker of the read_committed input and merged them all at every new one,
and a live worker slowed by the minute (docs/BENCHMARK.md, "A live worker over minutes").
At-least-once Faust's acknowledgements are the raw partitions' position and stay on.
The service is built against the session's broker, not started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.brokers import EmbeddedBroker

from ndd_stream.settings import Settings
from ndd_stream.worker.app import Service


@pytest.mark.parametrize(("guarantee", "acks"), [("exactly-once", False),
                                                 ("at-least-once", True)])
def test_faust_tracks_acknowledgements_only_at_least_once(
        broker: EmbeddedBroker, tmp_path: Path, guarantee: str, acks: bool) -> None:
    settings = Settings(brokers=[broker.bootstrap], guarantee=guarantee, data_dir=tmp_path,
                        web_port=0)
    service = Service(settings)
    try:
        agents = service.app.agents
        assert set(agents) == {"ndd-router", "ndd-decider"}
        assert all(agent.channel.acks is acks for agent in agents.values())
    finally:
        service.close()
