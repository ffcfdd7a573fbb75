"""One driver per broker, all with the same workloads and the same shape.

A driver's `produce(name, count, size, batch, deadline)` sends `count` messages of `size` bytes
in windows of `batch`: it sends a window, waits until the broker has acknowledged every message
in it, and only then sends the next (batch 1 = each message acknowledged before the next is
sent). `pipelined(name, count, size, in_flight, deadline)` sends the same without waiting per
window: it keeps a bounded number of messages unacknowledged (about `in_flight`; each driver's
settings say exactly how it is bounded), sends more as acknowledgements arrive, and is timed from
the first send to the last acknowledgement. `consume(name, expected, deadline)` reads the stream
from its start. All three return a `Run` timed from the first send or receive call, after
connecting, counting the messages acknowledged and, apart, those the broker refused.
`latency(name, rate, seconds)` sends messages at a fixed rate, each acknowledged before the next,
while a second connection receives them, and returns the send-to-receive times in milliseconds.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

STAMP = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class Run:
    messages: int
    seconds: float
    failed: int = 0


class Driver(Protocol):
    settings: dict[str, Any]

    def prepare(self, name: str) -> None: ...
    def produce(self, name: str, count: int, size: int, batch: int, deadline: float) -> Run: ...
    def pipelined(
        self, name: str, count: int, size: int, in_flight: int, deadline: float
    ) -> Run: ...
    def consume(self, name: str, expected: int, deadline: float) -> Run: ...
    def latency(self, name: str, rate: int, seconds: float) -> list[float]: ...
    def drop(self, name: str) -> None: ...


def payload(size: int) -> bytes:
    """Incompressible-looking printable bytes, the same for every broker."""
    return os.urandom(size // 2 + 1).hex().encode()[:size]


def stamped(size: int) -> bytes:
    """A latency probe: the send time (perf_counter_ns) followed by padding up to `size`."""
    return STAMP.pack(time.perf_counter_ns()) + b"x" * max(0, size - STAMP.size)


def elapsed_ms(message: bytes) -> float:
    (sent,) = STAMP.unpack_from(message)
    return (time.perf_counter_ns() - sent) / 1e6


def windows(count: int, batch: int, deadline: float) -> Iterator[int]:
    """Sizes of the successive windows, stopping early once `deadline` (monotonic) passes."""
    sent = 0
    while sent < count and time.monotonic() < deadline:
        n = min(batch, count - sent)
        yield n
        sent += n


def paced(rate: int, seconds: float) -> Iterator[int]:
    """Message numbers on a fixed schedule of `rate` per second; a sender that falls behind
    sends at once rather than skipping."""
    started = time.perf_counter()
    for n in range(int(rate * seconds)):
        delay = started + n / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield n
