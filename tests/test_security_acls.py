"""Security as documented, against a broker that enforces it: Apache Kafka with a
``SASL_SSL`` listener (SCRAM-SHA-512, certificates of a throwaway CA), StandardAuthorizer
and nothing allowed without an ACL (``ndd_stream/kafka/secured.py``).

Each principal gets exactly the ACLs ``ndd_stream/kafka/acls.py`` lists for its command
(the table docs/DEPLOYMENT.md prints) and nothing more: the commands do their job with
them, and each ACL removed in turn stops the command at once with one line naming the
operation, the resource and its name, exit code 3. Refused logins, an untrusted CA and
a client speaking the wrong protocol are one line each too, at once (exit 2; the worker,
whose every fatal condition is exit 3, exits 3). One secured broker serves the module.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from harness import brokers
from harness.kafka import make_settings, wait_until
from harness.scenarios import news_lines
from harness.worker import Process, WorkerProcess, events_named

from ndd_stream.cli.io_commands import topics_apply
from ndd_stream.kafka.acls import (
    Acl,
    producer_acls,
    reader_acls,
    topics_acls,
    view_acls,
    worker_denied,
)
from ndd_stream.kafka.broker import EmbeddedBroker
from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.kafka.secured import MECHANISM, SecuredKafka, make_ca
from ndd_stream.settings import Settings
from ndd_stream.worker.guarantee import guarantee_for

pytestmark = [pytest.mark.broker]


def worker_acls(settings: Settings) -> list[Acl]:
    """The worker's ACLs under its settings' guarantee (``worker/guarantee.py``)."""
    return guarantee_for(settings).acls()

#: A command that finds an ACL missing must say so well within this (seconds).
PROMPT_S = 20.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    if not brokers.is_kafka():
        pytest.skip("the secured broker is Apache Kafka (NDD_TEST_BROKER=kafka)")
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the throwaway CA")
    from ndd_stream.kafka import apache

    apache.fetch()
    broker = SecuredKafka(tmp_path_factory.mktemp("tls"),
                          log_dir=tmp_path_factory.mktemp("secured-log"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Principal:
    """A SCRAM user of the secured broker and its settings."""

    def __init__(self, broker: SecuredKafka, base: Settings, role: str) -> None:
        self.broker = broker
        self.name = f"{role}-{uuid.uuid4().hex[:6]}"
        self.password = secrets.token_urlsafe(12)
        broker.add_user(self.name, self.password)
        self.settings = make_settings(**{
            **base.model_dump(exclude={"sasl_password"}),
            "security_protocol": "SASL_SSL", "sasl_mechanism": MECHANISM,
            "sasl_username": self.name, "sasl_password": self.password,
            "ssl_cafile": broker.tls.ca})

    def grant(self, acls: Sequence[Acl], *, without: tuple[str, str, str] | None = None) -> None:
        """Grant ``acls``, except the one (resource, name, operation) ``without``."""
        self.broker.revoke_all(self.name)
        for acl in acls:
            ops = [op for op in acl.operations
                   if without != (acl.resource, acl.name, op)]
            if ops:
                self.broker.grant(self.name, acl.resource, acl.name, ops,
                                  prefixed=acl.prefixed)

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **self.settings.to_env(), **extra}


def _base(broker: SecuredKafka, tmp_path: Path, **fields: Any) -> Settings:
    """Settings of a test of its own: app id, topics (2 partitions), data dir."""
    tag = uuid.uuid4().hex[:6]
    return make_settings(**{
        "brokers": [broker.bootstrap], "app_id": f"sec-{tag}", "raw_topics": f"raw-{tag}",
        "unique_topic": f"unique-{tag}", "duplicate_topic": f"duplicate-{tag}",
        "dlq_topic": f"dlq-{tag}", "decisions_topic": f"decisions-{tag}", "partitions": 2,
        "data_dir": tmp_path / "data", "web_port": 0, "web_host": "127.0.0.1",
        "session_timeout_s": 8.0, "broker_timeout_s": 30.0, **fields})


def _admin_topics(broker: SecuredKafka, base: Settings) -> None:
    """The topics of ``base``, created by the administrator."""
    admin = make_settings(**{**base.model_dump(exclude={"sasl_password"}),
                             "security_protocol": "SASL_SSL", "sasl_mechanism": MECHANISM,
                             "sasl_username": "admin", "sasl_password": broker.admin_password,
                             "ssl_cafile": broker.tls.ca})
    from rich.console import Console

    assert topics_apply(admin, console=Console(file=open(os.devnull, "w"))) == 0  # noqa: SIM115


def _cli(env: dict[str, str], *args: str, timeout: float = 60.0) -> tuple[int, str, float]:
    """Run ``ndd-stream ARGS``: exit code, stdout+stderr, seconds."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ndd_stream.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def _one_line_naming(output: str, *parts: str) -> None:
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if "error:" in line]
    assert len(lines) == 1, output
    for part in parts:
        assert part in " ".join(output.split()), (part, output)


def _identities(reader: Principal, timeout: float, want: int,
                settle: float = 3.0) -> Counter[str]:
    """``ndd-identity`` of every committed record of the outputs, read by ``reader``
    (read_committed, its own read-only ACLs) until ``want`` identities and ``settle`` s
    without a record more (to see repeats), or ``timeout``."""
    s = reader.settings
    consumer = Consumer(librdkafka_config(s, {
        "group.id": f"{s.app_id}-reader-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "log_level": 0}))
    seen: Counter[str] = Counter()
    try:
        topics = [s.unique_topic, s.duplicate_topic, s.dlq_topic]
        meta = consumer.list_topics(timeout=10).topics
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics
                         for p in meta[t].partitions])
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if len(seen) >= want and not settle:
                break
            if msg is None:
                if len(seen) >= want:  # all there: read on a while for repeats
                    quiet_until = quiet_until or time.monotonic() + settle
                    if time.monotonic() > quiet_until:
                        break
                continue
            assert msg.error() is None, msg.error()
            identity = dict(msg.headers() or []).get("ndd-identity") or b"?"
            seen[identity.decode() if isinstance(identity, bytes) else identity] += 1
    finally:
        consumer.close()
    return seen


def _write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


# --- commands with exactly their ACLs ---------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_worker_decides_with_exactly_the_documented_acls_through_kill_9(
    secured: SecuredKafka, tmp_path: Path, guarantee: str
) -> None:
    """The worker with exactly ``worker_acls`` (its guarantee's), items loaded by
    ``produce`` with exactly ``producer_acls``, outputs read by a ``read_committed``
    reader with exactly ``reader_acls``: every item decided, through a kill -9 and a
    restart; under exactly-once none twice."""
    base = _base(secured, tmp_path, guarantee=guarantee)
    _admin_topics(secured, base)
    worker, crawler, reader = (Principal(secured, base, r) for r in ("worker", "crawler",
                                                                     "reader"))
    worker.grant(worker_acls(worker.settings))
    crawler.grant(producer_acls(base.raw_topics[0]))
    reader.grant(reader_acls(base, [base.unique_topic, base.duplicate_topic, base.dlq_topic]))
    first = news_lines(60, seed=44, id_prefix="a-")
    second = news_lines(40, seed=45, id_prefix="b-")

    log = tmp_path / "worker.log"
    process = WorkerProcess(worker.settings, log).start()
    try:
        code, out, _ = _cli(crawler.env(), "produce", str(_write_lines(tmp_path / "a.jsonl",
                                                                         first)))
        assert code == 0, out
        assert len(_identities(reader, 90, 20, settle=0)) >= 20, process.log_tail()
        process.kill9()
        code, out, _ = _cli(crawler.env(), "produce", str(_write_lines(tmp_path / "b.jsonl",
                                                                         second)))
        assert code == 0, out
        process = WorkerProcess(worker.settings, log).start()
        seen = _identities(reader, 120, len(first) + len(second))
        assert process.alive(), process.log_tail()
        assert process.stop() == 0, process.log_tail()
    finally:
        process.stop()
    assert len(seen) == len(first) + len(second), (len(seen), process.log_tail())
    repeated = {k: n for k, n in seen.items() if n > 1}
    if guarantee == "exactly-once":
        assert not repeated
    assert not events_named(log, "fatal"), process.log_tail()
    print(f"{guarantee}: {len(seen)} decided through a kill -9, {len(repeated)} repeated")
    if guarantee == "exactly-once":
        _view_shows(secured, base, tmp_path, len(seen))


def _view_shows(secured: SecuredKafka, base: Settings, tmp_path: Path, decided: int) -> None:
    """``view`` with exactly ``view_acls``: it follows every decision and its lag table
    (end and committed offsets) without an error."""
    viewer = Principal(secured, base, "viewer")
    viewer.grant(view_acls(base))
    view = Process([sys.executable, "-m", "ndd_stream.cli", "view", "--port", "0",
                    "--backfill", "1000"], tmp_path / "view.log",
                   env=viewer.env(PYTHONUNBUFFERED="1")).start()
    status: dict[str, Any] = {}
    try:
        assert wait_until(lambda: "ndd-stream view: http" in view.log_text(), 60), view.log_tail()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", view.log_text())
        assert url is not None, view.log_tail()

        def followed() -> bool:
            with urllib.request.urlopen(url.group(1) + "api/status", timeout=5) as resp:
                status.update(json.loads(resp.read()))
            return status["decisions"] >= decided and status["lag_updated"] is not None

        assert wait_until(followed, 60), (status, view.log_tail())
    finally:
        assert view.stop(30) == 0, view.log_tail()
    assert status["follower_error"] is None and status["lag_error"] is None, status


@pytest.mark.timeout(120)
def test_topics_apply_produce_tail_with_exactly_the_documented_acls(
    secured: SecuredKafka, tmp_path: Path
) -> None:
    """``topics apply`` (Describe and DescribeConfigs on existing topics, Create on the
    missing one), ``produce`` (Write) and ``tail`` (Read, and a group coordinator lookup
    under the app's prefix) do their job with exactly those ACLs."""
    base = _base(secured, tmp_path)
    _admin_topics(secured, base)
    ops, crawler, reader = (Principal(secured, base, r) for r in ("ops", "crawler", "reader"))
    extra = f"{base.app_id}-audit"  # a decisions topic that does not exist yet
    ops_env = ops.env(NDD_DECISIONS_TOPIC=extra)
    names = [base.raw_topics[0], base.unique_topic, base.duplicate_topic, base.dlq_topic,
             f"{base.app_id}-news.scoped", f"{base.app_id}-state-changelog"]
    ops.grant([*topics_acls(names), Acl("topic", extra, ("Create", "Describe",
                                                         "DescribeConfigs"), "")])
    crawler.grant(producer_acls(base.raw_topics[0]))
    reader.grant(reader_acls(base, [base.raw_topics[0]]))

    code, out, _ = _cli(ops_env, "topics", "apply")
    assert code == 0 and "1 created" in out and "6 exists" in out, out
    lines = news_lines(5, seed=3)
    code, out, _ = _cli(crawler.env(), "produce", str(_write_lines(tmp_path / "x.jsonl", lines)))
    assert code == 0 and "5/5 delivered" in out, out
    code, out, _ = _cli(reader.env(), "tail", base.raw_topics[0], "-n", "5", "--timeout", "20")
    assert code == 0 and "5 record(s)" in out, out


# --- each ACL removed in turn -------------------------------------------------------------


def _worker_rights() -> list[tuple[str, str, str]]:
    """(resource, placeholder name, operation) of every operation of ``worker_acls``."""
    probe = make_settings(app_id="A", raw_topics="R", unique_topic="U",
                          duplicate_topic="D", dlq_topic="Q", decisions_topic="E")
    return [(acl.resource, acl.name, op) for acl in worker_acls(probe)
            for op in acl.operations]


#: The cases run as a worker process: a topic, the group and the transactional id (the
#: one the transactions check finds); the start check of the others is the same function,
#: asked in the test's process (test_each_worker_acl_is_named_by_the_start_check).
WORKER_PROCESS_CASES = [("topic", "R", "Read"), ("group", "A", "Read"),
                        ("transactional_id", "A-", "Write")]


_NAMES = {"A": "app_id", "R": "raw", "U": "unique_topic", "D": "duplicate_topic",
          "Q": "dlq_topic", "E": "decisions_topic", "A-": "app_id-"}


def _real_name(base: Settings, placeholder: str) -> str:
    field = _NAMES[placeholder]
    if field == "raw":
        return base.raw_topics[0]
    if field == "app_id-":
        return f"{base.app_id}-"
    return str(getattr(base, field))


@pytest.fixture(scope="module")
def worker_topics(secured: SecuredKafka, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One app's topics for the removed-ACL cases of the worker (none of them runs)."""
    base = _base(secured, tmp_path_factory.mktemp("removed"))
    _admin_topics(secured, base)
    return base


@pytest.mark.timeout(120)
def test_each_worker_acl_is_named_by_the_start_check(
    secured: SecuredKafka, worker_topics: Settings
) -> None:
    """Every operation of the worker's rows removed in turn: the check the worker runs at
    its start (``worker_denied``) names it; with all of them it finds nothing missing."""
    worker = Principal(secured, worker_topics, "worker")
    worker.grant(worker_acls(worker.settings))
    assert worker_denied(worker.settings, worker_acls(worker.settings)) is None
    for resource, placeholder, operation in _worker_rights():
        if resource == "transactional_id":
            continue  # not askable: the worker's transactions check names it (below)
        name = _real_name(worker_topics, placeholder)
        worker.grant(worker_acls(worker.settings), without=(resource, name, operation))
        message = worker_denied(worker.settings, worker_acls(worker.settings))
        assert message is not None, (resource, name, operation)
        assert f"user '{worker.name}' {operation} on {resource} '{name}" in message, message
        print(f"{resource} {name} {operation}: {message}")


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("resource", "placeholder", "operation"), WORKER_PROCESS_CASES)
def test_worker_without_one_documented_acl_exits_3_naming_it(
    secured: SecuredKafka, worker_topics: Settings, tmp_path: Path, resource: str,
    placeholder: str, operation: str
) -> None:
    base = worker_topics.model_copy(update={"data_dir": tmp_path / "data"})
    name = _real_name(base, placeholder)
    worker = Principal(secured, base, "worker")
    worker.grant(worker_acls(worker.settings), without=(resource, name, operation))
    log = tmp_path / "worker.log"
    process = WorkerProcess(worker.settings, log)
    started = time.monotonic()
    code = process.run_to_exit(timeout=PROMPT_S * 2)
    took = time.monotonic() - started
    assert code == 3, process.log_tail()
    fatal = events_named(log, "fatal")
    assert len(fatal) == 1, process.log_tail()
    message = fatal[0]["message"]
    shown = name if resource != "transactional_id" else f"{base.app_id}-probe-"
    kind = {"transactional_id": "transactional id"}.get(resource, resource)
    assert f"user '{worker.name}' {operation} on {kind} '{shown}" in message, message
    assert "Traceback" not in process.log_text()
    assert took < PROMPT_S, (took, message)
    print(f"{resource} {name} {operation}: exit 3 in {took:.1f} s: {message}")


@pytest.mark.timeout(120)
def test_commands_without_one_documented_acl_exit_3_naming_it(
    secured: SecuredKafka, tmp_path: Path
) -> None:
    """``topics apply``, ``produce``, ``tail`` and ``view``, each ACL of theirs removed in
    turn (the view: two of them)."""
    base = _base(secured, tmp_path)
    _admin_topics(secured, base)
    raw, unique = base.raw_topics[0], base.unique_topic
    user = Principal(secured, base, "user")
    lines = _write_lines(tmp_path / "x.jsonl", news_lines(3, seed=4))
    names = [raw, unique, base.duplicate_topic, base.dlq_topic, str(base.decisions_topic),
             f"{base.app_id}-news.scoped", f"{base.app_id}-state-changelog"]
    missing_topic = f"{base.app_id}-audit"
    apply_acls = [*topics_acls(names), Acl("topic", missing_topic,
                                           ("Create", "Describe", "DescribeConfigs"), "")]
    cases: list[tuple[list[Acl], tuple[str, str, str], list[str], str]] = [
        (apply_acls, ("topic", unique, "Describe"), ["topics", "apply"],
         f"Describe on topic '{unique}'"),
        (apply_acls, ("topic", raw, "DescribeConfigs"), ["topics", "apply"],
         f"DescribeConfigs on topic '{raw}'"),
        (apply_acls, ("topic", missing_topic, "Create"), ["topics", "apply"],
         f"Create on topic '{missing_topic}'"),
        (producer_acls(raw), ("topic", raw, "Write"), ["produce", str(lines)],
         f"Write on topic '{raw}'"),
        (reader_acls(base, [unique]), ("topic", unique, "Read"), ["tail", unique],
         f"Read on topic '{unique}'"),
        (reader_acls(base, [unique]), ("group", f"{base.app_id}-", "Describe"),
         ["tail", unique, "--timeout", "10"], f"Describe on group '{base.app_id}-probe'"),
        (view_acls(base), ("topic", unique, "Read"), ["view", "--port", "0"],
         f"Read on topic '{unique}'"),
        (view_acls(base), ("group", base.app_id, "Describe"), ["view", "--port", "0"],
         f"Describe on group '{base.app_id}'"),
    ]
    for acls, without, args, named in cases:
        user.grant(acls, without=without)
        code, out, took = _cli(user.env(NDD_DECISIONS_TOPIC=missing_topic), *args)
        assert code == 3, (without, out)
        _one_line_naming(out, f"denies user '{user.name}' {named}")
        assert took < PROMPT_S, (without, took)
        print(f"{args[0]} without {without}: exit 3 in {took:.1f} s")


# --- credentials, certificates, protocols --------------------------------------------------


def _bad_settings(good: Principal, case: str, tmp_path: Path) -> dict[str, str]:
    """``good``'s environment with one thing wrong."""
    env = good.env()

    def drop(*names: str) -> None:
        for name in names:
            env.pop(name, None)

    if case == "wrong password":
        env["NDD_SASL_PASSWORD"] = "not-" + good.password
    elif case == "mechanism not enabled":
        env["NDD_SASL_MECHANISM"] = "PLAIN"
    elif case == "unknown user":
        env["NDD_SASL_USERNAME"] = "nobody"
    elif case == "wrong CA":
        env["NDD_SSL_CAFILE"] = str(make_ca(tmp_path / "other", "other-ca")[0])
    elif case == "no CA (system store)":
        drop("NDD_SSL_CAFILE")
    elif case == "plaintext to the TLS port":
        env["NDD_SECURITY_PROTOCOL"] = "PLAINTEXT"
        drop("NDD_SSL_CAFILE", "NDD_SASL_USERNAME", "NDD_SASL_PASSWORD")
    elif case == "SASL without TLS":
        env["NDD_SECURITY_PROTOCOL"] = "SASL_PLAINTEXT"
        drop("NDD_SSL_CAFILE")
    elif case == "TLS without SASL":
        env["NDD_SECURITY_PROTOCOL"] = "SSL"
        drop("NDD_SASL_USERNAME", "NDD_SASL_PASSWORD")
    elif case == "no credentials":
        drop("NDD_SASL_USERNAME", "NDD_SASL_PASSWORD")
    return env


CREDENTIAL_CASES = {
    "wrong password": (2, "refused the login of user"),
    "unknown user": (2, "refused the login of user 'nobody'"),
    "mechanism not enabled": (2, "does not enable NDD_SASL_MECHANISM=PLAIN (it offers "
                                 "SCRAM-SHA-512)"),
    "wrong CA": (2, "certificate at {bootstrap} is not trusted"),
    "no CA (system store)": (2, "certificate at {bootstrap} is not trusted"),
    "plaintext to the TLS port": (2, "speaks TLS and NDD_SECURITY_PROTOCOL=PLAINTEXT"),
    "SASL without TLS": (2, "speaks TLS and NDD_SECURITY_PROTOCOL=SASL_PLAINTEXT"),
    "TLS without SASL": (2, "wants a SASL login"),
    "no credentials": (2, "NDD_SECURITY_PROTOCOL=SASL_SSL needs"),
}


@pytest.mark.timeout(180)
def test_refused_credentials_certificates_and_protocols_are_one_line_at_once(
    secured: SecuredKafka, tmp_path: Path
) -> None:
    """``produce`` under each bad setting (``tail``, through the same probe, under two):
    one line naming the cause, exit 2, well before the broker timeout; the password
    printed nowhere."""
    base = _base(secured, tmp_path)
    _admin_topics(secured, base)
    good = Principal(secured, base, "user")
    good.grant([*producer_acls(base.raw_topics[0]), *reader_acls(base, [base.unique_topic])])
    lines = _write_lines(tmp_path / "x.jsonl", news_lines(2, seed=5))
    tail = ["tail", "-n", "1", "--timeout", "30"]
    for case, (code_wanted, said) in CREDENTIAL_CASES.items():
        env = _bad_settings(good, case, tmp_path)
        # tail goes through the same probe: two of its cases suffice
        both = case in ("wrong password", "plaintext to the TLS port")
        for args in (["produce", str(lines)], tail) if both else (["produce", str(lines)],):
            code, out, took = _cli(env, *args)
            assert code == code_wanted, (case, args[0], out)
            assert "Traceback" not in out and good.password not in out, out
            assert said.format(bootstrap=secured.bootstrap) in " ".join(out.split()), (
                case, out)
            assert took < 10, (case, args[0], took)
            print(f"{case}: {args[0]} exit {code} in {took:.1f} s")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["wrong password", "wrong CA", "plaintext to the TLS port"])
def test_worker_refused_login_exits_3_at_once_naming_the_cause(
    secured: SecuredKafka, tmp_path: Path, case: str
) -> None:
    """The worker's start with a refused login, an untrusted CA or the wrong protocol:
    exit 3 in seconds (not after NDD_BROKER_TIMEOUT_S), one CRITICAL line naming it."""
    base = _base(secured, tmp_path, broker_timeout_s=60.0)
    good = Principal(secured, base, "worker")
    env = _bad_settings(good, case, tmp_path)
    log = tmp_path / "worker.log"
    process = WorkerProcess(good.settings, log)
    process.env = {**env, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    code = process.run_to_exit(timeout=90)
    took = time.monotonic() - started
    assert code == 3, process.log_tail()
    fatal = events_named(log, "fatal")
    assert len(fatal) == 1, process.log_tail()
    said = CREDENTIAL_CASES[case][1].format(bootstrap=secured.bootstrap)
    assert said in fatal[0]["message"], fatal[0]["message"]
    assert good.password not in process.log_text()
    assert took < PROMPT_S, took
    print(f"worker, {case}: exit 3 in {took:.1f} s: {fatal[0]['message']}")


PLAINTEXT_PORT_CASES = {
    "SSL": "does not speak TLS and NDD_SECURITY_PROTOCOL=SSL does",
    "SASL_SSL": "does not speak TLS and NDD_SECURITY_PROTOCOL=SASL_SSL does",
    "SASL_PLAINTEXT": "takes no SASL login on this port",
}


@pytest.mark.timeout(120)
def test_tls_or_sasl_to_a_plaintext_port_is_one_line_at_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """The session's PLAINTEXT broker asked with TLS or a SASL login: ``produce`` exits 2
    at once with one line saying the listener's protocol differs."""
    if not brokers.is_kafka():
        pytest.skip("the lines are librdkafka's reading of Apache Kafka's answers")
    lines = _write_lines(tmp_path / "x.jsonl", news_lines(1, seed=6))
    for protocol, said in PLAINTEXT_PORT_CASES.items():
        env = {**os.environ, "NDD_BROKERS": broker.bootstrap,
               "NDD_SECURITY_PROTOCOL": protocol, "NDD_SASL_MECHANISM": MECHANISM}
        if protocol.startswith("SASL"):
            env.update(NDD_SASL_USERNAME="someone", NDD_SASL_PASSWORD="secret")
        code, out, took = _cli(env, "produce", str(lines), "--topic", "anything")
        assert code == 2, (protocol, out)
        _one_line_naming(out, said)
        assert took < 10, (protocol, took)
        print(f"{protocol} to a PLAINTEXT port: exit 2 in {took:.1f} s")
