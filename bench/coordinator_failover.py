"""Where a consumer group's pause goes when its coordinator is killed with -9.

Three brokers on loopback (real ZooKeeper, real broker processes), a topic with replication
factor 3, a producer at a steady rate and a group of two confluent-kafka consumers. The broker
coordinating the group is killed with -9, and the timeline is taken from what each party
observes: ZooKeeper removing the broker's registration (its session expiring), a broker naming
another coordinator, each consumer losing and getting back its assignment, and the first record
consumed afterwards. Kafka's own figure for the same drill is the ZooKeeper session timeout (the
controller learns of the death only then) plus the group's rebalance; the report lines the two
up.

    .venv/bin/python bench/coordinator_failover.py [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
from cluster_brokers import BrokerSet, create_topics, exchange, start_three
from cluster_processes import start_zookeeper
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator

from faultbench import machine, results_path, write_report
from weir.cli.zookeeper import find_installation
from weir.protocol.apis import ApiKey

TOPIC = "drill"
GROUP = "drill-group"
PARTITIONS = 6
SESSION_TIMEOUT_MS = 18_000  # zookeeper.session.timeout.ms, Kafka's default
CONSUMER_SESSION_TIMEOUT_MS = 10_000
BROKER_CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
}


class Timeline:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, str]] = []
        self.consumed: list[float] = []

    def note(self, what: str) -> None:
        with self.lock:
            self.events.append((time.monotonic(), what))


class Reader(threading.Thread):
    def __init__(self, name: str, bootstrap: str, timeline: Timeline) -> None:
        super().__init__(daemon=True, name=name)
        self.bootstrap, self.timeline = bootstrap, timeline
        self.stopping = threading.Event()

    def run(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": GROUP, "log_level": 0,
            "session.timeout.ms": CONSUMER_SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
            "auto.offset.reset": "latest",
        })  # fmt: skip
        consumer.subscribe(
            [TOPIC],
            on_assign=lambda _c, ps: self.timeline.note(f"{self.name} assigned {len(ps)}"),
            on_revoke=lambda _c, ps: self.timeline.note(f"{self.name} revoked {len(ps)}"),
            on_lost=lambda _c, ps: self.timeline.note(f"{self.name} lost {len(ps)}"),
        )
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    with self.timeline.lock:
                        self.timeline.consumed.append(time.monotonic())
        finally:
            consumer.close()


def produce(bootstrap: str, stopping: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0,
                         "acks": "all"})  # fmt: skip
    while not stopping.is_set():
        producer.produce(TOPIC, b"x" * 100)
        producer.poll(0.005)
    producer.flush(10)
    producer.close()


def coordinator(address: tuple[str, int]) -> int | None:
    """The group's coordinator as the broker at `address` names it (FindCoordinator v4)."""
    body = find_coordinator.FindCoordinatorRequest(key_type=0, coordinator_keys=(GROUP,))
    try:
        response = exchange(address, ApiKey.FIND_COORDINATOR, 4, body, timeout=2)
    except OSError:
        return None
    [found] = response.coordinators
    return int(found.node_id) if found.error_code == ErrorCode.none else None


def one_round(scratch: Path) -> dict[str, Any]:
    zookeeper = start_zookeeper(scratch / "zookeeper", find_installation())
    brokers = BrokerSet(scratch / "brokers")
    stopping = threading.Event()
    timeline = Timeline()
    readers: list[Reader] = []
    try:
        started = start_three(brokers, zookeeper.connect, BROKER_CONFIG)
        bootstrap = ",".join(b.bootstrap for b in started.values())
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3))
        threading.Thread(target=produce, args=(bootstrap, stopping), daemon=True).start()
        readers = [Reader(f"consumer-{i}", bootstrap, timeline) for i in (1, 2)]
        for reader in readers:
            reader.start()
        first = next(iter(started.values())).address
        while len(timeline.consumed) < 500 or coordinator(first) is None:
            time.sleep(0.2)
        time.sleep(3)
        victim = coordinator(first)
        assert victim is not None
        survivors = [b for n, b in started.items() if n != victim]
        zk = KazooClient(hosts=zookeeper.connect, timeout=10)
        zk.start(timeout=30)
        killed = time.monotonic()
        os.kill(started[victim].pid, signal.SIGKILL)
        timeline.note(f"broker {victim} (coordinator) killed")
        registration = f"/weir/brokers/ids/{victim}"
        seen: dict[str, float] = {}
        deadline = killed + 120
        while time.monotonic() < deadline and len(seen) < 3:
            now = time.monotonic()
            if "registration gone" not in seen and zk.exists(registration) is None:
                seen["registration gone"] = now
            if "new coordinator named" not in seen:
                named = coordinator(survivors[0].address)
                if named is not None and named != victim:
                    seen["new coordinator named"] = time.monotonic()
            with timeline.lock:
                after = [t for t in timeline.consumed if t > killed + 0.5]
            if after and "consuming again" not in seen and "new coordinator named" in seen:
                seen["consuming again"] = after[0]
            time.sleep(0.05)
        zk.stop()
        zk.close()
        with timeline.lock:
            before = [t for t in timeline.consumed if t <= killed]
            events = [(round(t - killed, 2), what) for t, what in timeline.events if t >= killed]
        return {
            "victim": victim,
            "last_consumed_before_kill_s": round((before[-1] - killed) if before else 0, 2),
            **{f"{k}_s": round(v - killed, 2) for k, v in sorted(seen.items(), key=lambda i: i[1])},
            "consumer_events": events,
        }
    finally:
        stopping.set()
        for reader in readers:
            reader.stopping.set()
        for reader in readers:
            reader.join(15)
        brokers.kill_all()
        zookeeper.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rounds = []
    for number in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="weir-coordinator-failover-") as scratch:
            rounds.append(one_round(Path(scratch)))
            print(f"round {number}: {rounds[-1]}", flush=True)
    report = {
        "bench": "coordinator_failover",
        "machine": machine(),
        "settings": {"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                     "consumer session.timeout.ms": CONSUMER_SESSION_TIMEOUT_MS},
        "rounds": rounds,
    }
    write_report(report, results_path(args.out, "coordinator_failover"), lambda r: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
