"""Dynamic broker configs in a cluster: a cluster default set through broker 1 lands in
ZooKeeper in Kafka's layout (`/config/brokers/<default>` and a `/config/changes` notification),
is in effect on broker 2 (which refuses a batch over the new message.max.bytes) without a
restart, and still is after broker 2 restarts; a per-broker setting stays with its broker."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from cluster_brokers import CHROOT, poll, wait_settled
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

TIMEOUT = 30


def describe(bootstrap: str, node: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.BROKER, node)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def produce(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    reports: list[KafkaError | None] = []
    producer.produce(topic, value, on_delivery=lambda err, _msg: reports.append(err))
    assert producer.flush(TIMEOUT) == 0
    return reports[0]


def too_large(bootstrap: str, topic: str) -> bool:
    error = produce(bootstrap, topic, b"x" * 5000)
    return error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_a_cluster_default_set_through_one_broker_holds_on_another_and_across_its_restart(
    zookeeper, cluster_brokers, zk_view
) -> None:
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 2)
    wait_settled(brokers.values())
    one, two = brokers[1], brokers[2]
    admin = AdminClient({"bootstrap.servers": one.bootstrap})
    topic = NewTopic("on-two", 1, replica_assignment=[[2]])  # led by broker 2
    admin.create_topics([topic])["on-two"].result(TIMEOUT)
    poll(lambda: produce(two.bootstrap, "on-two", b"x" * 5000) is None, TIMEOUT, "a first write")

    done = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "broker", "alter", "--entity-default",
         "--add-config", "message.max.bytes=2000", "--bootstrap-server", one.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert zk_view.json("/config/brokers/<default>") == {
        "version": 1, "config": {"message.max.bytes": "2000"}}  # fmt: skip
    notices = [zk_view.json(f"/config/changes/{c}") for c in zk_view.children("/config/changes")]
    assert {"version": 2, "entity_path": "brokers/<default>"} in notices

    def default_on_two() -> bool:
        entry = describe(two.bootstrap, "2")["message.max.bytes"]
        return (entry.value, entry.source) == (
            "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # fmt: skip

    poll(default_on_two, TIMEOUT, "broker 2 taking up the cluster default")
    assert too_large(two.bootstrap, "on-two")

    per_broker = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
        "log.retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    admin.incremental_alter_configs([per_broker])[per_broker].result(TIMEOUT)
    assert zk_view.json("/config/brokers/1")["config"] == {"log.retention.ms": "60000"}
    assert describe(two.bootstrap, "2")["log.retention.ms"].source == (
        ConfigSource.DEFAULT_CONFIG.value
    )

    two.stop()
    two.start()
    wait_settled(brokers.values())
    poll(default_on_two, TIMEOUT, "broker 2 keeping the cluster default across a restart")
    poll(lambda: too_large(two.bootstrap, "on-two"), TIMEOUT, "the limit after the restart")
