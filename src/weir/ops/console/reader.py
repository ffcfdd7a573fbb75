"""The console's reads of the cluster, as plain data: brokers, racks and the controller
(DescribeCluster), topics and their partitions (Metadata), log start and end offsets
(ListOffsets), replica sizes and log directories (DescribeLogDirs), topic config overrides,
consumer groups with their members and committed offsets.

`ClusterReader` owns one AdminClient, made once and shared by the request threads and the
sampler (librdkafka's admin calls may come from any thread; their answers arrive on
confluent-kafka's background thread); DescribeLogDirs, which librdkafka cannot ask, goes over a
`BrokerConnection` made for the call and closed after it. It never writes to the cluster and
never creates a topic by naming it (`allow.auto.create.topics` is off).

Every failure of the client is translated here, once, into a `weir.ops.console.errors`
exception worded for the operator. While librdkafka says every broker is down and nothing
listens at any bootstrap server, or for a while after it said the cluster refused the console's
TLS handshake or credentials, a read fails at once instead of waiting out its timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec
from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from weir.cli.broker_socket import BrokerConnection, BrokerConnectionError, nothing_listens
from weir.cli.kafka_errors import error_line, kafka_error
from weir.ops.console.errors import ClusterError, ConsoleError, NotAuthorized, NotFound
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

log = logging.getLogger(__name__)

#: how long one read of the cluster may take before its page reports the cluster as failing
REQUEST_TIMEOUT_S = 10.0
#: how long after the cluster refused the console's handshake or credentials reads fail at once
#: (librdkafka goes on trying, and says again if it is still refused)
REFUSAL_HOLD_S = 10.0
CLIENT_ID = "weir-console"
LOG_DIRS_VERSION = 4
#: (topic, partition)
TP = tuple[str, int]
_T = TypeVar("_T")
#: the cluster refused the TLS handshake or the credentials: retrying will not mend it
_HANDSHAKE_REFUSED = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}
)
_REFUSED = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where the cluster is and how to talk to it: librdkafka's settings (the bootstrap servers
    and the user's client settings, security ones included) and the same security for the
    connections the console makes itself."""

    bootstrap: str
    librdkafka: Mapping[str, Any]
    security: ClientSecurity


def reading_consumer(settings: ClientSettings, group_id: str) -> Consumer:
    """A consumer for reading partitions it is assigned: it joins no group (`group_id` only
    names it), commits nothing, creates no topic, and reports each partition's end."""
    return Consumer({
        **settings.librdkafka, "group.id": group_id, "enable.auto.commit": False,
        "enable.partition.eof": True, "allow.auto.create.topics": False,
    })  # fmt: skip


@dataclass(frozen=True, slots=True, order=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[Broker, ...]


@dataclass(frozen=True, slots=True)
class PartitionView:
    """A partition as the metadata describes it; `leader` is -1 while it has none."""

    index: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    partitions: tuple[PartitionView, ...]

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)

    def partition(self, index: int) -> PartitionView:
        for partition in self.partitions:
            if partition.index == index:
                return partition
        raise NotFound(f"topic {self.name!r} has no partition {index}")


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """A partition's log start and log end offsets; None where its leader did not say."""

    start: int | None
    end: int | None


@dataclass(frozen=True, slots=True)
class LogDir:
    path: str
    error: str | None
    total_bytes: int
    usable_bytes: int


@dataclass(frozen=True, slots=True)
class BrokerLogDirs:
    """One broker's log directories and the size of each replica it holds (future replicas of
    a move between directories left out)."""

    node_id: int
    dirs: tuple[LogDir, ...]
    sizes: Mapping[TP, int]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    partitions: tuple[TP, ...]


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    assignor: str
    coordinator: int | None
    members: tuple[MemberView, ...]

    def owners(self) -> dict[TP, MemberView]:
        return {tp: member for member in self.members for tp in member.partitions}


class ClusterReader:
    """Reads for the console's pages and its sampler; see the module docstring for its
    threads."""

    def __init__(self, settings: ClientSettings, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.settings = settings
        self._timeout = timeout_s
        self._all_brokers_down = False
        #: the last refusal error_cb reported, and when; None once the cluster answers
        self._refusal: tuple[KafkaError, float] | None = None
        config: dict[str, Any] = {
            **settings.librdkafka,
            "allow.auto.create.topics": False,
            "client.id": CLIENT_ID,
            "error_cb": self._on_error,
        }  # fmt: skip
        self._admin = AdminClient(config)

    # ---- cluster and topics ----------------------------------------------------------------

    def cluster(self) -> ClusterView:
        described = self._result(self._call(self._admin.describe_cluster,
                                            request_timeout=self._timeout))  # fmt: skip
        brokers = tuple(sorted(Broker(n.id, n.host, n.port, n.rack) for n in described.nodes))
        controller = described.controller.id if described.controller is not None else None
        return ClusterView(described.cluster_id, controller, brokers)

    def topics(self) -> list[TopicView]:
        """Every topic the console's principal may describe, by name."""
        metadata = self._call(self._admin.list_topics, timeout=self._timeout)
        views = (_topic_view(t) for t in metadata.topics.values() if t.error is None
                 or t.error.code() == KafkaError.LEADER_NOT_AVAILABLE)  # fmt: skip
        return sorted(views, key=lambda t: t.name)

    def topic(self, name: str) -> TopicView:
        metadata = self._call(self._admin.list_topics, name, timeout=self._timeout)
        topic = metadata.topics.get(name)
        error = topic.error if topic is not None else None
        if topic is None or (error is not None and error.code() in _REFUSED):
            raise NotAuthorized(f"not authorized to describe topic {name!r}")
        if error is not None and error.code() != KafkaError.LEADER_NOT_AVAILABLE:
            raise NotFound(f"no topic {name!r} in the cluster ({error_line(error)})")
        return _topic_view(topic)

    def topic_overrides(self, name: str) -> dict[str, str]:
        """The topic's configs set on it (not the broker's defaults)."""
        resource = ConfigResource("topic", name)
        futures = self._call(self._admin.describe_configs, [resource],
                             request_timeout=self._timeout)  # fmt: skip
        configs = self._result(futures[resource])
        return {k: str(v.value) for k, v in sorted(configs.items()) if not v.is_default}

    def log_offsets(self, partitions: Iterable[TP]) -> dict[TP, LogOffsets]:
        wanted = list(partitions)
        starts = self._list_offsets(wanted, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        ends = self._list_offsets(wanted, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        return {tp: LogOffsets(starts.get(tp), ends.get(tp)) for tp in wanted}

    def end_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """The log end offset (high watermark) of each partition whose leader answered."""
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        return self._list_offsets(list(partitions), latest)

    def _list_offsets(self, partitions: list[TP], spec: OffsetSpec) -> dict[TP, int]:
        if not partitions:
            return {}
        request = {KafkaTopicPartition(t, p): spec for t, p in partitions}
        futures = self._call(self._admin.list_offsets, request, request_timeout=self._timeout)
        found = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:  # no leader now: that partition's offsets are unknown
                log.debug("offsets of %s-%d: %s", tp.topic, tp.partition, exc)
        return found

    # ---- log directories (DescribeLogDirs) ---------------------------------------------------

    def log_dirs(
        self, brokers: Iterable[Broker], topic: TopicView | None = None
    ) -> list[BrokerLogDirs]:
        """Each broker's log directories and replica sizes (only `topic`'s when given). A
        broker that cannot be asked is left out: sizes are shown as unknown, not as a failure."""
        request = DescribeLogDirsRequest(topics=None if topic is None else (
            DescribableLogDirTopic(topic=TopicName(topic.name),
                                   partitions=tuple(i32(p.index) for p in topic.partitions)),
        ))  # fmt: skip
        described = []
        for broker in brokers:
            try:
                described.append(self._broker_log_dirs(broker, request))
            except (BrokerConnectionError, OSError) as exc:
                log.info("log directories of broker %d: %s", broker.node_id, exc)
        return described

    def _broker_log_dirs(self, broker: Broker, request: DescribeLogDirsRequest) -> BrokerLogDirs:
        with BrokerConnection(broker.host, broker.port, self.settings.security,
                              timeout=self._timeout, client_id=CLIENT_ID) as conn:  # fmt: skip
            response = conn.call(ApiKey.DESCRIBE_LOG_DIRS, LOG_DIRS_VERSION, request)
        if response.error_code is not ErrorCode.none:
            raise BrokerConnectionError(response.error_code.name.upper())
        dirs, sizes = [], {}
        for result in response.results:
            error = None if result.error_code is ErrorCode.none else result.error_code.name.upper()
            dirs.append(LogDir(result.log_dir, error, result.total_bytes, result.usable_bytes))
            for t in result.topics:
                sizes.update({(str(t.name), int(p.partition_index)): int(p.partition_size)
                              for p in t.partitions if not p.is_future_key})  # fmt: skip
        return BrokerLogDirs(broker.node_id, tuple(dirs), sizes)

    # ---- consumer groups -----------------------------------------------------------------------

    def group_listings(self) -> list[GroupListing]:
        result = self._result(self._call(self._admin.list_consumer_groups,
                                         request_timeout=self._timeout))  # fmt: skip
        return sorted((GroupListing(g.group_id, _state_name(g.state)) for g in result.valid),
                      key=lambda g: g.group_id)  # fmt: skip

    def describe_groups(self, names: Iterable[str]) -> dict[str, GroupView]:
        wanted = list(names)
        if not wanted:
            return {}
        futures = self._call(self._admin.describe_consumer_groups, wanted,
                             request_timeout=self._timeout)  # fmt: skip
        return {name: _group_view(self._result(future)) for name, future in futures.items()}

    def group(self, name: str) -> GroupView:
        """The group, or NotFound when the cluster does not know it."""
        if name not in {g.group_id for g in self.group_listings()}:
            raise NotFound(f"no consumer group {name!r} in the cluster")
        return self.describe_groups([name])[name]

    def committed(self, group: str) -> dict[TP, int]:
        """The group's committed offset of each partition it has one for."""
        request = [ConsumerGroupTopicPartitions(group)]
        futures = self._call(self._admin.list_consumer_group_offsets, request,
                             request_timeout=self._timeout)  # fmt: skip
        result = self._result(futures[group])
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
                if tp.offset >= 0}  # fmt: skip

    def group_offsets(
        self, groups: Iterable[str], end_offsets: Mapping[TP, int] | None = None
    ) -> dict[str, dict[TP, tuple[int, int]]]:
        """Each group's (committed offset, log end offset) of every partition it has committed,
        the log end offsets asked in one request for all the groups unless given."""
        committed = {group: self.committed(group) for group in groups}
        ends = end_offsets
        if ends is None:
            ends = self.end_offsets({tp for offsets in committed.values() for tp in offsets})
        return {group: {tp: (offset, ends[tp]) for tp, offset in offsets.items() if tp in ends}
                for group, offsets in committed.items()}  # fmt: skip

    # ---- failures -----------------------------------------------------------------------------

    def _on_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._all_brokers_down = True
        elif error.code() in _HANDSHAKE_REFUSED:
            self._refusal = (error, time.monotonic())

    def _call(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """`method`'s answer; at once a ClusterError while the cluster refuses the console's
        TLS handshake or credentials, or nothing listens where every broker was said down."""
        self._admin.poll(0)  # serves error_cb
        refused = self._refused(within_s=REFUSAL_HOLD_S)
        if refused is not None:
            raise refused
        if self._all_brokers_down:
            unreachable = nothing_listens(self.settings.bootstrap)
            if unreachable is not None:
                raise self._unreachable(unreachable)
        try:
            answer = method(*args, **kwargs)
        except KafkaException as exc:
            raise self._translated(exc) from None
        self._all_brokers_down, self._refusal = False, None
        return answer

    def _result(self, future: Future[_T]) -> _T:
        try:
            return future.result()
        except KafkaException as exc:
            raise self._translated(exc) from None

    def _refused(self, within_s: float) -> ClusterError | None:
        """The refusal error_cb reported since the last answer, if it came within `within_s`
        seconds."""
        refusal = self._refusal
        if refusal is None or time.monotonic() - refusal[1] > within_s:
            return None
        return ClusterError(f"the cluster at {self.settings.bootstrap} refused the console: "
                            f"{error_line(refusal[0])}")  # fmt: skip

    def _translated(self, exc: KafkaException) -> ConsoleError:
        self._admin.poll(0)
        refused = self._refused(within_s=float("inf"))
        if refused is not None:
            return refused
        error = kafka_error(exc)
        if error is not None and error.code() in _REFUSED:
            return NotAuthorized(error_line(error))
        if error is not None and error.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return NotFound(error_line(error))
        unreachable = nothing_listens(self.settings.bootstrap)
        if unreachable is not None:
            return self._unreachable(unreachable)
        reason = error_line(error) if error is not None else str(exc)
        return ClusterError(f"the cluster at {self.settings.bootstrap} failed to answer: {reason}")

    def _unreachable(self, reason: BrokerConnectionError) -> ClusterError:
        return ClusterError(f"cannot reach the cluster at {self.settings.bootstrap}: {reason}")


def _topic_view(metadata: Any) -> TopicView:
    partitions = tuple(sorted(
        (PartitionView(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
         for p in metadata.partitions.values()),
        key=lambda p: p.index,
    ))  # fmt: skip
    return TopicView(metadata.topic, partitions)


def _group_view(description: Any) -> GroupView:
    members = tuple(
        MemberView(m.member_id, m.client_id, m.host, m.group_instance_id,
                   tuple(sorted((tp.topic, tp.partition)
                                for tp in m.assignment.topic_partitions)))
        for m in description.members
    )  # fmt: skip
    coordinator = description.coordinator.id if description.coordinator is not None else None
    return GroupView(description.group_id, _state_name(description.state),
                     description.partition_assignor or "", coordinator, members)  # fmt: skip


def _state_name(state: Any) -> str:
    """Kafka's name of a group state (Stable, PreparingRebalance, Empty, Dead, ...)."""
    names = {"STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead",
             "PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance"}  # fmt: skip
    name = getattr(state, "name", str(state))
    return names.get(name, name.title())
