"""`weir operator pool move-broker` on a real cluster: brokers 1-3 in no pool, broker 4 in
"tenant-a". Broker 3 is emptied within its pool under idempotent acks=all load and handed to
tenant-a: it holds nothing afterwards, the controller and placement see its new pool (a pinned
partition may move onto it, a pinned topic of replication factor 2 can be created), and every
acknowledged record is read back. Handing broker 1 over too is refused (the shared topic would
have one broker left for two replicas) with nothing changed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_brokers import CHROOT, create_topics, metadata_of, start_together, wait_settled
from cluster_processes import free_port
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from operatorkit import CONFIG, Load, bootstrap_of, check_nothing_lost

from waiting import poll

POOL = "tenant-a"


def weir(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args, "--bootstrap-server",
                           bootstrap], capture_output=True, text=True, timeout=300)  # fmt: skip


def broker_pool(admin: AdminClient, node_id: int) -> str:
    resource = ConfigResource("broker", str(node_id))
    entry = admin.describe_configs([resource])[resource].result(30).get("broker.pool")
    return (entry.value or "") if entry is not None else ""


@pytest.mark.slow
def test_a_broker_is_emptied_and_handed_to_another_pool(
    zookeeper, cluster_brokers, tmp_path: Path, figure
) -> None:  # fmt: skip
    brokers = {}
    for node_id in (1, 2, 3, 4):
        config = {**CONFIG, "metrics.port": free_port()}
        if node_id == 4:
            config["broker.pool"] = POOL
        brokers[node_id] = cluster_brokers.add(node_id, f"{zookeeper.connect}{CHROOT}",
                                               config=config)  # fmt: skip
    start_together(brokers.values())
    wait_settled(brokers.values())
    bootstrap = bootstrap_of(brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("shared", 6, replica_assignment=[
        [1, 2], [2, 3], [3, 1], [1, 3], [2, 1], [3, 2]]),
        NewTopic("pinned", 1, 1, config={"replica.placement.pool": POOL}))  # fmt: skip
    load = Load(bootstrap, "shared", 200, partitions=6)
    load.start()
    try:
        moved = weir(bootstrap, "operator", "pool", "move-broker", "3", "--to", POOL,
                     "--window-seconds", "2", "--windows", "1", "--throttle", "4000000",
                     "--adaptive-throttle")  # fmt: skip
    finally:
        load.stop()
    print(moved.stdout, moved.stderr)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert f"Broker 3 holds no replicas and is in pool '{POOL}' now" in moved.stdout
    view = metadata_of(brokers[1].address, ["shared"])
    for partition, state in view.topics["shared"].items():
        assert 3 not in state.replicas and len(set(state.replicas)) == 2, (partition, state)
    assert broker_pool(admin, 3) == POOL
    check_nothing_lost(bootstrap, load)
    figure("records acknowledged and read back during the hand-over", load.total(), "records")

    plan = tmp_path / "onto-3.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "pinned", "partition": 0, "replicas": [4, 3]}]}))  # fmt: skip
    executed = weir(bootstrap, "reassign", "execute", "--reassignment-json-file", str(plan))
    assert executed.returncode == 0, executed.stdout + executed.stderr
    poll(lambda: set(metadata_of(brokers[1].address, ["pinned"]).topics["pinned"][0].replicas)
         == {3, 4}, 60, "pinned-0 on brokers 3 and 4")  # fmt: skip
    create_topics(admin, NewTopic("pinned-wide", 2, 2, config={"replica.placement.pool": POOL}))
    wide = metadata_of(brokers[1].address, ["pinned-wide"]).topics["pinned-wide"]
    assert all(set(state.replicas) == {3, 4} for state in wide.values()), wide

    before = {p: list(s.replicas) for p, s in
              metadata_of(brokers[1].address, ["shared"]).topics["shared"].items()}  # fmt: skip
    refused = weir(bootstrap, "operator", "pool", "move-broker", "1", "--to", POOL,
                   "--window-seconds", "1", "--windows", "1")  # fmt: skip
    assert refused.returncode != 0
    assert "broker 1 cannot be emptied" in refused.stderr, refused.stderr
    after = {p: list(s.replicas) for p, s in
             metadata_of(brokers[1].address, ["shared"]).topics["shared"].items()}  # fmt: skip
    assert after == before
    assert broker_pool(admin, 1) == ""
