"""Does a broker answer? Asked before a command or the worker starts, so an unreachable
cluster is one clear line naming the address, not a page of client retries."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

#: librdkafka logs every failed connection attempt to stderr (level 3, FAIL); the caller
#: reports the outcome itself, once.
_QUIET = {"log_level": 0}


def broker_answers(settings: Settings, timeout: float) -> bool:
    """True when a broker of ``settings.brokers`` answers a metadata request in time."""
    admin = AdminClient(librdkafka_config(settings, _QUIET))
    try:
        admin.list_topics(timeout=max(0.1, timeout))
    except KafkaException:
        return False
    return True


def unreachable_message(settings: Settings, seconds: float) -> str:
    return (f"no Kafka broker answers at {settings.brokers} (NDD_BROKERS) "
            f"after {seconds:.0f} s")


def wait_for_broker(settings: Settings, timeout: float, first_try: float = 3.0,
                    on_wait: Callable[[], None] | None = None) -> bool:
    """Ask until a broker answers or ``timeout`` s have passed; ``on_wait()`` runs once,
    after the first failed try (to say what is being waited for)."""
    deadline = time.monotonic() + timeout
    attempt = min(first_try, timeout)
    while True:
        if broker_answers(settings, attempt):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if on_wait is not None:
            on_wait()
            on_wait = None
        attempt = min(5.0, remaining)
