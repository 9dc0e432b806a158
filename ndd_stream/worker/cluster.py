"""The Kafka cluster a worker's local state was built on.

A broker that lost its data (restarted with empty disks, or a new cluster at the same
address) comes back as a cluster with another id and none of the topics. The local state
then reflects records that no longer exist: going on would decide against a window the
changelog cannot rebuild and skip or re-decide input. So the worker records the cluster id
beside its state on first start and refuses, with exit code 3, whenever the broker reports
another one, at start and while it runs, until the operator deletes the state directory.
(A broker that keeps its id while losing data, like an in-memory test broker, is caught
when a partition's changelog ends before the local state: ``pool.BrokerLostData``.)
"""

from __future__ import annotations

from pathlib import Path

CLUSTER_FILE = "cluster-id"


class ClusterChanged(RuntimeError):
    """The broker is another cluster than the one the local state was built on."""


def check_cluster(state_dir: Path, cluster_id: str | None, bootstrap: str) -> None:
    """Record ``cluster_id`` on first sight; raise ``ClusterChanged`` if it differs from the
    recorded one. A broker that reports no id is not checked."""
    if not cluster_id:
        return
    path = state_dir / CLUSTER_FILE
    try:
        known = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        state_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(cluster_id + "\n", encoding="utf-8")
        tmp.replace(path)
        return
    if known and known != cluster_id:
        raise ClusterChanged(
            f"the broker lost data: the cluster at {bootstrap} is {cluster_id!r}, but the "
            f"local state under {state_dir} was built on cluster {known!r} (a broker "
            "restarted with empty disks, or another cluster). Refusing to continue; restore "
            "the broker's data, or delete the state directory to start from an empty window.")
