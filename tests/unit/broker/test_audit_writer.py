"""The audit writer (weir.broker.audit_writer) on a single node's storage and fake time: the
topic it creates, the records it appends, what a flush writes again, and counts kept while
`__audit` cannot be written."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_world import StorageWorld

from weir.broker.audit import AuditLog
from weir.broker.audit_writer import AuditWriter
from weir.clock import FakeClock
from weir.protocol.audit_records import AUDIT_TOPIC, PRODUCE, decode_value, encode_key
from weir.records import iter_records


@dataclasses.dataclass
class AuditWorld(StorageWorld):
    leader: tuple[int, tuple[str, int]] | None = (0, ("127.0.0.1", 9092))

    def open_coordinator(self) -> None:
        self.audit = AuditLog(0, self.clock)
        self.writer = AuditWriter(self.audit, self.replicas, self.topics, self.clock,
                                  partitions=1, leader_of=self.leader_of)  # fmt: skip

    def leader_of(self, topic: str, index: int) -> tuple[int, tuple[str, int]] | None:
        if self.topics.metadata.topic(topic) is None:
            raise KeyError(topic)
        return self.leader

    def produce(self, partition: int, size: int, records: int) -> None:
        contextvars.copy_context().run(self.audit.produced, "app", "orders", partition, size,
                                       records)  # fmt: skip

    def flush(self) -> bool:
        return asyncio.run(self.writer.flush())

    def stored(self) -> list[tuple[bytes, bytes]]:
        partition = self.replicas.get(AUDIT_TOPIC, 0)
        assert partition is not None
        return [(r.key, r.value) for header in partition.log.batches(0)
                for r in iter_records(header)]  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> Iterator[AuditWorld]:
    world = AuditWorld(tmp_path / "data", FakeClock())
    yield world
    world.close()


def test_the_first_flush_creates_a_compacted_topic_and_appends_the_counts(
    world: AuditWorld,
) -> None:
    assert world.flush()  # nothing to write: no topic
    assert world.topics.metadata.topic(AUDIT_TOPIC) is None
    world.produce(0, 1000, 10)
    world.produce(1, 500, 5)
    assert world.flush()
    info = world.topics.metadata.topic(AUDIT_TOPIC)
    assert info is not None and info.partitions == 1
    assert info.configs["cleanup.policy"] == "compact"
    stored = world.stored()
    entries = [decode_value(value) for _, value in stored]
    assert [(e.api, e.topic, e.partition, e.bytes, e.records) for e in entries] == [
        (PRODUCE, "orders", 0, 1000, 10), (PRODUCE, "orders", 1, 500, 5)]  # fmt: skip
    assert [key for key, _ in stored] == [encode_key(e) for e in entries]


def test_a_flush_writes_only_the_counts_that_grew(world: AuditWorld) -> None:
    world.produce(0, 1000, 10)
    world.produce(1, 500, 5)
    assert world.flush()
    assert world.flush()
    assert len(world.stored()) == 2
    world.produce(0, 24, 1)
    assert world.flush()
    stored = world.stored()
    assert len(stored) == 3
    latest = decode_value(stored[-1][1])
    assert (latest.partition, latest.bytes, latest.records) == (0, 1024, 11)
    assert stored[-1][0] == stored[0][0]  # the same key: compaction keeps the latest


def test_counts_wait_while_the_partition_has_no_leader_and_are_written_once_it_has(
    world: AuditWorld, caplog: pytest.LogCaptureFixture
) -> None:
    world.produce(0, 1000, 10)
    assert world.flush()  # creates the topic
    world.leader = None
    world.produce(0, 1000, 10)
    world.clock.advance(60_000)
    world.produce(0, 7, 1)
    with caplog.at_level(logging.INFO, logger="weir.broker.audit_writer"):
        assert not world.flush()
        assert not world.flush()
        world.leader = (0, ("127.0.0.1", 9092))
        assert world.flush()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "LEADER_NOT_AVAILABLE" in warnings[0].getMessage()
    assert "written again" in caplog.text
    entries = [decode_value(value) for _, value in world.stored()]
    assert [(e.bytes, e.records) for e in entries] == [(1000, 10), (2000, 20), (7, 1)]
    assert len(world.audit) == 1  # the ended minute is written and forgotten


def test_the_partition_is_the_node_id_modulo_the_partitions(tmp_path: Path) -> None:
    world = AuditWorld(tmp_path / "data", FakeClock())
    try:
        world.audit = AuditLog(5, world.clock)
        world.writer = AuditWriter(world.audit, world.replicas, world.topics, world.clock,
                                   partitions=3)  # fmt: skip
        world.produce(0, 10, 1)
        assert world.flush()
        ends = {}
        for index in range(3):
            partition = world.replicas.get(AUDIT_TOPIC, index)
            assert partition is not None
            ends[index] = partition.log.log_end_offset
        assert ends == {0: 0, 1: 0, 2: 1}
    finally:
        world.close()
