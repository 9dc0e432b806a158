"""examples/: the library API in a bytewax dataflow and a quix-streams application, run
against the in-memory sources those libraries ship (no broker): their decisions are
``ndd-stream dedup``'s on the sample feed."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from harness.kafka import Names, consume, create_topics, produce

from ndd_stream.data import sample_feed
from ndd_stream.dedup import run_dedup
from ndd_stream.kafka.broker import EmbeddedBroker
from ndd_stream.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def _no_ndd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)


def _need_quixstreams() -> None:
    """quixstreams lives in an environment of its own (the ``examples`` extra: it pins
    confluent-kafka below the test environment's); .ci/run runs this file there with
    NDD_CI_EXAMPLES=1, where its absence fails."""
    if os.environ.get("NDD_CI_EXAMPLES") == "1":
        import quixstreams  # noqa: F401
    else:
        pytest.importorskip("quixstreams", reason="quixstreams: pip install -e '.[examples]'")


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"ndd_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines() -> list[bytes]:
    return sample_feed().read_bytes().splitlines()


def _dedup(lines: list[bytes], **overrides: Any) -> list[dict[str, Any]]:
    s = Settings(**overrides)
    sink = io.BytesIO()
    run_dedup(lines, sink, s.detector_config(), s.item_format())
    return [json.loads(line) for line in sink.getvalue().splitlines()]


def _kept(record: dict[str, Any]) -> bool:
    return record["status"] == "unique" or bool(record.get("supersedes"))


@pytest.mark.parametrize("settings", [{}, {"scope": "global", "keep": "complete"}])
def test_the_bytewax_flow_decides_as_dedup(settings: dict[str, Any]) -> None:
    pytest.importorskip("bytewax")
    from bytewax.testing import TestingSink, TestingSource, run_main

    example = _example("bytewax_flow")
    kept: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    run_main(example.build_flow(TestingSource(_lines()), TestingSink(kept),
                                TestingSink(others), **settings))
    want = _dedup(_lines(), **settings)
    assert sorted(kept + others, key=lambda r: r["line"]) == want
    assert kept == [r for r in want if _kept(r)] and others == [r for r in want if not _kept(r)]
    assert any(r["status"] == "invalid" for r in others)
    assert any(r["status"] == "near_duplicate" for r in others)


def test_the_bytewax_flow_runs_as_a_script() -> None:
    pytest.importorskip("bytewax")
    out = subprocess.run([sys.executable, "-m", "bytewax.run", "examples/bytewax_flow.py"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    printed = out.stdout.splitlines()
    assert len(printed) == len(_lines())
    assert sum("'status': 'exact_duplicate'" in line for line in printed) == sum(
        r["status"] == "exact_duplicate" for r in _dedup(_lines()))


def test_the_quixstreams_app_decides_as_dedup(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _need_quixstreams()
    from quixstreams import Application
    from quixstreams.models import Topic, TopicConfig

    from ndd_stream import Filter

    monkeypatch.chdir(tmp_path)  # the application's state directory, if it makes one
    example = _example("quixstreams_app")
    # no broker: a topic built here, not fetched from one, and StreamingDataFrame.test()
    app = Application(broker_address="127.0.0.1:1", consumer_group="ndd-test")
    raw = Topic("news.raw", value_deserializer="bytes",
                create_config=TopicConfig(num_partitions=1, replication_factor=1))
    sdf = example.decisions(app.dataframe(raw), Filter())
    got = []
    for line in _lines():
        out = sdf.test(line, key=b"", timestamp=1_710_000_000_000)
        assert len(out) == 1
        got.append(out[0][0])
    want = _dedup(_lines())
    assert got == want  # the feed's items have event times: the fallback unused
    assert [example.destination(r) for r in got] == [
        "dlq" if r["status"] == "invalid" else "unique" if _kept(r) else "duplicate"
        for r in want]
    # the whole application (its routing branches) composes without a broker
    out = {name: Topic(f"news.{name}", value_serializer="json",
                       create_config=TopicConfig(num_partitions=1, replication_factor=1))
           for name in ("unique", "duplicate", "dlq")}
    fresh = Application(broker_address="127.0.0.1:1", consumer_group="ndd-test")
    assert set(example.build(fresh, raw, out, Filter()).compose()) == {"news.raw"}
    # an item without one gets its Kafka record's
    timeless = sdf.test(b'{"id": "t", "text": "an item without its own event time"}',
                        timestamp=1_710_000_000_000)[0][0]
    assert timeless["status"] == "unique" and timeless["hour"] == 1_710_000_000 // 3600
    with pytest.raises(SystemExit) as done:
        example.main(["--help"])
    assert done.value.code == 0


@pytest.mark.broker
def test_the_quixstreams_app_runs_on_a_broker(broker: EmbeddedBroker, names: Names,
                                              tmp_path: Path) -> None:
    """The application as its docstring runs it: items on the raw topic, records routed to
    the unique, duplicate and dead-letter topics, as dedup decides them."""
    _need_quixstreams()
    prefix = names.topic("quix") + "-"
    topics = [f"{prefix}news.{name}" for name in ("raw", "unique", "duplicate", "dlq")]
    create_topics(broker.bootstrap, topics)
    produce(broker.bootstrap, topics[0], _lines(), one_per_batch=False)
    with (tmp_path / "app.log").open("wb") as log:
        app = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "quixstreams_app.py"), "--broker", broker.bootstrap,
             "--prefix", prefix], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            records = consume(broker.bootstrap, topics[1:], n=len(_lines()), timeout=120)
        finally:
            app.terminate()
            app.wait(30)
    want = _dedup(_lines())
    routed = {topic: sorted(json.loads(r.value or b"")["line"] for r in records
                            if r.topic == topic) for topic in topics[1:]}
    assert routed == {
        topics[1]: [r["line"] for r in want if r["status"] != "invalid" and _kept(r)],
        topics[2]: [r["line"] for r in want if r["status"] != "invalid" and not _kept(r)],
        topics[3]: [r["line"] for r in want if r["status"] == "invalid"],
    }, (tmp_path / "app.log").read_text()[-2000:]
