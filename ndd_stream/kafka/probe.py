"""Does a broker answer, and does it let us in? Asked before a command or the worker
starts, so an unreachable cluster, a refused login, an untrusted certificate or a client
speaking the wrong protocol is one clear line naming the cause, not a page of client
retries: an absent broker after the timeout, a broker that answered and refused at once.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

#: librdkafka logs every failed connection attempt to stderr (level 3, FAIL); the caller
#: reports the outcome itself, once.
_QUIET = {"log_level": 0}

#: One metadata request's wait: a refusal (login, certificate) is known within it.
_TRY_S = 1.0


@dataclass(frozen=True)
class BrokerProblem:
    """Why the probe got no metadata. ``refused``: a broker answered and would not let the
    client in (login, certificate, protocol), a settings problem that waiting cannot fix;
    else nothing answered, and ``reason`` is the client's."""

    reason: str
    refused: bool = False

    def __str__(self) -> str:
        return self.reason


def _hosts(settings: Settings) -> str:
    return settings.bootstrap_servers()


def _refusal(settings: Settings, errors: list[KafkaError]) -> BrokerProblem | None:
    """A refused login or TLS handshake among the client's errors, as one line."""
    for error in errors:
        text = error.str()
        offered = re.search(r"supported mechanisms: ?([\w, -]*)", text)
        if error.code() == KafkaError._AUTHENTICATION and offered is not None:
            mechanisms = offered.group(1).strip().rstrip("(").strip()
            if not mechanisms:  # a listener without SASL
                return BrokerProblem(
                    f"the broker at {_hosts(settings)} takes no SASL login on this port: "
                    f"NDD_SECURITY_PROTOCOL={settings.security_protocol} does not match its "
                    "listener (PLAINTEXT or SSL?)", refused=True)
            return BrokerProblem(
                f"the broker at {_hosts(settings)} does not enable NDD_SASL_MECHANISM="
                f"{settings.sasl_mechanism} (it offers {mechanisms})", refused=True)
        if error.code() == KafkaError._TRANSPORT and "SSL handshake failed" in text \
                and "PLAINTEXT" in text:
            return BrokerProblem(
                f"the port at {_hosts(settings)} does not speak TLS and NDD_SECURITY_PROTOCOL="
                f"{settings.security_protocol} does: use PLAINTEXT or SASL_PLAINTEXT",
                refused=True)
        if error.code() == KafkaError._AUTHENTICATION:
            return BrokerProblem(
                f"the broker at {_hosts(settings)} refused the login of user "
                f"'{settings.sasl_username}' ({settings.sasl_mechanism}): authentication "
                "failed (wrong NDD_SASL_USERNAME or NDD_SASL_PASSWORD)", refused=True)
        if error.code() == KafkaError._SSL:
            detail = text.split("SSL handshake failed: ", 1)[-1].split(" (after ", 1)[0]
            detail = detail.split(": broker certificate could not be verified", 1)[0]
            if "certificate verify failed" in text:
                ca = settings.ssl_cafile or "the system's CA store"
                return BrokerProblem(
                    f"the broker's certificate at {_hosts(settings)} is not trusted "
                    f"({detail}): it is not signed by a CA of NDD_SSL_CAFILE ({ca}), or "
                    "does not name the host (NDD_SSL_CHECK_HOSTNAME)", refused=True)
            return BrokerProblem(
                f"the TLS handshake with the broker at {_hosts(settings)} failed ({detail}): "
                f"does its port speak TLS (NDD_SECURITY_PROTOCOL="
                f"{settings.security_protocol})?", refused=True)
    return None


def speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``host:port`` completes a TLS handshake (certificate not checked: only the
    protocol is asked)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=host):
            return True
    except (OSError, ValueError):
        return False


def _protocol_mismatch(settings: Settings) -> BrokerProblem | None:
    """A broker that closes every connection may be listening in another protocol: a TLS
    port asked in plaintext, or a SASL port asked without a login."""
    protocol = settings.security_protocol
    for address in settings.brokers:
        host, _, port = address.rpartition(":")
        if not port.isdigit() or not speaks_tls(host.strip("[]"), int(port)):
            continue
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            wanted = "SASL_SSL" if protocol == "SASL_PLAINTEXT" else "SSL or SASL_SSL"
            return BrokerProblem(
                f"the port at {address} speaks TLS and NDD_SECURITY_PROTOCOL={protocol} "
                f"does not: use {wanted}", refused=True)
        if protocol == "SSL":
            return BrokerProblem(
                f"the broker at {address} accepted TLS, then closed the connection: its "
                "listener wants a SASL login (NDD_SECURITY_PROTOCOL=SASL_SSL with "
                "NDD_SASL_USERNAME and NDD_SASL_PASSWORD)", refused=True)
    return None


def broker_error(settings: Settings, timeout: float) -> BrokerProblem | None:
    """None when a broker of ``settings.brokers`` answers a metadata request within
    ``timeout`` s, else why not. A refusal is returned as soon as it is known."""
    errors: list[KafkaError] = []
    admin = AdminClient(librdkafka_config(settings, {**_QUIET, "error_cb": errors.append}))
    deadline = time.monotonic() + max(0.1, timeout)
    checked_protocol = False
    while True:
        remaining = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.1, min(_TRY_S, remaining)))
            return None
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            reason = error.str() if isinstance(error, KafkaError) else str(exc)
        admin.poll(0)  # serves error_cb
        refused = _refusal(settings, errors)
        if refused is None and not checked_protocol and errors:
            checked_protocol = True  # connections failed: a listener of another protocol?
            refused = _protocol_mismatch(settings)
        if refused is not None:
            return refused
        if deadline - time.monotonic() <= 0:
            return BrokerProblem(reason)


def unreachable_message(settings: Settings, seconds: float,
                        reason: BrokerProblem | str | None) -> str:
    """The line for a failed probe: a refusal says itself, silence says how long."""
    if isinstance(reason, BrokerProblem) and reason.refused:
        return reason.reason
    why = f": {reason}" if reason else ""
    return (f"no Kafka broker answers at {settings.bootstrap_servers()} (NDD_BROKERS) "
            f"after {seconds:.0f} s{why}")


def wait_for_broker(settings: Settings, timeout: float, first_try: float = 3.0,
                    on_wait: Callable[[], None] | None = None) -> BrokerProblem | None:
    """Ask until a broker answers (None), refuses (at once) or ``timeout`` s have passed
    (the last reason); ``on_wait()`` runs once, after the first failed try (to say what is
    being waited for)."""
    deadline = time.monotonic() + timeout
    attempt = min(first_try, timeout)
    while True:
        problem = broker_error(settings, attempt)
        if problem is None or problem.refused:
            return problem
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return problem
        if on_wait is not None:
            on_wait()
            on_wait = None
        attempt = min(5.0, remaining)
