"""A real broker fed bad input over raw TCP: it closes that connection or answers with Kafka's
error code, and keeps serving everyone else (checked each time with a fresh confluent_kafka
client on a new connection)."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import random
import resource
import socket
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_reader
from kio.static.primitive import Records
from raw_requests import RoundTripProbe, encode_request, recv_exact

from weir.protocol.apis import ADVERTISED, ApiKey
from weir.protocol.codec import codec_for
from weir.protocol.framing import frame, size_prefix
from weir.protocol.uvarint import encode_uvarint
from weir.records import Record, build_batch

TIMEOUT = 10.0
SMALL_REQUEST_LIMIT = 1024 * 1024
BrokerFactory = Callable[..., BrokerProcess]

# ---- raw protocol helpers ------------------------------------------------------------------------


def build(cls: type, **values: Any) -> Any:
    """An instance of a kio class from the values its version has fields for."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def schema(api_key: int, version: int, kind: str = "request") -> Any:
    name = codec_for(api_key, version).request_type.__module__.rsplit(".", 2)[0]
    return importlib.import_module(f"{name}.v{version}.{kind}")


def read_response(sock: socket.socket, api_key: int, version: int, correlation_id: int) -> Any:
    """One response: size, the response header (v0 or v1 as kio says), then the body."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    payload = recv_exact(sock, size)
    cls = codec_for(api_key, version).response_type
    header, used = entity_reader(cls.__header_schema__)(payload, 0)  # type: ignore[attr-defined]
    assert header.correlation_id == correlation_id
    body, body_size = entity_reader(cls)(payload, used)
    assert used + body_size == size
    return body


def produce_v9(topic: str, records: bytes, acks: int = -1) -> Any:
    """A Produce v9 request body: one batch for partition 0 of `topic`."""
    m = schema(ApiKey.PRODUCE, 9)
    data = m.PartitionProduceData(index=0, records=Records(records))
    return m.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(data,)),),
    )


class RawClient:
    """One raw TCP connection speaking Kafka with kio's classes."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT)
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, body, self._correlation_id))
        return read_response(self.sock, api_key, version, self._correlation_id)

    def produce(self, topic: str, records: bytes, acks: int = -1) -> Any:
        response = self.call(ApiKey.PRODUCE, 9, produce_v9(topic, records, acks))
        (topic_response,) = response.responses
        assert topic_response.name == topic
        (partition,) = topic_response.partition_responses
        assert partition.index == 0
        return partition

    def create_topic(self, topic: str, **configs: str) -> None:
        m = schema(ApiKey.CREATE_TOPICS, 7)
        request = m.CreateTopicsRequest(
            topics=(
                m.CreatableTopic(
                    name=topic,
                    num_partitions=1,
                    replication_factor=1,
                    assignments=(),
                    configs=tuple(
                        m.CreatableTopicConfig(name=k.replace("_", "."), value=v)
                        for k, v in configs.items()
                    ),
                ),
            ),
            timeout=datetime.timedelta(seconds=5),
            validate_only=False,
        )
        (result,) = self.call(ApiKey.CREATE_TOPICS, 7, request).topics
        assert result.error_code == ErrorCode.none, result.error_message

    def list_offset(self, topic: str, timestamp: int) -> int:
        m = schema(ApiKey.LIST_OFFSETS, 7)
        request = m.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                m.ListOffsetsTopic(
                    name=topic,
                    partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=timestamp),),
                ),
            ),
        )
        ((partition,),) = (t.partitions for t in self.call(ApiKey.LIST_OFFSETS, 7, request).topics)
        assert partition.error_code == ErrorCode.none
        return int(partition.offset)

    def metadata(self, version: int, topic: str) -> Any:
        m = schema(ApiKey.METADATA, version)
        request = build(
            m.MetadataRequest,
            topics=(build(m.MetadataRequestTopic, name=topic, topic_id=None),),
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return self.call(ApiKey.METADATA, version, request)


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[Callable[[], RawClient]]:
    opened: list[RawClient] = []

    def connect() -> RawClient:
        client = RawClient(broker)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        client.close()


def assert_closed_by_broker(sock: socket.socket) -> None:
    """The broker hangs up: EOF (or a reset if it left our bytes unread), never a timeout."""
    try:
        while data := sock.recv(65536):
            pytest.fail(f"expected the broker to close the connection, got {data!r}")
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the broker left the connection open for {TIMEOUT}s")


def assert_still_serves(broker: BrokerProcess, topic: str | None = None) -> None:
    """A fresh confluent_kafka producer and consumer round-trip a record."""
    topic = topic or f"after-{uuid.uuid4().hex[:12]}"
    value = uuid.uuid4().bytes
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    delivered: list[Any] = []
    producer.produce(topic, value=value, on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(30) == 0
    ((error, message),) = delivered
    assert error is None, error
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bad-input",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, message.offset())])
        received = consumer.poll(30)
        assert received is not None and received.error() is None, received
        assert received.value() == value
    finally:
        consumer.close()
    assert "Traceback" not in broker.logs()


def batch(value: bytes, count: int = 1) -> bytes:
    now = int(time.time() * 1000)
    records = [Record(offset=i, timestamp=now, key=b"k", value=value) for i in range(count)]
    return build_batch(records)


# ---- bytes that are not Kafka --------------------------------------------------------------------

GARBAGE = {
    "negative-size": b"\xff" * 64,
    "http": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "tls-client-hello": bytes.fromhex("160301020001000200030300") + bytes(range(64)),
    "zero-length-frame": size_prefix(0),
    "short-frame": frame(b"\x00\x03\x00"),
    "framed-random": frame(b"\x7f\xf0" + random.Random(7).randbytes(500)),
    "random-with-valid-metadata-header": frame(
        struct.pack(">hhih", ApiKey.METADATA, 12, 1, 3) + random.Random(11).randbytes(300)
    ),
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_bytes_close_the_connection(broker: BrokerProcess, garbage: bytes) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(garbage)
        assert_closed_by_broker(sock)
    assert_still_serves(broker)


def test_unframed_random_bytes_then_half_close(broker: BrokerProcess) -> None:
    """The first four bytes read as a negative size: the broker may hang up before the rest is
    sent."""
    rng = random.Random(1234)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        try:
            for _ in range(16):
                sock.sendall(rng.randbytes(4096))
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed already, with our bytes unread
        assert_closed_by_broker(sock)
    assert_still_serves(broker)


def test_a_truncated_frame_then_close(broker: BrokerProcess, raw: Callable[[], RawClient]) -> None:
    request = encode_request(ApiKey.METADATA, 1, schema(ApiKey.METADATA, 1).MetadataRequest(
        topics=None), correlation_id=1)  # fmt: skip
    for cut in (1, 3, 4, 7, len(request) - 1):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
            sock.sendall(request[:cut])
    assert raw().metadata(1, "t").brokers[0].port == broker.port
    assert_still_serves(broker)


def test_an_oversized_frame_is_refused_from_its_size_alone(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory("small", **{"socket.request.max.bytes": SMALL_REQUEST_LIMIT})
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(size_prefix(SMALL_REQUEST_LIMIT + 1))  # and not one byte of payload
        assert_closed_by_broker(sock)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(size_prefix(SMALL_REQUEST_LIMIT + 1) + b"\0" * 65536)
        assert_closed_by_broker(sock)
    assert "socket.request.max.bytes=1048576" in broker.logs()
    assert_still_serves(broker)


def produce_request_of_size(topic: str, size: int) -> bytes:
    """A framed Produce v9 request whose payload is exactly `size` bytes."""

    def encode(value_size: int) -> bytes:
        body = produce_v9(topic, batch(b"v" * value_size))
        return encode_request(ApiKey.PRODUCE, 9, body, correlation_id=5)

    value_size = size
    for _ in range(5):  # each step corrects by the difference; varint widths settle at once
        request = encode(value_size)
        if len(request) - 4 == size:
            return request
        value_size += size - (len(request) - 4)
    raise AssertionError(f"no produce request of exactly {size} bytes")


def test_a_frame_at_the_request_limit_is_read(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("small", **{"socket.request.max.bytes": SMALL_REQUEST_LIMIT})
    with RawClient(broker) as client:
        client.create_topic("limit")
        client.sock.sendall(produce_request_of_size("limit", SMALL_REQUEST_LIMIT))
        response = read_response(client.sock, ApiKey.PRODUCE, 9, 5)
        (partition,) = response.responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (ErrorCode.none, 0)
        client.sock.sendall(produce_request_of_size("limit", SMALL_REQUEST_LIMIT + 1))
        assert_closed_by_broker(client.sock)
    assert_still_serves(broker, "limit")


# ---- requests the broker does not serve ---------------------------------------------------------


def header_v1(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    client_id = b"bad-input-test"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


@pytest.mark.parametrize(
    "api_key", [min(set(api_key_map) - set(ADVERTISED)), 1000, -1], ids=["unserved", "1000", "-1"]
)
def test_an_unknown_api_key_closes_the_connection(broker: BrokerProcess, api_key: int) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(frame(header_v1(api_key, 0) + b"\0" * 16))
        assert_closed_by_broker(sock)
    assert_still_serves(broker)


@pytest.mark.parametrize("version", [13, 99, -1])
def test_an_unsupported_metadata_version_closes_the_connection(
    broker: BrokerProcess, version: int
) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(frame(header_v1(ApiKey.METADATA, version) + b"\0\0\0\0"))
        assert_closed_by_broker(sock)
    assert_still_serves(broker)


def test_requests_before_a_bad_one_are_answered_in_order_then_it_closes(
    broker: BrokerProcess,
) -> None:
    m = schema(ApiKey.METADATA, 1)
    good = [encode_request(ApiKey.METADATA, 1, m.MetadataRequest(topics=None), cid)
            for cid in (41, 43)]  # fmt: skip
    bad = frame(header_v1(ApiKey.METADATA, 99, correlation_id=42))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(b"".join(good) + bad)  # one write: the broker reads all three at once
        assert read_response(sock, ApiKey.METADATA, 1, 41).brokers[0].port == broker.port
        assert read_response(sock, ApiKey.METADATA, 1, 43).brokers[0].port == broker.port
        assert_closed_by_broker(sock)
    assert_still_serves(broker)


@pytest.mark.parametrize("version", [4, 99])
def test_api_versions_of_an_unsupported_version_answers_v0_with_the_table(
    broker: BrokerProcess, version: int
) -> None:
    # A newer client sends its own newest ApiVersions; Kafka answers v0 with error 35 and its
    # table so the client can retry with a version both sides know.
    body = b"\x06client\x041.0\x00"  # compact strings and empty tagged fields, as v3+ has
    request = frame(header_v1(ApiKey.API_VERSIONS, version, correlation_id=99) + b"\x00" + body)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(request)
        response = read_response(sock, ApiKey.API_VERSIONS, 0, 99)
        assert response.error_code == ErrorCode.unsupported_version
        table = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert table == {int(k): v for k, v in ADVERTISED.items()}
        # the connection stays open for the retry
        m = schema(ApiKey.API_VERSIONS, 3)
        retry = m.ApiVersionsRequest(client_software_name="c", client_software_version="1")
        sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, retry, correlation_id=100))
        response = read_response(sock, ApiKey.API_VERSIONS, 3, 100)
        assert response.error_code == ErrorCode.none
        assert {k.api_key for k in response.api_keys} == {int(k) for k in ADVERTISED}
    assert_still_serves(broker)


def response_or_close(sock: socket.socket) -> bytes | None:
    """The next response's payload, or None if the broker closed the connection instead."""
    try:
        head = sock.recv(4)
    except ConnectionResetError:
        return None
    except TimeoutError:
        pytest.fail(f"neither a response nor a close in {TIMEOUT}s")
    if not head:
        return None
    head += recv_exact(sock, 4 - len(head))
    return recv_exact(sock, struct.unpack(">i", head)[0])


def legacy_message_set(value: bytes) -> bytes:
    """One magic-1 message, as Produce v2 carries."""
    body = struct.pack(">bbq", 1, 0, int(time.time() * 1000))
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def legacy_produce(topic: str, version: int, acks: int = -1, correlation_id: int = 7) -> bytes:
    """A framed Produce v0-2 request for partition 0 (kio has no schema for these versions)."""
    messages = legacy_message_set(b"old")
    body = struct.pack(">hii", acks, 5000, 1) + struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">iii", 1, 0, len(messages)) + messages
    return frame(header_v1(ApiKey.PRODUCE, version, correlation_id) + body)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_below_v3_is_answered_unsupported_version_and_not_appended(
    broker: BrokerProcess, raw: Callable[[], RawClient], version: int
) -> None:
    topic = f"legacy-{version}"
    client = raw()
    client.create_topic(topic)
    client.sock.sendall(legacy_produce(topic, version, correlation_id=7))
    answer = response_or_close(client.sock)
    assert answer is not None, "Kafka 4 answers Produce v0-2 with UNSUPPORTED_VERSION"
    # v0-2 response: correlation id, [topic [partition error base_offset (v2: append time)]],
    # (v1+) throttle time
    partition = struct.pack(">ihq", 0, ErrorCode.unsupported_version.value, -1)
    partition += struct.pack(">q", -1) if version >= 2 else b""
    expected = struct.pack(">ii", 7, 1) + struct.pack(">h", len(topic)) + topic.encode()
    expected += struct.pack(">i", 1) + partition + (struct.pack(">i", 0) if version else b"")
    assert answer == expected
    assert client.list_offset(topic, -1) == 0  # nothing appended; the connection is still open
    assert_still_serves(broker)


@pytest.mark.parametrize("size", [8, 9])
def test_a_legacy_produce_header_cut_short_is_a_protocol_error_not_a_crash(
    broker: BrokerProcess, size: int
) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(frame(header_v1(ApiKey.PRODUCE, 1)[:size]))
        assert_closed_by_broker(sock)
    assert "internal error" not in broker.logs()
    assert_still_serves(broker)


def next_is_close_or_metadata(sock: socket.socket, correlation_id: int) -> bool:
    """After an acks=0 produce, ask for metadata: True if the broker hung up first; fails if
    anything but that metadata response comes back (no response is owed for acks=0)."""
    m = schema(ApiKey.METADATA, 1)
    try:
        sock.sendall(
            encode_request(ApiKey.METADATA, 1, m.MetadataRequest(topics=()), correlation_id)
        )
    except (BrokenPipeError, ConnectionResetError):
        return True
    answer = response_or_close(sock)
    if answer is None:
        return True
    assert answer[:4] == struct.pack(">i", correlation_id), "a response nobody asked for"
    return False


def test_an_acks_0_produce_of_a_corrupt_batch_closes_the_connection(
    raw: Callable[[], RawClient],
) -> None:
    client = raw()
    client.create_topic("acks0")
    damaged = bytearray(batch(b"payload"))
    damaged[-1] ^= 0x01
    request = produce_v9("acks0", bytes(damaged), acks=0)
    client.sock.sendall(encode_request(ApiKey.PRODUCE, 9, request, correlation_id=70))
    assert next_is_close_or_metadata(client.sock, 71)


def test_an_acks_0_legacy_produce_gets_no_response_but_a_close(
    raw: Callable[[], RawClient],
) -> None:
    client = raw()
    client.create_topic("acks0-legacy")
    client.sock.sendall(legacy_produce("acks0-legacy", 1, acks=0, correlation_id=80))
    assert next_is_close_or_metadata(client.sock, 81)


@pytest.mark.parametrize(
    "request_bytes",
    [
        header_v1(ApiKey.METADATA, 12) + b"\0" + encode_uvarint(2**35 - 1),
        header_v1(ApiKey.CREATE_TOPICS, 2) + struct.pack(">i", 2**31 - 1),
    ],
    ids=["metadata-v12-compact-count", "create-topics-v2-int32-count"],
)
def test_an_array_count_too_large_to_allocate_closes_only_that_connection(
    broker: BrokerProcess, request_bytes: bytes
) -> None:
    assert broker.process is not None
    limit = 4 << 30  # a broker with 4 GiB of address space, so any machine behaves alike
    resource.prlimit(broker.process.pid, resource.RLIMIT_AS, (limit, limit))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
        sock.sendall(frame(request_bytes))
        assert_closed_by_broker(sock)
    time.sleep(0.2)
    assert broker.process.poll() is None, f"the broker died:\n{broker.logs()[-600:]}"
    assert_still_serves(broker)


# ---- record batches the broker must not append --------------------------------------------------

# Offsets inside a v2 batch header: CRC at 17..20, covering attributes (21) to the end.
CRC_COVERED = {"attributes": 21, "last-offset-delta": 25, "producer-id": 43,
               "record-count": 60, "first-record": 61, "last-byte": -1}  # fmt: skip


def test_a_batch_with_a_bad_crc_is_corrupt_and_not_appended(
    broker: BrokerProcess, raw: Callable[[], RawClient]
) -> None:
    client = raw()
    client.create_topic("crc")
    good = batch(b"payload", count=3)
    for name, position in {"crc": 17, **CRC_COVERED}.items():
        damaged = bytearray(good)
        damaged[position] ^= 0x01
        partition = client.produce("crc", bytes(damaged))
        assert partition.error_code == ErrorCode.corrupt_message, name
        assert partition.base_offset == -1
    assert client.list_offset("crc", -1) == 0  # latest: nothing was appended
    assert client.list_offset("crc", -2) == 0
    assert client.produce("crc", good).base_offset == 0  # the same connection still works
    assert client.list_offset("crc", -1) == 3
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "crc",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition("crc", 0, 0)])
        values = []
        while len(values) < 3:
            message = consumer.poll(30)
            assert message is not None and message.error() is None
            values.append((message.offset(), message.value()))
        assert values == [(0, b"payload"), (1, b"payload"), (2, b"payload")]
        assert consumer.poll(0.5) is None
    finally:
        consumer.close()
    assert_still_serves(broker)


def test_a_batch_over_max_message_bytes_is_too_large(
    broker: BrokerProcess, raw: Callable[[], RawClient]
) -> None:
    client = raw()
    limit = len(batch(b"x" * 1000))
    client.create_topic("big", max_message_bytes=str(limit))
    partition = client.produce("big", batch(b"x" * 1001))
    assert partition.error_code == ErrorCode.message_too_large
    assert client.list_offset("big", -1) == 0
    partition = client.produce("big", batch(b"x" * 1000))  # exactly the limit is allowed
    assert partition.error_code == ErrorCode.none
    assert partition.base_offset == 0
    assert client.list_offset("big", -1) == 1
    assert_still_serves(broker, "big")


def test_a_batch_over_the_broker_message_max_bytes_is_too_large(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory("tight", **{"message.max.bytes": 4096})
    client = RawClient(broker)
    try:
        client.create_topic("tight")
        assert client.produce("tight", batch(b"x" * 5000)).error_code == (
            ErrorCode.message_too_large
        )
        assert client.list_offset("tight", -1) == 0
    finally:
        client.close()
    assert_still_serves(broker, "tight")


def test_produce_to_a_missing_topic_without_auto_create(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("noauto", **{"auto.create.topics.enable": False})
    client = RawClient(broker)
    try:
        partition = client.produce("nowhere", batch(b"lost"))
        assert partition.error_code == ErrorCode.unknown_topic_or_partition
        for version in (1, 4, 12):  # v4+ ask for auto-creation, which the broker refuses
            (topic,) = client.metadata(version, "nowhere").topics
            assert topic.error_code == ErrorCode.unknown_topic_or_partition, version
            assert topic.partitions == ()
        client.create_topic("somewhere")
    finally:
        client.close()
    assert_still_serves(broker, "somewhere")


# ---- many connections at once ------------------------------------------------------------------


def still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""  # data nobody asked for also counts as open
    except BlockingIOError:
        return True
    except ConnectionError:
        return False
    finally:
        sock.setblocking(True)


def test_a_slow_garbage_connection_does_not_hold_up_others(broker: BrokerProcess) -> None:
    # An unknown API key, so that once the frame is whole the broker must close.
    payload = header_v1(32767, 0) + random.Random(3).randbytes(200)
    others_done = threading.Event()
    outcome: dict[str, Any] = {}

    def trickle() -> None:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT) as sock:
            sock.sendall(size_prefix(len(payload)))
            sent = 0
            while not others_done.is_set() and sent < len(payload) - 1:
                sock.sendall(payload[sent : sent + 1])
                sent += 1
                time.sleep(0.02)
            others_done.wait(TIMEOUT * 6)  # the last byte waits until the others are done
            outcome["open_before_last_byte"] = still_open(sock)
            sock.sendall(payload[sent:])
            try:
                assert_closed_by_broker(sock)
                outcome["closed_after"] = True
            except BaseException as exc:  # reported by the main thread
                outcome["closed_after"] = exc

    idle = [socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT)
            for _ in range(5)]  # fmt: skip
    for i, sock in enumerate(idle):
        sock.sendall(size_prefix(100) + b"\0" * i)  # partial frames that never finish
    slow = threading.Thread(target=trickle)
    slow.start()
    try:
        for round_ in range(3):
            assert_still_serves(broker, f"busy-{round_}")
            with RawClient(broker) as client:
                assert client.metadata(12, f"busy-{round_}").topics[0].error_code == 0
        assert all(still_open(sock) for sock in idle), "a partial frame is not a reason to close"
    finally:
        others_done.set()
        slow.join(TIMEOUT * 2)
        for sock in idle:
            sock.close()
    assert outcome == {"open_before_last_byte": True, "closed_after": True}
    assert_still_serves(broker)


# ---- partition counts, internal topics, colliding names ------------------------------------

MAX_INT32 = 2**31 - 1


def list_topic_names(client: RawClient) -> list[str]:
    """Every topic, from a Metadata v12 asking for all."""
    m = schema(ApiKey.METADATA, 12)
    request = m.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)  # fmt: skip
    return sorted(t.name for t in client.call(ApiKey.METADATA, 12, request).topics)


def create_topics_v7(name: str, partitions: int) -> Any:
    m = schema(ApiKey.CREATE_TOPICS, 7)
    topic = m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                             assignments=(), configs=())  # fmt: skip
    return m.CreateTopicsRequest(
        topics=(topic,), timeout=datetime.timedelta(seconds=30), validate_only=False
    )


def create_partitions_v3(name: str, count: int) -> Any:
    m = schema(ApiKey.CREATE_PARTITIONS, 3)
    return m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name=name, count=count, assignments=None),),
        timeout=datetime.timedelta(seconds=30),
        validate_only=False,
    )


def test_a_partition_count_of_max_int32_is_refused_at_once_and_sigterm_still_stops_the_broker(
    broker: BrokerProcess, raw: Callable[[], RawClient], figure: Callable[..., None]
) -> None:
    client = raw()
    client.create_topic("existing")
    with RoundTripProbe(broker.port) as probe:
        started = time.monotonic()
        (created,) = client.call(
            ApiKey.CREATE_TOPICS, 7, create_topics_v7("huge", MAX_INT32)
        ).topics
        (grown,) = client.call(
            ApiKey.CREATE_PARTITIONS, 3, create_partitions_v3("existing", MAX_INT32)
        ).results
        answered = time.monotonic() - started
    assert probe.failure is None
    figure("CreateTopics and CreatePartitions of 2**31-1 partitions answered in", answered)
    figure("other client's longest ApiVersions round trip meanwhile", probe.longest)
    assert created.error_code == ErrorCode.policy_violation, created.error_message
    assert "max.partitions.per.broker=" in created.error_message
    assert grown.error_code == ErrorCode.policy_violation, grown.error_message
    assert answered < TIMEOUT
    (existing,) = client.metadata(12, "existing").topics
    assert len(existing.partitions) == 1
    assert list_topic_names(client) == ["existing"]
    assert_still_serves(broker)
    started = time.monotonic()
    assert broker.stop() == 0
    assert time.monotonic() - started < TIMEOUT


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
def test_an_internal_topic_is_neither_created_nor_auto_created_by_a_client(
    broker: BrokerProcess, raw: Callable[[], RawClient], name: str
) -> None:
    client = raw()
    (created,) = client.call(ApiKey.CREATE_TOPICS, 7, create_topics_v7(name, 1)).topics
    assert created.error_code == ErrorCode.invalid_request
    assert created.error_message == f"Creation of internal topic {name} is prohibited."
    (listed,) = client.metadata(12, name).topics  # allows auto-creation
    assert listed.error_code == ErrorCode.unknown_topic_or_partition
    assert listed.partitions == ()
    assert_still_serves(broker)


def test_a_name_colliding_with_an_existing_topic_is_not_auto_created(
    broker: BrokerProcess, raw: Callable[[], RawClient]
) -> None:
    client = raw()
    client.create_topic("foo.bar")
    (listed,) = client.metadata(12, "foo_bar").topics
    assert listed.error_code == ErrorCode.invalid_topic_exception
    (created,) = client.call(ApiKey.CREATE_TOPICS, 7, create_topics_v7("foo_bar", 1)).topics
    assert created.error_code == ErrorCode.invalid_topic_exception
    assert created.error_message == "Topic 'foo_bar' collides with existing topics: foo.bar"
    assert [t.name for t in client.metadata(12, "foo.bar").topics] == ["foo.bar"]
