"""A fetch whose record bytes are still being sent when their topic is deleted: the client gets
exactly the bytes it asked for (valid batches of the deleted topic, at their offsets), never an
error from a closed descriptor nor bytes of a file that took the descriptor's number."""

from __future__ import annotations

import datetime
import socket
import struct
import time

from broker_process import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.fetch.v4 import response as fetch_v4_response
from kio.serial import entity_reader
from kio.static.primitive import i8, i32, i64
from raw_requests import encode_request, recv_exact

from weir.protocol.apis import ApiKey
from weir.protocol.codec import codec_for
from weir.records import iter_batches, iter_records

TIMEOUT = 30
MESSAGES = 40_000
VALUE_BYTES = 500


def produce(broker: BrokerProcess, topic: str, tag: bytes) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for i in range(MESSAGES):
        producer.produce(topic, tag + b"%08d" % i + b"." * (VALUE_BYTES - len(tag) - 8),
                         partition=0)  # fmt: skip
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT) == 0


def fetch_request(topic: str, max_bytes: int) -> bytes:
    wanted = fetch_v4.FetchPartition(
        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(max_bytes)
    )
    body = fetch_v4.FetchRequest(
        replica_id=i32(-1), max_wait=datetime.timedelta(milliseconds=100), min_bytes=i32(1),
        max_bytes=i32(max_bytes), isolation_level=i8(0),
        topics=(fetch_v4.FetchTopic(topic=topic, partitions=(wanted,)),))  # fmt: skip
    return encode_request(ApiKey.FETCH, 4, body, correlation_id=7, client_id="slow-reader")


def test_bytes_in_flight_survive_their_topic_being_deleted_and_replaced(
    broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("doomed", 1, 1)])["doomed"].result(TIMEOUT)
    produce(broker, "doomed", b"doomed-")
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    reader.settimeout(TIMEOUT)
    reader.connect(("127.0.0.1", broker.port))
    reader.sendall(fetch_request("doomed", 16 * 1024 * 1024))
    (size,) = struct.unpack(">i", recv_exact(reader, 4))
    assert size > 8 * 1024 * 1024  # most of it is still to come: the broker is mid-sendfile
    first = recv_exact(reader, 4096)

    admin.delete_topics(["doomed"])["doomed"].result(TIMEOUT)
    admin.create_topics([NewTopic("usurper", 1, 1)])["usurper"].result(TIMEOUT)
    produce(broker, "usurper", b"usurper")  # new files, likely on the freed descriptor numbers
    time.sleep(0.2)

    payload = first + recv_exact(reader, size - len(first))
    reader.close()
    response_cls = codec_for(ApiKey.FETCH, 4).response_type
    header, used = entity_reader(response_cls.__header_schema__)(payload, 0)  # type: ignore[attr-defined]
    assert header.correlation_id == 7
    response, _ = entity_reader(fetch_v4_response.FetchResponse)(payload, used)
    [topic] = response.responses
    [partition] = topic.partitions
    assert partition.error_code == 0
    offsets = []
    for batch in iter_batches(bytes(partition.records), verify_crc=True):
        for record in iter_records(batch):
            assert record.value is not None and record.value.startswith(b"doomed-")
            assert record.value[7:15] == b"%08d" % record.offset
            offsets.append(record.offset)
    assert offsets == list(range(len(offsets))) and len(offsets) > 10_000
    assert "Bad file descriptor" not in broker.logs()
