"""The ACLs each command needs on a broker with an authorizer, and a check that asks the
broker which of them the principal lacks.

The tables here are the ones docs/DEPLOYMENT.md prints ("ACLs"), derived from the
requests each command sends. Kafka's implications are relied on: Read, Write, Delete and
Alter imply Describe; AlterConfigs implies DescribeConfigs. So ``Read`` below also grants
the Describe of metadata, FindCoordinator and OffsetFetch.

:func:`missing` asks the broker (DescribeTopics and DescribeGroups with the authorized
operations, KIP-430) which rights the settings' principal has, before a command sends its
first real request: a missing ACL is one line naming the operation, the resource and its
name, not a retry loop in a client. Transactional ids cannot be asked that way; the
transactions check at the worker's start (``kafka/transactions.py``) names a refused one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.settings import Settings

RESOURCE_NAMES = {"topic": "topic", "group": "group", "transactional_id": "transactional id"}


@dataclass(frozen=True)
class Acl:
    """Allow ``operations`` on a resource (``topic``, ``group``, ``transactional_id``)
    named ``name``, or every name starting with it when ``prefixed``."""

    resource: str
    name: str
    operations: tuple[str, ...]
    why: str
    prefixed: bool = False


@dataclass(frozen=True)
class Denied:
    """One right the principal lacks."""

    operation: str
    resource: str
    name: str

    def __str__(self) -> str:
        return f"{self.operation} on {RESOURCE_NAMES[self.resource]} '{self.name}'"


def _outputs(settings: Settings) -> list[str]:
    names = [settings.unique_topic, settings.duplicate_topic, settings.dlq_topic]
    if settings.decisions_topic:
        names.append(settings.decisions_topic)
    return names


def _internal(settings: Settings) -> str:
    return f"{settings.app_id}-"


def worker_acls(settings: Settings, extra: Sequence[Acl] = ()) -> list[Acl]:
    """What the worker's principal needs, and ``extra``: what its guarantee adds
    (``worker/guarantee.py``: :func:`transaction_acls` under exactly-once)."""
    prefix = _internal(settings)
    acls = [
        *(Acl("topic", raw, ("Read",), "input") for raw in settings.raw_topics
          if settings.raw_topic_pattern is None),
        *(Acl("topic", name, ("Write", "DescribeConfigs"),
              "output; its `max.message.bytes` bounds what is written there whole")
          for name in _outputs(settings)),
        Acl("topic", prefix, ("Read", "Write", "DescribeConfigs"),
            "its scoped, changelog and shards topics", prefixed=True),
        Acl("group", settings.app_id, ("Read",),
            "the consumer group; under exactly-once its offsets commit in the transactions"),
    ]
    return [*acls, *extra]


def transaction_acls(settings: Settings) -> list[Acl]:
    """What the worker's transactions need (exactly-once)."""
    return [Acl("transactional_id", _internal(settings), ("Write",),
                "the worker's transactional id and one per start for the transactions check",
                prefixed=True)]


def topics_acls(names: Sequence[str]) -> list[Acl]:
    """What ``topics apply`` needs on existing topics ``names`` (and Create on a missing
    one, which the broker names when it refuses the creation)."""
    return [Acl("topic", name, ("Describe", "DescribeConfigs"),
                "compare partitions and configs") for name in names]


def producer_acls(topic: str) -> list[Acl]:
    """What ``produce`` needs (its idempotent producer id comes with Write on a topic)."""
    return [Acl("topic", topic, ("Write",), "load items")]


def reader_acls(settings: Settings, topics: Iterable[str]) -> list[Acl]:
    """What ``tail`` needs (and any reader that assigns itself partitions): Read on the
    topics, and a coordinator lookup for its consumer's group id, under the app's prefix
    (it joins no group and commits nothing)."""
    return [*(Acl("topic", t, ("Read",), "read") for t in topics),
            Acl("group", _internal(settings), ("Describe",), "group coordinator lookup",
                prefixed=True)]


def view_acls(settings: Settings) -> list[Acl]:
    """What ``view`` needs: Read on the outputs; Describe on the raw and internal topics
    and the worker's group (the lag table: end offsets and committed offsets); a
    coordinator lookup for its own consumers' group ids."""
    prefix = _internal(settings)
    return [
        *(Acl("topic", t, ("Read",), "decisions and texts") for t in _outputs(settings)),
        *(Acl("topic", raw, ("Describe",), "lag") for raw in settings.raw_topics
          if settings.raw_topic_pattern is None),
        Acl("topic", prefix, ("Describe",), "lag of the scoped topic", prefixed=True),
        Acl("group", settings.app_id, ("Describe",), "the worker's committed offsets (lag)"),
        Acl("group", prefix, ("Describe",), "group coordinator lookup", prefixed=True),
    ]


def _probe_name(acl: Acl) -> str:
    """A name the ACL covers: a prefixed group ACL is asked for a name under its prefix."""
    return f"{acl.name}probe" if acl.prefixed else acl.name


def missing(settings: Settings, acls: Sequence[Acl], *,
            timeout: float = 10.0) -> list[Denied]:
    """The rights of ``acls`` on topics and groups that the broker does not grant the
    settings' principal. A topic that does not exist (while Describe is granted) is
    skipped: the command that needs it says so. Raises KafkaException when the broker
    does not answer."""
    admin = AdminClient(librdkafka_config(settings, {"log_level": 0}))
    denied: list[Denied] = []
    # the operations wanted per topic; a prefixed ACL is checked on the topics under its
    # prefix that exist (none listed: missing, or hidden; the command says which)
    topics: dict[str, list[str]] = {}
    prefixed = [a for a in acls if a.resource == "topic" and a.prefixed]
    listed = admin.list_topics(timeout=timeout).topics if prefixed else {}
    for acl in acls:
        if acl.resource != "topic":
            continue
        names = [t for t in listed if t.startswith(acl.name)] if acl.prefixed else [acl.name]
        for name in names:
            wanted = topics.setdefault(name, [])
            wanted += [op for op in acl.operations if op not in wanted]
    if topics:
        futures = admin.describe_topics(TopicCollection(sorted(topics)),
                                        include_authorized_operations=True,
                                        request_timeout=timeout)
        for name, future in futures.items():
            ops = topics[name]
            allowed = _allowed(future, timeout)
            if allowed is None:  # name what to grant: Read or Write imply Describe
                denied += [Denied(op, "topic", name)
                           for op in (["Describe"] if "Describe" in ops else ops)]
            elif allowed != "unknown":
                denied += [Denied(op, "topic", name) for op in ops
                           if op.upper() not in allowed]
    groups = {_probe_name(a): a for a in acls if a.resource == "group"}
    for name, acl in sorted(groups.items()):
        try:
            allowed = _group_allowed(admin, name, timeout)
        except (KafkaException, TimeoutError):
            if denied:  # what is known already is the answer
                continue
            raise
        if allowed is None:
            denied.append(Denied(acl.operations[0], "group", name))
        elif allowed != "unknown":
            denied += [Denied(op, "group", name) for op in acl.operations
                       if op.upper() not in allowed]
    return denied


#: A group coordinator that is still loading or moving: asked again.
_RETRIABLE = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
              KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def _group_allowed(admin: AdminClient, name: str, timeout: float) -> set[str] | str | None:
    """:func:`_allowed` of group ``name``, asked again while its coordinator is not ready
    (the first group request of a fresh cluster meets a loading offsets topic)."""
    deadline = time.monotonic() + timeout
    while True:
        future = admin.describe_consumer_groups([name], include_authorized_operations=True,
                                                request_timeout=timeout)[name]
        try:
            return _allowed(future, timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in _RETRIABLE or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _allowed(future: object, timeout: float) -> set[str] | str | None:
    """The authorized operations (``READ``, ``DESCRIBE_CONFIGS``, ...) a describe future
    reports; None when Describe itself is refused; ``"unknown"`` for a missing topic or
    when the broker does not report them."""
    try:
        found = future.result(timeout=timeout)  # type: ignore[attr-defined]
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        code = error.code() if isinstance(error, KafkaError) else None
        if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                    KafkaError.GROUP_AUTHORIZATION_FAILED):
            return None
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return "unknown"
        raise
    ops = getattr(found, "authorized_operations", None)
    if not ops:  # not reported (a broker without KIP-430): nothing to tell
        return "unknown"
    return {op.name.replace("_", "") for op in ops} | {op.name for op in ops}


def denied_message(settings: Settings, denied: Sequence[Denied], what: str) -> str:
    """One line: who may not do what, for which command."""
    user = settings.sasl_username or "the client's principal"
    names: dict[tuple[str, str], list[str]] = {}
    for d in denied:  # one clause per operation and resource type
        names.setdefault((d.operation, d.resource), []).append(f"'{d.name}'")
    rights = "; ".join(f"{op} on {RESOURCE_NAMES[res]} {', '.join(n)}"
                       for (op, res), n in names.items())
    return (f"the broker at {settings.bootstrap_servers()} denies user '{user}' {rights}, "
            f"which {what} needs (docs/DEPLOYMENT.md, ACLs)")


AUTHORIZATION_CODES = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional_id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}


def authorization_error(error: object) -> str | None:
    """The resource kind an authorization error of a client is about, else None."""
    code = error.code() if isinstance(error, KafkaError) else None
    return AUTHORIZATION_CODES.get(code) if code is not None else None


def worker_denied(settings: Settings, acls: Sequence[Acl]) -> str | None:
    """The line for the worker's start when its principal lacks a right of ``acls`` (its
    guarantee's: ``worker/guarantee.py``) on a topic or group, else None (also when the
    broker does not answer the question: the worker's own requests then say what is
    wrong)."""
    try:
        denied = missing(settings, acls)
    except (KafkaException, TimeoutError):
        return None
    if not denied:
        return None
    return denied_message(settings, denied, f"the worker (NDD_GUARANTEE={settings.guarantee})")


def view_denied(settings: Settings) -> str | None:
    """The line for the view's start when its principal lacks a right of
    :func:`view_acls`, else None."""
    try:
        denied = missing(settings, view_acls(settings))
    except (KafkaException, TimeoutError):
        return None
    return denied_message(settings, denied, "the view") if denied else None


def transactions_denied(settings: Settings, exc: BaseException) -> str | None:
    """The line for a transactions check the broker refused for want of an ACL (it is
    not a broker without transactions), else None."""
    cause = exc.__cause__
    error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    kind = authorization_error(error)
    if kind is None:
        return None
    if kind == "transactional_id":
        denied = Denied("Write", kind, f"{settings.app_id}-probe-...")
    elif kind == "group":
        denied = Denied("Read", kind, settings.app_id)
    else:
        assert isinstance(error, KafkaError)
        return (f"the broker at {settings.bootstrap_servers()} refused the transactions check "
                f"of user '{settings.sasl_username}': {error.str()} (docs/DEPLOYMENT.md, ACLs)")
    return denied_message(settings, [denied], "NDD_GUARANTEE=exactly-once")
