"""The guarantee the worker runs, chosen once at start: exactly-once or at-least-once.

Whatever differs between the two is asked of one object, made by :func:`guarantee_for`
(the one place ``NDD_GUARANTEE`` is read) before anything else of the worker exists:

- whether the broker can run it (at start): exactly-once (:class:`ExactlyOnce`) checks that
  a transaction's aborted record stays hidden; at-least-once (:class:`AtLeastOnce`) runs
  on any broker;
- the ACLs the principal needs: exactly-once adds Write on its transactional ids;
- Faust's consumer: exactly-once reads ``read_committed`` and Faust, which commits
  nothing, is never let warn about it;
- each agent's committer: exactly-once, with the worker's one transactional producer;
  at-least-once, through Faust's producer.

Each agent holds its committer (``worker/commit.py``), the guarantee's face to it: how a
piece is committed, whether a batch is acknowledged to Faust and how large it is, where an
input partition is opened from and how its changelog is restored, how its offsets run and
whose raw records the router forwards. No other module asks which guarantee runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from ndd_stream.kafka.acls import Acl, transaction_acls, transactions_denied, worker_acls
from ndd_stream.kafka.config import librdkafka_config
from ndd_stream.kafka.reads import Metadata
from ndd_stream.kafka.transactions import (
    TP,
    Member,
    TransactionError,
    Transactions,
    TransactionsUnsupported,
    check_group_metadata,
    check_transactions,
)
from ndd_stream.settings import Settings
from ndd_stream.worker.commit import AcknowledgingCommitter, Committer, TransactionalCommitter
from ndd_stream.worker.metrics import WorkerMetrics
from ndd_stream.worker.pool import BATCH_MAX, CHECKPOINT_ITEMS, TRANSACTION_ITEMS
from ndd_stream.worker.startup import transaction_conf, worker_id

FAUST_LIVELOCK_S = 300.0
"""Faust's warning that it "has not committed" a partition for this long (its default)."""


class Guarantee(ABC):
    """What the worker asks of its guarantee (see the module docstring)."""

    name: str
    read_committed: bool
    """Whether Faust's consumer reads only committed records (``runtime.make_app``)."""
    commit_livelock_s: float
    """After how long without a commit of its own Faust warns about a partition."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.committers: list[Committer] = []

    def faust_settings(self) -> dict[str, Any]:
        """``faust.App(**...)`` arguments of the guarantee."""
        return {"broker_commit_livelock_soft_timeout": self.commit_livelock_s}

    @abstractmethod
    def acls(self) -> list[Acl]:
        """The ACLs the worker's principal needs (docs/DEPLOYMENT.md, ACLs)."""

    @abstractmethod
    def refusal(self, changelog: str) -> str | None:
        """Before the worker starts: why the broker cannot run the guarantee (one line),
        or None. ``changelog``: the state changelog topic. Blocking."""

    def committer(self, agent: str, member: Callable[[], Member | None],
                  metrics: WorkerMetrics, stable: Callable[[Sequence[TP]], Any],
                  overlap: bool) -> Committer:
        """Commits ``agent``'s pieces (``router``, ``decider``, ``shards``): ``member`` is
        the worker's member of the consumer group now, ``stable`` reads the group's
        committed offsets (stable ones), ``overlap``: the next piece is decided while the
        last one commits (``commit.TransactionalCommitter``)."""
        made = self._committer(agent, member, metrics, stable, overlap)
        self.committers.append(made)
        return made

    @abstractmethod
    def _committer(self, agent: str, member: Callable[[], Member | None],
                   metrics: WorkerMetrics, stable: Callable[[Sequence[TP]], Any],
                   overlap: bool) -> Committer: ...

    def metadata(self, reads: Metadata) -> Metadata:
        """The client that answers the worker's metadata requests (the broker watch, the
        raw partitions), one the worker has anyway: the direct reads' (``reads``)."""
        return reads

    def close(self) -> None:
        """The worker stops: the committers' clients go."""
        for committer in self.committers:
            committer.shutdown()


class ExactlyOnce(Guarantee):
    """Kafka transactions (Apache Kafka): ``kafka/transactions.py``."""

    name = "exactly-once"
    read_committed = True
    # Faust commits nothing (the transactions do): never its warning after 5 minutes
    commit_livelock_s = 10 * 365 * 86400.0

    def acls(self) -> list[Acl]:
        return worker_acls(self.settings, transaction_acls(self.settings))

    def refusal(self, changelog: str) -> str | None:
        s = self.settings
        try:
            check_group_metadata(librdkafka_config(s), s.app_id)
            check_transactions(librdkafka_config(s), s.app_id, changelog)
            return None
        except TransactionsUnsupported as exc:
            return transactions_denied(s, exc) or (
                f"the broker at {s.bootstrap_servers()} has no transactions ({exc}): "
                "NDD_GUARANTEE=exactly-once needs them (Apache Kafka); set "
                "NDD_GUARANTEE=at-least-once for this broker")
        except TransactionError as exc:
            return (f"the broker at {s.bootstrap_servers()} did not answer the check that "
                    f"it runs transactions ({exc}), which NDD_GUARANTEE=exactly-once needs")

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.txns: Transactions | None = None

    def _committer(self, agent: str, member: Callable[[], Member | None],
                   metrics: WorkerMetrics, stable: Callable[[Sequence[TP]], Any],
                   overlap: bool) -> Committer:
        # one transactional producer for the worker, whose agents' transactions take turns
        # on it (one long-lived client, whatever the agents): docs/BENCHMARK.md
        s = self.settings
        if self.txns is None:
            self.txns = Transactions(transaction_conf(s), s.app_id,
                                     worker_id(s.data_dir / s.app_id), member)
        return TransactionalCommitter(self.txns, metrics, TRANSACTION_ITEMS, stable, overlap)

    def metadata(self, reads: Metadata) -> Metadata:
        # the transactional producer: the reads then need no producer (no sentinels here)
        return self.txns if self.txns is not None else reads


class AtLeastOnce(Guarantee):
    """Outputs delivered, then state, then the batch acknowledged: any broker."""

    name = "at-least-once"
    read_committed = False
    commit_livelock_s = FAUST_LIVELOCK_S

    def acls(self) -> list[Acl]:
        return worker_acls(self.settings)

    def refusal(self, changelog: str) -> str | None:
        return None

    def _committer(self, agent: str, member: Callable[[], Member | None],
                   metrics: WorkerMetrics, stable: Callable[[Sequence[TP]], Any],
                   overlap: bool) -> Committer:
        return AcknowledgingCommitter(CHECKPOINT_ITEMS, BATCH_MAX)


def guarantee_for(settings: Settings) -> Guarantee:
    """The guarantee ``settings`` ask for (``NDD_GUARANTEE``)."""
    return (ExactlyOnce if settings.exactly_once() else AtLeastOnce)(settings)
