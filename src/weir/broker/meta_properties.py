"""`meta.properties` in every log directory of a cluster broker, as Kafka keeps it: the node id
and cluster id the directory's logs belong to. A directory written by another node, or for
another cluster, is refused at start, before any of its logs is touched (Kafka's
InconsistentBrokerIdException and InconsistentClusterIdException): a broker started on the wrong
data would otherwise take the logs for strays of its own and delete them, or serve another
cluster's records. A directory without the file gets it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from weir import diskio
from weir.cluster.metadata import MetadataError
from weir.durable import write_atomically

FILE = "meta.properties"


class InconsistentBrokerIdentityError(MetadataError):
    """A log directory belongs to another node or another cluster."""


def read_properties(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def check_and_write(log_dirs: Iterable[Path], node_id: int, cluster_id: str) -> None:
    """Refuse directories of another node or cluster; write the file where it is missing."""
    missing = []
    for directory in log_dirs:
        path = directory / FILE
        if not path.exists():
            missing.append(directory)
            continue
        stored = read_properties(path)
        stored_id = stored.get("broker.id", stored.get("node.id"))
        if stored_id is not None and stored_id != str(node_id):
            raise InconsistentBrokerIdentityError(
                f"Stored node id {stored_id} doesn't match previous node id {node_id} in "
                f"{path}. If you moved your data, make sure your configured node id matches. "
                "If you intend to create a new node, you should remove all data in your data "
                "directories."
            )
        stored_cluster = stored.get("cluster.id")
        if stored_cluster and cluster_id and stored_cluster != cluster_id:
            raise InconsistentBrokerIdentityError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored_cluster} "
                f"in {path}. The broker is trying to join the wrong cluster. Configured "
                "zookeeper.connect may be wrong."
            )
    for directory in missing:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(
            directory / FILE,
            ["#", "version=0", f"broker.id={node_id}", f"cluster.id={cluster_id}"],
            diskio.CHECKPOINT,
        )
