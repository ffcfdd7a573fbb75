"""Tenant pools on a real cluster: brokers 1 and 2 in no pool, 3 and 4 in pool "tenant-a". A
topic pinned to the pool (`replica.placement.pool`) is placed on its brokers only, and so are
partitions added later; an unpinned topic stays off them; a pinned topic whose pool cannot hold
it, replicas given by hand outside the pool, and a reassignment out of the pool are refused with
nothing changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_brokers import (
    CHROOT,
    ClusterBroker,
    create_topics,
    metadata_of,
    start_together,
    wait_same_everywhere,
    wait_settled,
)
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

POOL = "tenant-a"
CONFIG = {"zookeeper.session.timeout.ms": 6000}


def replicas_of(broker: ClusterBroker, topic: str) -> dict[int, set[int]]:
    view = metadata_of(broker.address, [topic])
    return {p: set(v.replicas) for p, v in view.topics[topic].items()}


def refusal(admin: AdminClient, *topics: NewTopic) -> str:
    with pytest.raises(KafkaException) as refused:
        create_topics(admin, *topics)
    return str(refused.value)


def test_pinned_topics_live_on_their_pool_and_the_others_off_it(
    zookeeper, cluster_brokers, tmp_path: Path
) -> None:
    brokers = {
        node_id: cluster_brokers.add(node_id, f"{zookeeper.connect}{CHROOT}", config={
            **CONFIG, **({"broker.pool": POOL} if node_id >= 3 else {})})
        for node_id in (1, 2, 3, 4)
    }  # fmt: skip
    start_together(brokers.values())
    wait_settled(brokers.values())
    first = brokers[1]
    admin = AdminClient({"bootstrap.servers": first.bootstrap, "log_level": 0})

    create_topics(admin, NewTopic("pinned", 6, 2, config={"replica.placement.pool": POOL}),
                  NewTopic("shared", 6, 2))  # fmt: skip
    wait_same_everywhere(brokers.values(), "pinned", 6)
    assert set().union(*replicas_of(first, "pinned").values()) == {3, 4}
    assert set().union(*replicas_of(first, "shared").values()) == {1, 2}

    for future in admin.create_partitions([NewPartitions("pinned", 9)]).values():
        future.result(30)
    wait_same_everywhere(brokers.values(), "pinned", 9)
    assert set().union(*replicas_of(first, "pinned").values()) == {3, 4}

    too_many = refusal(admin, NewTopic("wide", 1, 3, config={"replica.placement.pool": POOL}))
    assert "INVALID_REPLICATION_FACTOR" in too_many, too_many
    nowhere = refusal(admin, NewTopic("lost", 1, 1, config={"replica.placement.pool": "none"}))
    assert "No live broker is in pool 'none'" in nowhere, nowhere
    by_hand = refusal(admin, NewTopic("by-hand", 1, replica_assignment=[[1, 3]],
                                      config={"replica.placement.pool": POOL}))  # fmt: skip
    assert "INVALID_REPLICA_ASSIGNMENT" in by_hand and "[1]" in by_hand, by_hand
    topics = metadata_of(first.address).topics
    assert not {"wide", "lost", "by-hand"} & topics.keys()

    before = replicas_of(first, "pinned")
    moved = reassign(first, tmp_path / "plan.json", "pinned", 0, [1, 3])
    assert moved.returncode != 0
    assert "INVALID_REPLICA_ASSIGNMENT" in moved.stderr + moved.stdout
    assert "not in pool 'tenant-a'" in moved.stderr + moved.stdout
    assert replicas_of(first, "pinned") == before

    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "pinned"},
                                                          {"topic": "shared"}]}))  # fmt: skip
    generated = weir("reassign", "generate", "--topics-to-move-json-file", str(topics),
                     "--broker-list", "1,2,3,4", "--bootstrap-server", first.bootstrap)  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    proposal = generated.stdout.split("Proposed partition reassignment configuration")[1]
    proposed = json.loads(proposal)
    placed: dict[str, set[int]] = {p["topic"]: set() for p in proposed["partitions"]}
    for entry in proposed["partitions"]:
        placed[entry["topic"]] |= set(entry["replicas"])
    assert placed == {"pinned": {3, 4}, "shared": {1, 2}}

    drained = weir("cluster", "drain", "--broker", "3", "--dry-run",
                   "--bootstrap-server", first.bootstrap)  # fmt: skip
    assert drained.returncode != 0 and "in pool 'tenant-a'" in drained.stderr, drained.stderr


def weir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def reassign(
    broker: ClusterBroker, plan: Path, topic: str, partition: int, replicas: list[int]
) -> subprocess.CompletedProcess[str]:
    """`weir reassign execute` of one partition's move."""
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas}]}))  # fmt: skip
    return weir("reassign", "execute", "--reassignment-json-file", str(plan),
                "--bootstrap-server", broker.bootstrap)  # fmt: skip
