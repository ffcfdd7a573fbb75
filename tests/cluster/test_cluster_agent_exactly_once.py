"""The agent's exactly-once delivery on a three-broker cluster (replication factor 3,
min.insync.replicas 2), the first hop of the chain's chaos test: round after round the agent is
killed with -9 mid-send and restarted, and every other round the leader of a partition it writes
is killed with -9 too (restarted a round later). At the end every event the agent answered is in
the topic exactly once (read_committed), in the order sent per partition, and nothing else."""

from __future__ import annotations

import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from cluster_brokers import ClusterBroker, create_topics, metadata_of, start_three
from confluent_kafka.admin import AdminClient, NewTopic

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
if str(INTEGRATION) not in sys.path:
    sys.path.insert(0, str(INTEGRATION))

from agent_process import (  # noqa: E402
    AgentProcess,
    Application,
    agent_identity,
    read_committed,
    tally,
    wait_drained,
)

CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}
PARTITIONS = 3
ROUNDS = 6
TOPIC = "chain"


@pytest.fixture
def cluster(zookeeper, cluster_brokers) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, CONFIG)


def _leader_of(cluster: dict[int, ClusterBroker], partition: int) -> int:
    for broker in cluster.values():
        if broker.running():
            leader = metadata_of(broker.address, [TOPIC]).leaders(TOPIC).get(partition, -1)
            if leader >= 0:
                return leader
    raise AssertionError(f"{TOPIC}-{partition} has no leader")


@pytest.mark.slow
def test_agent_and_leader_killed_every_round_leave_every_answered_event_once(
    cluster: dict[int, ClusterBroker], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}))
    bootstrap = ",".join(b.bootstrap for b in cluster.values())
    agent = AgentProcess(tmp_path / "agent", bootstrap,
                         config='delivery_guarantee = "exactly-once"\n')  # fmt: skip
    application = Application(agent.socket, TOPIC)
    rng = random.Random(int(os.environ.get("WEIR_SEED", "7")))
    down: ClusterBroker | None = None
    leaders_killed = 0
    for round_number in range(ROUNDS):
        agent.start(timeout=60)
        thread, stop = application.round_in_background()
        time.sleep(rng.uniform(0.3, 1.0))
        if down is not None:
            down.start()
            down = None
        elif round_number % 2 == 0:
            down = cluster[_leader_of(cluster, rng.randrange(PARTITIONS))]
            down.kill()
            leaders_killed += 1
            time.sleep(rng.uniform(0.2, 1.0))
        agent.kill()
        stop.set()
        thread.join()
    if down is not None:
        down.start()
    agent.start(timeout=60)
    try:
        wait_drained(agent, timeout=120)
        records = read_committed(cluster[1].bootstrap, TOPIC, PARTITIONS, timeout=120)
    finally:
        agent.stop()
    found = tally(records, application, agent_identity(agent))
    resumed = Counter(re.findall(r"in flight before the resume was (\w+)", agent.log()))
    with capsys.disabled():
        print(f"\nexactly-once on 3 brokers, agent kill -9 x{ROUNDS}, leader kill -9 "
              f"x{leaders_killed}: {found.summary()}; batches in flight at a kill: "
              f"{dict(resumed)}")  # fmt: skip
    assert found.exactly_once, found
    assert found.answered > 500
