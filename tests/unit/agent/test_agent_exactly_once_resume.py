"""The agent's exactly-once resume logic: which positions a restarted queue skips, the intent file,
the position headers and the agent's identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.agent.event import decode_fields, encode_record
from weir.agent.exactly_once import (
    AgentIdentity,
    Intent,
    needs_check,
    position_of,
    read_intent,
    skip_delivered,
    skip_to,
    with_position,
    write_intent,
)
from weir.agent.queue import DiskQueue, Durability
from weir.clock import FakeClock
from weir.protocol.event_headers import AGENT_HEADER, POSITION_HEADER

INTENT = Intent(first_offset=100, last_offset=104, first_position=10, end_position=15)


def test_a_committed_batch_still_in_the_ring_is_skipped() -> None:
    assert skip_to(INTENT, 10, committed=[10, 11, 12, 13, 14]) == 15


def test_an_aborted_batch_is_sent_again() -> None:
    assert skip_to(INTENT, 10, committed=[]) == 10


def test_positions_outside_the_batch_do_not_count_as_its_commit() -> None:
    # the agent's records of earlier batches (or of later laps) are not this batch
    assert skip_to(INTENT, 10, committed=[9, 15, 16]) == 10


def test_a_batch_the_ring_already_acknowledged_needs_no_look() -> None:
    assert not needs_check(INTENT, 15)
    assert not needs_check(INTENT, 20)
    assert skip_to(INTENT, 20, committed=[10]) == 20
    assert needs_check(INTENT, 14)


def test_no_intent_means_nothing_was_ever_committed_unacknowledged() -> None:
    assert not needs_check(None, 0)
    assert skip_to(None, 7, committed=[7, 8]) == 7


def test_a_ring_partly_past_the_batch_resumes_at_its_end() -> None:
    # `logs` overwrote part of the batch meanwhile: the read position is inside it
    assert skip_to(INTENT, 12, committed=[12, 13, 14]) == 15


def test_intent_round_trips_and_a_torn_one_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "0.txn"
    assert read_intent(path) is None
    write_intent(path, INTENT)
    assert read_intent(path) == INTENT
    data = path.read_bytes()
    assert Intent.decode(data[:-1]) is None
    assert Intent.decode(bytes([data[0] ^ 1]) + data[1:]) is None


def test_records_carry_the_agent_and_their_ring_position() -> None:
    records = [decode_fields(encode_record(1, b"k", b"v", [("app", b"x")])),
               decode_fields(encode_record(2, None, b"w"))]  # fmt: skip
    stamped = with_position(records, b"a1", 41)
    assert stamped[0][3] == [("app", b"x"), (AGENT_HEADER, b"a1"), (POSITION_HEADER, b"41")]
    assert stamped[1][3] == [(AGENT_HEADER, b"a1"), (POSITION_HEADER, b"42")]
    assert [position_of(r[3], b"a1") for r in stamped] == [41, 42]
    assert position_of(stamped[0][3], b"another") is None
    assert position_of(None, b"a1") is None
    assert position_of([("app", b"x")], b"a1") is None


def test_the_identity_is_kept_across_restarts_and_new_per_spool(tmp_path: Path) -> None:
    first = AgentIdentity.load_or_create(tmp_path / "spool")
    assert AgentIdentity.load_or_create(tmp_path / "spool") == first
    assert AgentIdentity.load_or_create(tmp_path / "other") != first


@pytest.mark.parametrize("max_bytes", [1 << 20, 10])
def test_skipping_acknowledges_exactly_up_to_the_position(tmp_path: Path, max_bytes: int) -> None:
    queue = DiskQueue(tmp_path / "0.ring", topic="t", partition=0,
                      durability=Durability.LOGS, capacity=1 << 16, clock=FakeClock())  # fmt: skip
    queue.append([encode_record(0, None, str(i).encode()) for i in range(20)])
    try:
        assert skip_delivered(queue, 13, max_bytes) == 13
        batch = queue.peek(100, 1 << 20)
        assert batch.first_sequence == 13
        values = [decode_fields(p)[2] for p in batch.payloads]
        assert values == [str(i).encode() for i in range(13, 20)]
        assert skip_delivered(queue, 5, max_bytes) == 0  # already past it
    finally:
        queue.close()
