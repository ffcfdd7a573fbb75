"""The agent's exactly-once delivery on a three-broker cluster (replication factor 3,
min.insync.replicas 2), the short form of the chain's chaos test (chainkit.py; bench/chain.py is
the long one): round after round the agent is killed with -9 mid-send and restarted while the
schedule kills -9 a partition's leader or the controller, or pauses a broker. At the end every
event the agent answered is in the topic exactly once (read_committed), in the order sent per
partition, in consecutive queue positions, and nothing else is there."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from chainkit import BROKER_CONFIG, Chain
from cluster_brokers import ClusterBroker, create_topics, start_three
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3
ROUNDS = 6
TOPIC = "chain"


@pytest.fixture
def cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, BROKER_CONFIG)


@pytest.mark.slow
def test_agent_killed_every_round_amid_broker_faults_leaves_every_answered_event_once(
    cluster: dict[int, ClusterBroker], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}))
    rng = random.Random(int(os.environ.get("WEIR_SEED", "7")))
    chain = Chain(cluster, tmp_path, TOPIC, PARTITIONS, rng)
    chain.rounds(ROUNDS)
    run = chain.check()
    with capsys.disabled():
        print(f"\nchain (agent hop), 3 brokers: {run.summary()}")
    assert run.found is not None and run.found.exactly_once, run.found
    assert run.found.answered > 500
    assert run.faults["leader"] and run.faults["pause"] and run.faults["controller"]
