"""Choosing a partition the way Kafka's Java client does.

Keyed events: `toPositive(murmur2(key)) % partitions`, bit-for-bit Kafka's `Utils.murmur2`, so a
keyed event lands where a Java producer (or librdkafka's `murmur2_random`) would put it.
Unkeyed events: sticky — one partition until a batch worth of events went there, then another.
"""

from __future__ import annotations

import random
import threading

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c) as a signed 32-bit integer, like Java's `int`."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Unkeyed events stick to one partition per topic for `batch_events`, then move on."""

    def __init__(self, batch_events: int = 1000, rng: random.Random | None = None) -> None:
        self._batch_events = batch_events
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._current: dict[str, tuple[int, int]] = {}

    def partition(self, topic: str, partitions: int, events: int = 1) -> int:
        """The partition for the next `events` unkeyed events of `topic` (kept together)."""
        with self._lock:
            chosen, used = self._current.get(topic, (-1, 0))
            if chosen < 0 or chosen >= partitions or used >= self._batch_events:
                chosen, used = self._next(chosen, partitions), 0
            self._current[topic] = (chosen, used + events)
            return chosen

    def _next(self, previous: int, partitions: int) -> int:
        if partitions == 1:
            return 0
        choice = self._rng.randrange(partitions - 1)
        return choice if choice < previous or previous < 0 else choice + 1
