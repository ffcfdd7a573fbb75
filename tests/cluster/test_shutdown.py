"""A broker's shutdown always ends (weir.broker.shutdown): every broker of a three-broker cluster
is sent SIGTERM at the same moment, under acks=all replication load, twenty times over; each must
exit by itself, with status 0 (not forced by the deadline), within EXIT_BOUND_S. The brokers
then come back on the same data, and no acknowledged record is missing at the end."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from cluster_brokers import (
    ClusterBroker,
    create_topics,
    start_three,
    start_together,
    wait_settled,
)
from confluent_kafka.admin import AdminClient, NewTopic
from faultkit import History, ProducerWorker, check, close_client, poll, read_everything

ROUNDS = 20
EXIT_BOUND_S = 30.0
TOPIC = "under-load"
PARTITIONS = 60  # 180 replicas over three brokers: each leads and follows many
CONFIG: dict[str, object] = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
}


def stop_all_at_once(brokers: list[ClusterBroker]) -> list[float]:
    """SIGTERM to every broker in the same instant; each one's seconds to exit (a broker still
    running after EXIT_BOUND_S fails the test, with the end of its log)."""
    processes = [broker.process for broker in brokers]
    assert all(p is not None for p in processes)
    started = time.monotonic()
    for process in processes:
        process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    took = []
    for broker, process in zip(brokers, processes, strict=True):
        try:
            code = process.wait(max(0.0, started + EXIT_BOUND_S - time.monotonic()))  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            tail = broker.logs_since_start()[-3000:]
            broker.kill()
            pytest.fail(f"broker {broker.node_id} still running {EXIT_BOUND_S:g}s after "
                        f"SIGTERM:\n{tail}")  # fmt: skip
        assert code == 0, f"broker {broker.node_id} exited {code}:\n{broker.logs_since_start()}"
        took.append(time.monotonic() - started)
        broker.process = None
    return took


@pytest.mark.slow
def test_all_brokers_stopped_at_once_under_load_each_exit_in_time(
    zookeeper, cluster_brokers, figure
):
    brokers = list(start_three(cluster_brokers, zookeeper.connect, CONFIG).values())
    bootstrap = ",".join(b.bootstrap for b in brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}))
    del admin
    history = History()
    producer = ProducerWorker(0, bootstrap, TOPIC, PARTITIONS, 300.0, history)
    producer.start()
    slowest: list[float] = []
    try:
        for round_ in range(ROUNDS):
            if round_:
                start_together(brokers)
                wait_settled(brokers)
            acked = len(history.acked)
            poll(lambda acked=acked: len(history.acked) > acked + 50, 60,  # type: ignore[misc]
                 f"round {round_}: acknowledgements under load")  # fmt: skip
            slowest.append(max(stop_all_at_once(brokers)))
        start_together(brokers)
        wait_settled(brokers)
    finally:
        producer.stop()
        producer.join(90)
        close_client(producer)
    figure("slowest exit after SIGTERM to all (worst round)", max(slowest))
    figure("slowest exit after SIGTERM to all (median round)", sorted(slowest)[len(slowest) // 2])
    assert producer.unflushed == 0
    ends = read_everything(bootstrap, TOPIC, PARTITIONS, history)
    verdict = check(history, ends)
    errors = {"send": dict(history.send_errors), "client": dict(history.client_errors)}
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], (
        verdict,
        errors,
    )
