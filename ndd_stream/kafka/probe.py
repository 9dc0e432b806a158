"""Does a broker answer? Asked before a command or the worker starts, so an unreachable
cluster is one clear line naming the address, not a page of client retries."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

#: librdkafka logs every failed connection attempt to stderr (level 3, FAIL); the caller
#: reports the outcome itself, once.
_QUIET = {"log_level": 0}


def broker_error(settings: Settings, timeout: float) -> str | None:
    """None when a broker of ``settings.brokers`` answers a metadata request in time, else
    the client's reason (e.g. ``Local: Broker transport failure``)."""
    admin = AdminClient(librdkafka_config(settings, _QUIET))
    try:
        admin.list_topics(timeout=max(0.1, timeout))
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        return error.str() if isinstance(error, KafkaError) else str(exc)
    return None


def unreachable_message(settings: Settings, seconds: float, reason: str | None) -> str:
    why = f": {reason}" if reason else ""
    return (f"no Kafka broker answers at {settings.bootstrap_servers()} (NDD_BROKERS) "
            f"after {seconds:.0f} s{why}")


def wait_for_broker(settings: Settings, timeout: float, first_try: float = 3.0,
                    on_wait: Callable[[], None] | None = None) -> str | None:
    """Ask until a broker answers (None) or ``timeout`` s have passed (the last reason);
    ``on_wait()`` runs once, after the first failed try (to say what is being waited for)."""
    deadline = time.monotonic() + timeout
    attempt = min(first_try, timeout)
    while True:
        reason = broker_error(settings, attempt)
        if reason is None:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return reason
        if on_wait is not None:
            on_wait()
            on_wait = None
        attempt = min(5.0, remaining)
