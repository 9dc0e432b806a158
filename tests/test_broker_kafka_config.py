"""Client configs from Settings: SASL_SSL and SSL for librdkafka and aiokafka/Faust.

Configuration level only (no TLS broker here): the configs are built, checked key by key,
handed to the real client constructors (which reject unknown or invalid keys), and
checked to keep secrets out of anything printable.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from harness.kafka import make_settings as settings_of
from pydantic import ValidationError

from ndd_stream.kafka import config as kc
from ndd_stream.kafka.broker import free_port
from ndd_stream.settings import Settings

SECRET = "s3cr3t-Pa55"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A throwaway CA and a client certificate signed by it (openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=30)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=ndd-test-ca")  # fmt: skip
    run("req", *ec, "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=ndd-client")
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "client.pem", "-days", "2")  # fmt: skip
    return {"ca": d / "ca.pem", "cert": d / "client.pem", "key": d / "client.key"}


def _closed_port_brokers() -> str:
    return f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"


def aiokafka_kwargs(settings: Settings) -> dict[str, Any]:
    """What the worker's Faust hands aiokafka under these settings (its client kwargs)."""
    return {"bootstrap_servers": kc.bootstrap_list(settings), "client_id": settings.app_id,
            **credentials_to_aiokafka_auth(kc.faust_credentials(settings))}


def _aiokafka_accepts(conf: dict[str, Any]) -> None:
    """aiokafka validates its kwargs in the constructor (it connects only on start())."""

    async def build() -> None:
        AIOKafkaProducer(**conf)

    asyncio.run(build())


def test_plaintext_is_minimal() -> None:
    settings = settings_of(brokers=" 127.0.0.1:1 , ,127.0.0.1:2 ")
    conf = kc.librdkafka_config(settings, {"linger.ms": 5})
    assert conf == {
        "bootstrap.servers": "127.0.0.1:1,127.0.0.1:2",
        "security.protocol": "PLAINTEXT",
        "client.id": "ndd-stream",
        "linger.ms": 5,
    }
    assert kc.faust_broker_urls(settings) == ["kafka://127.0.0.1:1", "kafka://127.0.0.1:2"]
    assert kc.faust_credentials(settings) is None
    assert kc.ssl_context(settings) is None
    assert aiokafka_kwargs(settings)["security_protocol"] == "PLAINTEXT"


def test_sasl_ssl(pki: dict[str, Path]) -> None:
    settings = settings_of(
        brokers=_closed_port_brokers(),
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="ndd",
        sasl_password=SECRET,
        ssl_cafile=pki["ca"],
    )
    conf = kc.librdkafka_config(settings)
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "ndd" and conf["sasl.password"] == SECRET
    assert conf["ssl.ca.location"] == str(pki["ca"])
    assert conf["ssl.endpoint.identification.algorithm"] == "https"
    assert "ssl.certificate.location" not in conf
    Producer(conf)  # librdkafka accepts every key (raises KafkaException otherwise)

    creds = kc.faust_credentials(settings)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.protocol.value == "SASL_SSL"
    assert creds.mechanism.value == "SCRAM-SHA-512"
    assert creds.username == "ndd" and creds.password == SECRET
    assert creds.ssl_context is not None and creds.ssl_context.check_hostname
    assert creds.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert any(c["subject"] == ((("commonName", "ndd-test-ca"),),) for c in
               creds.ssl_context.get_ca_certs())  # fmt: skip

    # What Faust hands aiokafka is what the settings say, and aiokafka accepts it.
    ours = aiokafka_kwargs(settings)
    assert ours["security_protocol"] == "SASL_SSL" and ours["sasl_mechanism"] == "SCRAM-SHA-512"
    assert ours["sasl_plain_username"] == "ndd" and ours["sasl_plain_password"] == SECRET
    _aiokafka_accepts(ours)

    for text in (repr(settings), repr(creds), kc.describe(settings), repr(kc.redact(conf)),
                 repr(kc.redact(ours))):  # fmt: skip
        assert SECRET not in text
    assert kc.redact(conf)["sasl.password"] == kc.REDACTED
    assert kc.redact(ours)["sasl_plain_password"] == kc.REDACTED
    assert kc.redact(ours)["ssl_context"].startswith("<SSLContext")
    assert "sasl.username=ndd" in kc.describe(settings)


def test_ssl_mutual_tls_without_hostname_check(pki: dict[str, Path]) -> None:
    settings = settings_of(
        brokers=_closed_port_brokers(),
        security_protocol="SSL",
        ssl_cafile=pki["ca"],
        ssl_certfile=pki["cert"],
        ssl_keyfile=pki["key"],
        ssl_check_hostname=False,
    )
    conf = kc.librdkafka_config(settings)
    assert conf["security.protocol"] == "SSL"
    assert conf["ssl.certificate.location"] == str(pki["cert"])
    assert conf["ssl.key.location"] == str(pki["key"])
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    assert not any(k.startswith("sasl") for k in conf)
    Producer(conf)

    creds = kc.faust_credentials(settings)
    assert isinstance(creds, faust.SSLCredentials)
    assert creds.protocol.value == "SSL"
    assert creds.context.check_hostname is False
    assert creds.context.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified
    assert credentials_to_aiokafka_auth(creds)["ssl_context"] is creds.context
    kwargs = kc.faust_broker_kwargs(settings)
    assert kwargs["broker"] == kc.faust_broker_urls(settings)
    assert isinstance(kwargs["broker_credentials"], faust.SSLCredentials)
    _aiokafka_accepts(aiokafka_kwargs(settings))


def test_sasl_plaintext_has_no_tls() -> None:
    settings = settings_of(
        security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password=SECRET
    )
    creds = kc.faust_credentials(settings)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.protocol.value == "SASL_PLAINTEXT" and creds.ssl_context is None
    assert creds.mechanism.value == "PLAIN"
    assert aiokafka_kwargs(settings)["ssl_context"] is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "NDD_SASL_PASSWORD"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_password": "p"}, "NDD_SASL_USERNAME"),
        ({"security_protocol": "SSL", "ssl_certfile": Path("/x.pem")}, "NDD_SSL_KEYFILE"),
        ({"ssl_cafile": Path("/etc/hostname")}, "use SSL or SASL_SSL"),
        ({"brokers": " , "}, "at least one host:port"),
    ],
)
def test_inconsistent_security_settings_are_rejected_by_the_settings(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        settings_of(**fields)


def test_an_unreadable_tls_file_fails_when_a_client_is_configured() -> None:
    settings = settings_of(security_protocol="SSL", ssl_cafile=Path("/no/such/ca.pem"))
    with pytest.raises(kc.KafkaConfigError, match="not a readable"):
        kc.librdkafka_config(settings)
    with pytest.raises(kc.KafkaConfigError, match="not a readable"):
        kc.faust_credentials(settings)


def test_secret_keys() -> None:
    for key in ("sasl.password", "ssl.key.password", "ssl.key.pem", "sasl_plain_password",
                "sasl.oauthbearer.client.secret"):  # fmt: skip
        assert kc.is_secret_key(key), key
    for key in ("sasl.username", "ssl.key.location", "bootstrap.servers"):
        assert not kc.is_secret_key(key), key
