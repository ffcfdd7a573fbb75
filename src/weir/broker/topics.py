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

from kio.schema.errors import ErrorCode

from weir.broker.config import BrokerConfig
from weir.broker.replica_manager import ReplicaManager
from weir.cluster.metadata import MetadataError, MetadataStore, TopicInfo, validate_topic_name
from weir.storage import LogConfig, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TopicError(Exception):
    error: ErrorCode
    message: str

    def __str__(self) -> str:
        return self.message


class TopicManager:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, replicas: ReplicaManager):
        self.config = config
        self.metadata = metadata
        self.replicas = replicas
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
    ) -> int:
        """Check a CreateTopics entry; return the partition count it resolves to."""
        partitions = self.config.num_partitions if partitions == -1 else partitions
        replication = self.config.default_replication_factor if replication == -1 else replication
        if self.metadata.topic(name) is not None:
            raise TopicError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions < 1:
            raise TopicError(ErrorCode.invalid_partitions, "partitions must be at least 1")
        if replication != 1:
            raise TopicError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication} is larger than the 1 broker",
            )
        self.check_configs(configs)
        try:
            validate_topic_name(name)
        except MetadataError as exc:
            raise TopicError(ErrorCode(exc.error_code), str(exc)) from None
        return partitions

    def check_assignment(self, replicas: list[list[int]]) -> None:
        """Every partition's replica list: the same non-zero length, no broker twice, only
        live brokers (on a single node: this one)."""
        live = {self.config.node_id}
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

    def create(self, name: str, partitions: int, configs: dict[str, str]) -> TopicInfo:
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
        return self.create(name, self.config.num_partitions, {})

    def delete(self, name: str) -> TopicInfo:
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

    def grow(self, name: str, total: int, validate_only: bool) -> TopicInfo:
        info = self.metadata.topic(name)
        if info is None:
            raise TopicError(ErrorCode.unknown_topic_or_partition, f"no topic {name!r}")
        if total <= info.partitions:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {info.partitions} partitions; {total} is not more",
            )
        if validate_only:
            return info
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


def _stored(change: Callable[[], T]) -> T:
    """Apply a metadata change; its failure as a TopicError with Kafka's error code."""
    try:
        return change()
    except MetadataError as exc:
        raise TopicError(ErrorCode(exc.error_code), str(exc)) from None
    except OSError as exc:
        raise TopicError(ErrorCode.kafka_storage_error, f"metadata not written: {exc}") from None
