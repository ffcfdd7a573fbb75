"""Transaction markers: the control batch as Kafka lays it out, and the local writer."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode
from txn_harness import TxnWorld

from weir.broker.txn.markers import LocalMarkerWriter, control_batch, parse_marker
from weir.records import BatchHeader, iter_records


def test_control_batch_layout() -> None:
    batch = control_batch(4242, 7, 3, commit=True, timestamp=1_700_000_000_000)
    header = BatchHeader(batch)
    assert header.crc_ok()
    assert header.is_control and header.is_transactional
    assert header.attributes & 0x30 == 0x30  # bits 4 (transactional) and 5 (control)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    [record] = list(iter_records(header))
    assert record.key == b"\x00\x00\x00\x01"  # version 0, type 1 (commit)
    assert record.value == b"\x00\x00\x00\x00\x00\x03"  # version 0, coordinator epoch 3
    assert parse_marker(record.key, record.value) == (True, 3)
    abort = next(iter_records(BatchHeader(control_batch(1, 0, 0, False, 0))))
    assert abort.key == b"\x00\x00\x00\x00"
    assert parse_marker(abort.key, abort.value or b"") == (False, 0)


def test_local_writer_reports_unknown_partitions(world: TxnWorld) -> None:
    writer = LocalMarkerWriter(world.replicas, world.clock)
    results = asyncio.run(writer.write_markers(1, 0, 0, True, [("nowhere", 0)]))
    assert results == {("nowhere", 0): ErrorCode.unknown_topic_or_partition}


def test_local_writer_appends_a_marker_to_each_partition(world: TxnWorld) -> None:
    writer = LocalMarkerWriter(world.replicas, world.clock)
    partitions = [("orders", 0), ("payments", 1)]
    results = asyncio.run(writer.write_markers(9, 2, 0, False, partitions))
    assert results == dict.fromkeys(partitions, ErrorCode.none)
    for topic, index in partitions:
        partition = world.replicas.get(topic, index)
        assert partition is not None
        [header] = list(partition.log.batches(0))
        assert header.is_control and header.producer_id == 9
