"""Topic administration on this broker: metadata and partition logs kept in step.

Create, delete, grow and reconfigure topics; every change goes to the metadata store first and
then to the logs, except that a delete the disk has no room to record frees the logs first.
Errors carry Kafka error codes for the admin handlers; a disk that refuses a write is
KAFKA_STORAGE_ERROR and leaves the metadata as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from weir.broker.cluster_node import ClusterNode
from weir.broker.config import BrokerConfig
from weir.broker.replica_manager import ReplicaManager
from weir.cluster.metadata import MetadataError, MetadataStore, TopicInfo, validate_topic_name
from weir.cluster.placement import PlacementError
from weir.cluster.zookeeper import ZooKeeperUnavailableError
from weir.storage import LogConfig, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: topics the broker writes itself: no client deletes them, grows them, writes to them or
#: deletes records from them, whatever its ACLs (INVALID_TOPIC_EXCEPTION)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def internal_topic_error(name: str, what: str) -> TopicError | None:
    """The refusal of a client's `what` on an internal topic; None for other topics."""
    if name not in INTERNAL_TOPICS:
        return None
    return TopicError(ErrorCode.invalid_topic_exception, f"{name} is an internal topic: {what}")


@dataclass(frozen=True, slots=True)
class TopicError(Exception):
    error: ErrorCode
    message: str

    def __str__(self) -> str:
        return self.message


class TopicManager:
    def __init__(
        self,
        config: BrokerConfig,
        metadata: MetadataStore,
        replicas: ReplicaManager,
        *,
        cluster: ClusterNode | None = None,
    ):
        """`cluster`: in a cluster, changes are ZooKeeper writes the controller carries out, and
        partition logs come and go when the controller says (LeaderAndIsr, StopReplica)."""
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
        self.cluster = cluster
        if cluster is not None:
            return
        for info in metadata.topics().values():
            try:
                replicas.create_partitions(info.name, info.partitions, self.log_config(info))
            except StorageError as exc:
                log.error("topic %s: partitions not opened: %s", info.name, exc)

    def log_config(self, info: TopicInfo) -> LogConfig:
        return LogConfig.from_properties(info.configs, self.config.log_defaults)

    def check_configs(self, configs: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(configs, self.config.log_defaults)
        except ValueError as exc:
            raise TopicError(ErrorCode.invalid_config, str(exc)) from None

    def validate_create(
        self, name: str, partitions: int, replication: int, configs: dict[str, str]
    ) -> tuple[int, int]:
        """Check a CreateTopics entry; return the partition count and replication factor it
        resolves to."""
        partitions = self.config.num_partitions if partitions == -1 else partitions
        replication = self.config.default_replication_factor if replication == -1 else replication
        if self.metadata.topic(name) is not None:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions < 1:
            raise TopicError(ErrorCode.invalid_partitions, "partitions must be at least 1")
        brokers = len(self._live_brokers())
        if replication < 1:
            raise TopicError(
                ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
            )
        if replication > brokers:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication} larger than available brokers: {brokers}.",
            )
        self.check_configs(configs)
        try:
            validate_topic_name(name)
        except MetadataError as exc:
            raise TopicError(ErrorCode(exc.error_code), str(exc)) from None
        return partitions, replication

    def _live_brokers(self) -> set[int]:
        if self.cluster is None:
            return {self.config.node_id}
        return set(self.cluster.live_brokers())

    def check_assignment(self, replicas: list[list[int]]) -> None:
        """Every partition's replica list: the same non-zero length, no broker twice, only
        live brokers (on a single node: this one)."""
        live = self._live_brokers()
        sizes = {len(r) for r in replicas}
        if not replicas or 0 in sizes or len(sizes) != 1:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                "All partitions should have the same number of replicas, at least one",
            )
        for index, brokers in enumerate(replicas):
            if len(set(brokers)) != len(brokers):
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"Duplicate brokers not allowed in replica assignment of partition {index}: "
                    f"{brokers}",
                )
            unknown = sorted(set(brokers) - live)
            if unknown:
                raise TopicError(
                    ErrorCode.invalid_replica_assignment,
                    f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}",
                )

    def check_new_partitions(self, name: str, total: int, replicas: list[list[int]]) -> None:
        info = self.metadata.topic(name)
        if info is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if len(replicas) != total - info.partitions:
            raise TopicError(
                ErrorCode.invalid_replica_assignment,
                f"Increasing the number of partitions by {total - info.partitions} but "
                f"{len(replicas)} assignments provided.",
            )
        self.check_assignment(replicas)

    def create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        *,
        replication: int = 1,
        replicas: list[list[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic; in a cluster its replicas are `replicas` or placed by the topic's
        `replica.placement.strategy`."""
        if self.cluster is not None:
            if replicas is None:
                strategy = self.check_configs(configs).replica_placement_strategy
                replicas = self._place(name, partitions, replication, strategy)
            placed = replicas
            return _stored(lambda: self.metadata.create_topic(name, partitions, configs, placed))
        info = _stored(lambda: self.metadata.create_topic(name, partitions, configs))
        try:
            self.replicas.create_partitions(name, info.partitions, self.log_config(info))
        except StorageError as exc:
            self.replicas.delete_topic(name)
            _stored(lambda: self.metadata.delete_topic(name))
            raise TopicError(ErrorCode.kafka_storage_error, str(exc)) from None
        return info

    def auto_create(self, name: str) -> TopicInfo | None:
        """Create `name` with broker defaults if auto-creation is on; None if it is off."""
        if not self.config.auto_create_topics_enable:
            return None
        existing = self.metadata.topic(name)
        if existing is not None:
            return existing
        replication = self.config.default_replication_factor
        if self.cluster is not None:
            brokers = len(self._live_brokers())
            if replication > brokers:
                raise TopicError(
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {replication} larger than available brokers: {brokers}.",
                )
        return self.create(name, self.config.num_partitions, {}, replication=replication)

    def _place(
        self, name: str, partitions: int, replication: int, strategy: str, start: int = 0
    ) -> list[list[int]]:
        assert self.cluster is not None
        try:
            return self.cluster.place(
                name, partitions, replication, strategy, start_partition=start
            )
        except PlacementError as exc:
            raise TopicError(ErrorCode.invalid_replication_factor, str(exc)) from None

    def delete(self, name: str) -> TopicInfo:
        if refused := internal_topic_error(name, "it cannot be deleted"):
            raise refused
        if self.cluster is not None:
            return _stored(lambda: self.metadata.delete_topic(name))
        try:
            info = _stored(lambda: self.metadata.delete_topic(name))
        except TopicError as exc:
            if exc.error is not ErrorCode.kafka_storage_error:
                raise
            log.warning("deleting %s: %s; freeing its logs first", name, exc)
            self.replicas.delete_topic(name)
            info = _stored(lambda: self.metadata.delete_topic(name))
        self.replicas.delete_topic(name)
        return info

    def grow(
        self,
        name: str,
        total: int,
        validate_only: bool,
        replicas: list[list[int]] | None = None,
    ) -> TopicInfo:
        info = self.metadata.topic(name)
        if info is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if refused := internal_topic_error(name, "partitions cannot be added to it"):
            raise refused
        if total <= info.partitions:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {info.partitions} partitions; {total} is not more",
            )
        if validate_only:
            return info
        if self.cluster is not None:
            strategy = self.log_config(info).replica_placement_strategy
            replication = len(info.replicas[0]) if info.replicas else 1
            placed = replicas or self._place(
                name, total - info.partitions, replication, strategy, info.partitions
            )
            return _stored(lambda: self.metadata.add_partitions(name, total, placed))
        info = _stored(lambda: self.metadata.add_partitions(name, total))
        try:
            self.replicas.create_partitions(name, info.partitions, self.log_config(info))
        except StorageError as exc:
            raise TopicError(ErrorCode.kafka_storage_error, str(exc)) from None
        return info

    def set_configs(self, name: str, configs: dict[str, str], validate_only: bool) -> None:
        info = self.metadata.topic(name)
        if info is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        log_config = self.check_configs(configs)
        if validate_only:
            return
        _stored(lambda: self.metadata.set_topic_configs(name, configs))
        self.replicas.log_manager.set_topic_config(name, log_config)

    def apply_stored_config(self, name: str) -> None:
        """Take up a topic's config as the metadata store now has it (a change another broker
        made, in a cluster)."""
        info = self.metadata.topic(name)
        if info is None or not any(key[0] == name for key in self.replicas.partitions):
            return
        try:
            self.replicas.log_manager.set_topic_config(name, self.log_config(info))
        except ValueError as exc:
            log.warning("topic %s: config not applied: %s", name, exc)


def _stored(change: Callable[[], T]) -> T:
    """Apply a metadata change; its failure as a TopicError with Kafka's error code."""
    try:
        return change()
    except MetadataError as exc:
        raise TopicError(ErrorCode(exc.error_code), str(exc)) from None
    except ZooKeeperUnavailableError as exc:
        raise TopicError(ErrorCode.request_timed_out, str(exc)) from None
    except KazooException as exc:
        raise TopicError(
            ErrorCode.request_timed_out, f"ZooKeeper refused the change: {exc!r}"
        ) from None
    except OSError as exc:
        raise TopicError(ErrorCode.kafka_storage_error, f"metadata not written: {exc}") from None
