"""Transaction markers: how the coordinator ends a transaction on each of its partitions.

The coordinator hands the partitions of a prepared transaction to a `MarkerWriter`, which puts
a COMMIT or ABORT control batch on each and reports per partition. NONE means written;
UNKNOWN_TOPIC_OR_PARTITION means the partition is gone and is dropped; any other error is
retried by the coordinator with a back-off until it succeeds, as Kafka's marker channel does.

A control batch has the control and transactional attributes set, the producer's id and epoch,
base sequence -1 and one record: key = version:int16 (0) | type:int16 (0 abort, 1 commit);
value = version:int16 (0) | coordinator_epoch:int32.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as write_request
from kio.static.primitive import i16, i32

from weir.broker.group.store import OFFSETS_TOPIC
from weir.broker.peer import PeerConnection
from weir.broker.replica_manager import ReplicaManager
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.clock import Clock
from weir.protocol.errors import RemoteProtocolError
from weir.records import BatchSpec, Record, build_batch

log = logging.getLogger(__name__)

CONTROL_RECORD_VERSION = 0
ABORT_MARKER, COMMIT_MARKER = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class MarkerWriter(Protocol):
    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]: ...


def control_batch(
    producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool, timestamp: int
) -> bytes:
    """The COMMIT or ABORT marker batch for one partition."""
    marker = COMMIT_MARKER if commit else ABORT_MARKER
    record = Record(
        offset=0,
        timestamp=timestamp,
        key=_KEY.pack(CONTROL_RECORD_VERSION, marker),
        value=_VALUE.pack(CONTROL_RECORD_VERSION, coordinator_epoch),
    )
    spec = BatchSpec(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )
    return build_batch([record], spec=spec)


def parse_marker(key: bytes, value: bytes) -> tuple[bool, int]:
    """(commit, coordinator epoch) of a control record."""
    _, marker = _KEY.unpack_from(key)
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return marker == COMMIT_MARKER, coordinator_epoch


#: how long a marker waits for the partition's in-sync replicas (Kafka's request.timeout.ms)
MARKER_REPLICATION_TIMEOUT_MS = 30_000
WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1

#: (topic, partition) -> (leader node id, its address), or None when it has no leader now;
#: KeyError for a partition the cluster does not have
LeaderLookup = Callable[[str, int], tuple[int, tuple[str, int]] | None]
#: (producer id, partitions) of a marker about to be written
MarkerListener = Callable[[int, Sequence[tuple[str, int]]], None]


async def append_markers_here(
    replicas: ReplicaManager,
    batch: bytes,
    producer_id: int,
    commit: bool,
    partitions: Sequence[tuple[str, int]],
    on_offsets_marker: Callable[[int, bool], None] | None = None,
    on_marker: MarkerListener | None = None,
) -> dict[tuple[str, int], ErrorCode]:
    """Append one marker batch to each of `partitions` led here and wait until their in-sync
    replicas have it (as Kafka writes markers, with acks=all). A marker on `__consumer_offsets`
    also ends the producer's pending offset commits there (`on_offsets_marker`);
    `on_marker(producer_id, partitions)` hears of every marker before it is written (the
    transaction verification's guards)."""
    if on_marker is not None:
        on_marker(producer_id, partitions)
    results: dict[tuple[str, int], ErrorCode] = {}
    appended: dict[tuple[str, int], int] = {}
    for topic, index in partitions:
        result = replicas.append_marker(topic, index, batch, commit)
        results[(topic, index)] = result.error
        if result.error is not ErrorCode.none:
            continue
        appended[(topic, index)] = result.end_offset
        if topic == OFFSETS_TOPIC and on_offsets_marker is not None:
            on_offsets_marker(producer_id, commit)
    for (topic, index), end_offset in appended.items():
        if replicas.replicating(topic, index, end_offset):
            results[(topic, index)] = await replicas.wait_replicated(
                topic, index, end_offset, MARKER_REPLICATION_TIMEOUT_MS
            )
    return results


class LocalMarkerWriter:
    """Writes markers to the partitions this broker leads, through its replica manager; in a
    cluster (`leader_of` given), sends those led by other brokers to their leaders with
    WriteTxnMarkers. A marker on `__consumer_offsets` also ends the producer's pending offset
    commits there: `on_offsets_marker(producer_id, commit)` (the group coordinator's)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        clock: Clock,
        *,
        on_offsets_marker: Callable[[int, bool], None] | None = None,
        node_id: int = -1,
        leader_of: LeaderLookup | None = None,
        on_marker: MarkerListener | None = None,
        peer_security: InterBrokerSecurity | None = None,
    ) -> None:
        self._replicas = replicas
        self._on_marker = on_marker
        self._peer_security = peer_security
        self._clock = clock
        self._on_offsets_marker = on_offsets_marker
        self._node_id = node_id
        self._leader_of = leader_of
        self._peers: dict[int, PeerConnection] = {}

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Sequence[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        batch = control_batch(
            producer_id, producer_epoch, coordinator_epoch, commit, self._clock.milliseconds()
        )
        here: list[tuple[str, int]] = []
        elsewhere: dict[tuple[int, tuple[str, int]], list[tuple[str, int]]] = {}
        results: dict[tuple[str, int], ErrorCode] = {}
        for tp in partitions:
            try:
                leader = self._leader_of(*tp) if self._leader_of is not None else None
            except KeyError:
                results[tp] = ErrorCode.unknown_topic_or_partition  # deleted: dropped
                continue
            if self._leader_of is None or (leader is not None and leader[0] == self._node_id):
                here.append(tp)
            elif leader is None:
                results[tp] = ErrorCode.not_leader_or_follower  # retried once a leader is known
            else:
                elsewhere.setdefault(leader, []).append(tp)
        sends = [
            self._send(node, address, producer_id, producer_epoch, coordinator_epoch, commit, tps)
            for (node, address), tps in elsewhere.items()
        ]
        local = append_markers_here(
            self._replicas, batch, producer_id, commit, here, self._on_offsets_marker,
            self._on_marker,
        )  # fmt: skip
        for outcome in await asyncio.gather(local, *sends):
            results.update(outcome)
        return results

    async def _send(
        self,
        node_id: int,
        address: tuple[str, int],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        """WriteTxnMarkers to the leader `node_id`; a failed exchange is retriable for all."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        body = write_request.WriteTxnMarkersRequest(markers=(write_request.WritableTxnMarker(
            producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch),
            transaction_result=commit, coordinator_epoch=i32(coordinator_epoch),
            topics=tuple(write_request.WritableTxnMarkerTopic(
                name=TopicName(topic), partition_indexes=tuple(i32(i) for i in indexes))
                for topic, indexes in by_topic.items()),
        ),))  # fmt: skip
        peer = self._peers.get(node_id)
        if peer is None or peer.address != address:
            peer = self._peers[node_id] = PeerConnection(
                address, "weir-txn-markers", security=self._peer_security
            )
        try:
            response = await peer.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
        except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as exc:
            log.info("markers to broker %d not written: %r", node_id, exc)
            return dict.fromkeys(partitions, ErrorCode.not_leader_or_follower)
        results: dict[tuple[str, int], ErrorCode] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    results[(topic.name, partition.partition_index)] = partition.error_code
        for tp in partitions:
            results.setdefault(tp, ErrorCode.unknown_server_error)
        return results

    def close(self) -> None:
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()
