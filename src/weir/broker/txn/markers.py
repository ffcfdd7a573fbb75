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

import struct
from collections.abc import Callable, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from weir.broker.group.store import OFFSETS_TOPIC
from weir.broker.replica_manager import ReplicaManager
from weir.clock import Clock
from weir.records import BatchSpec, Record, build_batch

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


class LocalMarkerWriter:
    """Writes markers to the partitions this broker leads, through its replica manager. A
    marker on `__consumer_offsets` also ends the producer's pending offset commits there:
    `on_offsets_marker(producer_id, commit)` (the group coordinator's)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        clock: Clock,
        *,
        on_offsets_marker: Callable[[int, bool], None] | None = None,
    ) -> None:
        self._replicas = replicas
        self._clock = clock
        self._on_offsets_marker = on_offsets_marker

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
        results = {}
        for topic, index in partitions:
            result = self._replicas.append_marker(topic, index, batch, commit)
            results[(topic, index)] = result.error
            if (
                topic == OFFSETS_TOPIC
                and result.error is ErrorCode.none
                and self._on_offsets_marker is not None
            ):
                self._on_offsets_marker(producer_id, commit)
        return results
