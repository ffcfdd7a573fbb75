"""aiokafka against a real broker: every codec, offsets by time, the admin API (legacy
AlterConfigs: aiokafka has no incremental variant), and an acks=all producer, plain and
idempotent, that keeps sending through a broker restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from broker_process import BrokerProcess
from interop import (
    CODECS,
    SHARED_BROKER_CONFIG,
    TIMESTAMPS,
    DeliveryLog,
    Message,
    assert_acknowledged_present,
    assert_same_by_partition,
    first_offset_at_or_after,
    group,
    make_messages,
    shared_broker,
    timestamp_queries,
    unique_value,
)

TIMEOUT = 30
INVALID_TOPIC_EXCEPTION, TOPIC_ALREADY_EXISTS, INVALID_CONFIG = 17, 36, 40
SOURCE_DYNAMIC_TOPIC, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 4, 5


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = shared_broker(tmp_path_factory.mktemp("aiokafka"))
    yield process
    process.stop()


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 4 * TIMEOUT))


class Admin:
    """AIOKafkaAdminClient answers with raw responses; this reads them into error codes,
    config dicts and partition counts."""

    def __init__(self, client: AIOKafkaAdminClient) -> None:
        self.client = client

    async def create(self, name: str, partitions: int, **configs: str) -> int:
        topic = NewTopic(name, partitions, 1, topic_configs=configs)
        response = await self.client.create_topics([topic], timeout_ms=TIMEOUT * 1000)
        [(topic_name, error, *_)] = response.topic_errors
        assert topic_name == name
        return error

    async def configs(self, name: str) -> dict[str, tuple[str, int]]:
        """config name -> (value, source)"""
        [response] = await self.client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name)]
        )
        [resource] = response.to_object()["resources"]
        assert resource["error_code"] == 0, resource
        return {e["config_names"]: (e["config_value"], e["config_source"])
                for e in resource["config_entries"]}  # fmt: skip

    async def alter(self, name: str, configs: dict[str, str]) -> int:
        [response] = await self.client.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name, configs)]
        )
        [resource] = response.to_object()["resources"]
        return resource["error_code"]

    async def partition_counts(self) -> dict[str, int]:
        return {t["topic"]: len(t["partitions"]) for t in await self.client.describe_topics()}


async def with_admin(broker: BrokerProcess, body: Callable[[Admin], Any]) -> Any:
    client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap,
                                 request_timeout_ms=TIMEOUT * 1000)  # fmt: skip
    await client.start()
    try:
        return await body(Admin(client))
    finally:
        await client.close()


async def consume_all(
    broker: BrokerProcess, topic: str, partitions: int
) -> dict[int, list[Message]]:
    """Every message from the beginning up to each partition's end offset."""
    # No group, so every assigned partition starts at auto_offset_reset. (An explicit
    # seek_to_beginning() can lose a race to the reset that assign() starts.)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                request_timeout_ms=TIMEOUT * 1000)  # fmt: skip
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
        consumer.assign(tps)
        out: dict[int, list[Message]] = {p: [] for p, end in ends.items() if end > 0}
        next_offset = dict.fromkeys(ends, 0)
        while any(next_offset[p] < ends[p] for p in ends):
            batches = await consumer.getmany(timeout_ms=TIMEOUT * 1000)
            assert batches, f"nothing consumed in {TIMEOUT}s; at {next_offset}, ends {ends}"
            for records in batches.values():
                for r in records:
                    assert r.offset == next_offset[r.partition], "offsets skip or repeat"
                    next_offset[r.partition] = r.offset + 1
                    out[r.partition].append(Message(r.key, r.value, tuple(r.headers)))
        return out
    finally:
        await consumer.stop()


# ---- produce and fetch under every codec ---------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_keyed_messages_with_headers_come_back_byte_identical(
    shared: BrokerProcess, codec: str
) -> None:
    topic = f"round-trip-{codec}"
    messages = make_messages(f"aiokafka-{codec}", 300)

    async def scenario() -> None:
        assert await with_admin(shared, lambda admin: admin.create(topic, 3)) == 0
        producer = AIOKafkaProducer(bootstrap_servers=shared.bootstrap, acks="all",
                                    linger_ms=20, compression_type=None if codec == "none"
                                    else codec)  # fmt: skip
        await producer.start()
        try:
            futures = [await producer.send(topic, key=m.key, value=m.value,
                                           headers=list(m.headers)) for m in messages]  # fmt: skip
            placed = [(await f).partition for f in futures]
        finally:
            await producer.stop()
        produced = group(zip(placed, messages, strict=True))
        assert len(produced) == 3, "keyed messages should spread over all partitions"
        assert_same_by_partition(await consume_all(shared, topic, 3), produced)

    run(scenario())


# ---- offsets by time, earliest and latest -------------------------------------------------


def test_offsets_for_times_finds_the_first_offset_at_or_after_the_timestamp(
    shared: BrokerProcess,
) -> None:
    topic = "by-time"
    tp = TopicPartition(topic, 0)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=shared.bootstrap, linger_ms=20)
        await producer.start()
        try:
            # the first four share a batch, the rest are a batch each
            batch = [await producer.send(topic, b"at-%d" % i, key=b"k", partition=0,
                                         timestamp_ms=ts)
                     for i, ts in enumerate(TIMESTAMPS[:4])]  # fmt: skip
            await asyncio.gather(*batch)
            for i, ts in enumerate(TIMESTAMPS[4:], start=4):
                await producer.send_and_wait(topic, b"at-%d" % i, key=b"k", partition=0,
                                             timestamp_ms=ts)  # fmt: skip
        finally:
            await producer.stop()

    async def query() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=shared.bootstrap, group_id=None)
        await consumer.start()
        try:
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: len(TIMESTAMPS)}
            for ts in timestamp_queries(TIMESTAMPS):
                found = (await consumer.offsets_for_times({tp: ts}))[tp]
                expected = first_offset_at_or_after(TIMESTAMPS, ts)
                if expected is None:
                    assert found is None, f"timestamp {ts}"
                else:
                    assert found.offset == expected, f"timestamp {ts}"
                    assert found.timestamp == TIMESTAMPS[expected]

            await with_admin(
                shared, lambda admin: admin.client.delete_records({tp: RecordsToDelete(3)})
            )
            assert await consumer.beginning_offsets([tp]) == {tp: 3}
            assert (await consumer.offsets_for_times({tp: TIMESTAMPS[1]}))[tp].offset == 3
        finally:
            await consumer.stop()

    async def scenario() -> None:
        # a segment file per batch or so, so the search crosses files
        tiny_segments = {"segment.bytes": "200"}
        assert await with_admin(shared, lambda a: a.create(topic, 1, **tiny_segments)) == 0
        await produce()
        await query()

    run(scenario())


# ---- admin ---------------------------------------------------------------------------------


def test_topic_lifecycle_through_the_admin_client(shared: BrokerProcess) -> None:
    topic = "admin-lifecycle"

    async def lifecycle(admin: Admin) -> None:
        overrides = {"retention.ms": "3600000", "cleanup.policy": "compact"}
        assert await admin.create(topic, 2, **overrides) == 0
        assert (await admin.partition_counts())[topic] == 2
        configs = await admin.configs(topic)
        assert configs["retention.ms"] == ("3600000", SOURCE_DYNAMIC_TOPIC)
        assert configs["cleanup.policy"] == ("compact", SOURCE_DYNAMIC_TOPIC)
        assert configs["segment.bytes"] == ("16384", SOURCE_STATIC_BROKER)
        assert configs["min.compaction.lag.ms"] == ("0", SOURCE_DEFAULT)

        # legacy AlterConfigs replaces the whole set of overrides
        assert await admin.alter(topic, {"retention.ms": "7200000"}) == 0
        configs = await admin.configs(topic)
        assert configs["retention.ms"] == ("7200000", SOURCE_DYNAMIC_TOPIC)
        assert configs["cleanup.policy"] == ("delete", SOURCE_DEFAULT)

        await admin.client.create_partitions({topic: NewPartitions(5)})
        assert (await admin.partition_counts())[topic] == 5
        producer = AIOKafkaProducer(bootstrap_servers=shared.bootstrap)
        await producer.start()
        try:
            for partition in (0, 4):  # an old partition and a new one
                await producer.send_and_wait(topic, b"to be deleted", partition=partition)
        finally:
            await producer.stop()

        response = await admin.client.delete_topics([topic])
        assert [error for _name, error, *_ in response.topic_error_codes] == [0]
        assert topic not in await admin.client.list_topics()

        # the name is free again, and nothing of the old topic is left
        assert await admin.create(topic, 1) == 0
        assert (await admin.partition_counts())[topic] == 1
        assert (await admin.configs(topic))["retention.ms"][1] == SOURCE_DEFAULT
        assert await consume_all(shared, topic, 1) == {}

    run(with_admin(shared, lifecycle))


@pytest.mark.parametrize("name", ["has space", "slash/in/name", "..", "x" * 250, "ümlaut"])
def test_an_invalid_topic_name_is_refused(shared: BrokerProcess, name: str) -> None:
    async def attempt(admin: Admin) -> None:
        assert await admin.create(name, 1) == INVALID_TOPIC_EXCEPTION
        assert name not in await admin.client.list_topics()

    run(with_admin(shared, attempt))


@pytest.mark.parametrize(
    "config",
    [{"retention.ms": "soon"}, {"segment.bytes": "-5"}, {"cleanup.policy": "shred"},
     {"no.such.config": "1"}],
)  # fmt: skip
def test_a_bad_config_value_is_refused(shared: BrokerProcess, config: dict[str, str]) -> None:
    async def attempt(admin: Admin) -> None:
        assert await admin.create("bad-config", 1, **config) == INVALID_CONFIG
        assert "bad-config" not in await admin.client.list_topics()

    run(with_admin(shared, attempt))


def test_a_bad_config_change_is_refused_and_changes_nothing(shared: BrokerProcess) -> None:
    async def attempt(admin: Admin) -> None:
        assert await admin.create("bad-config-change", 1, **{"retention.ms": "60000"}) == 0
        change = {"retention.ms": "120000", "segment.ms": "yesterday"}
        assert await admin.alter("bad-config-change", change) == INVALID_CONFIG
        assert (await admin.configs("bad-config-change"))["retention.ms"][0] == "60000"

    run(with_admin(shared, attempt))


def test_creating_an_existing_topic_is_refused(shared: BrokerProcess) -> None:
    async def attempt(admin: Admin) -> None:
        assert await admin.create("exists-already", 2) == 0
        assert await admin.create("exists-already", 4) == TOPIC_ALREADY_EXISTS
        assert (await admin.partition_counts())["exists-already"] == 2

    run(with_admin(shared, attempt))


# ---- a broker restart under an acks=all producer -------------------------------------------


async def produce_through_restart(
    broker: BrokerProcess, producer: AIOKafkaProducer, topic: str, deliveries: DeliveryLog,
    *, window: int = 50, before: int = 300, after: int = 300,
) -> None:  # fmt: skip
    """interop.produce_through_restart for an asyncio client: the restart runs on a thread
    while this coroutine keeps sending, at most `window` unacknowledged at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 4 * TIMEOUT
    pending: set[asyncio.Future[Any]] = set()

    def settle(value: bytes) -> Callable[[asyncio.Future[Any]], None]:
        def done(future: asyncio.Future[Any]) -> None:
            pending.discard(future)
            if future.cancelled():
                deliveries.on_failed(value, "cancelled")
            elif future.exception() is not None:
                deliveries.on_failed(value, future.exception())
            else:
                deliveries.on_acked(value)

        return done

    async def send_while(keep_going: Callable[[], bool], *also: asyncio.Future[Any]) -> None:
        while keep_going():
            assert loop.time() < deadline, f"producing stalled: {len(pending)} in flight"
            if len(pending) < window:
                value = unique_value(deliveries.sent)
                future = await producer.send(topic, value, key=value[-3:])
                deliveries.on_sent()
                pending.add(future)
                future.add_done_callback(settle(value))
            else:
                await asyncio.wait({*pending, *also}, return_when=asyncio.FIRST_COMPLETED)

    await send_while(lambda: len(deliveries.acked) < before)
    restart = asyncio.ensure_future(asyncio.to_thread(broker.restart))
    await send_while(lambda: not restart.done(), restart)
    await restart
    target = deliveries.sent + after
    await send_while(lambda: deliveries.sent < target)
    await producer.flush()
    if pending:
        await asyncio.wait(pending, timeout=deadline - loop.time())
    assert not pending, f"{len(pending)} sends never completed"


@pytest.mark.parametrize("idempotent", [False, True], ids=["acks-all", "idempotent"])
def test_acknowledged_messages_survive_a_restart(
    broker_factory: Callable[..., BrokerProcess], idempotent: bool
) -> None:
    broker = broker_factory(**SHARED_BROKER_CONFIG)
    deliveries = DeliveryLog()

    async def scenario() -> list[bytes | None]:
        assert await with_admin(broker, lambda admin: admin.create("through-restart", 3)) == 0
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                    enable_idempotence=idempotent, linger_ms=5,
                                    compression_type="snappy",
                                    request_timeout_ms=TIMEOUT * 1000)  # fmt: skip
        await producer.start()
        try:
            await produce_through_restart(broker, producer, "through-restart", deliveries)
        finally:
            await producer.stop()
        consumed = await consume_all(broker, "through-restart", 3)
        return [m.value for messages in consumed.values() for m in messages]

    values = run(scenario())
    assert deliveries.failed == []
    assert_acknowledged_present(deliveries, values, idempotent=idempotent)
    if idempotent:
        assert len(values) == deliveries.sent
