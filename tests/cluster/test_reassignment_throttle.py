"""A throttled reassignment on a real cluster: `weir reassign execute --throttle` adds a third
replica to a partition holding tens of megabytes while an idempotent acks=all producer writes
to it; the new replica copies at the throttle's rate (measured from its log's growth on disk),
the in-sync follower keeps the producer's acknowledgements flowing, `verify` clears the
throttles once the move is done, and no acknowledged record is lost or written twice. A zero or
negative throttle is refused with nothing set and nothing moved."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_brokers import CHROOT, create_topics, poll, wait_settled
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from faultkit import History, ProducerWorker, check, close_client, read_everything

TOPIC = "throttled"
THROTTLE = 1_000_000  # bytes a second
BULK_RECORDS = 2_400
BULK_VALUE = 10_000  # bytes: 24 MB to copy
CONFIG: dict[str, object] = {"zookeeper.session.timeout.ms": 6000}


def weir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *args], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log")) if directory.exists() else 0


def steady_rate(samples: list[tuple[float, int]], total: int) -> float:
    """Bytes a second between a third and nine tenths of the copy: past its start (the first
    fetches are not held yet) and before the last fetches' catching up."""
    start = next(s for s in samples if s[1] >= total / 3)
    end = next(s for s in samples if s[1] >= total * 0.9)
    return (end[1] - start[1]) / (end[0] - start[0])


def throttles_of(admin: AdminClient, broker: int) -> dict[str, str]:
    resource = ConfigResource("broker", str(broker))
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()
            if "throttled.rate" in name and entry.source == 2}  # fmt: skip


def topic_throttles(admin: AdminClient) -> dict[str, str]:
    resource = ConfigResource("topic", TOPIC)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()
            if "throttled.replicas" in name and entry.value}  # fmt: skip


@pytest.mark.slow
def test_a_throttled_move_copies_at_the_throttle_with_nothing_lost(
    zookeeper, cluster_brokers, tmp_path, figure
):
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 3, config=CONFIG)
    wait_settled(brokers.values())
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, 1, replica_assignment=[[1, 2]],
                                  config={"min.insync.replicas": "2"}))  # fmt: skip
    bulk = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                     "log_level": 0})  # fmt: skip
    for i in range(BULK_RECORDS):
        bulk.produce(TOPIC, b"bulk-%06d-" % i + b"x" * BULK_VALUE, partition=0)
        bulk.poll(0)
    assert bulk.flush(60) == 0
    del bulk

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [1, 2, 3]}]}))  # fmt: skip
    for bad in ("0", "-5"):
        refused = weir("reassign", "execute", "--reassignment-json-file", str(path),
                       "--throttle", bad, "--bootstrap-server", bootstrap)  # fmt: skip
        assert refused.returncode != 0 and "--throttle must be a positive" in refused.stderr
    listed = weir("reassign", "list", "--bootstrap-server", bootstrap)
    assert "No partition reassignments found." in listed.stdout, listed.stdout
    assert topic_throttles(admin) == {} and throttles_of(admin, 3) == {}, "nothing set"

    history = History()
    producer = ProducerWorker(0, bootstrap, TOPIC, 1, 200.0, history)
    producer.start()
    target = brokers[3].data_dir / f"{TOPIC}-0"
    source = brokers[1].data_dir / f"{TOPIC}-0"
    samples: list[tuple[float, int]] = []
    try:
        poll(lambda: len(history.acked) > 200, 60, "acknowledgements before the move")
        started = time.monotonic()
        done = weir("reassign", "execute", "--reassignment-json-file", str(path),
                    "--throttle", str(THROTTLE), "--bootstrap-server", bootstrap)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in done.stdout
        assert throttles_of(admin, 3) == {"leader.replication.throttled.rate": str(THROTTLE),
                                          "follower.replication.throttled.rate": str(THROTTLE)}
        listed = {"leader.replication.throttled.replicas": "0:1,0:2",
                  "follower.replication.throttled.replicas": "0:3"}  # fmt: skip
        # (a topic config reaches the other brokers through ZooKeeper a moment later)
        poll(lambda: topic_throttles(admin) == listed, 15, "the topic's throttled replicas")
        acked_at_start = len(history.acked)
        in_progress = weir("reassign", "verify", "--reassignment-json-file", str(path),
                           "--bootstrap-server", bootstrap)  # fmt: skip
        assert "is still in progress" in in_progress.stdout, in_progress.stdout
        assert throttles_of(admin, 3), "verify keeps the throttles while the move runs"
        deadline = time.monotonic() + 120
        progress: list[int] = []
        while time.monotonic() < deadline:
            samples.append((time.monotonic(), log_bytes(target)))
            if samples[-1][1] >= log_bytes(source):
                break
            if not progress and samples[-1][1] > log_bytes(source) // 4:
                midway = weir("reassign", "verify", "--reassignment-json-file", str(path),
                              "--bootstrap-server", bootstrap)  # fmt: skip
                found = re.search(r"^  replica 3: [\d.]+ MB of [\d.]+ MB \((\d+)%\)$",
                                  midway.stdout, re.MULTILINE)  # fmt: skip
                assert found, midway.stdout
                progress.append(int(found[1]))
            time.sleep(0.25)
        assert progress and 0 < progress[0] < 100, progress
        copied = time.monotonic() - started
        acked_during = len(history.acked) - acked_at_start

        def verified() -> bool:
            answer = weir("reassign", "verify", "--reassignment-json-file", str(path),
                          "--bootstrap-server", bootstrap)  # fmt: skip
            assert answer.returncode == 0, answer.stdout + answer.stderr
            return "Clearing broker-level throttles on brokers 1,2,3" in answer.stdout

        poll(verified, 60, "the move complete and the throttles cleared")
    finally:
        producer.stop()
        producer.join(90)
        close_client(producer)
    total = samples[-1][1]
    rate = steady_rate(samples, total)
    figure("bytes copied to the new replica", total, "B")
    figure("copy time at a 1 MB/s throttle", copied)
    figure("steady copy rate", rate, "B/s")
    figure("overall copy rate", total / copied, "B/s")
    figure("acks=all acknowledgements during the copy", acked_during, "records")
    assert abs(rate - THROTTLE) <= 0.2 * THROTTLE, (rate, samples[::8])
    assert acked_during > 200 * copied * 0.5, "the in-sync follower kept acks=all flowing"
    for broker in brokers:
        assert throttles_of(admin, broker) == {}
    poll(lambda: topic_throttles(admin) == {}, 15, "the topic's throttled replicas cleared")
    assert producer.unflushed == 0
    ends = read_everything(bootstrap, TOPIC, 1, history)
    verdict = check(history, ends)
    errors = {"send": dict(history.send_errors), "client": dict(history.client_errors)}
    assert verdict.lost == [] and verdict.duplicated == [] and verdict.divergent == [], (
        verdict, errors)
    assert ends[0] >= BULK_RECORDS + verdict.acked
    figure("records acknowledged under load", verdict.acked, "records")
