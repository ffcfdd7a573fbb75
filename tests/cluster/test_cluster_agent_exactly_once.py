"""The whole chain, end to end exactly once, on a three-broker cluster (replication factor 3,
min.insync.replicas 2): the short form of the chain's chaos test (chainkit.py; bench/chain.py is
the long one). An application sends log lines through the agent (exactly-once) while `weir
pipeline logs --dedupe` streams the topic into the warehouse; round after round the agent is
killed with -9 mid-send and restarted, the schedule kills -9 a partition's leader or the
controller, or pauses a broker, the ETL's driver is killed with -9 and restarted from its
checkpoint, and another producer writes copies of records already in the topic. At the end every
event the agent answered is in the topic exactly once (read_committed, copies aside), in the
order sent per partition, in consecutive queue positions; and in the warehouse exactly once,
with its fields as sent (`logs`) or, for a line no format parses, in `quarantine`; nothing else
is in either."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from chainkit import BROKER_CONFIG, Chain
from cluster_brokers import ClusterBroker, create_topics, start_three
from confluent_kafka.admin import AdminClient, NewTopic
from pipeline_spark import require_spark

PARTITIONS = 3
ROUNDS = 6
TOPIC = "chain"


@pytest.fixture
def cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, BROKER_CONFIG)


@pytest.fixture
def chain(cluster: dict[int, ClusterBroker], tmp_path: Path) -> Iterator[Chain]:
    require_spark()
    admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}))
    rng = random.Random(int(os.environ.get("WEIR_SEED", "7")))
    made = Chain(cluster, tmp_path, TOPIC, PARTITIONS, rng)
    yield made
    made.close()


@pytest.mark.slow
def test_every_answered_event_reaches_the_warehouse_once_whatever_is_killed_along_the_way(
    chain: Chain, capsys: pytest.CaptureFixture[str]
) -> None:
    chain.rounds(ROUNDS)
    run = chain.check()
    with capsys.disabled():
        print(f"\nchain, 3 brokers: {run.summary()}")
    assert run.found is not None and run.found.exactly_once, run.found
    assert run.warehouse is not None and run.warehouse.exactly_once, run.warehouse
    assert run.found.answered > 500 and run.warehouse.quarantined > 10
    assert run.faults["leader"] and run.faults["pause"] and run.faults["controller"]
    assert run.etl_kills >= 1 and run.copies > 0 and run.etl_duplicates == run.copies
