"""The audit counts (weir.broker.audit): per minute per client and partition, from the session of
the request being served; what a flush takes and forgets; bounded memory."""

from __future__ import annotations

import contextvars
import logging
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from weir.broker.audit import AuditLog
from weir.broker.results import FetchResult
from weir.broker.security.listeners import Listener, SecurityProtocol
from weir.broker.security.session import KafkaPrincipal, Session, bind
from weir.protocol.audit_records import AUDIT_TOPIC, FETCH, PRODUCE, AuditEntry
from weir.storage import FileSlice

START_MS = 1_700_000_040_000  # the start of a minute
LISTENER = Listener("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 9092)


class WallClock:
    """A wall clock the test sets, backwards too."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def milliseconds(self) -> int:
        return self.now

    def monotonic_ms(self) -> int:
        return 0

    def sleep_ms(self, ms: int) -> None:
        self.now += ms


def as_client(user: str, address: str, call: Any, *args: Any) -> None:
    """Run `call` as a request of a connection of `user` from `address` (the session the
    connection's task binds)."""

    def serve() -> None:
        bind(Session(LISTENER, address, KafkaPrincipal("User", user)))
        call(*args)

    contextvars.copy_context().run(serve)


def fetched(topic: str, partition: int, size: int, first: int, next_: int) -> FetchResult:
    data = FileSlice(-1, Path("segment.log"), 0, size, first, next_)
    return FetchResult(topic, partition, ErrorCode.none, data=data)


def counts(entries: list[AuditEntry]) -> dict[tuple[Any, ...], tuple[int, int]]:
    return {(e.minute_ms - START_MS, e.principal, e.client_id, e.address, e.api, e.topic,
             e.partition): (e.bytes, e.records) for e in entries}  # fmt: skip


@pytest.fixture
def clock() -> WallClock:
    return WallClock()


@pytest.fixture
def audit(clock: WallClock) -> AuditLog:
    return AuditLog(7, clock)  # type: ignore[arg-type]


def test_produces_and_fetches_add_up_per_minute_client_and_partition(
    audit: AuditLog, clock: WallClock
) -> None:
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 1000, 10)
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 500, 5)
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 1, 300, 3)
    as_client("bob", "10.0.0.2", audit.produced, "reports", "orders", 0, 200, 2)
    as_client("bob", "10.0.0.2", audit.fetched, "reports",
              [fetched("orders", 0, 1500, 0, 15), fetched("orders", 1, 300, 0, 3)])  # fmt: skip
    clock.now += 60_000
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 100, 1)
    assert counts(audit.changed()) == {
        (0, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 0): (1500, 15),
        (0, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 1): (300, 3),
        (0, "User:bob", "reports", "10.0.0.2", PRODUCE, "orders", 0): (200, 2),
        (0, "User:bob", "reports", "10.0.0.2", FETCH, "orders", 0): (1500, 15),
        (0, "User:bob", "reports", "10.0.0.2", FETCH, "orders", 1): (300, 3),
        (60_000, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 0): (100, 1),
    }
    entry = audit.changed()[0]
    assert (entry.broker, entry.broker_started_ms) == (7, START_MS)


def test_a_fetch_counts_the_bytes_sent_and_the_records_past_the_fetch_offset(
    audit: AuditLog,
) -> None:
    """A slice read from offset 12 whose first batch begins at 10 and whose last ends before
    20: the consumer gets records 12..19."""
    as_client("carol", "10.0.0.3", audit.fetched, None, [
        fetched("orders", 0, 2048, 12, 20),
        fetched("orders", 1, 0, 5, 5),  # nothing to send
        FetchResult("orders", 2, ErrorCode.not_leader_or_follower),
    ])  # fmt: skip
    assert counts(audit.changed()) == {
        (0, "User:carol", "", "10.0.0.3", FETCH, "orders", 0): (2048, 8),
    }


def test_writes_to_the_audit_topic_are_not_counted(audit: AuditLog) -> None:
    as_client("broker", "10.0.0.9", audit.produced, "weir-audit-writer", AUDIT_TOPIC, 0, 900, 3)
    assert audit.changed() == []


def test_outside_a_request_the_client_is_anonymous(audit: AuditLog) -> None:
    contextvars.copy_context().run(audit.produced, "app", "orders", 0, 10, 1)
    assert counts(audit.changed()) == {
        (0, "User:ANONYMOUS", "app", "", PRODUCE, "orders", 0): (10, 1),
    }


def test_written_counts_are_taken_again_only_when_they_grow(
    audit: AuditLog, clock: WallClock
) -> None:
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 1000, 10)
    audit.written(audit.changed())
    assert audit.changed() == []
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 24, 1)
    assert counts(audit.changed()) == {
        (0, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 0): (1024, 11),
    }


def test_an_ended_minute_is_forgotten_once_written_and_the_current_one_kept(
    audit: AuditLog, clock: WallClock
) -> None:
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 1000, 10)
    taken = audit.changed()
    clock.now += 60_000
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 10, 1)
    assert len(audit) == 2
    audit.written(taken)  # the first minute ended since: forgotten
    assert len(audit) == 1
    audit.written(audit.changed())  # the current minute stays, to grow
    assert len(audit) == 1
    assert audit.changed() == []


def test_counts_that_grew_while_being_written_stay_changed(audit: AuditLog) -> None:
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 1000, 10)
    taken = audit.changed()
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 1000, 10)
    audit.written(taken)
    assert [(e.bytes, e.records) for e in audit.changed()] == [(2000, 20)]


def test_a_failed_write_keeps_the_counts(audit: AuditLog, clock: WallClock) -> None:
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 1000, 10)
    first = audit.changed()
    clock.now += 120_000
    assert audit.changed() == first  # not reported written: still there, minute ended or not


def test_when_the_clock_steps_back_counts_go_on_into_the_latest_minute(
    audit: AuditLog, clock: WallClock
) -> None:
    clock.now += 60_000
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 100, 1)
    clock.now -= 90_000
    as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 100, 1)
    assert counts(audit.changed()) == {
        (60_000, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 0): (200, 2),
    }


def test_past_the_cap_the_oldest_minute_goes_then_new_counts_of_the_current_one(
    clock: WallClock, caplog: pytest.LogCaptureFixture
) -> None:
    audit = AuditLog(1, clock, max_counts=3)  # type: ignore[arg-type]
    for partition in (0, 1):
        as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", partition, 10, 1)
    clock.now += 60_000
    with caplog.at_level(logging.WARNING, logger="weir.broker.audit"):
        for partition in (0, 1, 2, 3):
            as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", partition, 10, 1)
        as_client("alice", "10.0.0.1", audit.produced, "billing", "orders", 0, 10, 1)
        assert "dropped the unwritten counts of minute 2023-11-14T22:14Z (2 counts)" in caplog.text
        assert len(audit) == 3
        assert counts(audit.changed()) == {
            (60_000, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 0): (20, 2),
            (60_000, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 1): (10, 1),
            (60_000, "User:alice", "billing", "10.0.0.1", PRODUCE, "orders", 2): (10, 1),
        }
        assert "1 counts of minute 2023-11-14T22:15Z dropped" in caplog.text
