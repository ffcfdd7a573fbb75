"""kcat (librdkafka's command-line client) against a real broker: keyed binary messages with
headers under every codec into an auto-created topic, offsets by time and earliest/latest with
-Q, and an idempotent kcat -P that keeps producing through a broker restart. kcat has no admin
API; the admin tests live with the clients that have one."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess, require_tool
from interop import (
    CODECS,
    SHARED_BROKER_CONFIG,
    BackgroundRestart,
    DeliveryLog,
    Message,
    first_offset_at_or_after,
    make_messages,
    shared_broker,
    timestamp_queries,
    unique_value,
)

TIMEOUT = 60
KEY_DELIMITER = b"<key|>"
MESSAGE_DELIMITER = b"<|end>"
#: -f output: a text line of lengths and headers, then the raw key and value bytes
FORMAT = r"%p %o %T %K %S %h\n%k%s\n"
#: kcat -H sets the same headers on every message of one run: repeated, empty, null, non-ASCII
HEADERS: tuple[tuple[str, bytes | None], ...] = (
    ("dup", b"first"), ("dup", b"second"), ("empty", b""), ("null", None),
    ("\u00fcn\u00ef", "\u00e7\u00f6d\u00e9 \u2713".encode()),
)  # fmt: skip


@pytest.fixture(scope="module")
def kcat_path() -> str:
    return require_tool("kcat")


@pytest.fixture(scope="module")
def shared(kcat_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = shared_broker(tmp_path_factory.mktemp("kcat"))
    yield process
    process.stop()


def kcat(kcat_path: str, broker: BrokerProcess, *args: str, stdin: bytes = b"") -> bytes:
    """Run kcat to completion; its stdout. -q keeps its notices off stderr."""
    done = subprocess.run([kcat_path, "-b", broker.bootstrap, "-q", "-m", "30", *args],
                          input=stdin, capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def header_flags(headers: tuple[tuple[str, bytes | None], ...]) -> list[str]:
    flags = []
    for name, value in headers:
        flags += ["-H", name if value is None else f"{name}={value.decode()}"]
    return flags


def kcat_input(messages: list[Message]) -> bytes:
    """-K/-D framed input; a message without the key delimiter gets a null key."""
    return b"".join(
        (b"" if m.key is None else m.key + KEY_DELIMITER) + (m.value or b"") + MESSAGE_DELIMITER
        for m in messages
    )


def parse_headers(text: str) -> tuple[tuple[str, bytes | None], ...]:
    """%h is `name=value,...` with NULL for a null value; our names and values avoid ,= ."""
    if not text:
        return ()
    pairs = (item.partition("=") for item in text.split(","))
    return tuple((name, None if value == "NULL" else value.encode()) for name, _, value in pairs)


def parse(output: bytes) -> list[tuple[int, int, int, Message]]:
    """(partition, offset, timestamp, message) for each record kcat printed with FORMAT."""
    records = []
    position = 0
    while position < len(output):
        end = output.index(b"\n", position)
        partition, offset, timestamp, key_size, value_size, headers = output[position:end].split(
            b" ", 5
        )
        position = end + 1
        fields = []
        for size in (int(key_size), int(value_size)):
            fields.append(None if size == -1 else output[position : position + size])
            position += max(size, 0)
        assert output[position : position + 1] == b"\n", "a record ran past its sizes"
        position += 1
        message = Message(fields[0], fields[1], parse_headers(headers.decode()))
        records.append((int(partition), int(offset), int(timestamp), message))
    return records


def consume(
    kcat_path: str, broker: BrokerProcess, topic: str, *args: str
) -> list[tuple[int, int, int, Message]]:
    return parse(
        kcat(kcat_path, broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", FORMAT, *args)
    )


# ---- produce and fetch under every codec ---------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_keyed_messages_with_headers_come_back_byte_identical(
    kcat_path: str, shared: BrokerProcess, codec: str
) -> None:
    topic = f"round-trip-{codec}"  # auto-created with the broker's num.partitions = 3
    produced = [
        Message(m.key, m.value, HEADERS)
        for m in make_messages(f"kcat-{codec}", 300, null_values=False,
                               avoid=(KEY_DELIMITER, MESSAGE_DELIMITER))
    ]  # fmt: skip
    kcat(kcat_path, shared, "-P", "-t", topic, "-z", codec, "-X", "linger.ms=20",
         "-K", KEY_DELIMITER.decode(), "-D", MESSAGE_DELIMITER.decode(), *header_flags(HEADERS),
         stdin=kcat_input(produced))  # fmt: skip

    records = consume(kcat_path, shared, topic)
    by_partition: dict[int, list[Message]] = {}
    for partition, offset, _ts, message in records:
        assert offset == len(by_partition.setdefault(partition, [])), "offsets skip or repeat"
        by_partition[partition].append(message)
    assert len(by_partition) == 3, "keyed messages should spread over all partitions"
    consumed_values = sorted(message.value or b"" for _, _, _, message in records)
    assert consumed_values == sorted(m.value or b"" for m in produced), "every message once"
    for partition, got in by_partition.items():
        in_this_partition = {m.value for m in got}
        sent_here = [m for m in produced if m.value in in_this_partition]
        assert got == sent_here, f"partition {partition}: not what was sent, in send order"


# ---- offsets by time, earliest and latest -------------------------------------------------


def test_query_finds_the_first_offset_at_or_after_the_timestamp(
    kcat_path: str, shared: BrokerProcess
) -> None:
    """kcat cannot set timestamps: three runs of kcat -P give records whose timestamps are read
    back and then searched for."""
    topic = "by-time"
    for run in range(3):
        messages = [Message(b"k", b"run-%d-%d" % (run, i)) for i in range(3)]
        kcat(kcat_path, shared, "-P", "-t", topic, "-p", "0", "-K", KEY_DELIMITER.decode(),
             "-D", MESSAGE_DELIMITER.decode(), stdin=kcat_input(messages))  # fmt: skip
    records = consume(kcat_path, shared, topic, "-p", "0")
    assert [offset for _, offset, _, _ in records] == list(range(9))
    timestamps = [ts for _, _, ts, _ in records]
    assert len(set(timestamps)) > 1, "three separate runs a millisecond apart at least"

    def query(timestamp: int) -> int:
        out = kcat(kcat_path, shared, "-Q", "-t", f"{topic}:0:{timestamp}").decode()
        assert out.startswith(f"{topic} [0] offset "), out
        return int(out.split()[-1])

    for timestamp in timestamp_queries(timestamps):
        expected = first_offset_at_or_after(timestamps, timestamp)
        assert query(timestamp) == (-1 if expected is None else expected), f"timestamp {timestamp}"
    assert query(-2) == 0  # earliest
    assert query(-1) == 9  # latest


# ---- a broker restart under an idempotent producer -----------------------------------------


class KcatProducer:
    """A long-running idempotent kcat -P fed line by line. -v -v makes it report every delivery
    (only counts: not which message) and -E keeps it running while the only broker is down.

    kcat reads its input with fread() in 128-byte chunks and serves delivery reports only
    between reads, so every line is exactly 128 bytes (the key pads it) and sending never
    waits for acknowledgements: they arrive as more input does."""

    LINE = 128

    def __init__(self, kcat_path: str, broker: BrokerProcess, topic: str) -> None:
        self.deliveries = DeliveryLog()
        self.errors: list[str] = []
        self.process = subprocess.Popen(
            [kcat_path, "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-E", "-v", "-v",
             "-z", "zstd", "-X", "acks=all", "-X", "enable.idempotence=true",
             "-X", "linger.ms=5"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read_reports, name="kcat-reports")
        self._reader.start()

    def _read_reports(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            text = line.decode(errors="replace").strip()
            if text.startswith("% Message delivered"):
                self.deliveries.on_acked(b"")
            elif text.startswith("% Delivery failed"):
                self.deliveries.on_failed(b"", text)
            elif "ERROR" in text or "FAIL" in text:
                self.errors.append(text)  # connection errors while the broker restarts

    def send_next(self) -> None:
        assert self.process.stdin is not None
        value = unique_value(self.deliveries.sent)
        key = (value[-3:] * self.LINE)[: self.LINE - len(value) - 2]
        self.process.stdin.write(key + b":" + value + b"\n")
        self.process.stdin.flush()
        self.deliveries.on_sent()

    def send_until(self, done: Callable[[], bool], deadline: float) -> None:
        while not done():
            sent, acked = self.deliveries.sent, len(self.deliveries.acked)
            assert time.monotonic() < deadline, f"kcat stalled: {sent} sent, {acked} delivered"
            self.send_next()
            time.sleep(0.001)  # pacing, not waiting: about 1000 messages a second

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        assert self.process.stderr is not None
        self.process.stderr.close()
        return code


def test_idempotent_kcat_loses_and_duplicates_nothing_across_a_restart(
    kcat_path: str, broker_factory: Callable[..., BrokerProcess]
) -> None:
    broker = broker_factory(**SHARED_BROKER_CONFIG)
    producer = KcatProducer(kcat_path, broker, "through-restart")
    deliveries = producer.deliveries
    deadline = time.monotonic() + 2 * TIMEOUT
    try:
        producer.send_until(lambda: len(deliveries.acked) >= 300, deadline)
        restart = BackgroundRestart(broker)
        producer.send_until(lambda: not restart.running, deadline)
        restart.join()
        target = deliveries.sent + 300
        producer.send_until(lambda: deliveries.sent >= target, deadline)
    finally:
        code = producer.close()  # kcat delivers the rest, or reports failures, and exits
    assert code == 0, producer.errors
    assert deliveries.failed == []
    assert len(deliveries.acked) == deliveries.sent
    values = [m.value for _, _, _, m in consume(kcat_path, broker, "through-restart")]
    assert sorted(values) == [unique_value(i) for i in range(deliveries.sent)]
