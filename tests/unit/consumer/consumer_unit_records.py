"""Records and partitions for the consumer framework's unit tests."""

from __future__ import annotations

from weir.consumer.partition import OwnedPartition
from weir.consumer.record import ConsumedRecord


def record(
    partition: int, offset: int, key: bytes | None = None, topic: str = "t"
) -> ConsumedRecord:
    return ConsumedRecord(topic, partition, offset, key, b"value-%d" % offset, (), 1000 + offset)


def owned(partition: int, *, committed: int | None = None, eos: bool = False) -> OwnedPartition:
    return OwnedPartition("t", partition, committed, keep_results=eos)
