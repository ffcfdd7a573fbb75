"""Fetch sessions (KIP-227) against a real broker: a session's life by hand (full fetch, empty
incremental fetches, long polls on every session partition, forgotten partitions, the session
errors, closing), then real consumers with sessions on (kafka-python, also held to a byte-rate
quota, whose throttled responses leave the session going) and without (librdkafka's
confluent-kafka, which sends no session) reading every record as written."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess, weir
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from raw_fetch import RawFetcher

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with the deprecated
    # importlib.resources.read_text (which calls open_text) while importing
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPartition

TIMEOUT = 30
PARTITIONS = 6


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("sessions") / "broker")
    process.start()
    yield process
    process.stop()


def create_topic(broker: BrokerProcess, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def produce(
    broker: BrokerProcess, topic: str, values: dict[int, list[bytes]], batch_size: int = 16384
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.size": batch_size})  # fmt: skip
    for partition, batch in values.items():
        for value in batch:
            producer.produce(topic, value, partition=partition)
    assert producer.flush(TIMEOUT) == 0


def test_a_session_by_hand(shared: BrokerProcess) -> None:
    topic = "by-hand"
    create_topic(shared, topic)
    produce(shared, topic, {0: [b"a", b"b"]})
    fetcher = RawFetcher(shared.port)
    offsets = {(topic, p): 0 for p in range(PARTITIONS)}

    full = fetcher.fetch(offsets, epoch=0)
    assert full.error_code == ErrorCode.none and full.session_id != 0
    assert set(full.partitions) == set(offsets)  # a full response: every partition
    assert full.partitions[(topic, 0)].next_offset == 2
    session = full.session_id

    # the fetch offset of partition 0 moved: only it is sent; nothing is new, nothing answered
    quiet = fetcher.fetch({(topic, 0): 2}, session_id=session, epoch=1)
    assert (quiet.error_code, quiet.session_id, quiet.partitions) == (ErrorCode.none, session, {})

    # an empty incremental fetch long-polls on every partition of the session
    later = threading.Timer(0.5, produce, (shared, topic, {3: [b"c"]}))
    later.start()
    started = time.monotonic()
    woken = fetcher.fetch({}, session_id=session, epoch=2, max_wait_ms=10_000)
    later.join()
    assert time.monotonic() - started < 8
    assert list(woken.partitions) == [(topic, 3)]
    assert woken.partitions[(topic, 3)].next_offset == 1
    assert woken.partitions[(topic, 3)].high_watermark == 1

    # a forgotten partition is no longer read
    forgetting = fetcher.fetch({(topic, 3): 1}, session_id=session, epoch=3,
                               forgotten=[(topic, 1)])  # fmt: skip
    assert forgetting.partitions == {}
    produce(shared, topic, {1: [b"d"], 2: [b"e"]})
    after = fetcher.fetch({}, session_id=session, epoch=4)
    assert list(after.partitions) == [(topic, 2)]

    wrong_epoch = fetcher.fetch({}, session_id=session, epoch=9)
    assert (wrong_epoch.error_code, wrong_epoch.session_id) == (
        ErrorCode.invalid_fetch_session_epoch, 0)  # fmt: skip
    unknown = fetcher.fetch({}, session_id=session + 1, epoch=5)
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found

    closed = fetcher.fetch({(topic, 0): 2}, session_id=session, epoch=-1)
    assert closed.error_code == ErrorCode.none and closed.session_id == 0
    gone = fetcher.fetch({}, session_id=session, epoch=5)
    assert gone.error_code == ErrorCode.fetch_session_id_not_found
    fetcher.close()


def test_a_sessionless_fetch_gets_every_partition(shared: BrokerProcess) -> None:
    topic = "sessionless"
    create_topic(shared, topic)
    fetcher = RawFetcher(shared.port)
    offsets = {(topic, p): 0 for p in range(PARTITIONS)}
    for _ in range(2):
        answer = fetcher.fetch(offsets)
        assert answer.session_id == 0 and set(answer.partitions) == set(offsets)
    fetcher.close()


def test_no_cache_slots_no_sessions(broker_factory: Callable[..., BrokerProcess]) -> None:
    broker = broker_factory("no-sessions", **{"max.incremental.fetch.session.cache.slots": 0})
    create_topic(broker, "no-sessions", 2)
    fetcher = RawFetcher(broker.port)
    answer = fetcher.fetch({("no-sessions", 0): 0, ("no-sessions", 1): 0}, epoch=0)
    fetcher.close()
    assert answer.error_code == ErrorCode.none and answer.session_id == 0
    assert len(answer.partitions) == 2


def produce_in_rounds(broker: BrokerProcess, topic: str, rounds: int) -> dict[int, list[bytes]]:
    """A few records to a few partitions at a time, a little apart, so that most incremental
    responses leave most partitions out. Returns what was written, by partition."""
    written: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for r in range(rounds):
        batch = {p: [b"%d-%d" % (r, p)] for p in (r % PARTITIONS, (r * 5 + 1) % PARTITIONS)}
        produce(broker, topic, batch)
        for p, values in batch.items():
            written[p].extend(values)
        time.sleep(0.05)
    return written


def consume_while_producing(
    broker: BrokerProcess, topic: str, poll: object, rounds: int = 40
) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
    read: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    written: dict[int, list[bytes]] = {}
    writer = threading.Thread(target=lambda: written.update(produce_in_rounds(broker, topic,
                                                                              rounds)))  # fmt: skip
    writer.start()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for partition, value in poll():  # type: ignore[operator]
            read[partition].append(value)
        if not writer.is_alive() and sum(map(len, read.values())) >= 2 * rounds:
            break
    writer.join()
    return written, read


def test_kafka_python_consumes_everything_with_a_session(shared: BrokerProcess) -> None:
    topic = "kafka-python-sessions"
    create_topic(shared, topic)
    consumer = KafkaConsumer(bootstrap_servers=shared.bootstrap, auto_offset_reset="earliest",
                             enable_incremental_fetch_sessions=True, fetch_max_wait_ms=200,
                             request_timeout_ms=TIMEOUT * 1000)  # fmt: skip
    consumer.assign([KafkaPartition(topic, p) for p in range(PARTITIONS)])

    def poll() -> list[tuple[int, bytes]]:
        batches = consumer.poll(timeout_ms=200)
        return [(tp.partition, r.value) for tp, records in batches.items() for r in records]

    written, read = consume_while_producing(shared, topic, poll)
    # the broker gave the consumer a session, and it kept it (no session error restarted it)
    handlers = consumer._fetcher._session_handlers  # kafka-python's per-broker session state
    sessions = [h.next_metadata for h in handlers.values()]
    consumer.close()
    assert read == written
    assert sessions and all(m.session_id != 0 and m.epoch > 10 for m in sessions)


def test_confluent_kafka_consumes_everything(shared: BrokerProcess) -> None:
    topic = "confluent-sessions"
    create_topic(shared, topic)
    consumer = Consumer({"bootstrap.servers": shared.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 200})  # fmt: skip
    consumer.assign([ConfluentPartition(topic, p, 0) for p in range(PARTITIONS)])

    def poll() -> list[tuple[int, bytes]]:
        message = consumer.poll(0.2)
        if message is None or message.error():
            return []
        return [(message.partition(), message.value())]

    written, read = consume_while_producing(shared, topic, poll)
    consumer.close()
    assert read == written


def test_a_throttled_kafka_python_consumer_keeps_its_session_and_misses_nothing(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    # the rate is measured over at least one window of one second (not Kafka's ten)
    shared = broker_factory("throttling", **{"quota.window.num": 2,
                                             "quota.window.size.seconds": 1})  # fmt: skip
    topic = "throttled-sessions"
    create_topic(shared, topic, 3)
    values = {p: [b"%d-%05d" % (p, i) + b"." * 500 for i in range(150)] for p in range(3)}
    produce(shared, topic, values, batch_size=1000)  # a batch a record: fetches stay small
    done = weir("quota", "alter", "--entity-type", "clients", "--entity-name", "slow-reader",
                "--add-config", "consumer_byte_rate=65536", "--bootstrap-server",
                shared.bootstrap)  # fmt: skip
    assert done.returncode == 0, done.stderr
    consumer = KafkaConsumer(bootstrap_servers=shared.bootstrap, client_id="slow-reader",
                             auto_offset_reset="earliest", fetch_max_bytes=16384,
                             max_partition_fetch_bytes=8192,
                             request_timeout_ms=TIMEOUT * 1000)  # fmt: skip
    consumer.assign([KafkaPartition(topic, p) for p in range(3)])
    read: dict[int, list[bytes]] = {p: [] for p in range(3)}
    deadline = time.monotonic() + TIMEOUT
    while sum(map(len, read.values())) < 450 and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=200).items():
            read[tp.partition].extend(r.value for r in records)
    throttled_ms = consumer.metrics()["consumer-metrics"]["throttle-time-max"]
    sessions = [h.next_metadata for h in consumer._fetcher._session_handlers.values()]
    consumer.close()
    assert read == values
    assert throttled_ms > 0
    assert sessions and all(m.session_id != 0 for m in sessions)
