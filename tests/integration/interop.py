"""Shared by the real-client interop tests (test_kcat, test_confluent_kafka, test_kafka_python,
test_aiokafka): the messages they produce, how they compare what came back, the expected answer
to a ListOffsets-by-timestamp query, and a producer loop that keeps sending through a broker
restart. Nothing here speaks the Kafka protocol itself; each test module drives its own client.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker_process import BrokerProcess

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Settings for a module's shared broker: auto-created topics get 3 partitions, and small
#: segments make every test read and search across several segment files.
SHARED_BROKER_CONFIG: dict[str, object] = {"num.partitions": 3, "log.segment.bytes": 16384}

#: Explicit record timestamps (ms) for the offsets-by-timestamp tests, in offset order. Not
#: monotonic on purpose: the answer is the first *offset* whose timestamp is >= the query.
#: An hour ago: records older than retention.ms (7 days) could be deleted at any moment.
TIMESTAMP_BASE = (int(time.time()) - 3600) * 1000
TIMESTAMPS = tuple(TIMESTAMP_BASE + t for t in (0, 1000, 2000, 2000, 1500, 3000, 2500, 4000))
#: The offset ListOffsets with MAX_TIMESTAMP (-3) must answer for TIMESTAMPS
LATEST_RECORD = TIMESTAMPS.index(max(TIMESTAMPS))


@dataclass(frozen=True, slots=True)
class Message:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def make_messages(
    tag: str,
    count: int,
    *,
    null_keys: bool = True,
    null_values: bool = True,
    null_headers: bool = True,
    avoid: tuple[bytes, ...] = (),
) -> list[Message]:
    """`count` messages with binary keys, values and headers, deterministic per `tag`.

    Every value is unique. Headers repeat a key (order matters) and carry empty and null
    values.
    The null_* flags leave out what a client cannot send. `avoid` lists byte strings that must
    not appear in keys or values (a text client's delimiters)."""
    rng = random.Random(tag)
    messages = []
    for i in range(count):
        key = _binary(rng, f"key-{tag}-{i}-", 0, 24, avoid)
        value = _binary(rng, f"value-{tag}-{i}-", 0, 600, avoid)
        headers = (
            ("tag", tag.encode()),
            ("seq", b"%d" % i),
            ("dup", b"first"),
            ("dup", b"second"),
            ("empty", b""),
            *([("null", None)] if null_headers else []),
            ("bin\u00e9", bytes(rng.randrange(256) for _ in range(8))),
        )
        if null_values and i % 11 == 5:  # a tombstone: keyed, no value
            value = None
            headers = (("tombstone", b"%d" % i),)
        elif null_keys and i % 7 == 3:
            key = None
        messages.append(Message(key, value, headers))
    return messages


def _binary(
    rng: random.Random, prefix: str, low: int, high: int, avoid: tuple[bytes, ...]
) -> bytes:
    while True:
        data = prefix.encode() + bytes(rng.randrange(256) for _ in range(rng.randint(low, high)))
        if not any(a in data for a in avoid):
            return data


def group(pairs: Iterable[tuple[int, Message]]) -> dict[int, list[Message]]:
    """Messages by partition, in the order given."""
    out: dict[int, list[Message]] = {}
    for partition, message in pairs:
        out.setdefault(partition, []).append(message)
    return out


def assert_same_by_partition(
    consumed: dict[int, list[Message]], produced: dict[int, list[Message]]
) -> None:
    """Each partition holds exactly what was produced to it, byte for byte, in send order."""
    assert sorted(consumed) == sorted(produced)
    for partition, expected in produced.items():
        got = consumed[partition]
        assert len(got) == len(expected), f"partition {partition}"
        for offset, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert a == b, f"partition {partition} offset {offset}"


def first_offset_at_or_after(timestamps: Iterable[int], query: int) -> int | None:
    """What ListOffsets must answer: the first offset whose timestamp is >= `query`."""
    return next((offset for offset, ts in enumerate(timestamps) if ts >= query), None)


def timestamp_queries(timestamps: Iterable[int]) -> list[int]:
    """Each timestamp, one below and one above it: every boundary of the answer."""
    return sorted({q for ts in timestamps for q in (ts - 1, ts, ts + 1)})


def unique_value(i: int) -> bytes:
    """The value of the i-th message sent by a restart test."""
    return b"restart-%08d" % i


class BackgroundRestart:
    """`BrokerProcess.restart()` on its own thread, so a producer can keep sending meanwhile;
    `join()` re-raises whatever the restart raised."""

    def __init__(self, broker: BrokerProcess) -> None:
        self._broker = broker
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._restart, name="broker-restart")
        self._thread.start()

    def _restart(self) -> None:
        try:
            self._broker.restart()
        except BaseException as exc:
            self._failure = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self) -> None:
        self._thread.join()
        if self._failure is not None:
            raise self._failure


@dataclass
class DeliveryLog:
    """What a producer's delivery callbacks reported, safe to update from any thread."""

    acked: list[bytes] = field(default_factory=list)
    failed: list[tuple[bytes, str]] = field(default_factory=list)
    sent: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def on_sent(self) -> None:
        with self._changed:
            self.sent += 1

    def on_acked(self, value: bytes) -> None:
        with self._changed:
            self.acked.append(value)
            self._changed.notify_all()

    def on_failed(self, value: bytes, error: object) -> None:
        with self._changed:
            self.failed.append((value, repr(error)))
            self._changed.notify_all()

    @property
    def in_flight(self) -> int:
        with self._changed:
            return self.sent - len(self.acked) - len(self.failed)

    def wait(self, timeout: float) -> None:
        """Until a callback reports something (or `timeout`); for clients whose callbacks run
        on their own threads."""
        with self._changed:
            self._changed.wait(timeout)


def produce_through_restart(
    broker: BrokerProcess,
    send: Callable[[bytes], None],
    deliveries: DeliveryLog,
    serve: Callable[[float], None],
    *,
    window: int = 50,
    before: int = 300,
    after: int = 300,
    timeout: float = 120,
) -> None:
    """Send unique values with `send` until `before` are acknowledged, restart the broker on
    another thread while sending on (at most `window` unacknowledged at once, so some are in
    flight while the broker goes down), then send `after` more. `serve(timeout)` lets the
    client run its delivery callbacks. Returns once nothing is in flight."""
    deadline = time.monotonic() + timeout

    def send_while(keep_going: Callable[[], bool]) -> None:
        while keep_going():
            assert time.monotonic() < deadline, f"producing stalled: {deliveries.in_flight=}"
            if deliveries.in_flight < window:
                send(unique_value(deliveries.sent))
                deliveries.on_sent()
                serve(0)
            else:
                serve(0.05)

    send_while(lambda: len(deliveries.acked) < before)
    restart = BackgroundRestart(broker)
    send_while(lambda: restart.running)
    restart.join()
    target = deliveries.sent + after
    send_while(lambda: deliveries.sent < target)
    while deliveries.in_flight:
        assert time.monotonic() < deadline, f"deliveries stalled: {deliveries.in_flight=}"
        serve(0.1)


def assert_acknowledged_present(
    deliveries: DeliveryLog, consumed: Iterable[bytes | None], *, idempotent: bool
) -> None:
    """Every acknowledged value was read back; with idempotence, nothing appears twice."""
    counts = Counter(consumed)
    missing = [v for v in deliveries.acked if counts[v] == 0]
    assert not missing, f"{len(missing)} acknowledged messages lost, first {missing[:5]}"
    if idempotent:
        twice = {v: n for v, n in counts.items() if n > 1}
        assert not twice, f"{len(twice)} values duplicated, e.g. {list(twice.items())[:5]}"


def shared_broker(directory: Path) -> BrokerProcess:
    process = BrokerProcess(directory / "broker", config=SHARED_BROKER_CONFIG)
    process.start()
    return process
