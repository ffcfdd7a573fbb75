"""kafka-python against a real broker: every codec, offsets by time, the admin API (incremental
and legacy AlterConfigs), and its default idempotent producer through a broker restart."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess
from interop import (
    CODECS,
    LATEST_RECORD,
    SHARED_BROKER_CONFIG,
    TIMESTAMPS,
    DeliveryLog,
    Message,
    assert_acknowledged_present,
    assert_same_by_partition,
    first_offset_at_or_after,
    group,
    make_messages,
    produce_through_restart,
    shared_broker,
    timestamp_queries,
)

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with the deprecated
    # importlib.resources.read_text (which calls open_text) while importing
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    import kafka.errors as errors
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.protocol.consumer import OffsetSpec

TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = shared_broker(tmp_path_factory.mktemp("kafka-python"))
    yield process
    process.stop()


@pytest.fixture
def admin(shared: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=shared.bootstrap, request_timeout_ms=TIMEOUT_MS)
    yield client
    client.close()


def create_topic(admin: KafkaAdminClient, name: str, partitions: int, **configs: str) -> None:
    admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1,
                                "configs": configs}})  # fmt: skip


def topic_configs(admin: KafkaAdminClient, name: str) -> dict[str, dict[str, object]]:
    result = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all"
    )
    return result["topic"][name]


def alter(admin: KafkaAdminClient, name: str, configs: dict[str, object], **kw: object) -> str:
    """The broker's answer for the one resource: 'OK' or the error."""
    result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, configs)], **kw)
    return str(result["topic"][name])


def partition_counts(admin: KafkaAdminClient) -> dict[str, int]:
    return {t["name"]: len(t["partitions"]) for t in admin.describe_topics()}


def new_consumer(broker: BrokerProcess) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         request_timeout_ms=TIMEOUT_MS)  # fmt: skip


def consume_all(broker: BrokerProcess, topic: str, partitions: int) -> dict[int, list[Message]]:
    """Every message from the beginning up to each partition's end offset."""
    consumer = new_consumer(broker)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: end for tp, end in consumer.end_offsets(tps, TIMEOUT_MS).items()}
        consumer.assign(tps)  # no group: positions start at auto_offset_reset
        out: dict[int, list[Message]] = {p: [] for p, end in ends.items() if end > 0}
        next_offset = dict.fromkeys(ends, 0)
        while any(next_offset[p] < ends[p] for p in ends):
            polled = consumer.poll(timeout_ms=TIMEOUT_MS)
            assert polled, f"nothing consumed in {TIMEOUT_MS} ms; at {next_offset}, ends {ends}"
            for records in polled.values():
                for r in records:
                    assert r.offset == next_offset[r.partition], "offsets skip or repeat"
                    next_offset[r.partition] = r.offset + 1
                    out[r.partition].append(Message(r.key, r.value, tuple(r.headers)))
        return out
    finally:
        consumer.close()


# ---- produce and fetch under every codec ---------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_keyed_messages_with_headers_come_back_byte_identical(
    shared: BrokerProcess, admin: KafkaAdminClient, codec: str
) -> None:
    topic = f"round-trip-{codec}"
    create_topic(admin, topic, 3)
    # kafka-python refuses null header values: "All headers items must be (str, bytes) tuples"
    messages = make_messages(f"kafka-python-{codec}", 300, null_headers=False)
    producer = KafkaProducer(bootstrap_servers=shared.bootstrap, linger_ms=20, acks="all",
                             compression_type=None if codec == "none" else codec)  # fmt: skip
    futures = [
        producer.send(topic, key=m.key, value=m.value, headers=list(m.headers)) for m in messages
    ]
    producer.flush(TIMEOUT_MS / 1000)
    placed = [f.get(TIMEOUT_MS / 1000).partition for f in futures]
    producer.close()
    produced = group(zip(placed, messages, strict=True))
    assert len(produced) == 3, "keyed messages should spread over all partitions"
    assert_same_by_partition(consume_all(shared, topic, 3), produced)


# ---- offsets by time, earliest and latest -------------------------------------------------


def test_offsets_for_times_finds_the_first_offset_at_or_after_the_timestamp(
    shared: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = "by-time"
    create_topic(admin, topic, 1, **{"segment.bytes": "200"})  # a segment file per batch or so
    producer = KafkaProducer(bootstrap_servers=shared.bootstrap, linger_ms=20)
    for i, ts in enumerate(TIMESTAMPS):
        producer.send(topic, key=b"k", value=b"at-%d" % i, partition=0, timestamp_ms=ts)
        if i >= 3:  # the first four share a batch, the rest are a batch each
            producer.flush(TIMEOUT_MS / 1000)
    producer.close()

    tp = TopicPartition(topic, 0)
    consumer = new_consumer(shared)
    try:
        assert consumer.beginning_offsets([tp], TIMEOUT_MS) == {tp: 0}
        assert consumer.end_offsets([tp], TIMEOUT_MS) == {tp: len(TIMESTAMPS)}
        for query in timestamp_queries(TIMESTAMPS):
            found = consumer.offsets_for_times({tp: query}, TIMEOUT_MS)[tp]
            expected = first_offset_at_or_after(TIMESTAMPS, query)
            if expected is None:
                assert found is None, f"timestamp {query}"
            else:
                assert found.offset == expected, f"timestamp {query}"
                assert found.timestamp == TIMESTAMPS[expected]
        newest = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
        assert (newest.offset, newest.timestamp) == (LATEST_RECORD, max(TIMESTAMPS))

        admin.delete_records({tp: 3})
        assert consumer.beginning_offsets([tp], TIMEOUT_MS) == {tp: 3}
        assert consumer.offsets_for_times({tp: TIMESTAMPS[1]}, TIMEOUT_MS)[tp].offset == 3
    finally:
        consumer.close()


# ---- admin ---------------------------------------------------------------------------------


def test_topic_lifecycle_through_the_admin_client(
    shared: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = "admin-lifecycle"
    create_topic(admin, topic, 2, **{"retention.ms": "3600000", "cleanup.policy": "compact"})
    assert partition_counts(admin)[topic] == 2
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["segment.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"

    changes = {"retention.ms": "7200000", "cleanup.policy": (AlterConfigOp.DELETE, None)}
    assert alter(admin, topic, changes, incremental=True) == "OK"
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"]["value"] == "7200000"
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"

    # legacy AlterConfigs replaces the whole override set; kafka-python resends the others
    assert alter(admin, topic, {"max.message.bytes": "4096"}, incremental=False) == "OK"
    configs = topic_configs(admin, topic)
    assert configs["max.message.bytes"]["value"] == "4096"
    assert configs["retention.ms"]["value"] == "7200000"

    admin.create_partitions({topic: 5})
    assert partition_counts(admin)[topic] == 5
    producer = KafkaProducer(bootstrap_servers=shared.bootstrap)
    for partition in (0, 4):  # an old partition and a new one
        producer.send(topic, b"to be deleted", partition=partition).get(TIMEOUT_MS / 1000)
    producer.close()

    admin.delete_topics([topic])
    assert topic not in admin.list_topics()

    create_topic(admin, topic, 1)  # the name is free again, and nothing of the old topic is left
    assert partition_counts(admin)[topic] == 1
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    assert "retention.ms" not in modified["topic"][topic]
    consumer = new_consumer(shared)
    try:
        assert consumer.end_offsets([TopicPartition(topic, 0)], TIMEOUT_MS) == {
            TopicPartition(topic, 0): 0
        }
    finally:
        consumer.close()


@pytest.mark.parametrize("name", ["has space", "slash/in/name", "..", "x" * 250, "ümlaut"])
def test_an_invalid_topic_name_is_refused(admin: KafkaAdminClient, name: str) -> None:
    with pytest.raises(errors.InvalidTopicError):
        create_topic(admin, name, 1)
    assert name not in admin.list_topics()


@pytest.mark.parametrize(
    "config",
    [{"retention.ms": "soon"}, {"segment.bytes": "-5"}, {"cleanup.policy": "shred"},
     {"no.such.config": "1"}],
)  # fmt: skip
def test_a_bad_config_value_is_refused(admin: KafkaAdminClient, config: dict[str, str]) -> None:
    with pytest.raises(errors.InvalidConfigurationError):
        create_topic(admin, "bad-config", 1, **config)
    assert "bad-config" not in admin.list_topics()


@pytest.mark.parametrize("incremental", [True, False])
def test_a_bad_config_change_is_refused_and_changes_nothing(
    admin: KafkaAdminClient, incremental: bool
) -> None:
    topic = f"bad-config-change-{incremental}"
    create_topic(admin, topic, 1, **{"retention.ms": "60000"})
    answer = alter(admin, topic, {"retention.ms": "120000", "segment.ms": "yesterday"},
                   incremental=incremental)  # fmt: skip
    assert answer.startswith("[Error 40] InvalidConfigurationError"), answer
    assert topic_configs(admin, topic)["retention.ms"]["value"] == "60000"


def test_partition_reassignments_on_a_single_node(admin: KafkaAdminClient) -> None:
    """One broker holds every replica: a target of that broker is met at once, any other
    broker is refused, nothing is ever moving."""
    create_topic(admin, "reassign-one", 1)
    tp = TopicPartition("reassign-one", 0)
    [node] = [b["broker_id"] for b in admin.describe_cluster()["brokers"]]
    assert admin.alter_partition_reassignments({tp: [node]}) == {tp: None}
    assert admin.alter_partition_reassignments({tp: [node + 5]}) == {
        tp: errors.InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: None}) == {
        tp: errors.NoReassignmentInProgressError}
    unknown = TopicPartition("reassign-none", 0)
    assert admin.alter_partition_reassignments({unknown: [node]}) == {
        unknown: errors.UnknownTopicOrPartitionError}
    assert admin.list_partition_reassignments() == {}


def test_creating_an_existing_topic_is_refused(admin: KafkaAdminClient) -> None:
    create_topic(admin, "exists-already", 2)
    with pytest.raises(errors.TopicAlreadyExistsError):
        create_topic(admin, "exists-already", 4)
    assert partition_counts(admin)["exists-already"] == 2


# ---- a broker restart under the (default) idempotent producer ------------------------------


def produce_through_restart_idempotently(broker: BrokerProcess, topic: str) -> DeliveryLog:
    deliveries = DeliveryLog()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5,
                             compression_type="gzip", request_timeout_ms=TIMEOUT_MS)  # fmt: skip
    assert producer.config["enable_idempotence"], "kafka-python's default"

    def send(value: bytes) -> None:
        future = producer.send(topic, key=value[-3:], value=value)
        future.add_callback(lambda _metadata: deliveries.on_acked(value))
        future.add_errback(lambda exc: deliveries.on_failed(value, exc))

    produce_through_restart(broker, send, deliveries, deliveries.wait)
    producer.close()
    return deliveries


@pytest.fixture
def leaked_sockets_collected(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """kafka-python 3.0.12 leaks the socket of every refused connect (kafka/net/inet.py,
    KafkaNetSocket.connect never closes it), and it reconnects while a broker restarts. The log
    records of those failures keep the sockets alive until pytest drops them; drop them here and
    finalize the sockets while the test's warning filter still applies."""
    yield
    caplog.get_records("call").clear()
    gc.collect()


@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
@pytest.mark.usefixtures("leaked_sockets_collected")
def test_idempotent_producer_loses_and_duplicates_nothing_across_a_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(**SHARED_BROKER_CONFIG)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    create_topic(admin, "through-restart", 3)
    admin.close()
    deliveries = produce_through_restart_idempotently(broker, "through-restart")
    assert deliveries.failed == []
    consumed = consume_all(broker, "through-restart", 3)
    values = [m.value for messages in consumed.values() for m in messages]
    assert_acknowledged_present(deliveries, values, idempotent=True)
    assert len(values) == deliveries.sent
