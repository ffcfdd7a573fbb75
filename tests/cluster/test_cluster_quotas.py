"""Client quotas in a cluster: a quota altered through broker 1 lands in ZooKeeper in Kafka's
layout (`/config/users/<user>/clients/<client-id>`, a `/config/changes` notification naming it),
is described by broker 2, and throttles a producer writing to broker 2, without a restart; a
user's quotas share its znode with its SCRAM credentials and leave them as they were."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from cluster_brokers import CHROOT, poll, wait_settled
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30


def quota(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "quota", *args, "--bootstrap-server", bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def throttled_on(bootstrap: str, topic: str) -> list[float]:
    """The throttle times broker reported to a producer with client.id `slow` that sent 12 kB."""
    throttles: list[float] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": "slow", "linger.ms": 0,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })  # fmt: skip
    reports: list[Any] = []
    for _ in range(12):
        producer.produce(topic, b"x" * 1000, on_delivery=lambda err, _m: reports.append(err))
    assert producer.flush(TIMEOUT) == 0
    producer.poll(0.5)
    assert reports == [None] * 12  # never refused for being over quota
    return throttles


def test_a_quota_altered_through_one_broker_holds_on_another(
    zookeeper, cluster_brokers, zk_view
) -> None:
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 2)
    wait_settled(brokers.values())
    one, two = brokers[1], brokers[2]
    admin = AdminClient({"bootstrap.servers": one.bootstrap})
    admin.create_topics([NewTopic("on-two", 1, replica_assignment=[[2]])])["on-two"].result(TIMEOUT)
    poll(lambda: not throttled_on(two.bootstrap, "on-two"), TIMEOUT, "unthrottled writes")

    done = quota(one.bootstrap, "alter", "--entity-type", "users", "--entity-default",
                 "--entity-type", "clients", "--entity-name", "slow",
                 "--add-config", "producer_byte_rate=1000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert zk_view.json("/config/users/<default>/clients/slow") == {
        "version": 1, "config": {"producer_byte_rate": "1000"}}  # fmt: skip
    notices = [zk_view.json(f"/config/changes/{c}") for c in zk_view.children("/config/changes")]
    assert {"version": 2, "entity_path": "users/<default>/clients/slow"} in notices

    expected = ("Quota configs for the default user-principal, client-id 'slow' are "
                "producer_byte_rate=1000.0\n")  # fmt: skip
    poll(lambda: quota(two.bootstrap, "describe", "--entity-type", "users", "--entity-type",
                       "clients").stdout == expected, TIMEOUT, "broker 2 describing the quota")
    throttles = throttled_on(two.bootstrap, "on-two")
    assert throttles and max(throttles) > 0


def test_a_users_quotas_leave_its_scram_credentials_alone(
    zookeeper, cluster_brokers, zk_view
) -> None:
    connect = f"{zookeeper.connect}{CHROOT}"
    brokers = cluster_brokers.start_cluster(connect, 1)
    wait_settled(brokers.values())
    made = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "user", "create", "carol", "--zookeeper", connect,
         "--mechanism", "SCRAM-SHA-512", "--password", "carol-secret"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    credential = zk_view.json("/config/users/carol")["config"]["SCRAM-SHA-512"]

    bootstrap = brokers[1].bootstrap
    done = quota(bootstrap, "alter", "--entity-type", "users", "--entity-name", "carol",
                 "--add-config", "consumer_byte_rate=2048")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert zk_view.json("/config/users/carol")["config"] == {
        "SCRAM-SHA-512": credential, "consumer_byte_rate": "2048"}  # fmt: skip
    shown = quota(bootstrap, "describe", "--entity-type", "users")
    assert shown.stdout == (
        "Quota configs for user-principal 'carol' are consumer_byte_rate=2048.0\n"
    )
    done = quota(bootstrap, "alter", "--entity-type", "users", "--entity-name", "carol",
                 "--delete-config", "consumer_byte_rate")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert zk_view.json("/config/users/carol")["config"] == {"SCRAM-SHA-512": credential}
    assert quota(bootstrap, "describe", "--entity-type", "users").stdout == ""
