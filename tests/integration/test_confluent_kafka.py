"""confluent-kafka (librdkafka) against a real broker: every codec, offsets by time, the admin
API, and an idempotent producer that keeps sending through a broker restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from broker_process import BrokerProcess
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
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

TIMEOUT = 30


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = shared_broker(tmp_path_factory.mktemp("confluent"))
    yield process
    process.stop()


@pytest.fixture
def admin(shared: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": shared.bootstrap})


def create_topic(admin: AdminClient, name: str, partitions: int, **config: str) -> None:
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)],
        operation_timeout=TIMEOUT,
    )
    futures[name].result(TIMEOUT)


def creation_error(admin: AdminClient, name: str, **config: str) -> KafkaError:
    futures = admin.create_topics([NewTopic(name, num_partitions=1, config=config)])
    with pytest.raises(KafkaException) as raised:
        futures[name].result(TIMEOUT)
    return raised.value.args[0]


def topic_configs(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def partition_counts(admin: AdminClient) -> dict[str, int]:
    topics = admin.list_topics(timeout=TIMEOUT).topics
    return {name: len(meta.partitions) for name, meta in topics.items()}


def new_consumer(broker: BrokerProcess) -> Consumer:
    # group.id is required by librdkafka even for assign(); no group is ever joined
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "interop-unused",
                     "enable.auto.commit": False, "enable.partition.eof": False})  # fmt: skip


def consume_all(broker: BrokerProcess, topic: str, partitions: int) -> dict[int, list[Message]]:
    """Every message from the beginning up to each partition's high watermark."""
    consumer = new_consumer(broker)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, TIMEOUT, False)[1] for tp in tps}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[Message]] = {p: [] for p, end in ends.items() if end > 0}
        next_offset = dict.fromkeys(ends, 0)
        while remaining := sum(ends[p] - next_offset[p] for p in ends):
            batch = consumer.consume(min(remaining, 500), TIMEOUT)  # returns once it has them
            assert batch, f"nothing consumed within {TIMEOUT}s; at {next_offset}, ends {ends}"
            for m in batch:
                assert m.error() is None, m.error()
                assert m.offset() == next_offset[m.partition()], "offsets skip or repeat"
                next_offset[m.partition()] = m.offset() + 1
                out[m.partition()].append(Message(m.key(), m.value(), tuple(m.headers() or ())))
        return out
    finally:
        consumer.close()


# ---- produce and fetch under every codec ---------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_keyed_messages_with_headers_come_back_byte_identical(
    shared: BrokerProcess, admin: AdminClient, codec: str
) -> None:
    topic = f"round-trip-{codec}"
    create_topic(admin, topic, 3)
    messages = make_messages(f"confluent-{codec}", 300)
    placed: dict[int, int] = {}
    errors: list[KafkaError] = []

    def delivered(index: int) -> object:
        def report(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                placed[index] = msg.partition()  # type: ignore[attr-defined]

        return report

    producer = Producer({"bootstrap.servers": shared.bootstrap, "compression.type": codec,
                         "linger.ms": 20, "acks": "all"})  # fmt: skip
    for i, m in enumerate(messages):
        producer.produce(topic, key=m.key, value=m.value, headers=list(m.headers),
                         on_delivery=delivered(i))  # fmt: skip
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    assert errors == []
    produced = group((placed[i], m) for i, m in enumerate(messages))
    assert len(produced) == 3, "keyed messages should spread over all partitions"
    assert_same_by_partition(consume_all(shared, topic, 3), produced)


# ---- offsets by time, earliest and latest -------------------------------------------------


def test_offsets_for_times_finds_the_first_offset_at_or_after_the_timestamp(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    topic = "by-time"
    # tiny segments: most batches get a segment file of their own, so the search crosses files
    create_topic(admin, topic, 1, **{"segment.bytes": "200"})
    producer = Producer({"bootstrap.servers": shared.bootstrap, "linger.ms": 20})
    for i, ts in enumerate(TIMESTAMPS):
        producer.produce(topic, key=b"k", value=b"at-%d" % i, partition=0, timestamp=ts)
        if i >= 3:  # the first four share a batch, the rest are a batch each
            assert producer.flush(TIMEOUT) == 0
    assert producer.flush(TIMEOUT) == 0

    consumer = new_consumer(shared)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.get_watermark_offsets(tp, TIMEOUT, False) == (0, len(TIMESTAMPS))
        for query in timestamp_queries(TIMESTAMPS):
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, query)], TIMEOUT)
            assert found.error is None
            expected = first_offset_at_or_after(TIMESTAMPS, query)
            assert found.offset == (-1 if expected is None else expected), f"timestamp {query}"
        newest = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
        assert (newest.offset, newest.timestamp) == (LATEST_RECORD, max(TIMESTAMPS))

        admin.delete_records([TopicPartition(topic, 0, 3)])[TopicPartition(topic, 0, 3)].result(
            TIMEOUT
        )
        assert consumer.get_watermark_offsets(tp, TIMEOUT, False) == (3, len(TIMESTAMPS))
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, TIMESTAMPS[1])], TIMEOUT)
        assert found.offset == 3, "records below the log start offset are gone"
    finally:
        consumer.close()


# ---- admin ---------------------------------------------------------------------------------


def test_topic_lifecycle_through_the_admin_client(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    topic = "admin-lifecycle"
    create_topic(admin, topic, 2, **{"retention.ms": "3600000", "cleanup.policy": "compact"})
    assert partition_counts(admin)[topic] == 2

    configs = topic_configs(admin, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "16384"  # the broker's log.segment.bytes
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["min.compaction.lag.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("max.message.bytes", "4096", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    admin.incremental_alter_configs([change])[change].result(TIMEOUT)
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"].value == "7200000"
    assert configs["max.message.bytes"].value == "4096"
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(TIMEOUT)
    assert partition_counts(admin)[topic] == 5
    producer = Producer({"bootstrap.servers": shared.bootstrap})
    producer.produce(topic, value=b"in a new partition", partition=4)
    producer.produce(topic, value=b"in an old one", partition=0)
    assert producer.flush(TIMEOUT) == 0

    admin.delete_topics([topic], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    assert topic not in partition_counts(admin)

    create_topic(admin, topic, 1)  # the name is free again, and nothing of the old topic is left
    assert partition_counts(admin)[topic] == 1
    assert topic_configs(admin, topic)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    consumer = new_consumer(shared)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT, False) == (0, 0)
    finally:
        consumer.close()


@pytest.mark.parametrize("name", ["has space", "slash/in/name", "..", "x" * 250, "ümlaut"])
def test_an_invalid_topic_name_is_refused(admin: AdminClient, name: str) -> None:
    assert creation_error(admin, name).code() == KafkaError.TOPIC_EXCEPTION
    assert name not in partition_counts(admin)


@pytest.mark.parametrize(
    "config",
    [{"retention.ms": "soon"}, {"segment.bytes": "-5"}, {"cleanup.policy": "shred"},
     {"no.such.config": "1"}],
)  # fmt: skip
def test_a_bad_config_value_is_refused(admin: AdminClient, config: dict[str, str]) -> None:
    name = "bad-config"
    assert creation_error(admin, name, **config).code() == KafkaError.INVALID_CONFIG
    assert name not in partition_counts(admin)


def test_a_bad_config_change_is_refused_and_changes_nothing(admin: AdminClient) -> None:
    topic = "bad-config-change"
    create_topic(admin, topic, 1, **{"retention.ms": "60000"})
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.ms", "yesterday", incremental_operation=AlterConfigOpType.SET),
    ])  # fmt: skip
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([change])[change].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert topic_configs(admin, topic)["retention.ms"].value == "60000"


def test_validate_only_changes_nothing(admin: AdminClient) -> None:
    topic = "validate-only"
    futures = admin.create_topics([NewTopic(topic, 2, config={"retention.ms": "1000"})],
                                  validate_only=True)  # fmt: skip
    futures[topic].result(TIMEOUT)
    assert topic not in partition_counts(admin)
    create_topic(admin, topic, 2)
    admin.create_partitions([NewPartitions(topic, 4)], validate_only=True)[topic].result(TIMEOUT)
    assert partition_counts(admin)[topic] == 2


def test_creating_an_existing_topic_is_refused(admin: AdminClient) -> None:
    create_topic(admin, "exists-already", 2)
    assert creation_error(admin, "exists-already").code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert partition_counts(admin)["exists-already"] == 2


# ---- a broker restart under an idempotent producer -----------------------------------------


def test_idempotent_producer_loses_and_duplicates_nothing_across_a_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(**SHARED_BROKER_CONFIG)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "through-restart"
    create_topic(admin, topic, 3)
    deliveries = DeliveryLog()

    def report(err: KafkaError | None, msg: object) -> None:
        value = msg.value()  # type: ignore[attr-defined]
        if err is None:
            deliveries.on_acked(value)
        else:
            deliveries.on_failed(value, err)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "compression.type": "lz4"})  # fmt: skip

    def send(value: bytes) -> None:
        producer.produce(topic, key=value[-3:], value=value, on_delivery=report)

    produce_through_restart(broker, send, deliveries, producer.poll)
    assert producer.flush(TIMEOUT) == 0
    assert deliveries.failed == []
    consumed = consume_all(broker, topic, 3)
    values = [m.value for messages in consumed.values() for m in messages]
    assert_acknowledged_present(deliveries, values, idempotent=True)
    assert len(values) == deliveries.sent
