"""`weir operator start` on a real cluster: a broker killed -9 for longer than the grace period
has its replicas re-created on the others; the active operator killed -9 in the middle of a
throttled balance is replaced by a standby that follows the moves left under way to their end,
removes their throttles and finishes the balancing. Idempotent acks=all producers run
throughout and every acknowledged record is read back at its offset."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from cluster_brokers import CHROOT, ClusterBroker, create_topics, metadata_of
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from operatorkit import (
    Load,
    OperatorProcess,
    bootstrap_of,
    check_nothing_lost,
    current_spread,
    start_four,
    weir_operator,
)

from waiting import poll, timed_poll

TOPIC = "events"


def replicas(broker: ClusterBroker, topic: str) -> dict[int, tuple[list[int], list[int]]]:
    view = metadata_of(broker.address, [topic])
    return {p: (list(v.replicas), list(v.isr)) for p, v in view.topics[topic].items()}


@pytest.mark.slow
def test_a_dead_brokers_replicas_are_recreated_after_the_grace_period(
    zookeeper, cluster_brokers, figure
) -> None:  # fmt: skip
    brokers = start_four(cluster_brokers, zookeeper)
    bootstrap = bootstrap_of(brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, 4, replica_assignment=[[1, 4], [4, 2], [3, 4],
                                                                [2, 3]]))  # fmt: skip
    load = Load(bootstrap, TOPIC, 200)
    load.start()
    operator = OperatorProcess(
        brokers, f"{zookeeper.connect}{CHROOT}", "a", "--interval", "1", "--window-seconds",
        "1", "--windows", "1", "--heal-after", "5", "--balance-threshold", "100",
    )  # fmt: skip
    try:
        poll(lambda: operator.said("leading"), 30, "operator a leading", detail=operator.output)
        time.sleep(2)
        brokers[4].kill()
        survivor = brokers[1]

        def healed() -> bool:
            found = replicas(survivor, TOPIC)
            return all(4 not in rs and sorted(rs) == sorted(isr) and len(rs) == 2
                       for rs, isr in found.values())  # fmt: skip

        _, took = timed_poll(healed, 90, "every partition on two live brokers, in sync",
                             detail=lambda: f"{replicas(survivor, TOPIC)}\n{operator.output()}")
        exit_s = operator.stop()
    finally:
        load.stop()
        if operator.process.poll() is None:
            operator.kill()
    print(operator.output())
    assert operator.said("broker 4 is dead"), operator.output()
    assert operator.said("healing brokers [4]"), operator.output()
    figure("kill -9 -> every replica re-created and in sync (grace 5 s)", took, "s")
    figure("operator exit after SIGTERM", exit_s, "s")
    check_nothing_lost(bootstrap_of({b: brokers[b] for b in (1, 2, 3)}), load)
    figure("records acknowledged and read back", load.total(), "records")


def throttles(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in configs.items()
            if "throttled" in name and entry.value}  # fmt: skip


def no_moves(bootstrap: str) -> bool:
    listed = subprocess.run([sys.executable, "-m", "weir.cli.main", "reassign", "list",
                             "--bootstrap-server", bootstrap],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    return "No partition reassignments found." in listed.stdout


@pytest.mark.slow
def test_an_operator_killed_mid_balance_is_replaced_and_its_moves_finished(
    zookeeper, cluster_brokers, figure
) -> None:  # fmt: skip
    brokers = start_four(cluster_brokers, zookeeper)
    bootstrap = bootstrap_of(brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic("hot", 4, replica_assignment=[[1, 2], [2, 1], [1, 2],
                                                               [2, 1]]))  # fmt: skip
    fill = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                     "log_level": 0})  # fmt: skip
    for i in range(16_000):  # 8 MB, 2 MB a partition: a move at the throttle takes seconds
        fill.produce("hot", b"f" * 500, partition=i % 4)
        if i % 1000 == 0:
            fill.poll(0)
    assert fill.flush(60) == 0
    load = Load(bootstrap, "hot", 100)
    load.start()
    connect = f"{zookeeper.connect}{CHROOT}"
    args = ("--interval", "2", "--window-seconds", "2", "--windows", "1",
            "--balance-threshold", "1.5", "--throttle", "300000", "--max-concurrent-moves", "2")
    first = OperatorProcess(brokers, connect, "first", *args)
    second = None
    try:
        poll(lambda: first.said("started hot-"), 90, "the first operator's first move",
             detail=first.output)  # fmt: skip
        second = OperatorProcess(brokers, connect, "second", *args)
        time.sleep(1)
        first.kill()
        killed = time.monotonic()
        poll(lambda: second.said("second: leading"), 60, "the second operator leading",
             detail=second.output)  # fmt: skip
        took_over = time.monotonic() - killed
        poll(lambda: no_moves(bootstrap) and not throttles(admin, "hot"), 120,
             "every move done and the throttles removed", interval=1.0,
             detail=lambda: f"{throttles(admin, 'hot')}\n{second.output()}")  # fmt: skip
        poll(lambda: second.said("moves done"), 60, "the second operator's moves done",
             detail=second.output)  # fmt: skip
        time.sleep(6)  # a round or two more: the balance, if not done yet, is finished
        poll(lambda: no_moves(bootstrap), 120, "no move under way", interval=1.0)
        spread = current_spread(weir_operator(brokers, "plan").stdout)
        exit_s = second.stop()
    finally:
        load.stop()
        for operator in (first, second):
            if operator is not None and operator.process.poll() is None:
                operator.kill()
    print(first.output(), second.output(), sep="\n----\n")
    assert second.said("following") or not re.search(r"^started", first.output(), re.M)
    figure("first operator kill -9 -> second leading", took_over, "s")
    figure("bytes-in max/min across brokers at the end", spread, "ratio")
    figure("second operator exit after SIGTERM", exit_s, "s")
    assert spread < 1.6
    check_nothing_lost(bootstrap, load)
    figure("records acknowledged and read back", load.total(), "records")
