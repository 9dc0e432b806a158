"""The worker's Kafka clients speak Apache Kafka 4.x, checked without a broker.

Kafka 4.0 removed the request versions of clients older than Kafka 2.1 (KIP-896): a 4.x
broker refuses them. kafka4_api_versions.json holds what 4.0.0 and 4.1.1 advertise in their
ApiVersions response and what they serve, taken from Kafka's own message definitions.

- aiokafka (through Faust: agents, producer, consumer group, Faust's topic creation) picks a
  version per request from the broker's advertised range with its own code
  (`Request.prepare`, what `AIOKafkaConnection.send` calls). Here the requests are built as
  aiokafka and Faust build them and prepared against the 4.x ranges: every pick must be served
  by the broker and encodable by the client.
- librdkafka (confluent-kafka: CLI, admin, reads, DLQ producer) negotiates in C, out of reach
  from Python: its version must be one whose release notes cover Kafka 4.0.

Later 4.x releases only add versions at the top (removals wait for a major release), and the
picks do not move when the maxima grow (test_picks_hold_for_later_4x).
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import Callable
from importlib.metadata import version as installed_version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import confluent_kafka
import faust
import mode
import pytest
from aiokafka.protocol.admin import ApiVersionRequest, CreateTopicsRequest
from aiokafka.protocol.api import Request, RequestStruct
from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest
from aiokafka.protocol.coordination import FindCoordinatorRequest
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.protocol.produce import ProduceRequest
from faust.transport.drivers import aiokafka as faust_aiokafka
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
TABLE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "kafka4_api_versions.json").read_text(encoding="utf-8")
)
KAFKA_RELEASES = [k for k in TABLE if not k.startswith("_")]
GROUP, MEMBER, TOPIC = "ndd-stream", "ndd-stream-1-a1b2", "news.raw"

Range = tuple[int, int]


def apis(kafka: str) -> dict[str, dict[str, Any]]:
    return {name: d for name, d in TABLE[kafka].items() if not name.startswith("_")}


def advertised(kafka: str) -> dict[int, Range]:
    """What the broker's ApiVersions response holds: api key -> (min, max)."""
    return {d["key"]: (d["advertised"][0], d["advertised"][1]) for d in apis(kafka).values()}


def served(kafka: str, name: str) -> Range:
    lo, hi = apis(kafka)[name]["served"]
    return lo, hi


# Every request the worker's aiokafka clients send, built as aiokafka builds it at its call
# site (client.py, producer/sender.py, consumer/fetcher.py, consumer/group_coordinator.py).
# Not InitProducerId and the transaction requests: the worker runs Faust's at_least_once
# (no idempotent or transactional producer; aiokafka's enable_idempotence defaults to False).
# CreateTopics is Faust's own code path: test_faust_create_topic_speaks_kafka4.
WORKER_REQUESTS: dict[str, Callable[[], Request[Any]]] = {
    "Metadata": lambda: MetadataRequest([TOPIC]),
    "Produce": lambda: ProduceRequest(
        transactional_id=None, required_acks=-1, timeout=40_000,
        topics=[("news.decisions", [(0, b"")])],
    ),
    "Fetch": lambda: FetchRequest(
        500, 1, 52_428_800, 0, [(TOPIC, [(0, 42, 4_194_304)])], rack_id=""
    ),
    "ListOffsets": lambda: OffsetRequest(-1, 0, [(TOPIC, [(0, -1)])]),
    "FindCoordinator": lambda: FindCoordinatorRequest(GROUP, 0),
    "JoinGroup": lambda: JoinGroupRequest(
        GROUP, 30_000, 300_000, "", None, "consumer", [("faust", b"\x00\x01")]
    ),
    "SyncGroup": lambda: SyncGroupRequest(GROUP, 1, MEMBER, None, [(MEMBER, b"\x00\x01")]),
    "Heartbeat": lambda: HeartbeatRequest(GROUP, 1, MEMBER),
    "LeaveGroup": lambda: LeaveGroupRequest(GROUP, MEMBER),
    "OffsetCommit": lambda: OffsetCommitRequest(
        GROUP, 1, MEMBER, OffsetCommitRequest.DEFAULT_RETENTION_TIME, [(TOPIC, [(0, 42, "")])]
    ),
    "OffsetFetch": lambda: OffsetFetchRequest(GROUP, [(TOPIC, [0])]),
}


def assert_speaks(kafka: str, name: str, struct: RequestStruct) -> None:
    """The broker serves the picked version and the client can put it on the wire."""
    lo, hi = served(kafka, name)
    assert apis(kafka)[name]["key"] == struct.API_KEY, name
    assert lo <= struct.API_VERSION <= hi, (
        f"Kafka {kafka} serves {name} v{lo}-{hi}; the client picked v{struct.API_VERSION}"
    )
    # On the wire: the request header (api key, version) as aiokafka writes it, then the body.
    header = struct.build_request_header(correlation_id=1, client_id="ndd-stream").encode()
    assert int.from_bytes(header[:2], "big") == struct.API_KEY, name
    assert int.from_bytes(header[2:4], "big") == struct.API_VERSION, name
    assert isinstance(struct.encode(), bytes), name


# --- the table ------------------------------------------------------------------------


@pytest.mark.parametrize("kafka", KAFKA_RELEASES)
def test_table_has_kip896_floors(kafka: str) -> None:
    """The table is 4.x's, not 3.x's: KIP-896's new baselines are in it, and Faust's
    CreateTopics v1 (what it sends with aiokafka < 0.13) and Produce v0-2 are refused."""
    assert kafka.startswith("4.")
    floors = {"Produce": 3, "Fetch": 4, "ListOffsets": 1, "OffsetCommit": 2,
              "OffsetFetch": 1, "CreateTopics": 2}
    for name, floor in floors.items():
        assert served(kafka, name)[0] == floor, name
    assert not served(kafka, "CreateTopics")[0] <= 1 <= served(kafka, "CreateTopics")[1]
    # A 4.x broker advertises Produce from v0 (a librdkafka workaround) but serves v3+:
    # a client that took the bottom of the advertised range would be refused.
    assert apis(kafka)["Produce"]["advertised"][0] == 0
    for name, d in apis(kafka).items():
        assert d["advertised"][1] == d["served"][1], name
        assert d["advertised"][0] <= d["served"][0] <= d["served"][1], name


# --- aiokafka -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WORKER_REQUESTS))
@pytest.mark.parametrize("kafka", KAFKA_RELEASES)
def test_aiokafka_picks_a_served_version(kafka: str, name: str) -> None:
    assert_speaks(kafka, name, WORKER_REQUESTS[name]().prepare(advertised(kafka)))


@pytest.mark.parametrize("kafka", KAFKA_RELEASES)
def test_api_versions_handshake(kafka: str) -> None:
    """A new connection asks ApiVersions before it knows any range: aiokafka sends its
    first version, which the broker must serve."""
    assert_speaks(kafka, "ApiVersions", ApiVersionRequest().prepare({}))
    assert_speaks(kafka, "ApiVersions", ApiVersionRequest().prepare(advertised(kafka)))


@pytest.mark.parametrize("name", sorted(WORKER_REQUESTS))
def test_picks_hold_for_later_4x(name: str) -> None:
    """Releases after 4.1 raise maxima only; aiokafka's pick must not depend on them."""
    base = advertised(KAFKA_RELEASES[-1])
    raised = {key: (lo, hi + 10) for key, (lo, hi) in base.items()}
    picks = {WORKER_REQUESTS[name]().prepare(v).API_VERSION for v in (base, raised)}
    assert len(picks) == 1, picks


class RecordingClient:
    """An in-memory stand-in for AIOKafkaClient where Faust only needs cluster and send:
    `send` negotiates as AIOKafkaConnection.send does and records what would go out."""

    def __init__(self, versions: dict[int, Range]) -> None:
        self.versions = versions
        self.sent: list[RequestStruct] = []
        self.cluster = SimpleNamespace(
            topics=lambda: set(), brokers=lambda: [SimpleNamespace(nodeId=1)]
        )

    async def send(self, node_id: int, request: Any) -> SimpleNamespace:
        prepare = getattr(request, "prepare", None)
        # aiokafka < 0.13 has no negotiation: Faust hands it a struct of a fixed version.
        struct = prepare(self.versions) if prepare is not None else request
        self.sent.append(struct)
        if struct.API_KEY == 3:
            return SimpleNamespace(controller_id=node_id)
        return SimpleNamespace(topic_errors=[(TOPIC, 0, None)])


@pytest.mark.parametrize("kafka", KAFKA_RELEASES)
def test_faust_create_topic_speaks_kafka4(kafka: str) -> None:
    """Faust's own topic creation (Metadata for the controller, then CreateTopics), the
    request Kafka 4.x refused when Faust pinned it to v1. The worker declares no topics
    (topic_allow_declare=False: `ndd-stream topics apply` creates them with librdkafka), but
    any declared topic, or a future setting, takes this path."""
    assert not faust_aiokafka._AIOKAFKA_HAS_API_VERSION, "Faust takes its aiokafka < 0.13 path"
    client = RecordingClient(advertised(kafka))

    async def create() -> None:
        app = faust.App("ndd-kafka4-check", broker="kafka://127.0.0.1:1")
        await app.transport._really_create_topic(  # type: ignore[attr-defined]
            mode.Service(), client, TOPIC, 3, 1
        )

    asyncio.run(create())
    assert [s.API_KEY for s in client.sent] == [3, 19]
    assert_speaks(kafka, "Metadata", client.sent[0])
    assert_speaks(kafka, "CreateTopics", client.sent[1])


@pytest.mark.parametrize("kafka", KAFKA_RELEASES)
def test_the_check_catches_faust_on_old_aiokafka(kafka: str) -> None:
    """What Faust sends through aiokafka < 0.13, `CreateTopicsRequest[1](...)`, goes through
    RecordingClient unnegotiated and fails the check: a downgrade cannot pass unnoticed."""
    v1 = CreateTopicsRequest._CLASSES[1]
    assert v1.API_VERSION == 1
    client = RecordingClient(advertised(kafka))
    asyncio.run(client.send(1, v1([(TOPIC, 3, 1, [], [])], 30_000, False)))
    with pytest.raises(AssertionError, match="picked v1"):
        assert_speaks(kafka, "CreateTopics", client.sent[0])


# --- pins -----------------------------------------------------------------------------


def pinned(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return next(r for r in reqs if r.name == name)


@pytest.mark.parametrize(
    ("name", "floor"),
    [("aiokafka", "0.14"), ("confluent-kafka", "2.12"), ("faust-streaming", "0.12")],
)
def test_pins_keep_kafka4_clients(name: str, floor: str) -> None:
    """pyproject's lower bound excludes every release below the floor, and what is
    installed satisfies it (a downgrade fails here before it fails on a broker)."""
    req = pinned(name)
    below = Version(floor).release
    older = Version(".".join(map(str, (*below[:-1], below[-1] - 1))))
    assert not req.specifier.contains(older), (req, older)
    assert req.specifier.contains(floor), (req, floor)
    assert req.specifier.contains(installed_version(name)), (req, installed_version(name))


def test_librdkafka_speaks_kafka4() -> None:
    """librdkafka picks versions in C. Its CHANGELOG, v2.11.0 (#5131): "Features
    BROKER_BALANCED_CONSUMER and SASL_GSSAPI don't depend on JoinGroup v0 anymore, missing in
    AK 4.0 and CP 8.0" (earlier releases see no consumer groups on Kafka 4.0). v2.12.0 makes
    the KIP-848 consumer protocol generally available; 2.12 is the floor the project pins."""
    text, _ = confluent_kafka.libversion()
    assert Version(text) >= Version("2.12.0"), text
