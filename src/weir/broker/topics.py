"""Topic administration on this broker: metadata and partition logs kept in step.

Create, delete, grow and reconfigure topics. A new topic goes to the metadata store first, then
its logs are opened; new partitions of a topic are opened first, then recorded; a delete the
disk has no room to record frees the logs first. Everything is checked before anything is
created: Kafka's topic rules, no internal topic created by a client, no name colliding with
another once '.' and '_' are alike, and the partition limit (`weir.broker.partition_limit`).

Logs are opened on the default executor in slices of `CREATION_SLICE`, so the loop serves
others meanwhile; between slices the creation checks that its topic still stands. A creation
that fails midway removes what it opened: a new topic is gone, a grown one keeps its old count.
Errors carry Kafka error codes for the admin handlers; a disk that refuses a write is
KAFKA_STORAGE_ERROR and leaves the metadata as it was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from weir.broker.cluster_node import ClusterNode
from weir.broker.config import BrokerConfig
from weir.broker.partition_limit import limit_refusal
from weir.broker.replica_manager import CREATION_SLICE, ReplicaManager
from weir.cluster.metadata import MetadataError, MetadataStore, TopicInfo, validate_topic_name
from weir.cluster.placement import PlacementError, pool_refusal
from weir.cluster.zookeeper import ZooKeeperUnavailableError
from weir.protocol.audit_records import AUDIT_TOPIC
from weir.storage import LogConfig, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: topics the broker writes itself: no client creates them (INVALID_REQUEST), deletes them,
#: grows them, writes to them or deletes records from them, whatever its ACLs
#: (INVALID_TOPIC_EXCEPTION); their coordinators (and the audit writer) create them
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", AUDIT_TOPIC})
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def internal_topic_error(name: str, what: str) -> TopicError | None:
    """The refusal of a client's `what` on an internal topic; None for other topics."""
    if name not in INTERNAL_TOPICS:
        return None
    return TopicError(ErrorCode.invalid_topic_exception, f"{name} is an internal topic: {what}")


def collision_error(name: str, existing: Collection[str]) -> TopicError | None:
    """Kafka's refusal of a name that equals an existing one once '.' and '_' are alike
    (their metric names would be the same); None if there is none."""
    folded = name.replace(".", "_")
    colliding = sorted(t for t in existing if t != name and t.replace(".", "_") == folded)
    if not colliding:
        return None
    return TopicError(
        ErrorCode.invalid_topic_exception,
        f"Topic '{name}' collides with existing topics: {', '.join(colliding)}",
    )


def internal_partition_count(info: TopicInfo, configured: int, setting: str) -> int:
    """The partition count a coordinator places its keys by: the internal topic's own, as
    Kafka's partitionFor does, even when it differs from the setting (a topic made by an older
    weir or under another setting); the difference is logged."""
    if info.partitions != configured:
        log.warning(
            "%s has %d partitions, not %s=%d: its keys are placed by its %d partitions",
            info.name, info.partitions, setting, configured, info.partitions,
        )  # fmt: skip
    return info.partitions


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
        #: topic -> partition replicas being opened for it here, not yet in the metadata
        self._growing: dict[str, int] = {}
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
        if name in INTERNAL_TOPICS:
            raise TopicError(
                ErrorCode.invalid_request, f"Creation of internal topic {name} is prohibited."
            )
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
        self._check_new_name(name)
        self.check_partition_limit(partitions * replication)
        return partitions, replication

    def _check_new_name(self, name: str) -> None:
        """Kafka's rules for a new topic's name, and no collision with an existing one."""
        try:
            validate_topic_name(name)
        except MetadataError as exc:
            raise TopicError(ErrorCode(exc.error_code), str(exc)) from None
        if refused := collision_error(name, self.metadata.topics().keys()):
            raise refused

    def check_partition_limit(self, adding: int) -> None:
        """POLICY_VIOLATION if `adding` partition replicas would take the cluster past
        `max.partitions.per.broker` times its live brokers."""
        topics = self.metadata.topics()
        hosted = sum(sum(map(len, t.replicas)) if t.replicas else t.partitions
                     for t in topics.values())  # fmt: skip
        brokers = len(self._live_brokers())
        refusal = limit_refusal(
            adding=adding,
            hosted=hosted + sum(self._growing.values()),
            per_broker=self.config.max_partitions_per_broker,
            brokers=brokers,
            reserved=self._reserved_for_internal(topics, brokers),
        )
        if refusal is not None:
            raise TopicError(ErrorCode.policy_violation, refusal)

    def _reserved_for_internal(self, topics: Collection[str], brokers: int) -> int:
        """Room kept for the internal topics not created yet, as this broker would create them,
        but never more than half the limit: a broker whose descriptors cannot hold them all (a
        small RLIMIT_NOFILE) still takes topics of its own."""
        limit = self.config.max_partitions_per_broker * brokers
        return min(self._internal_shapes(topics, brokers), limit // 2)

    def _internal_shapes(self, topics: Collection[str], brokers: int) -> int:
        """The coordinators' topics, without which groups and transactions stop; `__audit`
        (small, and created past the limit all the same) is not kept room for."""
        c = self.config
        shapes = {
            OFFSETS_TOPIC: (c.offsets_topic_num_partitions, c.offsets_topic_replication_factor),
            TRANSACTION_STATE_TOPIC: (
                c.transaction_state_log_num_partitions,
                c.transaction_state_log_replication_factor,
            ),
        }
        return sum(count * min(factor, brokers)
                   for name, (count, factor) in shapes.items() if name not in topics)  # fmt: skip

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

    async def create(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        *,
        replication: int = 1,
        replicas: list[list[int]] | None = None,
    ) -> TopicInfo:
        """Create a topic checked by `validate_create`; in a cluster its replicas are
        `replicas` or placed by the topic's `replica.placement.strategy`. On a single node its
        logs are opened in slices off the loop; if one cannot be, the topic is removed."""
        if self.cluster is not None:
            return self._create_in_cluster(name, partitions, configs, replication, replicas)
        info = _stored(lambda: self.metadata.create_topic(name, partitions, configs))
        try:
            await self._open_in_slices(info, range(partitions))
        except TopicError:
            await self.replicas.remove_partitions(name, range(partitions))
            if self._still_stands(info):
                _stored(lambda: self.metadata.delete_topic(name))
            raise
        return info

    async def create_internal(
        self, name: str, partitions: int, configs: dict[str, str], *, replication: int = 1
    ) -> TopicInfo:
        """Create a topic whose size is the broker's own setting without the loop waiting on
        ZooKeeper: in a cluster the replicas are placed here and the ZooKeeper write runs on
        the default executor; on a single node as `create`."""
        if self.cluster is None:
            return await self.create(name, partitions, configs, replication=replication)
        strategy = self.check_configs(configs).replica_placement_strategy
        placed = self._place(name, partitions, replication, strategy)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, _stored, lambda: self.metadata.create_topic(name, partitions, configs, placed)
        )

    def create_now(
        self, name: str, partitions: int, configs: dict[str, str], *, replication: int = 1
    ) -> TopicInfo:
        """Create a topic whose size is the broker's own setting (an internal topic), its logs
        opened at once on this thread; not checked against the partition limit, which keeps
        room for the internal topics."""
        if self.cluster is not None:
            return self._create_in_cluster(name, partitions, configs, replication, None)
        info = _stored(lambda: self.metadata.create_topic(name, partitions, configs))
        try:
            self.replicas.create_partitions(name, info.partitions, self.log_config(info))
        except StorageError as exc:
            self.replicas.delete_topic(name)
            _stored(lambda: self.metadata.delete_topic(name))
            raise TopicError(ErrorCode.kafka_storage_error, str(exc)) from None
        return info

    def _create_in_cluster(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replication: int,
        replicas: list[list[int]] | None,
    ) -> TopicInfo:
        """The ZooKeeper write; the controller has the replicas open their logs."""
        config = self.check_configs(configs)
        if replicas is None:
            replicas = self._place(name, partitions, replication,
                                   config.replica_placement_strategy,
                                   pool=config.replica_placement_pool)  # fmt: skip
        else:
            self._check_pool(replicas, config.replica_placement_pool)
        placed = replicas
        return _stored(lambda: self.metadata.create_topic(name, partitions, configs, placed))

    async def _open_in_slices(self, info: TopicInfo, indexes: Sequence[int]) -> None:
        """Open the logs of `indexes` of the topic, CREATION_SLICE at a time on the default
        executor, each slice led here alone once open; stop if the topic is deleted
        meanwhile."""
        config = self.log_config(info)
        for start in range(0, len(indexes), CREATION_SLICE):
            if not self._still_stands(info):
                raise TopicError(
                    ErrorCode.unknown_topic_or_partition,
                    f"topic {info.name!r} was deleted while its partitions were created",
                )
            chunk = indexes[start : start + CREATION_SLICE]
            try:
                await self.replicas.open_partitions(info.name, chunk, config)
            except StorageError as exc:
                raise TopicError(ErrorCode.kafka_storage_error, str(exc)) from None
            self.replicas.lead_alone(info.name, chunk)

    def _still_stands(self, info: TopicInfo) -> bool:
        current = self.metadata.topic(info.name)
        return current is not None and current.topic_id == info.topic_id

    async def auto_create(self, name: str) -> TopicInfo | None:
        """Create `name` with broker defaults if auto-creation is on; None if it is off, or
        for an internal topic (its coordinator creates it)."""
        if not self.config.auto_create_topics_enable:
            return None
        existing = self.metadata.topic(name)
        if existing is not None:
            return existing
        if name in INTERNAL_TOPICS:
            return None
        replication = self.config.default_replication_factor
        if self.cluster is not None:
            brokers = len(self._live_brokers())
            if replication > brokers:
                raise TopicError(
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {replication} larger than available brokers: {brokers}.",
                )
        else:
            replication = 1
        partitions = self.config.num_partitions
        self._check_new_name(name)
        self.check_partition_limit(partitions * replication)
        return await self.create(name, partitions, {}, replication=replication)

    def _place(
        self, name: str, partitions: int, replication: int, strategy: str, start: int = 0,
        *, pool: str = "",
    ) -> list[list[int]]:  # fmt: skip
        assert self.cluster is not None
        try:
            return self.cluster.place(
                name, partitions, replication, strategy, start_partition=start, pool=pool
            )
        except PlacementError as exc:
            raise TopicError(ErrorCode.invalid_replication_factor, str(exc)) from None

    def _check_pool(self, replicas: list[list[int]], pool: str) -> None:
        """INVALID_REPLICA_ASSIGNMENT if a replica given by hand is on a broker outside the
        topic's pool."""
        assert self.cluster is not None
        outside = self.cluster.outside_pool({b for r in replicas for b in r}, pool)
        if outside:
            raise TopicError(ErrorCode.invalid_replica_assignment, pool_refusal(outside, pool))

    async def delete(self, name: str) -> TopicInfo:
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
            await self._remove_logs(name)
            info = _stored(lambda: self.metadata.delete_topic(name))
        await self._remove_logs(name)
        return info

    async def _remove_logs(self, name: str) -> None:
        indexes = [index for topic, index in self.replicas.partitions if topic == name]
        await self.replicas.remove_partitions(name, indexes)

    async def grow(
        self,
        name: str,
        total: int,
        validate_only: bool,
        replicas: list[list[int]] | None = None,
    ) -> TopicInfo:
        """Add partitions up to `total`. On a single node the new logs are opened first and
        the count recorded after; if a log cannot be opened, the topic keeps its old count."""
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
        if name in self._growing:
            raise TopicError(
                ErrorCode.invalid_partitions,
                f"partitions are being added to topic {name!r} already; try again",
            )
        replication = len(info.replicas[0]) if info.replicas else 1
        self.check_partition_limit((total - info.partitions) * replication)
        if validate_only:
            return info
        if self.cluster is not None:
            config = self.log_config(info)
            if replicas:
                self._check_pool(replicas, config.replica_placement_pool)
            placed = replicas or self._place(
                name, total - info.partitions, replication, config.replica_placement_strategy,
                info.partitions, pool=config.replica_placement_pool,
            )  # fmt: skip
            return _stored(lambda: self.metadata.add_partitions(name, total, placed))
        added = range(info.partitions, total)
        self._growing[name] = len(added)
        try:
            await self._open_in_slices(info, added)
            return _stored(lambda: self.metadata.add_partitions(name, total))
        except TopicError:
            await self.replicas.remove_partitions(name, added)
            raise
        finally:
            del self._growing[name]

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
