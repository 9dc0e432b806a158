"""The guarantee, one object chosen at start (worker/guarantee.py): what each answers; the
checks before the worker starts, on a thread of their own. No broker: the clients are made,
never used, or find no one at the address."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness.kafka import make_settings

from ndd_stream.kafka.transactions import Transactions
from ndd_stream.worker import startup
from ndd_stream.worker.commit import AcknowledgingCommitter, CommittedOrder, TransactionalCommitter
from ndd_stream.worker.delivery import InOrder
from ndd_stream.worker.guarantee import AtLeastOnce, ExactlyOnce, guarantee_for
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.startup import Preflight


def _made(guarantee: str, tmp_path: Path) -> tuple[object, list[object]]:
    settings = make_settings(guarantee=guarantee, data_dir=tmp_path,
                             brokers="127.0.0.1:9")
    chosen = guarantee_for(settings)
    committers = [chosen.committer(agent, lambda: None, WorkerMetrics(), lambda tps: {},
                                   overlap=agent != "router")
                  for agent in ("router", "decider", "shards")]
    return chosen, committers


def test_exactly_once_commits_in_one_producers_transactions(tmp_path: Path) -> None:
    chosen, committers = _made("exactly-once", tmp_path)
    assert isinstance(chosen, ExactlyOnce) and chosen.read_committed
    assert all(isinstance(c, TransactionalCommitter) and not c.acks for c in committers)
    producers = {id(c.txns) for c in committers}  # type: ignore[attr-defined]
    assert len(producers) == 1  # one transactional producer, whatever the agents
    assert isinstance(chosen.metadata(object()), Transactions)  # type: ignore[arg-type]
    assert any(a.resource == "transactional_id" for a in chosen.acls())
    assert chosen.faust_settings()["broker_commit_livelock_soft_timeout"] > 86400
    order = committers[1].in_order(lambda *a: [], WorkerMetrics(), "decided")
    assert isinstance(order, CommittedOrder)
    assert not committers[0].forwards(False) and committers[0].forwards(True)
    chosen.close()


def test_at_least_once_acknowledges_through_faust(tmp_path: Path) -> None:
    chosen, committers = _made("at-least-once", tmp_path)
    assert isinstance(chosen, AtLeastOnce) and not chosen.read_committed
    assert all(isinstance(c, AcknowledgingCommitter) and c.acks for c in committers)
    reads = object()
    assert chosen.metadata(reads) is reads  # type: ignore[arg-type]
    assert not any(a.resource == "transactional_id" for a in chosen.acls())
    assert chosen.refusal("changelog") is None  # any broker
    order = committers[1].in_order(lambda *a: [], WorkerMetrics(), "decided")
    assert type(order) is InOrder
    assert committers[0].forwards(False)  # Faust acknowledges a revoked partition's records
    chosen.close()


@pytest.mark.parametrize("offsets", [[5, 7, 8, 12], [3, 9]])
def test_offset_order_read_committed_reads_back_only_the_first_jump(offsets: list[int]) -> None:
    """Exactly-once reads its inputs read_committed: offsets jump over transaction markers
    at every transaction, and only the first jump after a resume can be records Faust
    skipped; at-least-once every jump is read back."""
    import asyncio
    from types import SimpleNamespace

    asked: list[tuple[int, int]] = []

    def read(topic: str, partition: int, start: int, end: int) -> list[object]:
        asked.append((start, end))
        return []

    jumps = sum(1 for a, b in zip([0, *offsets], offsets, strict=False) if b > a + 1)
    for order, want in ((CommittedOrder(read, WorkerMetrics(), "decided"), 1),
                        (InOrder(read, WorkerMetrics(), "decided"), jumps)):
        asked.clear()
        order.resume(("t", 0), 1)
        messages = [SimpleNamespace(topic="t", partition=0, offset=o) for o in offsets]
        out = asyncio.run(order.arrange(messages))  # type: ignore[arg-type]
        assert [m.offset for m in out] == offsets
        assert len(asked) == want and asked[0] == (1, offsets[0])


def test_the_start_checks_answer_from_their_own_thread(tmp_path: Path) -> None:
    """No broker at the address: the checks, on their thread, say so (None: exit code 3)."""
    settings = make_settings(guarantee="exactly-once", data_dir=tmp_path,
                             brokers="127.0.0.1:9", broker_timeout_s=1)
    checks = Preflight(settings, guarantee_for(settings))
    started = time.monotonic()
    assert checks.result() is None
    assert time.monotonic() - started < 30


def test_what_the_start_checks_raise_is_raised_where_they_are_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(settings: object, guarantee: object) -> None:
        raise RuntimeError("checked on the other thread")

    monkeypatch.setattr(startup, "preflight", fails)
    settings = make_settings(data_dir=tmp_path, brokers="127.0.0.1:9")
    checks = Preflight(settings, guarantee_for(settings))
    with pytest.raises(RuntimeError, match="checked on the other thread"):
        checks.result()


def test_the_start_checks_import_no_faust_aiokafka_or_aiohttp() -> None:
    """They overlap the import of those (most of a worker's start) only while neither their
    module nor the guarantee's imports one of them."""
    probe = ("import sys; import ndd_stream.worker.guarantee, ndd_stream.worker.startup; "
             "print(sorted(m for m in ('faust', 'mode', 'aiokafka', 'aiohttp') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stderr
