"""Kafka client configuration derived from :class:`~ndd_stream.settings.Settings`.

Two client families are used: confluent-kafka (librdkafka: admin, CLI producer/tail)
and aiokafka (through Faust: the worker). Both are configured from the same settings
here, so security options cannot drift between them. The settings themselves are
checked for consistency (SASL needs credentials, ...) by a model validator of Settings.
Secrets only ever leave this module inside client configs; use :func:`redact` /
:func:`describe` for anything that is logged.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from ndd_stream.settings import Settings

#: Substrings of config keys whose values are secrets (librdkafka and aiokafka spellings).
_SECRET_MARKERS = ("password", "secret", "pem", "token", "sasl.jaas", "credentials")
REDACTED = "**********"


class KafkaConfigError(ValueError):
    """A TLS file of the settings cannot be read."""


def bootstrap_list(settings: Settings) -> list[str]:
    """``host:port`` entries of ``settings.brokers`` (Settings drops blanks, ensures one)."""
    return list(settings.brokers)


def _uses_ssl(settings: Settings) -> bool:
    return settings.security_protocol in ("SSL", "SASL_SSL")


def _uses_sasl(settings: Settings) -> bool:
    return settings.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _check(settings: Settings) -> None:
    """The TLS files exist when a client is configured (not when Settings are built: a
    setting may name a file that only the worker's host or container has)."""
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(settings, name)
        if path is not None and not path.is_file():
            raise KafkaConfigError(f"NDD_{name.upper()}={path} is not a readable file")


def librdkafka_config(settings: Settings, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Config dict for confluent-kafka Producer/Consumer/AdminClient (librdkafka keys).

    ``extra`` (librdkafka keys, e.g. ``{"linger.ms": 5}``) is merged last and wins.
    """
    _check(settings)
    conf: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers(),
        "security.protocol": settings.security_protocol,
        "client.id": settings.app_id,
    }
    if _uses_sasl(settings):
        assert settings.sasl_password is not None  # Settings._security_consistent
        conf["sasl.mechanism"] = settings.sasl_mechanism
        conf["sasl.username"] = settings.sasl_username
        conf["sasl.password"] = settings.sasl_password.get_secret_value()
    if _uses_ssl(settings):
        if settings.ssl_cafile is not None:
            conf["ssl.ca.location"] = str(settings.ssl_cafile)
        if settings.ssl_certfile is not None and settings.ssl_keyfile is not None:
            conf["ssl.certificate.location"] = str(settings.ssl_certfile)
            conf["ssl.key.location"] = str(settings.ssl_keyfile)
        conf["ssl.endpoint.identification.algorithm"] = (
            "https" if settings.ssl_check_hostname else "none"
        )
    conf.update(extra or {})
    return conf


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """TLS context for aiokafka/Faust, or None when the protocol does not use TLS.

    Certificates are verified always (CA bundle from settings, else the system store);
    ``ssl_check_hostname`` only turns off the host name match.
    """
    _check(settings)
    if not _uses_ssl(settings):
        return None
    cafile = str(settings.ssl_cafile) if settings.ssl_cafile is not None else None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
        if settings.ssl_certfile is not None and settings.ssl_keyfile is not None:
            ctx.load_cert_chain(str(settings.ssl_certfile), str(settings.ssl_keyfile))
    except (OSError, ssl.SSLError) as exc:
        raise KafkaConfigError(f"cannot load TLS files: {exc}") from exc
    ctx.check_hostname = settings.ssl_check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def faust_broker_urls(settings: Settings) -> list[str]:
    """Faust ``broker=`` value: one ``kafka://host:port`` URL per bootstrap server."""
    return [f"kafka://{host}" for host in bootstrap_list(settings)]


def faust_credentials(settings: Settings) -> Any:
    """Faust ``broker_credentials=``: SASLCredentials, SSLCredentials or None (PLAINTEXT).

    Typed ``Any`` so importing this module does not import Faust (slow, and the CLI's
    producer/tail never need it).
    """
    import faust

    ctx = ssl_context(settings)
    if _uses_sasl(settings):
        assert settings.sasl_password is not None
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password.get_secret_value(),
            ssl_context=ctx,  # a context makes Faust speak SASL_SSL, None SASL_PLAINTEXT
            mechanism=settings.sasl_mechanism,
        )
    if ctx is not None:
        return faust.SSLCredentials(ctx)
    return None


def faust_broker_kwargs(settings: Settings) -> dict[str, Any]:
    """``faust.App(**...)`` connection arguments: ``broker`` and ``broker_credentials``."""
    return {
        "broker": faust_broker_urls(settings),
        "broker_credentials": faust_credentials(settings),
    }


def is_secret_key(key: str) -> bool:
    """True for config keys whose values must never be logged."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a client config that is safe to log: secrets masked, contexts summarised."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if value is not None and is_secret_key(key):
            out[key] = REDACTED
        elif isinstance(value, ssl.SSLContext):
            out[key] = f"<SSLContext check_hostname={value.check_hostname}>"
        else:
            out[key] = value
    return out


def describe(settings: Settings) -> str:
    """One log line describing the connection, without secrets."""
    conf = redact(librdkafka_config(settings))
    return " ".join(f"{k}={v}" for k, v in sorted(conf.items()))
