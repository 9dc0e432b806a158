"""An Apache Kafka node that enforces security: a ``SASL_SSL`` listener (SCRAM-SHA-512 over
TLS with certificates of a throwaway CA), ``StandardAuthorizer`` and nothing allowed
without an ACL (``allow.everyone.if.no.acl.found=false``).

It is the broker the security tests run the commands against. The administrator
(``User:admin``, a super user) is created when the node is formatted; other users and
their ACLs are made through the Admin API (:meth:`SecuredKafka.add_user`,
:meth:`SecuredKafka.grant`). The controller listener stays PLAINTEXT on loopback, its
principal (``User:ANONYMOUS``) a super user: Kafka's broker-to-controller requests need
Cluster rights, and what is tested is the client listener.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from ndd_stream.kafka.apache import ApacheKafka
from ndd_stream.kafka.broker import BrokerError

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"


@dataclass(frozen=True)
class Tls:
    """A throwaway CA and a broker certificate it signed (for 127.0.0.1 and localhost)."""

    ca: Path  # the CA certificate (PEM): what clients trust
    keystore: Path  # the broker's key and certificate chain (PKCS12)
    password: str


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=60)
    if done.returncode != 0:
        raise BrokerError(f"openssl {args[0]} failed: {done.stderr.strip()[-1000:]}")


def make_ca(folder: Path, name: str = "ndd-test-ca") -> tuple[Path, Path]:
    """A self-signed CA in ``folder``: (certificate, key), PEM."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", key.name, "-out", cert.name, "-days", "3", "-subj",
             f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    return cert, key


def make_tls(folder: Path) -> Tls:
    """A CA and a broker keystore signed by it, made with openssl in ``folder``."""
    ca, ca_key = make_ca(folder)
    (folder / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "broker.key", "-out", "broker.csr", "-subj", "/CN=localhost",
             cwd=folder)
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", ca.name, "-CAkey", ca_key.name,
             "-CAcreateserial", "-out", "broker.pem", "-days", "3", "-extfile", "san.ext",
             cwd=folder)
    password = secrets.token_hex(12)
    _openssl("pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile",
             ca.name, "-name", "broker", "-out", "broker.p12", "-passout", f"pass:{password}",
             cwd=folder)
    return Tls(ca=ca, keystore=folder / "broker.p12", password=password)


def _every(user: str) -> AclBindingFilter:
    """A filter matching every ACL of ``user`` (None: any name, any host; the stubs type
    them as str)."""
    return AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,  # type: ignore[arg-type]
                            f"User:{user}", None, AclOperation.ANY,  # type: ignore[arg-type]
                            AclPermissionType.ANY)


def _ops(names: Iterable[str]) -> list[AclOperation]:
    return [AclOperation[re.sub(r"(?<=[a-z])(?=[A-Z])", "_", n).upper()] for n in names]


class SecuredKafka(ApacheKafka):
    """One KRaft node whose client listener is ``SASL_SSL`` (SCRAM-SHA-512) and whose
    authorizer allows nothing without an ACL; ``tls_dir`` receives the CA and keystore."""

    kind = "kafka-sasl-ssl"

    def __init__(self, tls_dir: Path, *, admin_password: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tls = make_tls(tls_dir)
        self.admin_password = admin_password or secrets.token_hex(12)
        self._admin: AdminClient | None = None

    def client_config(self, user: str = ADMIN, password: str | None = None) -> dict[str, Any]:
        """librdkafka settings of ``user`` (default: the administrator) on this node."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.admin_password if password is None else password,
            "ssl.ca.location": str(self.tls.ca),
        }

    def admin(self) -> AdminClient:
        """The administrator's client (kept: a client dropped while a future of it is
        pending fails that future)."""
        if self._admin is None:
            self._admin = AdminClient({**self.client_config(), "log_level": 0})
        return self._admin

    def add_user(self, user: str, password: str) -> None:
        """Create (or reset) a SCRAM-SHA-512 login."""
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        futures = self.admin().alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode())])
        for future in futures.values():
            future.result(timeout=30)

    def grant(self, user: str, resource: str, name: str, operations: Iterable[str], *,
              prefixed: bool = False) -> None:
        """Allow ``user`` the ``operations`` (``Read``, ``Write``, ...) on a ``resource``
        (``topic``, ``group``, ``transactional_id``, ``cluster``) named or prefixed
        ``name``, from any host."""
        pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
        bindings = [AclBinding(ResourceType[resource.upper()], name, pattern,
                               f"User:{user}", "*", op, AclPermissionType.ALLOW)
                    for op in _ops(operations)]
        for future in self.admin().create_acls(bindings, request_timeout=30).values():
            future.result()

    def revoke_all(self, user: str) -> None:
        """Delete every ACL of ``user``."""
        for future in self.admin().delete_acls([_every(user)], request_timeout=30).values():
            future.result()

    def acls(self, user: str) -> list[AclBinding]:
        """The ACLs of ``user``."""
        try:
            return list(self.admin().describe_acls(_every(user), request_timeout=30).result())
        except KafkaException as exc:
            raise BrokerError(f"describe_acls failed: {exc}") from exc

    # --- the node's configuration ---------------------------------------------------------
    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        host, port, controller = self._host, self._port, self._controller_port
        jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ADMIN}" password="{self.admin_password}";')
        props.update({
            "listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller}",
            "advertised.listeners": f"SASL_SSL://{host}:{port}",
            "inter.broker.listener.name": "SASL_SSL",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.tls.keystore),
            "ssl.keystore.password": self.tls.password,
            "ssl.key.password": self.tls.password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        })
        return props

    def _format_args(self) -> list[str]:
        # the administrator exists before the node starts: the broker logs in as it
        return [*super()._format_args(), "--add-scram",
                f"{MECHANISM}=[name={ADMIN},password={self.admin_password}]"]

    def __repr__(self) -> str:
        return "<SecuredKafka " + super().__repr__().removeprefix("<ApacheKafka ")
