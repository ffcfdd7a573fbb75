"""Partitioning as Kafka's Java client does it, and the durability classes of a queue."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from weir.agent.event import Event, decode_event, encode_event, timestamp_prefix
from weir.agent.partitioner import StickyPartitioner, murmur2, partition_for_key
from weir.agent.queue import DiskQueue, Durability, QueueFullError
from weir.agent.ring import RECORD_OVERHEAD
from weir.agent.wire import (
    PREAMBLE,
    ClientConnection,
    Op,
    Response,
    ServerConnection,
    WireError,
    encode_response,
    encode_send,
)
from weir.clock import FakeClock

# Kafka's own UtilsTest.testMurmur2 values (Java `int` results).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR2.items())
def test_murmur2_matches_java(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_partition_is_positive_murmur_modulo() -> None:
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_sticky_partitioner_switches_after_a_batch() -> None:
    sticky = StickyPartitioner(batch_events=3)
    chosen = [sticky.partition("t", 4) for _ in range(9)]
    assert chosen[0] == chosen[1] == chosen[2] != chosen[3]
    assert chosen[3] == chosen[4] == chosen[5] != chosen[6]


def test_event_round_trip() -> None:
    event = Event(topic="t", value=b"v", key=None, headers=[("h", b"x")], timestamp_ms=5)
    assert decode_event("t", encode_event(event)) == event


def _queue(tmp_path: Path, durability: Durability, records: int) -> DiskQueue:
    return DiskQueue(
        tmp_path / "q.ring",
        topic="t",
        partition=0,
        durability=durability,
        capacity=records * (RECORD_OVERHEAD + 2),
        clock=FakeClock(),
    )


def test_events_queue_refuses_when_full_and_keeps_everything(tmp_path: Path) -> None:
    queue = _queue(tmp_path, Durability.EVENTS, 5)
    for i in range(5):
        queue.append([b"%02d" % i])
    with pytest.raises(QueueFullError, match="full"):
        queue.append([b"xx"])
    assert queue.peek(10, 1 << 20).payloads == [b"%02d" % i for i in range(5)]
    assert queue.state().dropped == 0
    queue.close()


def test_logs_queue_overwrites_oldest_and_counts(tmp_path: Path) -> None:
    queue = _queue(tmp_path, Durability.LOGS, 5)
    for i in range(12):
        queue.append([b"%02d" % i])
    assert queue.state().dropped == 7
    assert queue.peek(10, 1 << 20).payloads == [b"%02d" % i for i in range(7, 12)]
    queue.close()


def test_group_commit_serves_concurrent_callers(tmp_path: Path) -> None:
    queue = _queue(tmp_path, Durability.EVENTS, 2000)
    threads = [
        threading.Thread(target=lambda n=n: [queue.append([b"%02d" % n]) for _ in range(50)])
        for n in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert queue.state().depth == 400
    queue.close()


def test_wire_frames_round_trip_and_reject_oversized() -> None:
    server = ServerConnection(max_frame_bytes=1000)
    event = Event(topic="t", value=b"v", key=b"k", headers=[("h", b"1")])
    server.receive_data(PREAMBLE + encode_send(7, event) + encode_send(8, event)[:5])
    (request,) = server.next_requests()
    assert request.op is Op.SEND and request.correlation_id == 7
    assert (request.topic, request.key, request.size) == ("t", b"k", 4)
    assert decode_event("t", timestamp_prefix(0) + request.record) == event
    big = Event(topic="t", value=b"x" * 2000)
    server.receive_data(encode_send(8, event)[5:] + encode_send(9, big))
    (before_the_broken_frame,) = server.next_requests()
    assert before_the_broken_frame.correlation_id == 8
    with pytest.raises(WireError, match="2"):
        server.next_requests()
    client = ClientConnection()
    client.receive_data(
        encode_response(Response(correlation_id=3, ok=False, code="X", message=b"m"))
    )
    assert client.next_responses() == [Response(correlation_id=3, ok=False, code="X", message=b"m")]


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xfe" + bytes(6),  # key length below -1
        bytes(4) + b"\x00\x00\x00\x09" + bytes(2),  # value longer than the frame
        bytes(10) + b"x",  # bytes after the headers
        bytes(4) + bytes(4) + b"\x00\x01\x00",  # a header cut short
    ],
)
def test_malformed_send_bodies_are_refused_before_anything_is_stored(body: bytes) -> None:
    server = ServerConnection(max_frame_bytes=1000)
    frame = struct.pack(">BIH", Op.SEND, 5, 1) + b"t" + body
    server.receive_data(PREAMBLE + struct.pack(">I", len(frame)) + frame)
    with pytest.raises(WireError, match="malformed SEND") as raised:
        server.next_requests()
    assert raised.value.code == "BAD_FRAME"


def test_lines_mode_is_chosen_without_preamble() -> None:
    server = ServerConnection(max_frame_bytes=100)
    server.receive_data(b"topic\tkey\tvalue\npartial")
    assert server.next_lines() == [b"topic\tkey\tvalue"]
    server.receive_data(b"y" * 200)
    with pytest.raises(WireError):
        server.next_lines()
