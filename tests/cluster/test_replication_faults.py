"""Replication under faults: a real ZooKeeper and three brokers, each in a network namespace of
its own (faultkit.py), idempotent acks=all producers and a consumer group on a topic with three
partitions, replication factor 3 and min.insync.replicas=2.

What a user of acks=all relies on is checked Jepsen-style after every run: every acknowledged
write is read back (nothing lost), no write sits at two offsets (no duplicates, with
idempotence), no offset holds two different values for any two readers (no divergence), and
offsets come gap-free and in order. The single-scenario tests are short; the random-fault test
(`slow`) runs several rounds of kill -9, SIGSTOP and network partitions. Set WEIR_FAULT_SEED to
replay a random run; the seed is printed.

Network namespaces need root (CI runs as root); without them the tests are skipped locally and
fail in CI.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from faultkit import (
    CHROOT,
    TOPIC_CONFIG,
    FaultCluster,
    History,
    Outcome,
    Workload,
    check,
    eventually,
    fault_cluster,
    poll,
    producer_config,
    read_everything,
    run_faults,
    summary,
    table,
)

from weir.cli.zookeeper import Installation

TOPIC = "events"
PARTITIONS = 3


@pytest.fixture
def clusters(
    tmp_path: Path, zookeeper_installation: Installation, netns: None
) -> Iterator[Callable[..., FaultCluster]]:
    """`clusters(config=None)`: a started FaultCluster; namespaces, links, ZooKeeper and brokers
    are all removed after the test, passed or failed."""
    numbers = itertools.count()
    with contextlib.ExitStack() as stack:

        def start(config: dict[str, object] | None = None) -> FaultCluster:
            directory = tmp_path / f"cluster-{next(numbers)}"
            return stack.enter_context(fault_cluster(directory, config=config))

        yield start


@pytest.fixture
def cluster(clusters: Callable[..., FaultCluster]) -> FaultCluster:
    return clusters()


def assert_safe(outcome: Outcome, cluster: FaultCluster) -> None:
    verdict = outcome.verdict
    logs = [str(b.log_path) for b in cluster.brokers.values()]
    where = f"seed {outcome.seed}; broker logs {logs}"
    assert verdict.acked > 0, f"nothing was acknowledged; {where}"
    assert verdict.lost == [], f"acknowledged writes lost; {where}"
    assert verdict.duplicated == [], f"values at two offsets; {where}"
    assert verdict.divergent == [], f"offsets read with two values; {where}"
    assert verdict.gaps == [], f"offsets skipped; {where}"
    assert verdict.disorder == [], f"offsets out of order; {where}"
    assert outcome.history.fatal == [], f"idempotent producers failed; {where}"


def report(outcome: Outcome, record_property: Callable[[str, object], None]) -> dict:
    figures = summary(outcome)
    print("\n" + table(figures))
    for record in outcome.records:
        print(f"  {json.dumps(asdict(record))}")
    record_property("faults", json.dumps(figures))
    return figures


# ---- single scenarios ----------------------------------------------------------------------------


def test_kill_leader_during_acks_all_writes_loses_nothing(
    cluster: FaultCluster, record_property: Callable[[str, object], None]
) -> None:
    outcome = run_faults(cluster, TOPIC, rounds=1, seed=1, kinds=("kill_leader",),
                         producers=2, consumers=1, recover_timeout=45)  # fmt: skip
    figures = report(outcome, record_property)
    assert_safe(outcome, cluster)
    assert all(r.recovered for r in outcome.records), figures
    assert outcome.records[0].leaderless_s < cluster.session_timeout_s * 3, figures


def test_isolated_leader_loses_nothing(
    cluster: FaultCluster, record_property: Callable[[str, object], None]
) -> None:
    """The leader of partition 0 is cut off from everyone (ZooKeeper included) for about ten
    seconds while writes go on: its session expires, another replica leads, and whatever it
    appended alone is cut when it comes back, never acknowledged."""
    outcome = run_faults(cluster, TOPIC, rounds=1, seed=2, kinds=("isolate_leader",),
                         producers=2, consumers=1, recover_timeout=45)  # fmt: skip
    figures = report(outcome, record_property)
    assert_safe(outcome, cluster)
    assert all(r.recovered and r.left_isr for r in outcome.records), figures


def test_retried_write_is_acknowledged_only_once_replicated(cluster: FaultCluster) -> None:
    """acks=all with both followers cut off: the leader times the produce out, the producer
    retries the same batch, and the retry must wait for the followers like the first attempt
    did. Then the leader dies before they get it; an acknowledged write must survive that."""
    cluster.create_topic(TOPIC, PARTITIONS, 3, TOPIC_CONFIG)
    history = History()

    def delivered(error: object, message: object) -> None:
        if error is None:
            history.ack(message.value(), message.partition(), message.offset())  # type: ignore[attr-defined]

    settings = {**producer_config(cluster.bootstrap), "request.timeout.ms": 1500,
                "message.timeout.ms": 60_000}  # fmt: skip
    producer = cluster.track(Producer(settings))
    for i in range(20):
        producer.produce(TOPIC, f"before-{i}".encode(), partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    leader = cluster.partition_state(TOPIC, 0).leader
    followers = [r for r in cluster.replicas(TOPIC, 0) if r != leader]
    for follower in followers:
        cluster.isolate(follower)
    producer.produce(TOPIC, b"while-followers-are-cut-off", partition=0, on_delivery=delivered)
    deadline = time.monotonic() + 4  # under replica.lag.time.max.ms: the ISR stays whole
    while time.monotonic() < deadline and len(history.acked) < 21:
        producer.poll(0.1)
    cluster.isolate(leader)  # so that nothing it sends later reaches the followers
    cluster.kill(leader)
    for follower in followers:
        cluster.heal(follower)
    poll(lambda: cluster.partition_state(TOPIC, 0).leader in followers, 40, "a new leader")
    cluster.heal(leader)
    producer.flush(30)
    cluster.restart(leader)
    poll(lambda: cluster.isr_full(TOPIC, PARTITIONS), 60, "ISR full again")
    ends = read_everything(cluster.bootstrap, TOPIC, PARTITIONS, history)
    verdict = check(history, ends)
    assert verdict.lost == [], verdict


@pytest.mark.slow
def test_isr_grows_again_after_a_paused_controller_is_controller_again(
    clusters: Callable[..., FaultCluster],
) -> None:
    # a short lag time: the other leaders' ISR shrinks reach the paused controller before its
    # session expires, and wait in its socket for it to wake up
    cluster = clusters({"replica.lag.time.max.ms": 2000})
    cluster.create_topic(TOPIC, PARTITIONS, 3, TOPIC_CONFIG)
    workload = Workload(cluster.bootstrap, TOPIC, PARTITIONS, producers=1, consumers=0)
    workload.start()
    try:
        first = cluster.wait_controller()
        if not leads_any(cluster, first):
            elect_preferred_leaders(cluster, first)
        cluster.pause(first)
        poll(lambda: first not in cluster.registered(), 30, f"broker {first}'s session expired")
        time.sleep(1)
        cluster.resume(first)
        poll(lambda: cluster.registered() == set(cluster.brokers)
             and cluster.isr_full(TOPIC, PARTITIONS), 45, "ISR full after the pause")  # fmt: skip
        # make the paused broker controller again: stop the controller while the third sleeps
        second = cluster.wait_controller()
        third = ({*cluster.brokers} - {first, second}).pop()
        cluster.pause(third)
        cluster.brokers[second].stop()
        poll(lambda: cluster.controller() == first, 10, f"broker {first} controller again")
        cluster.resume(third)
        elect_preferred_leaders(cluster, first)
        cluster.restart(second)
        full = eventually(lambda: cluster.isr_full(TOPIC, PARTITIONS), 30)
        states = [cluster.partition_state(TOPIC, p) for p in range(PARTITIONS)]
        assert full, f"broker {second} back for 30 s, ISR still short: {states}"
    finally:
        workload.stop_producers(30)


def leads_any(cluster: FaultCluster, node: int) -> bool:
    return any(cluster.partition_state(TOPIC, p).leader == node for p in range(PARTITIONS))


def elect_preferred_leaders(cluster: FaultCluster, node: int) -> None:
    """Kafka's preferred replica election for the topic, until `node` leads a partition."""
    assert cluster.zk is not None
    request = {"version": 1, "partitions": [{"topic": TOPIC, "partition": p}
                                            for p in range(PARTITIONS)]}  # fmt: skip
    cluster.zk.create(f"{CHROOT}/admin/preferred_replica_election",
                      json.dumps(request).encode(), makepath=True)  # fmt: skip
    poll(lambda: leads_any(cluster, node), 30, f"broker {node} leading a partition")


# ---- random faults -------------------------------------------------------------------------------


@pytest.mark.slow
def test_random_faults_lose_nothing(
    cluster: FaultCluster, record_property: Callable[[str, object], None]
) -> None:
    """Five rounds, each fault kind once in a random order (kill -9 of partition 0's leader, of
    one of its followers, of the controller; SIGSTOP past the session timeout; a network
    partition of one broker), each undone and followed by a bounded wait for a full ISR."""
    seed = int(os.environ.get("WEIR_FAULT_SEED", random.randrange(2**32)))
    outcome = run_faults(cluster, TOPIC, rounds=5, seed=seed, producers=2, consumers=2,
                         rate=100, recover_timeout=30)  # fmt: skip
    report(outcome, record_property)
    assert_safe(outcome, cluster)
