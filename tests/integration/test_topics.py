"""Topic administration as an AdminClient meets it: the partition limit checked before anything
is created, large creations that leave the broker serving others, a creation that fails midway
leaving nothing behind, internal topics no client may create, and names that collide."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from raw_requests import RoundTripProbe

TIMEOUT = 60.0
POLICY_VIOLATION = 44
INVALID_PARTITIONS = 37
INVALID_REQUEST = 42
INVALID_TOPIC_EXCEPTION = 17
KAFKA_STORAGE_ERROR = 56
#: what the broker keeps for __consumer_offsets and __transaction_state (50 partitions each)
#: until they are created
INTERNAL_RESERVE = 100
BrokerFactory = Callable[..., BrokerProcess]


def admin_for(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def refusal(future: Any) -> tuple[int, str]:
    """(error code, message) of an admin future that must fail."""
    with pytest.raises(KafkaException) as failure:
        future.result(TIMEOUT)
    error = failure.value.args[0]
    return error.code(), error.str()


def create(admin: AdminClient, name: str, partitions: int) -> Any:
    topic = NewTopic(name, partitions, 1)
    return admin.create_topics([topic], request_timeout=TIMEOUT, operation_timeout=TIMEOUT)[name]


def partition_counts(admin: AdminClient) -> dict[str, int]:
    listed = admin.list_topics(timeout=TIMEOUT).topics
    return {name: len(t.partitions) for name, t in listed.items() if not name.startswith("__")}


def partition_dirs(data_dir: Path, topic: str) -> list[Path]:
    return [p for p in data_dir.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic]


# ---- the partition limit -------------------------------------------------------------------


def test_a_topic_past_the_partition_limit_is_refused_before_anything_is_created(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(**{"max.partitions.per.broker": 300})
    admin = admin_for(broker)
    create(admin, "small", 10).result(TIMEOUT)

    code, message = refusal(create(admin, "big", 100_000))
    assert code == POLICY_VIOLATION, message
    assert "max.partitions.per.broker=300" in message
    grown = admin.create_partitions([NewPartitions("small", 100_000)], request_timeout=TIMEOUT)
    code, message = refusal(grown["small"])
    assert code == POLICY_VIOLATION, message
    assert "limit of 300 (max.partitions.per.broker=300)" in message
    assert partition_counts(admin) == {"small": 10}
    assert partition_dirs(broker.data_dir, "big") == []
    assert len(partition_dirs(broker.data_dir, "small")) == 10

    room = 300 - INTERNAL_RESERVE - 10
    create(admin, "fits", room).result(TIMEOUT)
    code, message = refusal(create(admin, "one-more", 1))
    assert code == POLICY_VIOLATION, message
    assert "0 more fit (100 kept for internal topics)" in message
    assert partition_counts(admin) == {"small": 10, "fits": room}


def test_the_default_limit_follows_the_descriptor_limit(tmp_path: Path) -> None:
    """Under RLIMIT_NOFILE=1024 partitions may have half the descriptors, three each: 170;
    the room kept for internal topics is at most half of it."""
    broker = BrokerProcess(tmp_path / "broker", prefix=["prlimit", "--nofile=1024:1024"])
    broker.start()
    try:
        admin = admin_for(broker)
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
        assert configs["max.partitions.per.broker"].value == "170"
        room = 170 - min(INTERNAL_RESERVE, 170 // 2)
        code, message = refusal(create(admin, "over", room + 1))
        assert code == POLICY_VIOLATION, message
        create(admin, "at-the-limit", room).result(TIMEOUT)
        assert partition_counts(admin) == {"at-the-limit": 85}
    finally:
        broker.stop()


def test_a_large_creation_and_deletion_leave_the_broker_serving_others(
    broker: BrokerProcess, figure: Callable[..., None]
) -> None:
    admin = admin_for(broker)
    with RoundTripProbe(broker.port) as probe:
        started = time.monotonic()
        create(admin, "large", 2000).result(TIMEOUT * 2)
        figure("CreateTopics of 2000 partitions", time.monotonic() - started)
        started = time.monotonic()
        admin.delete_topics(["large"], operation_timeout=TIMEOUT)["large"].result(TIMEOUT)
        figure("DeleteTopics of 2000 partitions", time.monotonic() - started)
    assert probe.failure is None
    figure("other client's ApiVersions round trips meanwhile", len(probe.times), "requests")
    figure("their median", probe.median)
    figure("their longest", probe.longest)
    assert probe.longest < 2.0
    assert partition_counts(admin) == {}
    assert partition_dirs(broker.data_dir, "large") == []


def test_sigterm_during_a_large_creation_stops_the_broker(broker: BrokerProcess) -> None:
    admin = admin_for(broker)
    creating = threading.Thread(target=lambda: create(admin, "huge", 3000).exception(TIMEOUT))
    creating.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(partition_dirs(broker.data_dir, "huge")) < 100:
            assert time.monotonic() < deadline, "the creation did not start"
            time.sleep(0.05)
        started = time.monotonic()
        assert broker.stop(signal.SIGTERM, timeout=30) == 0
        assert time.monotonic() - started < 15
    finally:
        creating.join(TIMEOUT)
    assert "Traceback" not in broker.logs()


def test_a_creation_that_fails_midway_leaves_nothing_behind(tmp_path: Path) -> None:
    """A limit set above what the process may open: the creation runs out of descriptors
    midway, and the topic is gone (or keeps its old count) with its logs."""
    broker = BrokerProcess(
        tmp_path / "broker",
        config={"max.partitions.per.broker": 5000},
        prefix=["prlimit", "--nofile=512:512"],
    )
    broker.start()
    try:
        admin = admin_for(broker)
        code, message = refusal(create(admin, "too-many", 400))
        assert code == KAFKA_STORAGE_ERROR, message
        assert partition_counts(admin) == {}
        assert partition_dirs(broker.data_dir, "too-many") == []

        create(admin, "kept", 2).result(TIMEOUT)
        grown = admin.create_partitions([NewPartitions("kept", 400)], request_timeout=TIMEOUT)
        code, message = refusal(grown["kept"])
        assert code == KAFKA_STORAGE_ERROR, message
        assert partition_counts(admin) == {"kept": 2}
        assert len(partition_dirs(broker.data_dir, "kept")) == 2
        round_trip(broker, "kept")
        assert "Traceback" not in broker.logs()
    finally:
        broker.stop()


def round_trip(broker: BrokerProcess, topic: str) -> None:
    """A record produced with acks=all and consumed back."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    delivered: list[Any] = []
    producer.produce(topic, b"v", partition=1, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(TIMEOUT) == 0 and delivered == [None]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                assert message.value() == b"v"
                return
        pytest.fail(f"nothing consumed from {topic}")
    finally:
        consumer.close()


# ---- internal topics -----------------------------------------------------------------------


def test_clients_cannot_create_internal_topics_and_groups_still_work(
    broker: BrokerProcess,
) -> None:
    admin = admin_for(broker)
    for name in ("__consumer_offsets", "__transaction_state"):
        code, message = refusal(create(admin, name, 1))
        assert code == INVALID_REQUEST, message
        assert message == f"Creation of internal topic {name} is prohibited."
    assert "__consumer_offsets" not in admin.list_topics(timeout=TIMEOUT).topics

    create(admin, "work", 3).result(TIMEOUT)
    assigned = [assignment_of(broker, f"group-{i}", "work") for i in range(3)]
    assert all(len(partitions) == 3 for partitions in assigned)
    offsets = admin.list_topics("__consumer_offsets", timeout=TIMEOUT).topics
    assert len(offsets["__consumer_offsets"].partitions) == 50


def assignment_of(broker: BrokerProcess, group: str, topic: str) -> list[int]:
    """The partitions a lone consumer of `group` is given."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and not consumer.assignment():
            consumer.poll(0.5)
        return sorted(tp.partition for tp in consumer.assignment())
    finally:
        consumer.close()


# ---- names that collide --------------------------------------------------------------------


def test_topic_names_that_collide_once_dot_and_underscore_are_alike_are_refused(
    broker: BrokerProcess,
) -> None:
    admin = admin_for(broker)
    create(admin, "foo.bar", 1).result(TIMEOUT)
    code, message = refusal(create(admin, "foo_bar", 1))
    assert code == INVALID_TOPIC_EXCEPTION, message
    assert message == "Topic 'foo_bar' collides with existing topics: foo.bar"
    create(admin, "foo-bar", 1).result(TIMEOUT)  # '-' is not folded
    assert partition_counts(admin) == {"foo.bar": 1, "foo-bar": 1}
