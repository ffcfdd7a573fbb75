"""`weir operator` on a real skewed cluster: four brokers, a hot topic's replicas on brokers 1
and 2 only, a cold topic everywhere, idempotent acks=all producers running throughout.
`weir operator plan` measures the skew from the brokers' metrics; `weir operator balance` moves
replicas until the brokers' bytes in are even, a few moves at a time; a second plan measures
the spread again. Every acknowledged record is read back once, at its offset, in order."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import pytest
from cluster_brokers import CHROOT, ClusterBroker, create_topics, start_together, wait_settled
from cluster_processes import free_port
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CONFIG = {"zookeeper.session.timeout.ms": 6000, "offsets.topic.num.partitions": 2,
          "replica.lag.time.max.ms": 5000}  # fmt: skip
HOT, COLD = "hot", "cold"
#: hot: 4 partitions on brokers 1 and 2 only; cold: one partition led by each broker
HOT_ASSIGNMENT = [[1, 2], [2, 1], [1, 2], [2, 1]]
COLD_ASSIGNMENT = [[1, 2], [2, 3], [3, 4], [4, 1]]
HOT_RATE, COLD_RATE, VALUE_BYTES = 600, 40, 500
#: the longest the load runs (the test stops it once balanced)
LOAD_LIMIT_S = 240.0
SPREAD = re.compile(r"bytes-in max/min across brokers: (\S+) -> (\S+)")


class Load(threading.Thread):
    """Idempotent acks=all records to `topic` at `rate` a second until stopped; the offsets
    acknowledged, by partition, with their values."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5, "log_level": 0})  # fmt: skip
        self.acked: dict[int, dict[int, bytes]] = {}
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def delivered(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self.errors.append(str(error))
            return
        partition, offset = message.partition(), message.offset()  # type: ignore[attr-defined]
        self.acked.setdefault(partition, {})[offset] = message.value()  # type: ignore[attr-defined]

    def run(self) -> None:
        sent, start = 0, time.monotonic()
        while not self.stopping.is_set() and time.monotonic() - start < LOAD_LIMIT_S:
            due = int((time.monotonic() - start) * self.rate)
            while sent < due:
                value = f"{self.topic}-{sent:09d}".encode().ljust(VALUE_BYTES, b".")
                self.producer.produce(self.topic, value, partition=sent % 4,
                                      on_delivery=self.delivered)  # fmt: skip
                sent += 1
            self.producer.poll(0.01)
        self.producer.flush(60)

    def stop(self) -> None:
        self.stopping.set()
        self.join(90)


def operator(brokers: dict[int, ClusterBroker], *args: str) -> subprocess.CompletedProcess[str]:
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "operator", *args, "--bootstrap-server",
         bootstrap, "--window-seconds", "3", "--windows", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def current_spread(output: str) -> float:
    found = SPREAD.search(output)
    assert found, output
    return float(found.group(1))


def read_back(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, dict[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "log_level": 0})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    seen: dict[int, dict[int, bytes]] = {p: {} for p in ends}
    deadline = time.monotonic() + 60
    try:
        while any(len(seen[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1.0):
                assert message.error() is None, message.error()
                offset = message.offset()
                assert offset not in seen[message.partition()], f"offset {offset} twice"
                seen[message.partition()][offset] = message.value()
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_a_hot_topic_on_two_of_four_brokers_is_balanced_with_nothing_lost(
    zookeeper, cluster_brokers, figure
) -> None:  # fmt: skip
    brokers = {
        node_id: cluster_brokers.add(node_id, f"{zookeeper.connect}{CHROOT}",
                                     config={**CONFIG, "metrics.port": free_port()})
        for node_id in (1, 2, 3, 4)
    }  # fmt: skip
    start_together(brokers.values())
    wait_settled(brokers.values())
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(HOT, 4, replica_assignment=HOT_ASSIGNMENT),
                  NewTopic(COLD, 4, replica_assignment=COLD_ASSIGNMENT))  # fmt: skip
    loads = [Load(bootstrap, HOT, HOT_RATE), Load(bootstrap, COLD, COLD_RATE)]
    for load in loads:
        load.start()
    try:
        time.sleep(3)
        plan = operator(brokers, "plan")
        assert plan.returncode == 0, plan.stderr
        before = current_spread(plan.stdout)
        balance = operator(brokers, "balance", "--max-concurrent-moves", "2")
        assert balance.returncode == 0, balance.stdout + balance.stderr
        assert "moves done, 0 cancelled, 0 refused" in balance.stdout, balance.stdout
        again = operator(brokers, "plan")
        assert again.returncode == 0, again.stderr
        after = current_spread(again.stdout)
    finally:
        for load in loads:
            load.stop()
    print(plan.stdout, balance.stdout, again.stdout, sep="\n")
    moves = len(re.findall(r"^started ", balance.stdout, re.M))
    figure("bytes-in max/min across brokers before balancing", before, "ratio")
    figure("bytes-in max/min across brokers after balancing", after, "ratio")
    figure("moves made", moves, "moves")
    assert before > 5, plan.stdout
    assert after < 1.6, again.stdout
    assert moves >= 2, balance.stdout
    replicas = {b for line in re.findall(r"^started hot-\d: \[.*\] -> \[(.*)\]", balance.stdout,
                                         re.M) for b in line.split(", ")}  # fmt: skip
    assert replicas & {"3", "4"}, balance.stdout

    for load in loads:
        assert not load.errors, load.errors[:5]
        ends = {p: max(offsets) + 1 for p, offsets in load.acked.items()}
        seen = read_back(bootstrap, load.topic, ends)
        for partition, acked in load.acked.items():
            missing = [o for o in acked if seen[partition].get(o) != acked[o]]
            assert not missing, f"{load.topic}-{partition}: {len(missing)} acknowledged lost"
        figure(f"{load.topic} records acknowledged and read back",
               sum(len(a) for a in load.acked.values()), "records")  # fmt: skip
