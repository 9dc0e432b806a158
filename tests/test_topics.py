"""Topic definitions: loading, validation, Settings overrides, and apply on a real broker."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient
from harness import brokers
from harness.kafka import HANG_S, Names, SettingsFactory, TopicFactory
from harness.kafka import make_settings as settings_of
from rich.console import Console

from ndd_stream.cli.io_commands import (
    EXIT_MISMATCH,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    topics_apply,
)
from ndd_stream.kafka import topics
from ndd_stream.kafka.broker import EmbeddedBroker, free_port

BUNDLED = Path(__file__).resolve().parent.parent / "topics"


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=200, color_system=None), out


def _write(tmp_path: Path, doc: object, name: str = "t.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


# --- loading and validation -------------------------------------------------------------
def test_shard_topics_exist_only_when_sharded_with_partitions_times_shards() -> None:
    def counts(**kw: object) -> dict[str, int]:
        s = settings_of(**kw)
        resolved, _ = topics.resolve(s, topics.load_for(s))
        return {t.key: t.partitions for t in resolved}

    assert "shards" not in counts(partitions=4)
    sharded = counts(partitions=4, shards=3)
    assert sharded["shards"] == sharded["shards_changelog"] == 12
    assert sharded["scoped"] == 4


def test_bundled_definitions_cover_every_topic_of_the_service() -> None:
    definitions = topics.load_definitions(topics.default_definitions_path())
    keys = [t.key for t in definitions.topics]
    assert set(keys) == {"raw", "scoped", "changelog", "shards", "shards_changelog", "unique",
                         "duplicate", "dlq", "decisions"}
    for spec in definitions.topics:
        assert spec.partitions >= 1 and spec.replication_factor == 1
        # the changelogs are compacted (keyed records, tombstoned hours; Tansu accepts the
        # policy and does not compact, so their retention still bounds them there)
        changelog = spec.key in ("changelog", "shards_changelog")
        assert spec.config["cleanup.policy"] == ("compact,delete" if changelog else "delete")
        assert all(isinstance(v, str) for v in spec.config.values())
        assert spec.description
    assert topics.default_definitions_path() == BUNDLED


def test_installed_package_falls_back_to_the_packaged_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wheel install: no topics/ beside the package, the copy force-included as _topics/.
    package = tmp_path / "site-packages" / "ndd_stream"
    (package / "_topics").mkdir(parents=True)
    (package / "_topics" / "news.yaml").write_bytes((BUNDLED / "news.yaml").read_bytes())
    monkeypatch.setattr(topics, "__file__", str(package / "kafka" / "topics.py"))
    assert topics.default_definitions_path() == package / "_topics"
    assert len(topics.load_for(settings_of()).topics) == 9
    (package / "_topics" / "news.yaml").unlink()
    (package / "_topics").rmdir()
    with pytest.raises(topics.TopicDefinitionError, match="NDD_TOPICS_FILE"):
        topics.default_definitions_path()


def test_defaults_resolve_to_the_settings_names() -> None:
    settings = settings_of(app_id="news-a", partitions=12)
    wanted, skipped = topics.resolve(settings, topics.load_for(settings))
    by_key = {t.key: t for t in wanted}
    assert not skipped
    assert by_key["raw"].name == "news.raw" and by_key["raw"].partitions == 8
    assert by_key["scoped"].name == "news-a-news.scoped" and by_key["scoped"].partitions == 12
    assert by_key["changelog"].name == "news-a-state-changelog"
    assert by_key["changelog"].partitions == 12
    assert by_key["unique"].name == settings.unique_topic
    assert by_key["dlq"].config["retention.ms"] == "1209600000"


def test_settings_override_names_and_disable_topics() -> None:
    settings = settings_of(
        raw_topics="feed.a, feed.b", unique_topic="u", decisions_topic="", dlq_topic="d"
    )
    wanted, skipped = topics.resolve(settings, topics.load_for(settings), replication_factor=3)
    names = {t.name: t for t in wanted}
    assert {"feed.a", "feed.b", "u", "d"} <= set(names)
    assert "news.decisions" not in names
    assert [s.name for s in skipped] == ["decisions"]
    assert all(t.replication_factor == 3 for t in wanted)

    pattern = settings_of(raw_topic_pattern="feed\\..*")
    wanted, skipped = topics.resolve(pattern, topics.load_for(pattern))
    assert "raw" not in {t.key for t in wanted}
    assert skipped[0].name == "raw" and "raw_topic_pattern" in skipped[0].notes[0]


def test_topics_file_setting_and_directory_merge(tmp_path: Path) -> None:
    _write(tmp_path, {"topics": {"a": {"name": "x.a"}}}, "1.yaml")
    _write(tmp_path, {"defaults": {"partitions": 3}, "topics": {"b": {"name": "x.b"}}}, "2.yml")
    settings = settings_of(topics_file=tmp_path)
    definitions = topics.load_for(settings)
    assert [(t.key, t.partitions) for t in definitions.topics] == [("a", 8), ("b", 3)]
    single = settings_of(topics_file=tmp_path / "1.yaml")
    assert [t.key for t in topics.load_for(single).topics] == ["a"]
    with pytest.raises(topics.TopicDefinitionError, match="does not exist"):
        topics.load_for(settings_of(topics_file=tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"topics": {"a": {"name": "x", "partition": 3}}},
         r"topics\.a\.partition: Extra inputs are not permitted"),
        ({"topics": {"a": {"name": "x", "partitions": 0}}}, "greater than or equal to 1"),
        ({"topics": {"a": {"name": "x", "partitions": "8"}}}, "partitions: .*valid integer"),
        ({"topics": {"a": {"name": "x", "setting": "no_such"}}}, "not a Settings field"),
        ({"topics": {"a": {"name": "x", "role": "sink"}}}, "role: Input should be 'input'"),
        ({"topics": {"a": {"name": "x", "config": {"retention.ms": [1]}}}}, "scalar"),
        ({"topics": {"a": {"name": "x", "config": {"Bad Key": "1"}}}}, "invalid config name"),
        ({"topics": {"a": {"partitions": 1}}}, r"topics\.a\.name: Field required"),
        ({"topics": {}}, "topics: .*at least 1 item"),
        ({"version": 2, "topics": {"a": {"name": "x"}}}, "version: Input should be 1"),
        ({"defaults": {"replicas": 1}, "topics": {"a": {"name": "x"}}},
         r"defaults\.replicas: Extra inputs"),
        (["not", "a", "mapping"], "file: Input should be a valid dictionary"),
    ],
)
def test_invalid_definitions_are_rejected_with_the_place(
    tmp_path: Path, doc: object, message: str
) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(topics.TopicDefinitionError, match=message) as info:
        topics.load_definitions(path)
    assert str(path) in str(info.value)


def test_resolve_rejects_bad_and_clashing_names(tmp_path: Path) -> None:
    bad = topics.load_definitions(_write(tmp_path, {"topics": {"a": {"name": "has space"}}}))
    with pytest.raises(topics.TopicDefinitionError, match="not a valid Kafka topic name"):
        topics.resolve(settings_of(), bad)
    placeholder = topics.load_definitions(
        _write(tmp_path, {"topics": {"a": {"name": "{tenant}-x"}}}, "p.yaml")
    )
    with pytest.raises(topics.TopicDefinitionError, match="unknown placeholder"):
        topics.resolve(settings_of(), placeholder)
    bundled = topics.load_for(settings_of())
    with pytest.raises(topics.TopicDefinitionError, match="used by both"):
        topics.resolve(settings_of(unique_topic="same", duplicate_topic="same"), bundled)


def test_duplicate_keys_across_files_are_rejected(tmp_path: Path) -> None:
    _write(tmp_path, {"topics": {"a": {"name": "x"}}}, "1.yaml")
    _write(tmp_path, {"topics": {"a": {"name": "y"}}}, "2.yaml")
    with pytest.raises(topics.TopicDefinitionError, match="already defined"):
        topics.load_definitions(tmp_path)


# --- apply on the broker ----------------------------------------------------------------
@pytest.mark.broker
def test_apply_creates_then_reports_everything_in_place(
    broker: EmbeddedBroker, make_settings: SettingsFactory
) -> None:
    settings = make_settings(partitions=4)
    console, out = _console()
    assert topics_apply(settings, console=console, timeout=15) == EXIT_OK
    text = out.getvalue()
    assert "7 created" in text, text

    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics[f"{settings.app_id}-news.scoped"].partitions) == 4
    assert len(metadata.topics[settings.unique_topic].partitions) == 8

    report = topics.apply(settings, topics.load_for(settings), timeout=15)
    assert {s.action for s in report.statuses} == {"exists"}
    assert not report.mismatches


@pytest.mark.broker
def test_apply_reports_a_readable_diff_and_fails_unless_create_only(
    make_settings: SettingsFactory, make_topics: TopicFactory
) -> None:
    settings = make_settings()
    make_topics(settings.unique_topic, partitions=3, config={"retention.ms": "1000"})
    make_topics(settings.dlq_topic, partitions=8, config={"cleanup.policy": "delete"})

    console, out = _console()
    assert topics_apply(settings, console=console, timeout=15) == EXIT_MISMATCH
    text = out.getvalue()
    assert "mismatch" in text
    assert "partitions: want 8, have 3" in text
    assert "retention.ms: want 604800000, have 1000" in text

    report = topics.apply(settings, topics.load_for(settings), timeout=15)
    dlq = next(s for s in report.statuses if s.name == settings.dlq_topic)
    if brokers.is_kafka():  # Apache Kafka reports every config, defaults included
        assert dlq.action == "mismatch"
        assert "max.message.bytes: want 8388608, have 1048588" in dlq.diffs
        assert "retention.ms: want 1209600000, have 604800000" in dlq.diffs
    else:
        assert dlq.action == "exists"  # configs the broker does not report are no mismatch
        assert any("does not report" in note for note in dlq.notes)

    console, out = _console()
    assert topics_apply(settings, create_only=True, console=console, timeout=15) == EXIT_OK
    assert "mismatch" in out.getvalue()  # still shown


@pytest.mark.broker
def test_check_only_creates_nothing(broker: EmbeddedBroker, make_settings: SettingsFactory) -> None:
    settings = make_settings()
    console, out = _console()
    assert topics_apply(settings, check_only=True, console=console, timeout=15) == EXIT_MISMATCH
    assert "would-create" in out.getvalue()
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert settings.unique_topic not in metadata.topics


@pytest.mark.broker
def test_replication_factor_the_broker_cannot_meet_is_an_error(
    make_settings: SettingsFactory, names: Names
) -> None:
    settings = make_settings()
    console, out = _console()
    code = topics_apply(settings, replication_factor=3, console=console, timeout=15)
    if brokers.is_kafka():  # one node cannot hold three replicas
        assert code == EXIT_UNREACHABLE
    else:
        assert code in (EXIT_OK, EXIT_UNREACHABLE)  # Tansu accepts any factor on one broker
    if code == EXIT_UNREACHABLE:
        assert "create failed" in out.getvalue()


def test_unreachable_cluster_exits_3_within_the_timeout() -> None:
    settings = settings_of(brokers=f"127.0.0.1:{free_port()}")
    console, out = _console()
    started = time.monotonic()
    assert topics_apply(settings, console=console, timeout=2) == EXIT_UNREACHABLE
    assert time.monotonic() - started < HANG_S
    assert "did not answer" in out.getvalue()


def test_bad_definitions_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, {"topics": {"a": {"name": "x", "partitions": -1}}})
    console, out = _console()
    assert topics_apply(settings_of(topics_file=path), console=console) == EXIT_USAGE
    assert "topics.a.partitions: Input should be greater than or equal to 1" in out.getvalue()
