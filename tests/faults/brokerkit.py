"""Helpers for the fault tests that drive a real broker process (tests/integration's
`BrokerProcess`) with real clients: numbered 1 KB records produced with acks=all by an idempotent
confluent-kafka producer, a record of which were acknowledged and at which offsets, a consumer that
reads a partition back with CRC checks, and the checks every such test makes:

* every acknowledged record is served exactly once, at the offset its acknowledgement named;
* offsets run contiguously from the log start offset to the high watermark, no error (a CRC
  error among them) is served, and no record is served twice.

Also: a root check that fails in CI instead of skipping, a small tmpfs, a spacer file that fills
a file system, and a few raw Kafka requests (kio's classes over a socket) for what no client
shows: the error code of a produce or a fetch, and a partition's offline replicas.

Record numbers: each record's value starts with its number, so a reader can tell which record it
got; producers in one test use separate ranges (`next_seq`), raw produces 900,000,000 and up.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import logging
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
if str(INTEGRATION) not in sys.path:
    sys.path.insert(0, str(INTEGRATION))

from broker_process import IN_CI, BrokerProcess, require_tool, weir  # noqa: E402
from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.api_versions.v3 import request as api_versions_v3  # noqa: E402
from kio.schema.fetch.v12 import request as fetch_v12  # noqa: E402
from kio.schema.metadata.v9 import request as metadata_v9  # noqa: E402
from kio.schema.produce.v9 import request as produce_v9  # noqa: E402
from kio.serial import entity_reader  # noqa: E402
from kio.static.primitive import Records  # noqa: E402
from raw_requests import encode_request, recv_exact  # noqa: E402

from weir.protocol.apis import ApiKey  # noqa: E402
from weir.protocol.codec import codec_for  # noqa: E402
from weir.records import Record, build_batch  # noqa: E402

__all__ = ["IN_CI", "BrokerProcess", "require_tool", "weir"]

MiB = 1024 * 1024
VALUE_BYTES = 1000
KAFKA_STORAGE_ERROR = 56
LEADER_NOT_AVAILABLE = 5
RAW_TIMEOUT_S = 15.0
#: librdkafka's own log lines go to Python logging (pytest shows them with a failure) instead of
#: stderr, where clients left over from a stopped broker would print reconnection errors
RDKAFKA_LOG = logging.getLogger("librdkafka")


def require_root(what: str) -> None:
    """Skip without root locally; in CI (which runs as root) a missing capability is a failure."""
    if os.geteuid() == 0:
        return
    if IN_CI:
        pytest.fail(f"{what} needs root, and CI runs as root")
    pytest.skip(f"{what} needs root")


@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted at `path` (created), unmounted afterwards."""
    require_root("mounting a tmpfs")
    path.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        message = f"cannot mount a tmpfs at {path}: {mount.stderr.strip()}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def loop_disk(path: Path, image: Path, size_bytes: int) -> Iterator[Path]:
    """An ext4 file system of `size_bytes` on a loop device over the file `image`, with direct
    I/O (reads of the device reach the disk under `image`, not its page cache), mounted at
    `path`; unmounted and detached afterwards. /proc/diskstats counts the device's I/O."""
    require_root("a loop device")
    for tool in ("losetup", "mkfs.ext4"):
        require_tool(tool)
    with open(image, "wb") as file:
        file.truncate(size_bytes)
    attach = subprocess.run(["losetup", "--find", "--show", "--direct-io=on", str(image)],
                            capture_output=True, text=True, check=False)  # fmt: skip
    if attach.returncode != 0:
        message = f"cannot attach a loop device: {attach.stderr.strip()}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    device = attach.stdout.strip()
    try:
        subprocess.run(["mkfs.ext4", "-q", device], check=True)
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", device, str(path)], check=True)
        try:
            yield path
        finally:
            if subprocess.run(["umount", str(path)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], check=False)
    finally:
        subprocess.run(["losetup", "-d", device], check=False)
        image.unlink(missing_ok=True)


def evict_from_page_cache(directory: Path, pattern: str = "*") -> None:
    """Drop the cached pages of every file under `directory` matching `pattern` (clean pages
    only)."""
    for file in directory.rglob(pattern):
        if not file.is_file():
            continue
        try:
            fd = os.open(file, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(path: Path, leave: int = 0) -> int:
    """Write the spacer file `path` until its file system has less than `leave` + 4 KiB free
    (`leave`=0: until ENOSPC, so the disk is really full). Returns the spacer's size."""
    chunk = b"\0" * MiB
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (MiB, 64 * 1024, 4096):
            for _ in range(free_bytes(path.parent) // size + 1):  # bounded: the disk is finite
                if free_bytes(path.parent) - size < leave:
                    break
                try:
                    if os.write(fd, chunk[:size]) < size:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path.stat().st_size


# ---- producing, with a record of what was acknowledged ---------------------------------------


def value_for(seq: int) -> bytes:
    head = b"%010d|" % seq
    return head + bytes((seq + i) % 251 for i in range(VALUE_BYTES - len(head)))


def seq_of(value: bytes) -> int:
    return int(value[:10])


@dataclass
class AckedProducer:
    """An idempotent acks=all producer of numbered 1 KB records to partition 0 of `topic`.

    `acked` maps each acknowledged record's number to the offset its acknowledgement named;
    `failed` maps the others to their delivery error."""

    bootstrap: str
    topic: str
    message_timeout_ms: int = 5000
    extra: dict[str, Any] = field(default_factory=dict)
    next_seq: int = 0  # the number of the next record; several producers use separate ranges
    acked: dict[int, int] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.first_seq = self.next_seq
        self.producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": self.message_timeout_ms,
                "linger.ms": 2,
                "retry.backoff.ms": 50,
                "logger": RDKAFKA_LOG,
                **self.extra,
            }
        )

    def _on_delivery(self, err: KafkaError | None, message: Any) -> None:
        seq = seq_of(message.value())
        if err is None:
            assert seq not in self.acked, f"record {seq} acknowledged twice"
            self.acked[seq] = message.offset()
        else:
            self.failed[seq] = str(err)

    @property
    def pending(self) -> int:
        return self.next_seq - self.first_seq - len(self.acked) - len(self.failed)

    def send(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(count):
            while True:
                try:
                    self.producer.produce(
                        self.topic,
                        value=value_for(self.next_seq),
                        partition=0,
                        on_delivery=self._on_delivery,
                    )
                    break
                except BufferError:  # the local queue is full: wait for deliveries
                    assert time.monotonic() < deadline, f"producer queue full for {timeout}s"
                    self.producer.poll(0.1)
            self.next_seq += 1
            self.producer.poll(0)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every delivery report (they all come within the message timeout)."""
        limit = timeout if timeout is not None else self.message_timeout_ms / 1000 + 30
        left = self.producer.flush(limit)
        assert left == 0, f"{left} records without a delivery report after {limit}s"
        assert self.pending == 0

    def produce(self, count: int, timeout: float | None = None) -> dict[int, int]:
        """Send `count` records and wait for their reports; those acknowledged now."""
        first = self.next_seq
        self.send(count)
        self.flush(timeout)
        return {s: o for s, o in self.acked.items() if s >= first}

    def produce_until_refused(self, max_records: int, max_seconds: float, chunk: int = 200) -> None:
        """Send in chunks until a delivery fails (the disk is full), at most `max_records` records
        or `max_seconds`."""
        deadline = time.monotonic() + max_seconds
        while not self.failed:
            assert self.next_seq - self.first_seq < max_records, (
                f"no delivery failed after {max_records} records"
            )
            assert time.monotonic() < deadline, f"no delivery failed after {max_seconds}s"
            self.send(chunk)
            self.flush()


# ---- reading back and checking --------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    offset: int
    seq: int
    value: bytes


def consume_all(bootstrap: str, topic: str, timeout: float = 60.0) -> tuple[int, list[Served]]:
    """Every record of partition 0 from the beginning to the high watermark, CRCs checked.
    Returns (the low watermark, the records in the order served). Any error served fails."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"faults-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "check.crcs": True,
            "enable.partition.eof": True,
            "fetch.max.bytes": 4 * MiB,
            "logger": RDKAFKA_LOG,
        }
    )
    served: list[Served] = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout)
        if high <= low:
            return low, served
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, (
                f"read {len(served)} records of {topic} in {timeout}s; the high watermark is {high}"
            )
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                if message.offset() >= high:
                    break
                continue
            assert error is None, f"served an error at offset {message.offset()}: {error}"
            value = message.value()
            served.append(Served(message.offset(), seq_of(value), value))
    finally:
        consumer.close()
    return low, served


def check_log(
    acked: dict[int, int], low: int, served: list[Served], *, expect_low: int = 0
) -> None:
    """The partition as served holds every acknowledged record exactly once at its offset, with
    contiguous offsets, intact values and nothing twice (see the module docstring)."""
    assert low == expect_low, f"log start offset {low}, expected {expect_low}"
    offsets = [r.offset for r in served]
    assert offsets == list(range(low, low + len(served))), _first_gap(offsets, low)
    seqs = [r.seq for r in served]
    twice = sorted(s for s, n in collections.Counter(seqs).items() if n > 1)
    assert not twice, f"records served twice: {twice[:10]}"
    damaged = [r.offset for r in served if r.value != value_for(r.seq)]
    assert not damaged, f"damaged values at offsets {damaged[:10]}"
    at = {r.seq: r.offset for r in served}
    lost = sorted(s for s, o in acked.items() if o >= low and s not in at)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:10]}"
    moved = sorted((s, o, at[s]) for s, o in acked.items() if o >= low and at[s] != o)
    assert not moved, f"acknowledged records at other offsets (record, acked, served): {moved[:10]}"


def _first_gap(offsets: list[int], low: int) -> str:
    for i, offset in enumerate(offsets):
        if offset != low + i:
            return f"offsets not contiguous: expected {low + i} at position {i}, got {offset}"
    return "offsets not contiguous"


def check_all(bootstrap: str, topic: str, acked: dict[int, int], *, expect_low: int = 0) -> int:
    """consume_all + check_log; the number of records served."""
    low, served = consume_all(bootstrap, topic)
    check_log(acked, low, served, expect_low=expect_low)
    return len(served)


# ---- admin ----------------------------------------------------------------------------------


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})


def create_topic(bootstrap: str, topic: str, **configs: str) -> None:
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config=configs)
    client = admin(bootstrap)  # the futures fail if their client is gone first
    client.create_topics([new])[topic].result(30)


def create_topic_error(bootstrap: str, topic: str) -> KafkaError | None:
    """The error CreateTopics answered for `topic`, or None if it was created."""
    new = NewTopic(topic, num_partitions=1, replication_factor=1)
    client = admin(bootstrap)
    try:
        client.create_topics([new])[topic].result(30)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        return error
    return None


def delete_records(bootstrap: str, topic: str, before: int) -> int:
    """DeleteRecords on partition 0 below offset `before`; the low watermark it answered."""
    client = admin(bootstrap)
    ((_, future),) = client.delete_records([TopicPartition(topic, 0, before)]).items()
    return int(future.result(30).low_watermark)


def delete_topic(bootstrap: str, topic: str) -> None:
    client = admin(bootstrap)
    client.delete_topics([topic])[topic].result(30)


def topics(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=30).topics)


# ---- raw requests --------------------------------------------------------------------------


class RawClient:
    """One TCP connection speaking Kafka with kio's classes."""

    def __init__(self, port: int, timeout: float = RAW_TIMEOUT_S) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._correlation_id = 0

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation_id += 1
        request = encode_request(api_key, version, body, self._correlation_id, "fault-tests")
        self.sock.sendall(request)
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        payload = recv_exact(self.sock, size)
        cls = codec_for(api_key, version).response_type
        header, used = entity_reader(cls.__header_schema__)(payload, 0)  # type: ignore[attr-defined]
        assert header.correlation_id == self._correlation_id
        response, _ = entity_reader(cls)(payload, used)
        return response

    def api_versions(self) -> Any:
        body = api_versions_v3.ApiVersionsRequest(
            client_software_name="fault-tests", client_software_version="1"
        )
        return self.call(ApiKey.API_VERSIONS, 3, body)

    def produce(self, topic: str, value: bytes) -> int:
        """Produce one record (acks=all) to partition 0; the error code."""
        now = int(time.time() * 1000)
        records = build_batch([Record(offset=0, timestamp=now, key=None, value=value)])
        m = produce_v9
        request = m.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                m.TopicProduceData(
                    name=topic,
                    partition_data=(m.PartitionProduceData(index=0, records=Records(records)),),
                ),
            ),
        )
        ((partition,),) = (
            t.partition_responses for t in self.call(ApiKey.PRODUCE, 9, request).responses
        )
        return int(partition.error_code)

    def fetch_error(self, topic: str, offset: int = 0) -> int:
        """Fetch partition 0 of `topic` from `offset` (no waiting); the partition's error code."""
        m = fetch_v12
        partition = m.FetchPartition(
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=MiB,
        )
        request = m.FetchRequest(
            cluster_id=None,
            replica_id=-1,
            max_wait=datetime.timedelta(0),
            min_bytes=1,
            max_bytes=MiB,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(m.FetchTopic(topic=topic, partitions=(partition,)),),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = self.call(ApiKey.FETCH, 12, request)
        ((answer,),) = (t.partitions for t in response.responses)
        return int(answer.error_code)

    def partition_metadata(self, topic: str) -> tuple[Any, list[int]]:
        """(partition 0 of `topic` as Metadata v9 describes it, the node ids of the brokers)."""
        m = metadata_v9
        request = m.MetadataRequest(
            topics=(m.MetadataRequestTopic(name=topic),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = self.call(ApiKey.METADATA, 9, request)
        (described,) = response.topics
        partition = next(p for p in described.partitions if p.partition_index == 0)
        return partition, [int(b.node_id) for b in response.brokers]


def assert_offline(broker: BrokerProcess, topic: str) -> None:
    """The partition's directory is offline: produce and fetch refused with KAFKA_STORAGE_ERROR,
    Metadata shows it leaderless with this broker among its offline replicas, the log says so."""
    with RawClient(broker.port) as raw:
        error = raw.produce(topic, value_for(999_999_999))
        assert error == KAFKA_STORAGE_ERROR, f"produce answered error {error}, not 56"
        error = raw.fetch_error(topic)
        assert error == KAFKA_STORAGE_ERROR, f"fetch answered error {error}, not 56"
        partition, nodes = raw.partition_metadata(topic)
    assert int(partition.error_code) == LEADER_NOT_AVAILABLE, partition
    assert int(partition.leader_id) == -1, partition
    assert [int(n) for n in partition.offline_replicas] == nodes, partition
    assert "is offline" in broker.logs()


def leftovers(directory: Path) -> list[str]:
    """`*.tmp` files, and empty files that must never be empty: checkpoints and metadata."""
    found = []
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        if ".tmp" in path.name:
            found.append(f"{path.relative_to(directory)} (temporary file)")
        elif path.stat().st_size == 0 and ("checkpoint" in path.name or "metadata" in path.name):
            found.append(f"{path.relative_to(directory)} (empty)")
    return found
