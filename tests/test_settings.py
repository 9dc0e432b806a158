"""Settings: list settings, ranges, and the environment a worker subprocess gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from ndd_stream.core.kernels import DEFAULT_DENSE_FRACTION
from ndd_stream.settings import Settings


def _from_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Settings:
    for name in Settings.model_fields:
        monkeypatch.delenv("NDD_" + name.upper(), raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.mark.parametrize("off", [None, ""])
def test_to_env_keeps_a_disabled_decisions_topic_disabled(
    monkeypatch: pytest.MonkeyPatch, off: str | None
) -> None:
    settings = Settings(decisions_topic=off, title_field=off)  # type: ignore[arg-type]
    assert settings.decisions_topic is None and settings.title_field is None
    env = settings.to_env()
    assert env["NDD_DECISIONS_TOPIC"] == "" and env["NDD_TITLE_FIELD"] == ""
    child = _from_env(monkeypatch, env)
    assert child.decisions_topic is None and child.title_field is None


def test_to_env_round_trips_every_field(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fields: dict[str, Any] = {
        "brokers": "a:1,b:2", "security_protocol": "SASL_SSL", "sasl_username": "u",
        "sasl_password": SecretStr("p w"), "ssl_cafile": tmp_path / "ca.pem",
        "raw_topics": "feed.a, feed.b", "raw_topic_pattern": "feed\\..*",
        "decisions_topic": None, "threshold": 0.45, "bitmap_filter_bits": 0,
        "case_sensitive": True, "scope": "global", "scope_map": {"x": "y"},
        "text_fields": ["body"], "timestamp_fields": "ts", "data_dir": tmp_path / "d",
    }
    settings = Settings(**fields)
    assert _from_env(monkeypatch, settings.to_env()) == settings


def test_list_settings_are_lists_from_comma_separated_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = _from_env(monkeypatch, {"NDD_RAW_TOPICS": " a, b,,c ", "NDD_TEXT_FIELDS": "x"})
    assert settings.raw_topics == ["a", "b", "c"]
    assert settings.text_fields == ["x"]
    assert settings.timestamp_fields == ["timestamp", "published_at"]
    assert Settings(raw_topics=["a ", " "]).raw_topics == ["a"]  # type: ignore[arg-type]


def test_brokers_is_a_list_setting_written_with_commas(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``NDD_BROKERS=a,b`` (environment or settings file) gives a list, like the other
    list settings, and is written back as ``a,b``."""
    from ndd_stream.cli.main import build_settings, make_parser

    settings = _from_env(monkeypatch, {"NDD_BROKERS": " a:1, ,b:2 "})
    assert settings.brokers == ["a:1", "b:2"]
    assert settings.bootstrap_servers() == "a:1,b:2"
    assert settings.to_env()["NDD_BROKERS"] == "a:1,b:2"
    # the demo's copy with this machine's broker: validated, so the string is split too
    assert settings.model_copy(update={"brokers": "c:3"}).brokers == ["c:3"]
    monkeypatch.delenv("NDD_BROKERS")
    assert Settings().brokers == ["127.0.0.1:9092"]
    config = tmp_path / "ndd.env"
    config.write_text("NDD_BROKERS=c:3,d:4\n")
    args = make_parser()[0].parse_args(["--config", str(config), "worker"])
    assert build_settings(args).brokers == ["c:3", "d:4"]


@pytest.mark.parametrize("bits", [0, 6, 14, 24, None])
def test_bitmap_filter_bits_accepts_the_detectors_range(bits: int | None) -> None:
    settings = Settings(bitmap_filter_bits=bits)
    assert settings.detector_config().bitmap_bits == bits


@pytest.mark.parametrize("bits", [1, 5, 25, -1])
def test_bitmap_filter_bits_rejects_what_the_detector_rejects(bits: int) -> None:
    with pytest.raises(ValidationError, match=r"0 \(off\) or in 6\.\.24"):
        Settings(bitmap_filter_bits=bits)


def test_core_speed_settings_reach_the_detector_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NDD_COUNT_THREADS", "3")
    monkeypatch.setenv("NDD_DENSE_FRACTION", "0")
    config = Settings().detector_config()
    assert (config.count_threads, config.dense_fraction) == (3, 0.0)
    monkeypatch.delenv("NDD_COUNT_THREADS")
    monkeypatch.delenv("NDD_DENSE_FRACTION")
    config = Settings().detector_config()
    assert config.count_threads is None and config.dense_fraction == DEFAULT_DENSE_FRACTION


def test_sharded_windows_count_on_one_thread_unless_told() -> None:
    """Shards spread the count over workers; count threads on top compete for the same
    cores (bench.e2e: 2 shards on 2 cores, 406-493 items/s with 2 threads, 576 with 1)."""
    assert Settings(shards=2).detector_config().count_threads == 1
    assert Settings(shards=2, count_threads=2).detector_config().count_threads == 2
    assert Settings(shards=1).detector_config().count_threads is None


def test_producer_batches_follow_the_setting_capped_at_the_request_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """16 KiB batches (Faust's default) held three ~5 KB outputs each; the worker's producer
    batches 512 KiB unless told, never more than one request carries."""
    import faust

    from ndd_stream.worker.startup import producer_kwargs

    kwargs = producer_kwargs(_from_env(monkeypatch, {}))
    assert kwargs["producer_max_batch_size"] == 512 << 10
    assert kwargs["producer_max_request_size"] == 4_000_000  # 2 x max_item_bytes
    app = faust.App("ndd-settings-test", **kwargs)
    assert app.conf.producer_max_batch_size == 512 << 10 and app.conf.producer_acks == -1
    small = _from_env(monkeypatch, {"NDD_PRODUCER_BATCH_KB": "64"})
    assert producer_kwargs(small)["producer_max_batch_size"] == 64 << 10
    capped = Settings(max_item_bytes=100_000, producer_batch_kb=4096)
    assert producer_kwargs(capped)["producer_max_batch_size"] == 1 << 20
    with pytest.raises(ValidationError, match="greater than or equal to 16"):
        Settings(producer_batch_kb=8)


def test_precedence_is_options_then_environment_then_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What README and docs/CONFIGURATION.md state: options > NDD_* > --config > default."""
    from ndd_stream.cli.main import build_settings, make_parser

    _from_env(monkeypatch, {"NDD_THRESHOLD": "0.5"})
    config = tmp_path / "ndd.env"
    config.write_text("NDD_THRESHOLD=0.6\nNDD_Q=5\nNDD_WINDOW_HOURS=12\n")
    parser = make_parser()[0]
    args = parser.parse_args(["--config", str(config), "dedup", "x.jsonl", "--q", "3"])
    settings = build_settings(args)
    assert (settings.q, settings.threshold, settings.window_hours) == (3, 0.5, 12)
    assert settings.novelty == "auto"  # the default where nothing sets it


def test_state_directory_defaults_to_an_absolute_per_user_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NDD_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert Settings().data_dir == tmp_path / ".local" / "share" / "ndd-stream"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert Settings().data_dir == tmp_path / "xdg" / "ndd-stream"
    monkeypatch.setenv("XDG_DATA_HOME", "relative")  # ignored, as the XDG spec says
    assert Settings().data_dir == tmp_path / ".local" / "share" / "ndd-stream"
    monkeypatch.setenv("NDD_DATA_DIR", "~/state")
    assert Settings().data_dir == tmp_path / "state"


def test_metrics_listen_on_loopback_unless_told() -> None:
    """Outside a container /metrics is not open to the network; the image, compose and the
    chart set NDD_WEB_HOST=0.0.0.0 themselves (tests/test_deploy_*.py)."""
    assert Settings.model_fields["web_host"].default == "127.0.0.1"


def test_dedup_looks_up_on_a_thread_for_a_regular_file_only(tmp_path: Path) -> None:
    """auto: a regular file, with two cores or more; a pipe would hold each record back
    until the next line comes, so it is decided without the thread; on and off are kept."""
    import os

    from ndd_stream.core.kernels import available_cores

    regular = tmp_path / "in.jsonl"
    regular.write_bytes(b"")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    auto = Settings()
    assert auto.lookup_thread == "auto"
    assert auto.lookup_thread_for(regular) is (available_cores() >= 2)
    assert auto.lookup_thread_for(fifo) is False
    assert auto.lookup_thread_for(tmp_path / "missing") is False
    assert Settings(lookup_thread="on").lookup_thread_for(fifo) is True
    assert Settings(lookup_thread="off").lookup_thread_for(regular) is False
