"""Consumer lag seen by the broker: for every group this broker coordinates, each partition's
committed offset against the partition's high watermark, sampled every
`consumer.lag.sample.interval.ms`, with Burrow's status from the trend
(`weir.cluster.consumer_lag`; a sampler keeps an observation only when the offset or the lag
changed, so a consumer that stopped committing with lag left drifts to STOP).

High watermarks of partitions led here are read from their logs; those led by other brokers
are asked of their leaders, one ListOffsets (latest, read_uncommitted: the high watermark) per
leader per sample. A partition whose leader is unknown or does not answer gets no observation
that round and keeps its last one. The newest results (`latest`) are plain data the metrics
endpoint reads.

Thread-safety (docs/threads.md): event-loop only, as the group coordinator whose state it reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v4 import request as list_request
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from weir.broker.group.coordinator import GroupCoordinator
from weir.broker.partition import LEADER
from weir.broker.peer import PeerConnection
from weir.broker.replica_manager import ReplicaManager
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.broker.txn.markers import LeaderLookup
from weir.clock import Clock
from weir.cluster.consumer_lag import (
    GroupStatus,
    LagWindow,
    Observation,
    PartitionStatus,
    group_status,
)
from weir.protocol.errors import RemoteProtocolError

log = logging.getLogger(__name__)

LIST_OFFSETS = 2
LIST_OFFSETS_VERSION = 4
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED = 0
#: a sample's question to another broker is given up after this long
PEER_TIMEOUT_S = 10.0

Key = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    high_watermark: int
    status: PartitionStatus

    @property
    def lag(self) -> int:
        return max(self.high_watermark - self.committed, 0)


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    status: GroupStatus
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int:
        return sum(p.lag for p in self.partitions)


class ConsumerLagMonitor:
    def __init__(
        self,
        groups: GroupCoordinator,
        replicas: ReplicaManager,
        clock: Clock,
        *,
        node_id: int = -1,
        leader_of: LeaderLookup | None = None,
        peer_security: InterBrokerSecurity | None = None,
    ) -> None:
        self._groups = groups
        self._replicas = replicas
        self._clock = clock
        self._node_id = node_id
        self._leader_of = leader_of
        self._peer_security = peer_security
        self._peers: dict[int, PeerConnection] = {}
        self._windows: dict[Key, tuple[LagWindow, int]] = {}
        #: the groups coordinated here as the last sample saw them, by group id
        self.latest: tuple[GroupLag, ...] = ()

    async def sample(self) -> tuple[GroupLag, ...]:
        """Observe every committed partition of the groups coordinated here once."""
        committed = {
            (group_id, topic, index): offset.offset
            for group_id, group in self._groups.groups.items()
            for (topic, index), offset in group.offsets.items()
        }
        high_watermarks = await self._high_watermarks({(t, p) for _, t, p in committed})
        now_ms = self._clock.milliseconds()
        windows: dict[Key, tuple[LagWindow, int]] = {}
        for key, offset in committed.items():
            window, high_watermark = self._windows.get(key, (LagWindow(), -1))
            seen = high_watermarks.get(key[1:])
            if seen is not None:
                high_watermark = seen
                lag = max(seen - offset, 0)
                window.add(Observation(offset, lag, now_ms), changes_only=True)
            windows[key] = (window, high_watermark)
        self._windows = windows  # groups and partitions no longer here are forgotten
        self.latest = _group_lags(windows, now_ms)
        return self.latest

    async def _high_watermarks(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = {}
        elsewhere: dict[tuple[int, tuple[str, int]], list[tuple[str, int]]] = {}
        for topic, index in partitions:
            partition = self._replicas.get(topic, index)
            if partition is not None and partition.role is LEADER:
                found[(topic, index)] = partition.log.high_watermark
                continue
            if self._leader_of is None:
                continue
            try:
                leader = self._leader_of(topic, index)
            except KeyError:
                continue  # the topic is gone
            if leader is not None and leader[0] != self._node_id:
                elsewhere.setdefault(leader, []).append((topic, index))
        asked = await asyncio.gather(*(
            self._ask(node_id, address, tps) for (node_id, address), tps in elsewhere.items()
        ))  # fmt: skip
        for answer in asked:
            found.update(answer)
        return found

    async def _ask(
        self, node_id: int, address: tuple[str, int], partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        body = list_request.ListOffsetsRequest(
            replica_id=BrokerId(-1),
            isolation_level=i8(READ_UNCOMMITTED),
            topics=tuple(list_request.ListOffsetsTopic(
                name=TopicName(topic),
                partitions=tuple(list_request.ListOffsetsPartition(
                    partition_index=i32(index), timestamp=i64(LATEST_TIMESTAMP))
                    for index in indexes),
            ) for topic, indexes in by_topic.items()),
        )  # fmt: skip
        peer = self._peers.get(node_id)
        if peer is None or peer.address != address:
            if peer is not None:
                peer.close()
            peer = self._peers[node_id] = PeerConnection(
                address, "weir-lag-monitor", timeout_s=PEER_TIMEOUT_S,
                security=self._peer_security,
            )  # fmt: skip
        try:
            response = await peer.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as exc:
            log.info("high watermarks from broker %d not read: %r", node_id, exc)
            return {}
        return {
            (topic.name, partition.partition_index): partition.offset
            for topic in response.topics
            for partition in topic.partitions
            if partition.error_code is ErrorCode.none
        }

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()


def _group_lags(windows: dict[Key, tuple[LagWindow, int]], now_ms: int) -> tuple[GroupLag, ...]:
    by_group: dict[str, list[PartitionLag]] = {}
    for (group_id, topic, index), (window, high_watermark) in sorted(windows.items()):
        if not window.observations:
            continue  # no high watermark seen yet
        newest = window.observations[-1]
        by_group.setdefault(group_id, []).append(PartitionLag(
            topic, index, newest.offset, high_watermark, window.status(now_ms)))  # fmt: skip
    return tuple(
        GroupLag(group_id, group_status(p.status for p in partitions), tuple(partitions))
        for group_id, partitions in by_group.items()
    )


async def sample_every(monitor: ConsumerLagMonitor, interval_ms: int) -> None:
    """Sample until cancelled; a failed sample is logged and the next one tried."""
    try:
        while True:
            try:
                await monitor.sample()
            except Exception:
                log.exception("consumer lag sample failed")
            await asyncio.sleep(interval_ms / 1000)
    finally:
        monitor.close()
